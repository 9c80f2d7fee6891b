/*
 * xpu_scope_host.h - scope primitives for host compilers, over the host XPU
 * runtime. Include device/runtime/xpu_scope.h instead of this file.
 *
 * Ids come from the calling thread's work-item (a thread the runtime did not
 * launch is a launch of one work-item, so every scope is itself). Barriers
 * and broadcasts suspend the waiting work-item's fiber, so the others of its
 * work-group run meanwhile; ThreadSanitizer sees their ordering.
 */
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_HOST_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_HOST_H_

#include <stdint.h>

#include "device/runtime/xpu_host_abi.h"

#include "device/xpu_func.h"

XPU_FUNC uint32_t xpu_lane_id(void) { return xpu_host_current()->lane; }
XPU_FUNC uint32_t xpu_subgroup_size(void) { return xpu_host_current()->subgroup_size; }
XPU_FUNC uint32_t xpu_subgroup_id(void) { return xpu_host_current()->subgroup_id; }
XPU_FUNC uint32_t xpu_num_subgroups(void) { return xpu_host_current()->num_subgroups; }
XPU_FUNC void xpu_subgroup_barrier(void) { xpu_host_subgroup_barrier(); }
XPU_FUNC uint64_t xpu_subgroup_broadcast_u64(uint64_t value, uint32_t src_lane) {
  return xpu_host_subgroup_broadcast(value, src_lane);
}
XPU_FUNC uint32_t xpu_subgroup_broadcast_u32(uint32_t value, uint32_t src_lane) {
  return (uint32_t)xpu_host_subgroup_broadcast(value, src_lane);
}

XPU_FUNC uint32_t xpu_workgroup_rank(void) { return xpu_host_current()->local_id; }
XPU_FUNC uint32_t xpu_workgroup_size(void) { return xpu_host_current()->workgroup_size; }
XPU_FUNC uint32_t xpu_workgroup_id(void) { return xpu_host_current()->workgroup_id; }
XPU_FUNC uint32_t xpu_num_workgroups(void) { return xpu_host_current()->num_workgroups; }
XPU_FUNC void xpu_workgroup_barrier(void) { xpu_host_workgroup_barrier(); }
XPU_FUNC uint64_t xpu_workgroup_broadcast_u64(uint64_t value, uint32_t src_rank) {
  return xpu_host_workgroup_broadcast(value, src_rank);
}
XPU_FUNC uint32_t xpu_workgroup_broadcast_u32(uint32_t value, uint32_t src_rank) {
  return (uint32_t)xpu_host_workgroup_broadcast(value, src_rank);
}

XPU_FUNC uint32_t xpu_device_rank(void) { return xpu_host_current()->global_id; }
XPU_FUNC uint32_t xpu_device_size(void) { return xpu_host_current()->global_size; }
XPU_FUNC void xpu_device_barrier(void) { xpu_host_device_barrier(); }
XPU_FUNC uint64_t xpu_device_broadcast_u64(uint64_t value, uint32_t src_rank) {
  return xpu_host_device_broadcast(value, src_rank);
}
XPU_FUNC uint32_t xpu_device_broadcast_u32(uint32_t value, uint32_t src_rank) {
  return (uint32_t)xpu_host_device_broadcast(value, src_rank);
}

XPU_FUNC int xpu_scope_supported(int scope) { return xpu_host_scope_supported(scope); }

#endif /* XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_HOST_H_ */
