// Which emulator generation to compare a hardware device against: the newest one whose data
// operations the device also offers, so that both sides run the same ops and refuse the same
// ones (a comparison against a richer profile would report every refused op as a difference).
#ifndef XPUFAB_TOOLS_BRINGUP_PROFILE_MATCH_H_
#define XPUFAB_TOOLS_BRINGUP_PROFILE_MATCH_H_

#include <cstdint>
#include <string>

#include "api/backend/backend.h"
#include "emu/profile.h"

namespace xpufab {
namespace bringup {

inline const char* matching_profile(uint32_t caps) {
  using namespace ::xpufab::backend;
  if (!(caps & kCapRdmaRead)) return "gen1";
  if (!(caps & kCapRdmaWrite)) return "gen2";
  if (!(caps & kCapInlineWrite)) return "gen3";
  return "gen4";
}

inline std::string caps_string(uint32_t caps) { return ::xpufab::emu::caps_to_string(caps); }

// The caps the emulator has and the device lacks: what FI_EFA_EMU_CAPS_CLEAR must remove so the
// emulator offers exactly the device's caps, whichever generation the comparison runs (bits the
// device has beyond the emulator cannot be added and are left out of the comparison).
inline uint32_t caps_to_clear(uint32_t caps) {
  return ::xpufab::emu::default_profile().device_caps & ~caps;
}

}  // namespace bringup
}  // namespace xpufab

#endif  // XPUFAB_TOOLS_BRINGUP_PROFILE_MATCH_H_
