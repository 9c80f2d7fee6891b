// The device's lock (DeviceImpl::mu_): a futex lock (base/futex_lock.h), since the engine takes it
// at every pass, several times a message. Every acquisition also clears the mark of an idle
// engine (quiet_until_ns).
#ifndef XPUFAB_EMU_DEVICE_MUTEX_H_
#define XPUFAB_EMU_DEVICE_MUTEX_H_

#include <atomic>
#include <cstdint>

#include "base/futex_lock.h"

namespace xpufab {
namespace emu {

class DeviceMutex {
 public:
  void lock() {
    word_.lock();
    quiet_until_ns.store(0, std::memory_order_relaxed);
  }
  bool try_lock() {
    if (!word_.try_lock()) return false;
    quiet_until_ns.store(0, std::memory_order_relaxed);
    return true;
  }
  void unlock() { word_.unlock(); }

  // Nonzero: the last holder was an engine pass that left no work behind, and no timer falls due
  // before this time (steady clock). Set by that pass just before it unlocks.
  std::atomic<uint64_t> quiet_until_ns{0};

 private:
  base::FutexLock word_;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_DEVICE_MUTEX_H_
