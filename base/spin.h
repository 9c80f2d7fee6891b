// Waiting on a word another thread or process will change: the pause a spin-wait loop takes
// between two looks (it saves power and, on a machine with hyper-threads, gives the sibling the
// core), and the futex call a waiter sleeps and is woken with.
#ifndef XPUFAB_BASE_SPIN_H_
#define XPUFAB_BASE_SPIN_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace xpufab {
namespace base {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// futex(2) on `addr` (FUTEX_WAIT, FUTEX_WAKE, optionally | FUTEX_PRIVATE_FLAG); `ts` may be null.
inline int futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0));
}

}  // namespace base
}  // namespace xpufab

#endif  // XPUFAB_BASE_SPIN_H_
