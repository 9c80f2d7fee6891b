/*
 * efa_xpu/atomics.h - fi_xpu_atomic / fi_xpu_fetch_atomic /
 * fi_xpu_compare_atomic for the efa provider. On a protocol-fabric EP
 * (EFA_XPU_EP_CAP_PROTO) the request goes through the protocol core
 * (api/proto/proto.h): whoever progresses the target endpoint executes it
 * with the target memory's own atomics (api/proto/atomic.h) after checking
 * the key, bounds and access, and fetched values come back in a reply. The
 * completion (FI_ATOMIC | FI_WRITE for fi_xpu_atomic, FI_ATOMIC | FI_READ for
 * the others) is read with fi_xpu_cq_read; a bad key or range completes with
 * an error whose prov_errno is the EFA status
 * (EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS). On efa-direct, which has no
 * atomics, they return -FI_ENOSYS. Valid C11, C++17 and CUDA.
 *
 * Scope: every work-item issues its own request. The descriptors are not
 * needed (operands travel in the request, results are copied by the core).
 *
 * Returns 0; before anything is sent: -FI_EOPNOTSUPP (an op/datatype pair the
 * table of api/proto/atomic.h does not offer for this kind), -FI_EINVAL (no
 * peer, count 0, a missing buffer, a key wider than EFA's 32 bits),
 * -FI_EMSGSIZE (more elements than one request holds), -FI_EBADFLAGS,
 * -FI_EAGAIN (read the CQ and retry).
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_ATOMICS_H_
#define XPUFAB_DEVICE_EFA_XPU_ATOMICS_H_

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "api/proto/atomic.h"
#include "api/proto/proto.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/check.h"
#include "xpufab/efa_xpu/handles.h"
#include "xpufab/efa_xpu/proto_ep.h"

#define EFA_XPU_ATOMIC_FLAGS_ (FI_MORE | FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_INJECT)

XPU_DEVICE_FUNC int efa_xpu_atomic_post_(struct fid_xpu_ep *ep, int kind, const void *buf, size_t count,
                                         const void *compare, void *result, void *dest_addr, uint64_t addr,
                                         uint64_t key, int datatype, int op, void *context, uint64_t flags,
                                         int scope) {
  struct efa_xpu_ep *e = NULL;
  struct proto_ep *p;
  uint32_t peer;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  p = efa_xpu_proto_of_(e);
  if (!p) return -FI_ENOSYS;
  if (flags & ~(uint64_t)EFA_XPU_ATOMIC_FLAGS_) return -FI_EBADFLAGS;
  /* FI_INJECT has no completion to carry fetched values. */
  if ((flags & FI_INJECT) && kind != PROTO_ATOMIC_PLAIN) return -FI_EBADFLAGS;
  if (!proto_atomic_supported(kind, op, datatype)) return -FI_EOPNOTSUPP;
  if (key > 0xffffffffu || !dest_addr) return -FI_EINVAL;
  /* The peer is resolved under the lock: the core's lookup keeps a cache. */
  EFA_XPU_PROTO_CALL_(e, p, rc,
                      (peer = efa_xpu_proto_peer_(p, dest_addr)) == PROTO_NONE
                          ? -FI_EINVAL
                          : proto_atomic(p, peer, kind, op, datatype, buf, compare, count, addr, (uint32_t)key,
                                         result, flags & FI_INJECT, (uint64_t)(uintptr_t)context));
  return rc;
}

XPU_DEVICE_FUNC int efa_xpu_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc, void *dest_addr,
                                   uint64_t addr, uint64_t key, int datatype, int op, void *context, uint64_t flags,
                                   int scope) {
  (void)desc;
  return efa_xpu_atomic_post_(ep, PROTO_ATOMIC_PLAIN, buf, count, NULL, NULL, dest_addr, addr, key, datatype, op,
                              context, flags, scope);
}

XPU_DEVICE_FUNC int efa_xpu_fetch_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc, void *result,
                                         void *result_desc, void *dest_addr, uint64_t addr, uint64_t key, int datatype,
                                         int op, void *context, uint64_t flags, int scope) {
  (void)desc, (void)result_desc;
  return efa_xpu_atomic_post_(ep, PROTO_ATOMIC_FETCH, buf, count, NULL, result, dest_addr, addr, key, datatype, op,
                              context, flags, scope);
}

XPU_DEVICE_FUNC int efa_xpu_compare_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc,
                                           const void *compare, void *compare_desc, void *result, void *result_desc,
                                           void *dest_addr, uint64_t addr, uint64_t key, int datatype, int op,
                                           void *context, uint64_t flags, int scope) {
  (void)desc, (void)compare_desc, (void)result_desc;
  return efa_xpu_atomic_post_(ep, PROTO_ATOMIC_COMPARE, buf, count, compare, result, dest_addr, addr, key, datatype,
                              op, context, flags, scope);
}

#endif /* XPUFAB_DEVICE_EFA_XPU_ATOMICS_H_ */
