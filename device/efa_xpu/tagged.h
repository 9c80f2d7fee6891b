/*
 * efa_xpu/tagged.h - fi_xpu_tsend / fi_xpu_trecv for the efa provider. On a
 * protocol-fabric EP (EFA_XPU_EP_CAP_PROTO) they go through the protocol
 * core (api/proto/proto.h): tag matching with the posted and unexpected
 * lists in the core endpoint's memory, eager below the core's threshold and
 * rendezvous above it, completions through fi_xpu_cq_read
 * (FI_CQ_FORMAT_TAGGED carries the tag). On efa-direct, which has no tags,
 * they return -FI_ENOSYS. Valid C11, C++17 and CUDA.
 *
 * Scope: every work-item posts its own operation (buffers, tags and contexts
 * may differ); the posts of a group take the endpoint's lock one at a time,
 * and resolve their peer under it (the core's lookup keeps a cache).
 *
 * Returns 0; -FI_EAGAIN when the core has no transmit buffer, operation or
 * completion slot free (read the CQ, which progresses the core, and retry);
 * -FI_EINVAL (a NULL buffer or desc with len > 0, an address that is no peer
 * of the core); -FI_EBADFLAGS; -FI_EMSGSIZE (FI_INJECT above the eager size).
 * trecv: src_addr NULL receives from any peer; FI_PEEK, FI_CLAIM and
 * FI_DISCARD have libfabric's meaning (a peek that finds nothing completes
 * with the error FI_ENOMSG).
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_TAGGED_H_
#define XPUFAB_DEVICE_EFA_XPU_TAGGED_H_

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_xpu.h>

#include "api/proto/proto.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/check.h"
#include "xpufab/efa_xpu/handles.h"
#include "xpufab/efa_xpu/proto_ep.h"

#define EFA_XPU_TSEND_FLAGS_ \
  (FI_REMOTE_CQ_DATA | FI_MORE | FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_INJECT)
#define EFA_XPU_TRECV_FLAGS_ (FI_MORE | FI_COMPLETION | FI_PEEK | FI_CLAIM | FI_DISCARD)

XPU_DEVICE_FUNC int efa_xpu_tsend(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                                  void *dest_addr, uint64_t tag, void *context, uint64_t flags, int scope) {
  struct efa_xpu_ep *e = NULL;
  struct proto_ep *p;
  struct proto_buf b;
  uint32_t peer;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  p = efa_xpu_proto_of_(e);
  if (!p) return -FI_ENOSYS;
  if (flags & ~(uint64_t)EFA_XPU_TSEND_FLAGS_) return -FI_EBADFLAGS;
  rc = efa_xpu_proto_buf_(buf, len, desc, &b);
  if (rc) return rc;
  if (!dest_addr) return -FI_EINVAL;
  EFA_XPU_PROTO_CALL_(e, p, rc,
                      (peer = efa_xpu_proto_peer_(p, dest_addr)) == PROTO_NONE
                          ? -FI_EINVAL
                          : proto_send(p, peer, &b, tag, data, (flags & (FI_REMOTE_CQ_DATA | FI_INJECT)) | FI_TAGGED,
                                       (uint64_t)(uintptr_t)context));
  return rc;
}

XPU_DEVICE_FUNC int efa_xpu_trecv(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                                  uint64_t tag, uint64_t ignore, void *context, uint64_t flags, int scope) {
  struct efa_xpu_ep *e = NULL;
  struct proto_ep *p;
  struct proto_buf b;
  uint64_t src = PROTO_ADDR_ANY;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  p = efa_xpu_proto_of_(e);
  if (!p) return -FI_ENOSYS;
  if (flags & ~(uint64_t)EFA_XPU_TRECV_FLAGS_) return -FI_EBADFLAGS;
  rc = efa_xpu_proto_buf_(buf, len, desc, &b);
  if (rc) return rc;
  EFA_XPU_PROTO_CALL_(e, p, rc,
                      src_addr && (src = efa_xpu_proto_peer_(p, src_addr)) == PROTO_NONE
                          ? -FI_EINVAL
                          : proto_recv(p, src, &b, tag, ignore,
                                       (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD)) | FI_TAGGED,
                                       (uint64_t)(uintptr_t)context));
  return rc;
}

#endif /* XPUFAB_DEVICE_EFA_XPU_TAGGED_H_ */
