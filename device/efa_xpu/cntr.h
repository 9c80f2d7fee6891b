/*
 * efa_xpu/cntr.h - the efa device counter calls: read, readerr, wait, add,
 * set, adderr, seterr, on the 64-bit words the NIC adds into. Valid C11,
 * C++17 and CUDA.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_CNTR_H_
#define XPUFAB_DEVICE_EFA_XPU_CNTR_H_

#include <stdint.h>
#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <time.h>
#endif

#include <rdma/fi_domain.h>
#include <rdma/fi_xpu.h>

#include "device/runtime/xpu_scope.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/check.h"
#include "xpufab/efa_xpu/handles.h"

/* A monotonic clock in nanoseconds, for cntr_wait timeouts. */
XPU_DEVICE_FUNC uint64_t efa_xpu_now_ns_(void) {
#if defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(__CUDACC__)
  return 0; /* host pass of a __device__ function: never run */
#elif defined(__cplusplus) || defined(_POSIX_C_SOURCE)
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#else
  struct timespec ts; /* strict C11: only the wall clock is declared */
  timespec_get(&ts, TIME_UTC);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

XPU_DEVICE_FUNC uint64_t efa_xpu_cntr_load_(struct fid_xpu_cntr *cntr, int err, int scope) {
  struct efa_xpu_cntr *c = NULL;
  if (efa_xpu_cntr_get_(cntr, scope, &c)) return 0;
  uint64_t v = 0;
  if (xpu_scope_is_leader(scope)) v = xpu_load_acquire_u64(err ? c->err_value : c->value);
  if (scope == FI_XPU_WORK_ITEM) return v;
  return xpu_scope_broadcast_u64(scope, v, 0);
}

XPU_DEVICE_FUNC uint64_t efa_xpu_cntr_read(struct fid_xpu_cntr *cntr, int scope) {
  return efa_xpu_cntr_load_(cntr, 0, scope);
}

XPU_DEVICE_FUNC uint64_t efa_xpu_cntr_readerr(struct fid_xpu_cntr *cntr, int scope) {
  return efa_xpu_cntr_load_(cntr, 1, scope);
}

XPU_DEVICE_FUNC void efa_xpu_cntr_wait(struct fid_xpu_cntr *cntr, uint64_t threshold, int timeout, int scope) {
  struct efa_xpu_cntr *c = NULL;
  if (efa_xpu_cntr_get_(cntr, scope, &c)) return;
  if (xpu_scope_is_leader(scope)) {
    const uint64_t err0 = xpu_load_acquire_u64(c->err_value);
    const uint64_t start = timeout >= 0 ? efa_xpu_now_ns_() : 0;
    const uint64_t limit = (uint64_t)(timeout >= 0 ? timeout : 0) * 1000000u;
    while (xpu_load_acquire_u64(c->value) < threshold) {
      if (xpu_load_acquire_u64(c->err_value) != err0) break;
      if (timeout >= 0 && efa_xpu_now_ns_() - start >= limit) break;
      xpu_relax();
    }
  }
  if (scope != FI_XPU_WORK_ITEM) xpu_scope_barrier(scope);
}

/* op: 0 add, 1 set. */
XPU_DEVICE_FUNC int efa_xpu_cntr_update_(struct fid_xpu_cntr *cntr, uint64_t value, int err, int op, int scope) {
  struct efa_xpu_cntr *c = NULL;
  int rc = efa_xpu_cntr_get_(cntr, scope, &c);
  if (rc) return rc;
  if (xpu_scope_is_leader(scope)) {
    uint64_t *p = err ? c->err_value : c->value;
    if (op == 0) xpu_fetch_add_u64(p, value);
    else xpu_store_release_u64(p, value);
  }
  if (scope != FI_XPU_WORK_ITEM) xpu_scope_barrier(scope);
  return 0;
}

XPU_DEVICE_FUNC int efa_xpu_cntr_add(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 0, 0, scope);
}

XPU_DEVICE_FUNC int efa_xpu_cntr_set(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 0, 1, scope);
}

XPU_DEVICE_FUNC int efa_xpu_cntr_adderr(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 1, 0, scope);
}

XPU_DEVICE_FUNC int efa_xpu_cntr_seterr(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 1, 1, scope);
}

#endif /* XPUFAB_DEVICE_EFA_XPU_CNTR_H_ */
