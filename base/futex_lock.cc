#include "base/futex_lock.h"

#include "base/spin.h"

namespace xpufab {
namespace base {
namespace {

constexpr int kSpins = 100;

}  // namespace

void FutexLock::lock_contended(uint32_t seen) {
  for (int i = 0; i < kSpins && seen == kHeld; ++i) {
    cpu_relax();
    seen = kFree;
    if (word_.compare_exchange_weak(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) return;
  }
  // From here on the word says that someone may sleep: whoever frees it then wakes one. Taking
  // it as kHeldWithSleepers (not kHeld) keeps that true for the sleepers still waiting.
  if (seen != kHeldWithSleepers) seen = word_.exchange(kHeldWithSleepers, std::memory_order_acquire);
  while (seen != kFree) {
    futex(&word_, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, kHeldWithSleepers, nullptr);
    seen = word_.exchange(kHeldWithSleepers, std::memory_order_acquire);
  }
}

void FutexLock::wake_one() { futex(&word_, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, nullptr); }

}  // namespace base
}  // namespace xpufab
