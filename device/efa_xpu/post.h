/*
 * efa_xpu/post.h - the efa device posts: send, write, read and recv at every
 * scope, each member of the scope posting its own operation with one slot
 * claim and one doorbell for the group (see efa_xpu.h). Tagged calls and
 * atomics go through the protocol core: tagged.h, atomics.h; on a
 * protocol-fabric EP these calls do too (every member posts its own under
 * the EP's lock, as tagged.h does). Valid C11, C++17 and CUDA.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_POST_H_
#define XPUFAB_DEVICE_EFA_XPU_POST_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "device/efa_dp.h"
#include "device/efa_wr.h"
#include "device/runtime/xpu_scope.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/check.h"
#include "xpufab/efa_xpu/handles.h"
#include "xpufab/efa_xpu/proto_ep.h"

#if defined(__CUDACC__)
/* Device-scope enrollment counter (one per translation unit, like the scope
 * primitives' grid mailbox). */
static __device__ uint32_t efa_xpu_grid_count_;
#endif

/*
 * Enrolls the caller in its scope's group operation and gives each `valid`
 * member a distinct *idx in [0, total). Collective; on return the leader knows
 * `total` (the return value; other members get a value they must not use).
 * `count` is storage of the caller's that must stay alive until the next
 * collective call of the scope (the leader's is the group's counter on the
 * host XPU).
 */
XPU_DEVICE_FUNC uint32_t efa_xpu_group_enroll_(int scope, int valid, uint32_t *idx, uint32_t *count) {
  *idx = 0;
  if (scope == FI_XPU_WORK_ITEM) return valid ? 1u : 0u;
#if defined(__CUDA_ARCH__)
  (void)count;
  if (scope == FI_XPU_SUBGROUP) {
    const uint32_t lanes = xpu_subgroup_size();
    const uint32_t mask = lanes >= 32u ? 0xffffffffu : ((1u << lanes) - 1u);
    const uint32_t lane = xpu_lane_id();
    const uint32_t votes = __ballot_sync(mask, valid);
    *idx = __popc(votes & ((1u << lane) - 1u));
    return (uint32_t)__popc(votes);
  }
  if (scope == FI_XPU_WORK_GROUP) {
    __shared__ uint32_t wg_count;
    if (xpu_workgroup_rank() == 0) wg_count = 0;
    __syncthreads();
    if (valid) *idx = atomicAdd(&wg_count, 1u);
    __syncthreads();
    const uint32_t total = wg_count;
    __syncthreads();
    return total;
  }
  if (xpu_device_rank() == 0) efa_xpu_grid_count_ = 0;
  xpu_device_barrier();
  if (valid) *idx = atomicAdd(&efa_xpu_grid_count_, 1u);
  xpu_device_barrier();
  const uint32_t total = *(volatile uint32_t *)&efa_xpu_grid_count_;
  xpu_device_barrier();
  return total;
#else
  /* Host XPU: work-items share the address space, so the leader's counter
   * serves the group; the leader reads it after the barrier. */
  *count = 0;
  uint32_t *shared_count = (uint32_t *)(uintptr_t)xpu_scope_broadcast_u64(scope, (uint64_t)(uintptr_t)count, 0);
  if (valid) *idx = xpu_fetch_add_u32(shared_count, 1u);
  xpu_scope_barrier(scope);
  return xpu_scope_is_leader(scope) ? xpu_load_acquire_u32(count) : 0u;
#endif
}

/* The claim result the leader broadcasts: first slot, error (positive), total. */
XPU_DEVICE_FUNC uint64_t efa_xpu_pack_claim_(uint32_t first, uint32_t err, uint32_t total) {
  return ((uint64_t)first << 32) | ((uint64_t)(err & 0xffu) << 24) | (total & 0xffffffu);
}

XPU_DEVICE_FUNC int efa_xpu_ring_claim_(struct efa_dp_ring *r, uint32_t n, uint32_t *first) {
  int rc;
  for (;;) {
    rc = efa_dp_ring_claim(r, n, first);
#if defined(FI_XPU_EFA_POST_SPIN)
    if (rc == -FI_EAGAIN) {
      xpu_relax();
      continue;
    }
#endif
    return rc;
  }
}

#define EFA_XPU_TX_FLAGS_ (FI_REMOTE_CQ_DATA | FI_MORE | FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE)
#define EFA_XPU_RX_FLAGS_ (FI_MORE | FI_COMPLETION)

/* Builds the work request of one member; 0 or its error. */
XPU_DEVICE_FUNC int efa_xpu_make_wr_(const struct efa_xpu_ep *e, uint32_t op, const void *buf, size_t len,
                                     void *desc, uint64_t data, void *peer, uint64_t addr, uint64_t key,
                                     void *context, uint64_t flags, struct efa_dp_wr *wr) {
  memset(wr, 0, sizeof(*wr));
  if (flags & ~(uint64_t)EFA_XPU_TX_FLAGS_) return -FI_EBADFLAGS;
  int rc = efa_wr_check_op(op, flags);
  if (rc) return rc;
  if (op == EFA_DP_OP_RDMA_READ && !(e->caps & EFA_XPU_EP_CAP_RDMA_READ)) return -FI_EOPNOTSUPP;
  if (op == EFA_DP_OP_RDMA_WRITE && !(e->caps & EFA_XPU_EP_CAP_RDMA_WRITE)) return -FI_EOPNOTSUPP;
  if (!peer || (len && (!buf || !desc))) return -FI_EINVAL;
  if (len > 0xffffffffu) return -FI_EMSGSIZE;
  struct efa_xpu_peer p;
  memcpy(&p, peer, sizeof(p));
  struct efa_dp_sge sge;
  sge.addr = (uint64_t)(uintptr_t)buf;
  sge.length = (uint32_t)len;
  sge.lkey = 0;
  if (desc) {
    struct efa_xpu_desc d;
    memcpy(&d, desc, sizeof(d));
    sge.lkey = d.lkey;
  }
  struct efa_wr_args a;
  a.op = op;
  a.num_sge = 1;
  a.sge = &sge;
  a.ah = p.ahn;
  a.dest_qpn = p.remote_qpn;
  a.qkey = p.remote_qkey;
  a.remote_addr = addr;
  a.key = key;
  a.data = data;
  a.context = (uint64_t)(uintptr_t)context;
  a.flags = flags;
  struct efa_wr_limits lim;
  lim.max_msg = e->mtu;
  lim.max_rdma = e->max_rdma_size;
  lim.max_inline = e->inline_size;
  rc = efa_wr_build(&a, &lim, wr);
  if (rc) return rc;
  return efa_sq_check_wr(&e->sq, wr);
}

/* Posts each member's wr (my_rc == 0) with one claim and one doorbell. */
XPU_DEVICE_FUNC int efa_xpu_sq_post_group_(struct efa_xpu_ep *e, const struct efa_dp_wr *wr, int my_rc, uint64_t flags,
                                           int scope) {
  const uint32_t more = (flags & FI_MORE) ? EFA_DP_WR_MORE : 0u;
  struct efa_sq *sq = &e->sq;
  if (scope == FI_XPU_WORK_ITEM) {
    if (my_rc) return my_rc;
    uint32_t slot;
    int rc = efa_xpu_ring_claim_(&sq->ring, 1, &slot);
    if (rc) return rc;
    efa_sq_write(sq, slot, wr);
    efa_sq_publish(sq, slot, 1, more);
    return 0;
  }
  uint32_t idx, count;
  const int leader = xpu_scope_is_leader(scope);
  uint32_t total = efa_xpu_group_enroll_(scope, my_rc == 0, &idx, &count);
  uint64_t claim = 0;
  if (leader && total) {
    uint32_t first = 0;
    int rc = efa_xpu_ring_claim_(&sq->ring, total, &first);
    claim = efa_xpu_pack_claim_(first, rc ? (uint32_t)-rc : 0u, total);
  }
  /* Also the barrier after which the leader's `count` may go away. */
  claim = xpu_scope_broadcast_u64(scope, claim, 0);
  const uint32_t err = (uint32_t)(claim >> 24) & 0xffu;
  const uint32_t first = (uint32_t)(claim >> 32);
  total = (uint32_t)claim & 0xffffffu;
  if (err) return my_rc ? my_rc : -(int)err;
  if (my_rc == 0) efa_sq_write(sq, first + idx, wr);
  xpu_scope_barrier(scope);
  if (leader && total) efa_sq_publish(sq, first, total, more);
  return my_rc;
}

/*
 * A send, write or read of a protocol-fabric EP through its core (msg.h,
 * rma.h): 0; -FI_EOPNOTSUPP (RMA on an EP without FI_RMA); -FI_EINVAL (no
 * peer of the core, a key wider than an EFA key, a buffer without desc);
 * -FI_EBADFLAGS; -FI_EAGAIN (read the CQ and retry).
 */
XPU_DEVICE_FUNC int efa_xpu_proto_tx_(struct efa_xpu_ep *e, struct proto_ep *p, uint32_t op, const void *buf,
                                      size_t len, void *desc, uint64_t data, void *peer_addr, uint64_t addr,
                                      uint64_t key, void *context, uint64_t flags) {
  struct proto_buf b;
  uint32_t peer;
  int rc;
  if (flags & ~(uint64_t)EFA_XPU_TX_FLAGS_) return -FI_EBADFLAGS;
  if (op != EFA_DP_OP_SEND && !(e->caps & EFA_XPU_EP_CAP_RMA)) return -FI_EOPNOTSUPP;
  if (op == EFA_DP_OP_RDMA_READ && (flags & FI_REMOTE_CQ_DATA)) return -FI_EINVAL;
  rc = efa_xpu_proto_buf_(buf, len, desc, &b);
  if (rc) return rc;
  if (!peer_addr || key > 0xffffffffu) return -FI_EINVAL;
  EFA_XPU_PROTO_CALL_(e, p, rc,
                      (peer = efa_xpu_proto_peer_(p, peer_addr)) == PROTO_NONE
                          ? -FI_EINVAL
                      : op == EFA_DP_OP_SEND
                          ? proto_send(p, peer, &b, 0, data, flags & FI_REMOTE_CQ_DATA, (uint64_t)(uintptr_t)context)
                          : proto_rma(p, peer, op == EFA_DP_OP_RDMA_WRITE, &b, 1, addr, (uint32_t)key, data,
                                      flags & FI_REMOTE_CQ_DATA, (uint64_t)(uintptr_t)context));
  return rc;
}

XPU_DEVICE_FUNC int efa_xpu_post_tx_(struct fid_xpu_ep *ep, uint32_t op, const void *buf, size_t len, void *desc,
                                     uint64_t data, void *peer, uint64_t addr, uint64_t key, void *context,
                                     uint64_t flags, int scope) {
  struct efa_xpu_ep *e = NULL;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  struct proto_ep *p = efa_xpu_proto_of_(e);
  if (p) return efa_xpu_proto_tx_(e, p, op, buf, len, desc, data, peer, addr, key, context, flags);
  struct efa_dp_wr wr;
  rc = efa_xpu_make_wr_(e, op, buf, len, desc, data, peer, addr, key, context, flags, &wr);
  return efa_xpu_sq_post_group_(e, &wr, rc, flags, scope);
}

XPU_DEVICE_FUNC int efa_xpu_send(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                                 void *dest_addr, void *context, uint64_t flags, int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_SEND, buf, len, desc, data, dest_addr, 0, 0, context, flags, scope);
}

XPU_DEVICE_FUNC int efa_xpu_write(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                                  void *dest_addr, uint64_t addr, uint64_t key, void *context, uint64_t flags,
                                  int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_RDMA_WRITE, buf, len, desc, data, dest_addr, addr, key, context, flags,
                          scope);
}

XPU_DEVICE_FUNC int efa_xpu_read(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                                 uint64_t addr, uint64_t key, void *context, uint64_t flags, int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_RDMA_READ, buf, len, desc, 0, src_addr, addr, key, context, flags, scope);
}

/* Writes one receive descriptor into claimed RQ slot `slot`; its buffer goes to rx_bufs for the CQ. */
XPU_DEVICE_FUNC void efa_xpu_rq_write_(struct efa_xpu_ep *e, uint32_t slot, const struct efa_dp_sge *sge, void *buf,
                                       void *context) {
  struct efa_rq *rq = &e->rq;
  const int req_id = efa_rq_write(rq, slot, sge, 1, (uint64_t)(uintptr_t)context);
  xpu_store_relaxed_u64(&e->rx_bufs[(uint32_t)req_id & (rq->reqs.count - 1u)], (uint64_t)(uintptr_t)buf);
}

XPU_DEVICE_FUNC int efa_xpu_recv(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                                 void *context, uint64_t flags, int scope) {
  (void)src_addr; /* EFA receives from any source */
  struct efa_xpu_ep *e = NULL;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  struct proto_ep *p = efa_xpu_proto_of_(e);
  if (p) {
    /* The protocol fabric: an untagged receive of the core, from any peer. */
    struct proto_buf b;
    if (flags & ~(uint64_t)EFA_XPU_RX_FLAGS_) return -FI_EBADFLAGS;
    rc = efa_xpu_proto_buf_(buf, len, desc, &b);
    if (rc) return rc;
    EFA_XPU_PROTO_CALL_(e, p, rc, proto_recv(p, PROTO_ADDR_ANY, &b, 0, 0, 0, (uint64_t)(uintptr_t)context));
    return rc;
  }
  int my_rc = 0;
  if (flags & ~(uint64_t)EFA_XPU_RX_FLAGS_) my_rc = -FI_EBADFLAGS;
  else if (len && (!buf || !desc)) my_rc = -FI_EINVAL;
  else if (len > 0xffffffffu) my_rc = -FI_EMSGSIZE;
  struct efa_dp_sge sge;
  sge.addr = (uint64_t)(uintptr_t)buf;
  sge.length = (uint32_t)len;
  sge.lkey = 0;
  if (desc) {
    struct efa_xpu_desc d;
    memcpy(&d, desc, sizeof(d));
    sge.lkey = d.lkey;
  }
  const int defer = (flags & FI_MORE) != 0;
  struct efa_dp_ring *ring = &e->rq.ring;
  if (scope == FI_XPU_WORK_ITEM) {
    if (my_rc) return my_rc;
    uint32_t slot;
    rc = efa_xpu_ring_claim_(ring, 1, &slot);
    if (rc) return rc;
    efa_xpu_rq_write_(e, slot, &sge, buf, context);
    efa_dp_ring_publish(ring, slot, 1, defer);
    return 0;
  }
  uint32_t idx, count;
  const int leader = xpu_scope_is_leader(scope);
  uint32_t total = efa_xpu_group_enroll_(scope, my_rc == 0, &idx, &count);
  uint64_t claim = 0;
  if (leader && total) {
    uint32_t first = 0;
    rc = efa_xpu_ring_claim_(ring, total, &first);
    claim = efa_xpu_pack_claim_(first, rc ? (uint32_t)-rc : 0u, total);
  }
  claim = xpu_scope_broadcast_u64(scope, claim, 0);
  const uint32_t err = (uint32_t)(claim >> 24) & 0xffu;
  const uint32_t first = (uint32_t)(claim >> 32);
  total = (uint32_t)claim & 0xffffffu;
  if (err) return my_rc ? my_rc : -(int)err;
  if (my_rc == 0) efa_xpu_rq_write_(e, first + idx, &sge, buf, context);
  xpu_scope_barrier(scope);
  if (leader && total) efa_dp_ring_publish(ring, first, total, defer);
  return my_rc;
}

#endif /* XPUFAB_DEVICE_EFA_XPU_POST_H_ */
