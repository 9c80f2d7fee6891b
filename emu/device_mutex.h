// The device's lock (DeviceImpl::mu_): a futex word rather than a std::mutex. The engine takes it
// at every pass, several times a message, so an uncontended try_lock and unlock are one
// compare-exchange and one exchange (pthread's pair costs about 40 instructions). Every
// acquisition clears the mark of an idle engine (quiet_until_ns).
#ifndef XPUFAB_EMU_DEVICE_MUTEX_H_
#define XPUFAB_EMU_DEVICE_MUTEX_H_

#include <atomic>
#include <cstdint>

namespace xpufab {
namespace emu {

class DeviceMutex {
 public:
  void lock() {
    uint32_t seen = kFree;
    if (!word_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) {
      lock_contended(seen);
    }
    quiet_until_ns.store(0, std::memory_order_relaxed);
  }
  bool try_lock() {
    uint32_t seen = kFree;
    if (!word_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) {
      return false;
    }
    quiet_until_ns.store(0, std::memory_order_relaxed);
    return true;
  }
  void unlock() {
    if (word_.exchange(kFree, std::memory_order_release) == kHeldWithSleepers) wake_one();
  }

  // Nonzero: the last holder was an engine pass that left no work behind, and no timer falls due
  // before this time (steady clock). Set by that pass just before it unlocks.
  std::atomic<uint64_t> quiet_until_ns{0};

 private:
  static constexpr uint32_t kFree = 0, kHeld = 1, kHeldWithSleepers = 2;
  // Spins a little (a holder keeps the lock for one pass), then sleeps on the word, marking it
  // so that the holder's unlock wakes a sleeper.
  void lock_contended(uint32_t seen);
  void wake_one();
  std::atomic<uint32_t> word_{kFree};
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_DEVICE_MUTEX_H_
