#include "emu/profile.h"

#include <cerrno>
#include <cstdlib>

#include "api/backend/backend.h"

namespace xpufab {
namespace emu {
namespace {

using namespace ::xpufab::backend;

constexpr uint32_t kBaseCaps = kCapCqWithSgid | kCapCqNotifications | kCapCqWithExtMem | kCapCompCntr;
constexpr uint32_t kGiB = 1u << 30;

// Queue limits are the ones EFA devices commonly report; MTU 8928 is the SRD payload size.
const Profile kProfiles[] = {
    {"gen1", "SEND/RECV only (first generation)", 0xefa0, kBaseCaps, 32, 0, 4096, 32768, 2, 2,
     kGiB, 8928, 16, 1},
    {"gen2", "+ RDMA read, RNR retry", 0xefa1, kBaseCaps | kCapRdmaRead | kCapRnrRetry, 32, 0, 4096,
     32768, 2, 2, kGiB, 8928, 16, 1},
    {"gen3", "+ RDMA write, write with immediate, unsolicited write recv", 0xefa2,
     kBaseCaps | kCapRdmaRead | kCapRnrRetry | kCapRdmaWrite | kCapUnsolicitedWriteRecv |
         kCapDataPolling128,
     32, 0, 4096, 32768, 2, 2, kGiB, 8928, 16, 1},
    {"gen4", "+ 128-byte WQE with inline RDMA write (newest)", 0xefa3,
     kBaseCaps | kCapRdmaRead | kCapRnrRetry | kCapRdmaWrite | kCapUnsolicitedWriteRecv |
         kCapDataPolling128 | kCapInlineWrite,
     32, 80, 4096, 32768, 2, 2, kGiB, 8928, 16, 1},
};

}  // namespace

const Profile* find_profile(const std::string& name) {
  if (name == "latest") return &default_profile();
  for (const Profile& p : kProfiles) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

const Profile& default_profile() { return kProfiles[sizeof(kProfiles) / sizeof(kProfiles[0]) - 1]; }

int profile_from_env(const Profile** profile_p) {
  const char* env = std::getenv("FI_EFA_EMU_PROFILE");
  const Profile* p = (env == nullptr || env[0] == '\0') ? &default_profile() : find_profile(env);
  if (p == nullptr) return -EINVAL;
  *profile_p = p;
  return 0;
}

std::vector<const Profile*> all_profiles() {
  std::vector<const Profile*> v;
  for (const Profile& p : kProfiles) v.push_back(&p);
  return v;
}

}  // namespace emu
}  // namespace xpufab
