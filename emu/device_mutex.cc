#include "emu/device_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emu/spin.h"

namespace xpufab {
namespace emu {
namespace {

constexpr int kSpins = 100;

void futex_op(std::atomic<uint32_t>* word, int op, uint32_t val) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op | FUTEX_PRIVATE_FLAG, val, nullptr, nullptr, 0);
}

}  // namespace

void DeviceMutex::lock_contended(uint32_t seen) {
  for (int i = 0; i < kSpins && seen == kHeld; ++i) {
    cpu_relax();
    seen = kFree;
    if (word_.compare_exchange_weak(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) return;
  }
  // From here on the word says that someone may sleep: whoever frees it then wakes one. Taking
  // it as kHeldWithSleepers (not kHeld) keeps that true for the sleepers still waiting.
  if (seen != kHeldWithSleepers) seen = word_.exchange(kHeldWithSleepers, std::memory_order_acquire);
  while (seen != kFree) {
    futex_op(&word_, FUTEX_WAIT, kHeldWithSleepers);
    seen = word_.exchange(kHeldWithSleepers, std::memory_order_acquire);
  }
}

void DeviceMutex::wake_one() { futex_op(&word_, FUTEX_WAKE, 1); }

}  // namespace emu
}  // namespace xpufab
