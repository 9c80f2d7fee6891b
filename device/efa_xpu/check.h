/*
 * efa_xpu/check.h - what every efa device call does first: check the scope
 * and the handle (class, layout version, size) and find the state behind it.
 * Valid C11, C++17 and CUDA.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_CHECK_H_
#define XPUFAB_DEVICE_EFA_XPU_CHECK_H_

#include <stdint.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "device/runtime/xpu_scope.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/handles.h"

XPU_DEVICE_FUNC int efa_xpu_scope_check_(int scope) {
  if (scope < FI_XPU_WORK_ITEM || scope > FI_XPU_DEVICE) return -FI_EINVAL;
  return xpu_scope_supported(scope) ? 0 : -FI_EOPNOTSUPP;
}

/* The state behind a handle after the common checks (see the header comment). */
XPU_DEVICE_FUNC int efa_xpu_state_check_(uint64_t prov_ctx, uint32_t fclass, uint32_t want_fclass) {
  if (!prov_ctx || fclass != want_fclass) return -FI_EINVAL;
  const uint32_t *hdr = (const uint32_t *)(uintptr_t)(prov_ctx + sizeof(struct fid_xpu));
  if (hdr[0] != EFA_XPU_VERSION) return -FI_EOPNOTSUPP;
  return 0;
}

XPU_DEVICE_FUNC int efa_xpu_ep_get_(struct fid_xpu_ep *ep, int scope, struct efa_xpu_ep **out) {
  int rc = efa_xpu_scope_check_(scope);
  if (rc) return rc;
  if (!ep) return -FI_EINVAL;
  rc = efa_xpu_state_check_(ep->fid.prov_ctx, ep->fid.fclass, FI_CLASS_EP);
  if (rc) return rc;
  struct efa_xpu_ep *e = (struct efa_xpu_ep *)(uintptr_t)ep->fid.prov_ctx;
  if (e->size != sizeof(*e)) return -FI_EINVAL;
  *out = e;
  return 0;
}

XPU_DEVICE_FUNC int efa_xpu_cq_get_(struct fid_xpu_cq *cq, int scope, struct efa_xpu_cq **out) {
  int rc = efa_xpu_scope_check_(scope);
  if (rc) return rc;
  if (!cq) return -FI_EINVAL;
  rc = efa_xpu_state_check_(cq->fid.prov_ctx, cq->fid.fclass, FI_CLASS_CQ);
  if (rc) return rc;
  struct efa_xpu_cq *c = (struct efa_xpu_cq *)(uintptr_t)cq->fid.prov_ctx;
  if (c->size != sizeof(*c)) return -FI_EINVAL;
  *out = c;
  return 0;
}

XPU_DEVICE_FUNC int efa_xpu_cntr_get_(struct fid_xpu_cntr *cntr, int scope, struct efa_xpu_cntr **out) {
  int rc = efa_xpu_scope_check_(scope);
  if (rc) return rc;
  if (!cntr) return -FI_EINVAL;
  rc = efa_xpu_state_check_(cntr->fid.prov_ctx, cntr->fid.fclass, FI_CLASS_CNTR);
  if (rc) return rc;
  struct efa_xpu_cntr *c = (struct efa_xpu_cntr *)(uintptr_t)cntr->fid.prov_ctx;
  if (c->size != sizeof(*c) || !c->value || !c->err_value) return -FI_EINVAL;
  *out = c;
  return 0;
}

#endif /* XPUFAB_DEVICE_EFA_XPU_CHECK_H_ */
