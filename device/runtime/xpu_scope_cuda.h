/*
 * xpu_scope_cuda.h - scope primitives for nvcc. Include
 * device/runtime/xpu_scope.h instead of this file.
 *
 * Device pass (__CUDA_ARCH__): subgroup = warp, work-group = block, device =
 * grid. Threads are numbered in block order (x fastest, then y, then z), so
 * warp w holds threads 32w .. 32w+31 of the block; the last warp of a block
 * whose size is not a multiple of 32 holds fewer lanes, and its collectives
 * use exactly those lanes (never __activemask(), which may miss converged
 * lanes). Device scope is available only in a cooperative launch
 * (cudaLaunchCooperativeKernel), where every block is co-resident and
 * cooperative_groups::this_grid().sync() is valid.
 *
 * Host pass: the same functions forward to the host XPU runtime, so host
 * code compiled by nvcc sees the caller's host work-item (or a work-group
 * of one).
 */
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_H_

#include <stdint.h>

#include <cooperative_groups.h>

#include "device/runtime/xpu_host_abi.h"

#include "device/xpu_func.h"

/* The device broadcast's mailbox, one per translation unit: two cooperative
 * launches of kernels from one unit must not broadcast at the same time.
 * Declared in both passes, as nvcc registers device variables from the host. */
static __device__ unsigned long long xpu_scope_grid_slot_;

#if defined(__CUDA_ARCH__)
__device__ static inline uint32_t xpu_cuda_block_threads_(void) {
  return blockDim.x * blockDim.y * blockDim.z;
}
__device__ static inline uint32_t xpu_cuda_thread_rank_(void) {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ static inline uint32_t xpu_cuda_warp_lanes_(void) {
  uint32_t left = xpu_cuda_block_threads_() - (xpu_cuda_thread_rank_() & ~31u);
  return left < 32u ? left : 32u;
}
__device__ static inline uint32_t xpu_cuda_warp_mask_(void) {
  uint32_t lanes = xpu_cuda_warp_lanes_();
  return lanes == 32u ? 0xffffffffu : ((1u << lanes) - 1u);
}
#endif

XPU_FUNC uint32_t xpu_lane_id(void) {
#if defined(__CUDA_ARCH__)
  return xpu_cuda_thread_rank_() & 31u;
#else
  return xpu_host_current()->lane;
#endif
}
XPU_FUNC uint32_t xpu_subgroup_size(void) {
#if defined(__CUDA_ARCH__)
  return xpu_cuda_warp_lanes_();
#else
  return xpu_host_current()->subgroup_size;
#endif
}
XPU_FUNC uint32_t xpu_subgroup_id(void) {
#if defined(__CUDA_ARCH__)
  return xpu_cuda_thread_rank_() >> 5;
#else
  return xpu_host_current()->subgroup_id;
#endif
}
XPU_FUNC uint32_t xpu_num_subgroups(void) {
#if defined(__CUDA_ARCH__)
  return (xpu_cuda_block_threads_() + 31u) >> 5;
#else
  return xpu_host_current()->num_subgroups;
#endif
}
XPU_FUNC void xpu_subgroup_barrier(void) {
#if defined(__CUDA_ARCH__)
  __syncwarp(xpu_cuda_warp_mask_());
#else
  xpu_host_subgroup_barrier();
#endif
}
XPU_FUNC uint64_t xpu_subgroup_broadcast_u64(uint64_t value, uint32_t src_lane) {
#if defined(__CUDA_ARCH__)
  return (uint64_t)__shfl_sync(xpu_cuda_warp_mask_(), (unsigned long long)value,
                               (int)(src_lane % xpu_cuda_warp_lanes_()));
#else
  return xpu_host_subgroup_broadcast(value, src_lane);
#endif
}
XPU_FUNC uint32_t xpu_subgroup_broadcast_u32(uint32_t value, uint32_t src_lane) {
#if defined(__CUDA_ARCH__)
  return __shfl_sync(xpu_cuda_warp_mask_(), value, (int)(src_lane % xpu_cuda_warp_lanes_()));
#else
  return (uint32_t)xpu_host_subgroup_broadcast(value, src_lane);
#endif
}

XPU_FUNC uint32_t xpu_workgroup_rank(void) {
#if defined(__CUDA_ARCH__)
  return xpu_cuda_thread_rank_();
#else
  return xpu_host_current()->local_id;
#endif
}
XPU_FUNC uint32_t xpu_workgroup_size(void) {
#if defined(__CUDA_ARCH__)
  return xpu_cuda_block_threads_();
#else
  return xpu_host_current()->workgroup_size;
#endif
}
XPU_FUNC uint32_t xpu_workgroup_id(void) {
#if defined(__CUDA_ARCH__)
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
#else
  return xpu_host_current()->workgroup_id;
#endif
}
XPU_FUNC uint32_t xpu_num_workgroups(void) {
#if defined(__CUDA_ARCH__)
  return gridDim.x * gridDim.y * gridDim.z;
#else
  return xpu_host_current()->num_workgroups;
#endif
}
XPU_FUNC void xpu_workgroup_barrier(void) {
#if defined(__CUDA_ARCH__)
  __syncthreads();
#else
  xpu_host_workgroup_barrier();
#endif
}
XPU_FUNC uint64_t xpu_workgroup_broadcast_u64(uint64_t value, uint32_t src_rank) {
#if defined(__CUDA_ARCH__)
  __shared__ unsigned long long slot;
  if (xpu_cuda_thread_rank_() == src_rank % xpu_cuda_block_threads_()) slot = value;
  __syncthreads();
  uint64_t out = slot;
  /* Keeps the next broadcast's store from overtaking a slow reader. */
  __syncthreads();
  return out;
#else
  return xpu_host_workgroup_broadcast(value, src_rank);
#endif
}
XPU_FUNC uint32_t xpu_workgroup_broadcast_u32(uint32_t value, uint32_t src_rank) {
  return (uint32_t)xpu_workgroup_broadcast_u64(value, src_rank);
}

XPU_FUNC uint32_t xpu_device_rank(void) {
#if defined(__CUDA_ARCH__)
  return xpu_workgroup_id() * xpu_cuda_block_threads_() + xpu_cuda_thread_rank_();
#else
  return xpu_host_current()->global_id;
#endif
}
XPU_FUNC uint32_t xpu_device_size(void) {
#if defined(__CUDA_ARCH__)
  return xpu_num_workgroups() * xpu_cuda_block_threads_();
#else
  return xpu_host_current()->global_size;
#endif
}
XPU_FUNC void xpu_device_barrier(void) {
#if defined(__CUDA_ARCH__)
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  /* sync() on a grid that was not launched cooperatively traps; do nothing. */
  if (grid.is_valid()) grid.sync();
#else
  xpu_host_device_barrier();
#endif
}
XPU_FUNC uint64_t xpu_device_broadcast_u64(uint64_t value, uint32_t src_rank) {
#if defined(__CUDA_ARCH__)
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  if (!grid.is_valid()) return value;
  if (xpu_device_rank() == src_rank % xpu_device_size()) {
    *(volatile unsigned long long *)&xpu_scope_grid_slot_ = value;
    __threadfence();
  }
  grid.sync();
  uint64_t out = *(volatile unsigned long long *)&xpu_scope_grid_slot_;
  grid.sync();
  return out;
#else
  return xpu_host_device_broadcast(value, src_rank);
#endif
}
XPU_FUNC uint32_t xpu_device_broadcast_u32(uint32_t value, uint32_t src_rank) {
  return (uint32_t)xpu_device_broadcast_u64(value, src_rank);
}

XPU_FUNC int xpu_scope_supported(int scope) {
#if defined(__CUDA_ARCH__)
  switch (scope) {
    case 0: /* XPU_SCOPE_WORK_ITEM */
    case 1: /* XPU_SCOPE_SUBGROUP */
    case 2: /* XPU_SCOPE_WORK_GROUP */
      return 1;
    case 3: /* XPU_SCOPE_DEVICE */
      return cooperative_groups::this_grid().is_valid() ? 1 : 0;
    default:
      return 0;
  }
#else
  return xpu_host_scope_supported(scope);
#endif
}

#endif /* XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_H_ */
