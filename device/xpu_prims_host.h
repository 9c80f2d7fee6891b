/*
 * xpu_prims_host.h - xpu primitives for host compilers (GCC/Clang, C11/C++17).
 * Include device/xpu_prims.h instead of this file. ThreadSanitizer understands
 * every primitive here, since all of them are __atomic builtins.
 */
#ifndef XPUFAB_DEVICE_XPU_PRIMS_HOST_H_
#define XPUFAB_DEVICE_XPU_PRIMS_HOST_H_

#include <stdint.h>

#if defined(__cplusplus) || defined(_POSIX_C_SOURCE)
#include <sched.h>
#else
int sched_yield(void); /* POSIX; strict C11 hides <sched.h>'s declaration */
#endif

#include "device/xpu_func.h"

XPU_FUNC uint32_t xpu_load_acquire_u32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
XPU_FUNC uint64_t xpu_load_acquire_u64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
XPU_FUNC uint32_t xpu_load_relaxed_u32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
XPU_FUNC uint64_t xpu_load_relaxed_u64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
XPU_FUNC void xpu_store_release_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
XPU_FUNC void xpu_store_release_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
XPU_FUNC void xpu_store_relaxed_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
XPU_FUNC void xpu_store_relaxed_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
XPU_FUNC uint32_t xpu_fetch_add_u32(uint32_t *p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
XPU_FUNC uint64_t xpu_fetch_add_u64(uint64_t *p, uint64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
XPU_FUNC int xpu_cas_u32(uint32_t *p, uint32_t *expected, uint32_t desired) {
  return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
XPU_FUNC int xpu_cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired) {
  return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
/*
 * ThreadSanitizer does not model fences (GCC rejects them under -Werror=tsan).
 * The data path never relies on a fence for a happens-before edge, only for
 * the order in which a NIC that does not synchronize sees memory, so TSan
 * builds keep just the compiler barrier.
 */
#if defined(__SANITIZE_THREAD__)
#define XPU_PRIMS_TSAN_ 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XPU_PRIMS_TSAN_ 1
#endif
#endif

#if defined(XPU_PRIMS_TSAN_)
XPU_FUNC void xpu_fence_release(void) { __atomic_signal_fence(__ATOMIC_RELEASE); }
XPU_FUNC void xpu_fence_acquire(void) { __atomic_signal_fence(__ATOMIC_ACQUIRE); }
XPU_FUNC void xpu_fence_system(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
XPU_FUNC void xpu_fence_doorbell(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#else
XPU_FUNC void xpu_fence_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }
XPU_FUNC void xpu_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
/* seq_cst: mfence or a locked instruction on x86, either of which also drains write-combining buffers. */
XPU_FUNC void xpu_fence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/*
 * x86 keeps stores to ordinary memory in order; only write-combined ones (an
 * LLQ send queue in device memory) may pass each other, and sfence orders
 * those. A full fence (mfence, or the locked instruction GCC emits for a
 * seq_cst fence) also waits for every earlier store to leave the core and
 * holds every later load, which a doorbell, ordering stores only, does not need.
 */
#if defined(__x86_64__) || defined(__i386__)
XPU_FUNC void xpu_fence_doorbell(void) { __asm__ __volatile__("sfence" ::: "memory"); }
#else
XPU_FUNC void xpu_fence_doorbell(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif
#endif

/*
 * A release store is one plain 32-bit mov on x86, as an uncached MMIO doorbell
 * needs, and gives an emulated NIC that acquire-loads the doorbell a
 * happens-before edge to everything written before it.
 */
XPU_FUNC void xpu_mmio_write_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
/*
 * Spinning posters wait for an earlier claimer that may be descheduled: on
 * the host XPU (device/runtime, which defines xpu_host_relax when linked in)
 * another work-item fiber of the same thread runs meanwhile; elsewhere the
 * core is given away.
 */
#ifdef __cplusplus
extern "C" {
#endif
void xpu_host_relax(void) __attribute__((weak));
#ifdef __cplusplus
}
#endif
XPU_FUNC void xpu_relax(void) {
  if (xpu_host_relax) {
    xpu_host_relax();
  } else {
    sched_yield();
  }
}

/*
 * 16-byte CAS where the CPU has one (x86-64: lock cmpxchg16b). GCC routes
 * 16-byte __atomic builtins through libatomic, which may take a lock, so the
 * instruction is written out. ThreadSanitizer does not see it; callers access
 * such words only through this function. p must be 16-byte aligned.
 */
#if defined(__x86_64__)
#define XPU_HAVE_CAS_U128 1
__extension__ typedef unsigned __int128 xpu_u128;
XPU_FUNC int xpu_cas_u128(xpu_u128 *p, xpu_u128 *expected, xpu_u128 desired) {
  uint64_t lo = (uint64_t)*expected, hi = (uint64_t)(*expected >> 64);
  unsigned char ok;
  __asm__ __volatile__("lock cmpxchg16b %1\n\tsetz %0"
                       : "=q"(ok), "+m"(*p), "+a"(lo), "+d"(hi)
                       : "b"((uint64_t)desired), "c"((uint64_t)(desired >> 64))
                       : "memory", "cc");
  *expected = ((xpu_u128)hi << 64) | lo;
  return ok;
}
#endif

#endif /* XPUFAB_DEVICE_XPU_PRIMS_HOST_H_ */
