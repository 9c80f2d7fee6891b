/*
 * xpu_prims_cuda.h - xpu primitives for nvcc (host and device passes).
 * Include device/xpu_prims.h instead of this file. All atomics use
 * cuda::atomic_ref at thread_scope_system, because the other party (NIC,
 * host thread, emulator engine) is outside the GPU.
 */
#ifndef XPUFAB_DEVICE_XPU_PRIMS_CUDA_H_
#define XPUFAB_DEVICE_XPU_PRIMS_CUDA_H_

#include <stdint.h>

#include <cuda/atomic>

#include "device/xpu_func.h"

template <typename T>
using xpu_sys_ref_ = cuda::atomic_ref<T, cuda::thread_scope_system>;

XPU_FUNC uint32_t xpu_load_acquire_u32(const uint32_t *p) {
  return xpu_sys_ref_<uint32_t>(*const_cast<uint32_t *>(p)).load(cuda::memory_order_acquire);
}
XPU_FUNC uint64_t xpu_load_acquire_u64(const uint64_t *p) {
  return xpu_sys_ref_<uint64_t>(*const_cast<uint64_t *>(p)).load(cuda::memory_order_acquire);
}
XPU_FUNC uint32_t xpu_load_relaxed_u32(const uint32_t *p) {
  return xpu_sys_ref_<uint32_t>(*const_cast<uint32_t *>(p)).load(cuda::memory_order_relaxed);
}
XPU_FUNC uint64_t xpu_load_relaxed_u64(const uint64_t *p) {
  return xpu_sys_ref_<uint64_t>(*const_cast<uint64_t *>(p)).load(cuda::memory_order_relaxed);
}
XPU_FUNC void xpu_store_release_u32(uint32_t *p, uint32_t v) {
  xpu_sys_ref_<uint32_t>(*p).store(v, cuda::memory_order_release);
}
XPU_FUNC void xpu_store_release_u64(uint64_t *p, uint64_t v) {
  xpu_sys_ref_<uint64_t>(*p).store(v, cuda::memory_order_release);
}
XPU_FUNC void xpu_store_relaxed_u32(uint32_t *p, uint32_t v) {
  xpu_sys_ref_<uint32_t>(*p).store(v, cuda::memory_order_relaxed);
}
XPU_FUNC void xpu_store_relaxed_u64(uint64_t *p, uint64_t v) {
  xpu_sys_ref_<uint64_t>(*p).store(v, cuda::memory_order_relaxed);
}
XPU_FUNC uint32_t xpu_fetch_add_u32(uint32_t *p, uint32_t v) {
  return xpu_sys_ref_<uint32_t>(*p).fetch_add(v, cuda::memory_order_acq_rel);
}
XPU_FUNC uint64_t xpu_fetch_add_u64(uint64_t *p, uint64_t v) {
  return xpu_sys_ref_<uint64_t>(*p).fetch_add(v, cuda::memory_order_acq_rel);
}
XPU_FUNC int xpu_cas_u32(uint32_t *p, uint32_t *expected, uint32_t desired) {
  return xpu_sys_ref_<uint32_t>(*p).compare_exchange_strong(*expected, desired, cuda::memory_order_acq_rel,
                                                            cuda::memory_order_acquire)
             ? 1
             : 0;
}
XPU_FUNC int xpu_cas_u64(uint64_t *p, uint64_t *expected, uint64_t desired) {
  return xpu_sys_ref_<uint64_t>(*p).compare_exchange_strong(*expected, desired, cuda::memory_order_acq_rel,
                                                            cuda::memory_order_acquire)
             ? 1
             : 0;
}
XPU_FUNC void xpu_fence_release(void) {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
}
XPU_FUNC void xpu_fence_acquire(void) {
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
}
/* fence.sc.sys on the device (what __threadfence_system gives), mfence on the host. */
XPU_FUNC void xpu_fence_system(void) {
  cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
}
XPU_FUNC void xpu_fence_doorbell(void) { xpu_fence_system(); }
/* The doorbell page is mapped with cuMemHostRegister(IOMEMORY); a volatile 32-bit store after a system fence. */
XPU_FUNC void xpu_mmio_write_u32(uint32_t *p, uint32_t v) {
  xpu_fence_system();
  *(volatile uint32_t *)p = v;
}
XPU_FUNC void xpu_relax(void) {
#if defined(__CUDA_ARCH__)
  __nanosleep(32);
#endif
}

/*
 * 16-byte CAS: atom.cas.b128 on sm_90 and later (cuda::atomic_ref's b128 path
 * does not compile in CUDA 13.0), cmpxchg16b in the host pass. p must be
 * 16-byte aligned.
 */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define XPU_HAVE_CAS_U128 1
__extension__ typedef unsigned __int128 xpu_u128;
XPU_FUNC int xpu_cas_u128(xpu_u128 *p, xpu_u128 *expected, xpu_u128 desired) {
  uint64_t lo = (uint64_t)*expected, hi = (uint64_t)(*expected >> 64);
#if defined(__CUDA_ARCH__)
  uint64_t olo, ohi;
  asm volatile(
      "{\n\t.reg .b128 c, n, o;\n\tmov.b128 c, {%2, %3};\n\tmov.b128 n, {%4, %5};\n\t"
      "atom.acq_rel.sys.cas.b128 o, [%6], c, n;\n\tmov.b128 {%0, %1}, o;\n\t}"
      : "=l"(olo), "=l"(ohi)
      : "l"(lo), "l"(hi), "l"((uint64_t)desired), "l"((uint64_t)(desired >> 64)), "l"(p)
      : "memory");
  const int ok = olo == lo && ohi == hi;
  *expected = ((xpu_u128)ohi << 64) | olo;
  return ok;
#else
  unsigned char ok;
  __asm__ __volatile__("lock cmpxchg16b %1\n\tsetz %0"
                       : "=q"(ok), "+m"(*p), "+a"(lo), "+d"(hi)
                       : "b"((uint64_t)desired), "c"((uint64_t)(desired >> 64))
                       : "memory", "cc");
  *expected = ((xpu_u128)hi << 64) | lo;
  return ok;
#endif
}
#endif

#endif /* XPUFAB_DEVICE_XPU_PRIMS_CUDA_H_ */
