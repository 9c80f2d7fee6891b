// A mutex on one futex word, for locks taken on every message: an uncontended lock (or
// try_lock) and unlock are one compare-exchange and one exchange, where pthread's pair costs
// about 40 more instructions. A contended lock spins briefly, then sleeps on the word; the unlock
// wakes a sleeper. Private to a process (FUTEX_PRIVATE_FLAG). Meets the Lockable requirements,
// so std::lock_guard and std::unique_lock take it.
#ifndef XPUFAB_BASE_FUTEX_LOCK_H_
#define XPUFAB_BASE_FUTEX_LOCK_H_

#include <atomic>
#include <cstdint>

namespace xpufab {
namespace base {

class FutexLock {
 public:
  FutexLock() = default;
  FutexLock(const FutexLock&) = delete;
  FutexLock& operator=(const FutexLock&) = delete;

  void lock() {
    uint32_t seen = kFree;
    if (!word_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) {
      lock_contended(seen);
    }
  }
  bool try_lock() {
    uint32_t seen = kFree;
    return word_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (word_.exchange(kFree, std::memory_order_release) == kHeldWithSleepers) wake_one();
  }

 private:
  static constexpr uint32_t kFree = 0, kHeld = 1, kHeldWithSleepers = 2;
  // Spins a little (holders keep the lock briefly), then sleeps on the word, marking it so that
  // the holder's unlock wakes a sleeper.
  void lock_contended(uint32_t seen);
  void wake_one();
  std::atomic<uint32_t> word_{kFree};
};

}  // namespace base
}  // namespace xpufab

#endif  // XPUFAB_BASE_FUTEX_LOCK_H_
