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

#endif /* XPUFAB_DEVICE_XPU_PRIMS_CUDA_H_ */
