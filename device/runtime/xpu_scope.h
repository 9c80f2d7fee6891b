/*
 * xpu_scope.h - scope primitives for device code: ids, barriers and
 * broadcasts of a work-item's subgroup, work-group and device.
 *
 * The device data path (posting with one slot claim and one doorbell per
 * group, leader-polled CQs and counters) is written against these. One
 * implementation per target, selected here:
 *   nvcc (__CUDACC__) -> device/runtime/xpu_scope_cuda.h
 *                        (warp = subgroup, block = work-group, grid = device)
 *   host compilers    -> device/runtime/xpu_scope_host.h
 *                        (the host XPU runtime, device/runtime/host_xpu.h)
 * HIP and SYCL have no implementation yet; including this header there fails.
 *
 * Every target provides, as XPU_FUNC functions of the same meaning:
 *   xpu_lane_id() / xpu_subgroup_size() / xpu_subgroup_id() / xpu_num_subgroups()
 *   xpu_subgroup_barrier(), xpu_subgroup_broadcast_u32/u64(v, src_lane)
 *   xpu_workgroup_rank() / xpu_workgroup_size() / xpu_workgroup_id() / xpu_num_workgroups()
 *   xpu_workgroup_barrier(), xpu_workgroup_broadcast_u32/u64(v, src_rank)
 *   xpu_device_rank() / xpu_device_size()
 *   xpu_device_barrier(), xpu_device_broadcast_u32/u64(v, src_rank)
 *   xpu_scope_supported(scope)
 * and this header adds the same operations selected by a scope number:
 *   xpu_scope_rank/size/is_leader(scope), xpu_scope_barrier(scope),
 *   xpu_scope_broadcast_u32/u64(scope, v, src_rank)
 *
 * Rules common to all targets:
 * - Collective calls (barrier, broadcast) must be made by every work-item of
 *   the scope, converged, in the same order. On the host XPU a work-item
 *   that has returned from the kernel no longer counts; portable kernels
 *   should not rely on that.
 * - A barrier orders memory: everything a member wrote before it is visible
 *   to every member after it (device scope for GPU memory, and for the host
 *   XPU all memory). Fences for the NIC are separate (device/xpu_prims.h).
 * - A broadcast returns the value of the member whose rank equals `src`
 *   modulo the scope's size, like CUDA's __shfl_sync.
 * - Every subgroup of the host XPU is full; on CUDA the last warp of a block
 *   whose size is not a multiple of 32 has fewer lanes (xpu_subgroup_size()
 *   says how many). The leader of every scope is rank 0.
 * - Device scope needs all work-items of the launch to be co-resident: a
 *   cooperative CUDA launch, or any host XPU launch not marked
 *   XPU_HOST_LAUNCH_NONCOOPERATIVE. Elsewhere xpu_scope_supported(
 *   XPU_SCOPE_DEVICE) is 0, device barriers synchronize nothing and device
 *   broadcasts return their own value.
 */
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_H_

#include <stdint.h>

/* Scope numbers; equal to FI_XPU_WORK_ITEM ... FI_XPU_DEVICE of rdma/fi_xpu.h. */
#define XPU_SCOPE_WORK_ITEM 0
#define XPU_SCOPE_SUBGROUP 1
#define XPU_SCOPE_WORK_GROUP 2
#define XPU_SCOPE_DEVICE 3

#if defined(__CUDACC__)
#include "device/runtime/xpu_scope_cuda.h"
#elif defined(__HIPCC__) || defined(SYCL_LANGUAGE_VERSION)
#error "xpu_scope: no HIP/SYCL implementation yet (untested targets)"
#else
#include "device/runtime/xpu_scope_host.h"
#endif

/* The caller's rank in `scope` (0 for an unknown scope). */
XPU_FUNC uint32_t xpu_scope_rank(int scope) {
  switch (scope) {
    case XPU_SCOPE_SUBGROUP:
      return xpu_lane_id();
    case XPU_SCOPE_WORK_GROUP:
      return xpu_workgroup_rank();
    case XPU_SCOPE_DEVICE:
      return xpu_device_rank();
    default:
      return 0;
  }
}

/* How many work-items `scope` has (1 for an unknown scope). */
XPU_FUNC uint32_t xpu_scope_size(int scope) {
  switch (scope) {
    case XPU_SCOPE_SUBGROUP:
      return xpu_subgroup_size();
    case XPU_SCOPE_WORK_GROUP:
      return xpu_workgroup_size();
    case XPU_SCOPE_DEVICE:
      return xpu_device_size();
    default:
      return 1;
  }
}

/* 1 if the caller leads `scope` (rank 0): it claims, rings and polls for all. */
XPU_FUNC int xpu_scope_is_leader(int scope) { return xpu_scope_rank(scope) == 0; }

/* Barrier over `scope`. Returns 0, or -1 (nothing synchronized) when the
 * scope is unknown or xpu_scope_supported(scope) is 0. */
XPU_FUNC int xpu_scope_barrier(int scope) {
  if (!xpu_scope_supported(scope)) return -1;
  switch (scope) {
    case XPU_SCOPE_SUBGROUP:
      xpu_subgroup_barrier();
      break;
    case XPU_SCOPE_WORK_GROUP:
      xpu_workgroup_barrier();
      break;
    case XPU_SCOPE_DEVICE:
      xpu_device_barrier();
      break;
    default:
      break;
  }
  return 0;
}

/* Broadcast over `scope`; an unknown or unsupported scope returns `value`. */
XPU_FUNC uint64_t xpu_scope_broadcast_u64(int scope, uint64_t value, uint32_t src_rank) {
  if (!xpu_scope_supported(scope)) return value;
  switch (scope) {
    case XPU_SCOPE_SUBGROUP:
      return xpu_subgroup_broadcast_u64(value, src_rank);
    case XPU_SCOPE_WORK_GROUP:
      return xpu_workgroup_broadcast_u64(value, src_rank);
    case XPU_SCOPE_DEVICE:
      return xpu_device_broadcast_u64(value, src_rank);
    default:
      return value;
  }
}

XPU_FUNC uint32_t xpu_scope_broadcast_u32(int scope, uint32_t value, uint32_t src_rank) {
  if (!xpu_scope_supported(scope)) return value;
  switch (scope) {
    case XPU_SCOPE_SUBGROUP:
      return xpu_subgroup_broadcast_u32(value, src_rank);
    case XPU_SCOPE_WORK_GROUP:
      return xpu_workgroup_broadcast_u32(value, src_rank);
    case XPU_SCOPE_DEVICE:
      return xpu_device_broadcast_u32(value, src_rank);
    default:
      return value;
  }
}

#endif /* XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_H_ */
