#include "emu/profile.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "api/backend/backend.h"

namespace xpufab {
namespace emu {
namespace {

using namespace ::xpufab::backend;

constexpr uint32_t kBaseCaps = kCapCqWithSgid | kCapCqNotifications | kCapCqWithExtMem | kCapCompCntr;
constexpr uint32_t kGiB = 1u << 30;

// Queue limits are the ones EFA devices commonly report; MTU 8928 is the SRD payload size.
// kMinSqWr: no public source states the minimum SQ depth a real EFA reports. The device gives
// it in its queue attributes ("minimum number of WQEs per SQ", min_sq_depth of the admin
// queue's feature descriptor) and the EFA driver passes it to libefa unchanged; the kernel,
// rdma-core, libfabric and their issue trackers carry no value. The value follows from
// libefa's sizing rule instead (reference/efa-queues.md 2.3): with a non-zero minimum, the
// doorbell batch is capped at `depth - 1` because the device cannot take a doorbell for the
// whole SQ, so a device reporting 1 gives a 1-entry SQ a batch of 0, and libefa's
// wr_complete then copies past the ring. 2 is the smallest depth that rule can serve.
constexpr uint32_t kMinSqWr = 2;
const Profile kProfiles[] = {
    {"gen1", "SEND/RECV only (first generation)", 0xefa0, kBaseCaps, 32, 0, 4096, 32768, 2, 2,
     kGiB, 8928, 16, kMinSqWr},
    {"gen2", "+ RDMA read, RNR retry", 0xefa1, kBaseCaps | kCapRdmaRead | kCapRnrRetry, 32, 0, 4096,
     32768, 2, 2, kGiB, 8928, 16, kMinSqWr},
    {"gen3", "+ RDMA write, write with immediate, unsolicited write recv", 0xefa2,
     kBaseCaps | kCapRdmaRead | kCapRnrRetry | kCapRdmaWrite | kCapUnsolicitedWriteRecv |
         kCapDataPolling128,
     32, 0, 4096, 32768, 2, 2, kGiB, 8928, 16, kMinSqWr},
    {"gen4", "+ 128-byte WQE with inline RDMA write (newest)", 0xefa3,
     kBaseCaps | kCapRdmaRead | kCapRnrRetry | kCapRdmaWrite | kCapUnsolicitedWriteRecv |
         kCapDataPolling128 | kCapInlineWrite,
     32, 80, 4096, 32768, 2, 2, kGiB, 8928, 16, kMinSqWr},
};

// Names as bring-up prints them (tools/bringup/profile_match.h), one per backend::DeviceCap bit.
const struct {
  uint32_t bit;
  const char* name;
} kCapNames[] = {
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

}  // namespace

int parse_caps(const std::string& text, uint32_t* caps_p) {
  if (caps_p == nullptr) return -EINVAL;
  if (text.empty() || text == "none") {
    *caps_p = 0;
    return 0;
  }
  if (text[0] >= '0' && text[0] <= '9') {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if (errno != 0 || *end != '\0' || v > 0xffffffffull) return -EINVAL;
    *caps_p = static_cast<uint32_t>(v);
    return 0;
  }
  uint32_t caps = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string name = text.substr(pos, comma - pos);
    bool found = false;
    for (const auto& n : kCapNames) {
      if (name == n.name) {
        caps |= n.bit;
        found = true;
      }
    }
    if (!found) return -EINVAL;
    pos = comma + 1;
  }
  *caps_p = caps;
  return 0;
}

std::string caps_to_string(uint32_t caps) {
  std::string s;
  for (const auto& n : kCapNames) {
    if (!(caps & n.bit)) continue;
    if (!s.empty()) s += ',';
    s += n.name;
    caps &= ~n.bit;
  }
  if (caps != 0) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%x", caps);
    if (!s.empty()) s += ',';
    s += hex;
  }
  return s.empty() ? "none" : s;
}

const Profile* profile_without_caps(const Profile* base, uint32_t clear) {
  if (base == nullptr || (base->device_caps & clear) == 0) return base;
  // Devices keep the pointer for their lifetime, so variants are created once and leaked.
  static std::mutex mu;
  static auto* variants = new std::map<std::pair<const Profile*, uint32_t>, std::unique_ptr<Profile>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*variants)[{base, clear}];
  if (!slot) {
    slot.reset(new Profile(*base));
    slot->device_caps &= ~clear;
  }
  return slot.get();
}

const Profile* find_profile(const std::string& name) {
  if (name == "latest") return &default_profile();
  for (const Profile& p : kProfiles) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

const Profile& default_profile() { return kProfiles[sizeof(kProfiles) / sizeof(kProfiles[0]) - 1]; }

std::vector<const Profile*> all_profiles() {
  std::vector<const Profile*> v;
  for (const Profile& p : kProfiles) v.push_back(&p);
  return v;
}

}  // namespace emu
}  // namespace xpufab
