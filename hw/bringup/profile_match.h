// Which emulator generation to compare a hardware device against: the newest one whose data
// operations the device also offers, so that both sides run the same ops and refuse the same
// ones (a comparison against a richer profile would report every refused op as a difference).
#ifndef XPUFAB_HW_BRINGUP_PROFILE_MATCH_H_
#define XPUFAB_HW_BRINGUP_PROFILE_MATCH_H_

#include <cstdint>
#include <string>

#include "api/backend/backend.h"

namespace xpufab {
namespace bringup {

inline const char* matching_profile(uint32_t caps) {
  using namespace ::xpufab::backend;
  if (!(caps & kCapRdmaRead)) return "gen1";
  if (!(caps & kCapRdmaWrite)) return "gen2";
  if (!(caps & kCapInlineWrite)) return "gen3";
  return "gen4";
}

inline std::string caps_string(uint32_t caps) {
  using namespace ::xpufab::backend;
  static const struct {
    uint32_t bit;
    const char* name;
  } kNames[] = {
      {kCapRdmaRead, "rdma_read"},
      {kCapRnrRetry, "rnr_retry"},
      {kCapCqWithSgid, "cq_with_sgid"},
      {kCapRdmaWrite, "rdma_write"},
      {kCapUnsolicitedWriteRecv, "unsolicited_write_recv"},
      {kCapCqWithExtMem, "cq_with_ext_mem"},
      {kCapCompCntr, "comp_cntr"},
      {kCapDataPolling128, "data_polling_128"},
      {kCapCqNotifications, "cq_notifications"},
      {kCapInlineWrite, "inline_write"},
  };
  std::string s;
  for (const auto& n : kNames) {
    if (!(caps & n.bit)) continue;
    if (!s.empty()) s += ',';
    s += n.name;
  }
  return s.empty() ? "none" : s;
}

}  // namespace bringup
}  // namespace xpufab

#endif  // XPUFAB_HW_BRINGUP_PROFILE_MATCH_H_
