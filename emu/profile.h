// Emulated EFA device generations. Each profile reproduces the capabilities one hardware
// generation reports (reference/efa-queues.md 2.1, 2.3, 2.7, 3): an op or size a generation does
// not support fails with the completion status that generation gives.
#ifndef XPUFAB_EMU_PROFILE_H_
#define XPUFAB_EMU_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace xpufab {
namespace emu {

struct Profile {
  const char* name;             // "gen1".."gen4"
  const char* description;
  uint16_t vendor_part_id;
  uint32_t device_caps;         // backend::DeviceCap bits
  uint16_t inline_buf_size;     // 64-byte WQE inline bytes
  uint16_t inline_buf_size_ex;  // 128-byte WQE inline bytes, 0 = no 128-byte WQE
  uint32_t max_sq_wr;
  uint32_t max_rq_wr;
  uint16_t max_sq_sge;
  uint16_t max_rq_sge;
  uint32_t max_rdma_size;
  uint32_t mtu;
  uint32_t max_tx_batch;        // 64-byte units between SQ doorbells
  uint32_t min_sq_wr;
};

// nullptr for an unknown name. "latest" names the newest generation.
const Profile* find_profile(const std::string& name);
// The newest generation (every capability on).
const Profile& default_profile();
// `base` with `clear` removed from device_caps; the same pointer for the same arguments, never
// freed. `base` itself when nothing changes.
const Profile* profile_without_caps(const Profile* base, uint32_t clear);
// Parses an FI_EFA_EMU_CAPS_CLEAR value into *caps_p (0 for "" or "none").
int parse_caps(const std::string& text, uint32_t* caps_p);
// "name1,name2" for the bits in `caps` ("none" for 0); unnamed bits as "0x..".
std::string caps_to_string(uint32_t caps);
std::vector<const Profile*> all_profiles();

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_PROFILE_H_
