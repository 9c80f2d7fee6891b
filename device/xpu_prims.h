/*
 * xpu_prims.h - the primitives the device data path is written against.
 *
 * Selects one implementation per target:
 *   nvcc (__CUDACC__)  -> device/xpu_prims_cuda.h (cuda::atomic_ref, system scope)
 *   host compilers     -> device/xpu_prims_host.h (GCC/Clang __atomic builtins)
 * HIP and SYCL have no implementation yet; including this header there fails.
 *
 * Every target provides, with the same names and memory-order meaning:
 *   XPU_FUNC                         function qualifier (device/xpu_func.h)
 *   xpu_load_acquire_u32/u64(p)      atomic load, acquire, system scope
 *   xpu_load_relaxed_u32/u64(p)      atomic load, relaxed
 *   xpu_store_release_u32/u64(p, v)  atomic store, release, system scope
 *   xpu_store_relaxed_u32/u64(p, v)  atomic store, relaxed
 *   xpu_fetch_add_u32/u64(p, v)      atomic add, acq_rel; returns the old value
 *   xpu_cas_u32/u64(p, &expected, desired)
 *                                    strong CAS, acq_rel; returns 1 on success,
 *                                    else 0 with *expected = the current value
 *   xpu_cas_u128(p, &expected, desired)
 *                                    16-byte CAS, only where XPU_HAVE_CAS_U128
 *                                    is defined (x86-64 hosts, sm_90 GPUs);
 *                                    xpu_u128 is its unsigned __int128 type
 *   xpu_fence_release()/acquire()    thread fences, system scope
 *   xpu_fence_system()               full fence: orders all earlier stores,
 *                                    write-combined and MMIO included, before
 *                                    all later loads and stores (x86 mfence /
 *                                    membar.sys)
 *   xpu_fence_doorbell()             what a doorbell write needs before it:
 *                                    orders all earlier stores, write-combined
 *                                    included, before all later stores (x86
 *                                    sfence, as rdma-core's mmio_flush_writes;
 *                                    membar.sys on the device)
 *   xpu_mmio_write_u32(p, v)         a doorbell write: one 32-bit store, with
 *                                    release order relative to earlier writes
 *   xpu_relax()                      one spin-loop wait (host: sched_yield)
 *
 * "System scope" means visible to the NIC and to other agents (CPU threads,
 * GPU threads, an emulated NIC engine thread) sharing the memory.
 */
#ifndef XPUFAB_DEVICE_XPU_PRIMS_H_
#define XPUFAB_DEVICE_XPU_PRIMS_H_

#if defined(__CUDACC__)
#include "device/xpu_prims_cuda.h"
#elif defined(__HIPCC__) || defined(SYCL_LANGUAGE_VERSION)
#error "xpu_prims: no HIP/SYCL implementation yet (untested targets)"
#else
#include "device/xpu_prims_host.h"
#endif

#endif /* XPUFAB_DEVICE_XPU_PRIMS_H_ */
