/*
 * rdma/fi_xpu_device_efa.h - the efa provider's device-side calls
 * (prov_id FI_XPU_PROV_EFA): efa_xpu_<op>() for every fi_xpu_<op>() of
 * rdma/fi_xpu_device.h, which includes this header when FI_XPU_HAVE_EFA is
 * nonzero. Valid C11, C++17 and CUDA (nvcc); the host form runs kernels on
 * the host XPU (device/runtime/host_xpu.h). HIP and SYCL: not available (the
 * data-path primitives have no implementation there yet).
 *
 * The handles point at the structs of api/efa/efa_xpu_types.h; every queue
 * access goes through the one data path of device/ (efa_sq.h, efa_rq.h,
 * efa_cq.h), the same code the host provider uses.
 *
 * Scope. Every work-item of `scope` makes the same call with the same
 * handle, scope and flags; buffers, lengths, addresses and contexts may
 * differ per work-item. Data transfers post one operation per work-item,
 * with one slot claim and one doorbell for the group (in max_batch chunks):
 * members enroll, the leader (rank 0) claims `n` slots, each member writes
 * its WQE/descriptor into its slot, and after a scope barrier the leader
 * publishes and rings. A member whose own arguments are invalid returns its
 * error and posts nothing; the others post normally. CQ and counter calls
 * are performed once for the scope by the leader and their result is
 * broadcast (cntr_add/set/adderr/seterr change the counter once per scope).
 * FI_XPU_DEVICE is supported where xpu_scope_supported() says so (host XPU
 * launches that are cooperative, cooperative CUDA launches); elsewhere every
 * call returns -FI_EOPNOTSUPP (cntr_read/readerr 0, cntr_wait returns at
 * once) before touching any queue. An unknown scope gives -FI_EINVAL.
 *
 * Return values (all calls check the handle first: a NULL or foreign state
 * gives -FI_EINVAL, a layout version other than EFA_XPU_VERSION
 * -FI_EOPNOTSUPP):
 *   send/recv/write/read   0; -FI_EAGAIN when the SQ/RQ lacks room for the
 *                          group (nothing is posted; poll the CQ, which gives
 *                          slots back, and retry); -FI_EINVAL (bad buffer,
 *                          desc or address, or a group larger than the
 *                          queue); -FI_EMSGSIZE (send above the MTU, RDMA
 *                          above max_rdma_size); -FI_EBADFLAGS;
 *                          -FI_EOPNOTSUPP (RDMA the device lacks).
 *                          Flags: FI_REMOTE_CQ_DATA (send/write: `data`'s
 *                          low 32 bits as immediate data), FI_MORE (defer the
 *                          doorbell; whole max_batch chunks still ring),
 *                          FI_COMPLETION (every operation completes anyway).
 *                          Building with -DFI_XPU_EFA_POST_SPIN makes posts
 *                          spin until the queue has room instead of
 *                          returning -FI_EAGAIN (what upstream kernels
 *                          expect); someone must keep polling the CQ.
 *   tsend/trecv, atomics   -FI_ENOSYS (efa-direct has neither; the context
 *                          query advertises neither).
 *   cq_read/readfrom       entries > 0 in the CQ's format, exactly as the
 *                          host fi_cq_read fills them (op_context; flags
 *                          FI_MSG|FI_SEND, FI_RMA|FI_WRITE, FI_RMA|FI_READ,
 *                          FI_MSG|FI_RECV, FI_RMA|FI_REMOTE_WRITE, plus
 *                          FI_REMOTE_CQ_DATA; len 0 for transmits, bytes
 *                          received for receives; buf = the receive buffer;
 *                          data = immediate data); -FI_EAGAIN when none is
 *                          ready (or another reader holds the CQ);
 *                          -FI_EAVAIL when an error completion is next
 *                          (successes before it are returned first);
 *                          -FI_EINVAL for a NULL buf with count > 0.
 *                          readfrom writes one fi_addr_t per entry: the AV
 *                          index of the sender of a receive (from the AV as
 *                          of the EP's latest fi_ep_export_xpu; export again
 *                          after fi_av_insert), else FI_ADDR_NOTAVAIL.
 *   cq_sread/sreadfrom     like read, but wait until min(threshold, count)
 *                          (at least 1) entries were read or an error is
 *                          next; no timeout.
 *   cq_readerr             1 with a struct fi_cq_err_entry (op_context,
 *                          flags, len, buf, data, err, prov_errno = EFA
 *                          status, olen 0, err_data_size 0), -FI_EAGAIN if
 *                          no error is next; flags must be 0 (-FI_EINVAL).
 *   cntr_read/readerr      the value (0 for a bad handle or scope).
 *   cntr_wait              returns when value >= threshold, when the error
 *                          count grew during the wait, or after `timeout`
 *                          milliseconds (negative: no limit), measured with
 *                          CLOCK_MONOTONIC on the host and %globaltimer on
 *                          CUDA.
 *   cntr_add/set/adderr/seterr  0, with 64-bit atomics on the memory the NIC
 *                          adds into.
 *
 * Queue space: SQ and RQ slots come back only when their completions are
 * read from the CQ (as in rdma-core), so a kernel that waits on counters
 * must still read the CQ now and then.
 */
#ifndef FI_XPU_DEVICE_EFA_H
#define FI_XPU_DEVICE_EFA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <time.h>
#endif

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "api/efa/efa_xpu_types.h"
#include "device/efa_dp.h"
#include "device/runtime/xpu_scope.h"

#ifndef FI_XPU_FUNC
#if defined(__CUDACC__)
#define FI_XPU_FUNC __device__ static inline
#else
#define FI_XPU_FUNC static inline
#endif
#endif

#if defined(__CUDACC__)
/* Device-scope enrollment counter (one per translation unit, like the scope
 * primitives' grid mailbox). */
static __device__ uint32_t efa_xpu_grid_count_;
#endif

/* ---- handles and scope ------------------------------------------------------ */

FI_XPU_FUNC int efa_xpu_scope_check_(int scope) {
  if (scope < FI_XPU_WORK_ITEM || scope > FI_XPU_DEVICE) return -FI_EINVAL;
  return xpu_scope_supported(scope) ? 0 : -FI_EOPNOTSUPP;
}

/* The state behind a handle after the common checks (see the header comment). */
FI_XPU_FUNC int efa_xpu_state_check_(uint64_t prov_ctx, uint32_t fclass, uint32_t want_fclass) {
  if (!prov_ctx || fclass != want_fclass) return -FI_EINVAL;
  const uint32_t *hdr = (const uint32_t *)(uintptr_t)(prov_ctx + sizeof(struct fid_xpu));
  if (hdr[0] != EFA_XPU_VERSION) return -FI_EOPNOTSUPP;
  return 0;
}

FI_XPU_FUNC int efa_xpu_ep_get_(struct fid_xpu_ep *ep, int scope, struct efa_xpu_ep **out) {
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

FI_XPU_FUNC int efa_xpu_cq_get_(struct fid_xpu_cq *cq, int scope, struct efa_xpu_cq **out) {
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

FI_XPU_FUNC int efa_xpu_cntr_get_(struct fid_xpu_cntr *cntr, int scope, struct efa_xpu_cntr **out) {
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

/*
 * Enrolls the caller in its scope's group operation and gives each `valid`
 * member a distinct *idx in [0, total). Collective; on return the leader knows
 * `total` (the return value; other members get a value they must not use).
 * `count` is storage of the caller's that must stay alive until the next
 * collective call of the scope (the leader's is the group's counter on the
 * host XPU).
 */
FI_XPU_FUNC uint32_t efa_xpu_group_enroll_(int scope, int valid, uint32_t *idx, uint32_t *count) {
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
FI_XPU_FUNC uint64_t efa_xpu_pack_claim_(uint32_t first, uint32_t err, uint32_t total) {
  return ((uint64_t)first << 32) | ((uint64_t)(err & 0xffu) << 24) | (total & 0xffffffu);
}

FI_XPU_FUNC int efa_xpu_ring_claim_(struct efa_dp_ring *r, uint32_t n, uint32_t *first) {
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

/* ---- posting ----------------------------------------------------------------- */

#define EFA_XPU_TX_FLAGS_ (FI_REMOTE_CQ_DATA | FI_MORE | FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE)
#define EFA_XPU_RX_FLAGS_ (FI_MORE | FI_COMPLETION)

/* Builds the work request of one member; 0 or its error. */
FI_XPU_FUNC int efa_xpu_make_wr_(const struct efa_xpu_ep *e, uint32_t op, const void *buf, size_t len, void *desc,
                                 uint64_t data, void *peer, uint64_t addr, uint64_t key, void *context,
                                 uint64_t flags, struct efa_dp_wr *wr) {
  memset(wr, 0, sizeof(*wr));
  if (flags & ~(uint64_t)EFA_XPU_TX_FLAGS_) return -FI_EBADFLAGS;
  if (op == EFA_DP_OP_RDMA_READ && (flags & FI_REMOTE_CQ_DATA)) return -FI_EINVAL;
  if (op == EFA_DP_OP_RDMA_READ && !(e->caps & EFA_XPU_EP_CAP_RDMA_READ)) return -FI_EOPNOTSUPP;
  if (op == EFA_DP_OP_RDMA_WRITE && !(e->caps & EFA_XPU_EP_CAP_RDMA_WRITE)) return -FI_EOPNOTSUPP;
  if (!peer || (len && (!buf || !desc))) return -FI_EINVAL;
  if (len > (op == EFA_DP_OP_SEND ? (size_t)e->mtu : (size_t)e->max_rdma_size)) return -FI_EMSGSIZE;
  struct efa_xpu_peer p;
  memcpy(&p, peer, sizeof(p));
  wr->op = op;
  wr->ah = p.ahn;
  wr->dest_qpn = p.remote_qpn;
  wr->qkey = p.remote_qkey;
  wr->num_sge = 1;
  wr->sge[0].addr = (uint64_t)(uintptr_t)buf;
  wr->sge[0].length = (uint32_t)len;
  if (desc) {
    struct efa_xpu_desc d;
    memcpy(&d, desc, sizeof(d));
    wr->sge[0].lkey = d.lkey;
  }
  wr->remote_addr = addr;
  wr->rkey = (uint32_t)key;
  if (flags & FI_REMOTE_CQ_DATA) {
    wr->flags |= EFA_DP_WR_IMM;
    wr->imm = (uint32_t)data;
  }
  if (flags & FI_MORE) wr->flags |= EFA_DP_WR_MORE;
  wr->context = (uint64_t)(uintptr_t)context;
  return efa_sq_check_wr(&e->sq, wr);
}

/* Posts each member's wr (my_rc == 0) with one claim and one doorbell. */
FI_XPU_FUNC int efa_xpu_sq_post_group_(struct efa_xpu_ep *e, const struct efa_dp_wr *wr, int my_rc, uint64_t flags,
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

FI_XPU_FUNC int efa_xpu_post_tx_(struct fid_xpu_ep *ep, uint32_t op, const void *buf, size_t len, void *desc,
                                 uint64_t data, void *peer, uint64_t addr, uint64_t key, void *context,
                                 uint64_t flags, int scope) {
  struct efa_xpu_ep *e = NULL;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
  struct efa_dp_wr wr;
  rc = efa_xpu_make_wr_(e, op, buf, len, desc, data, peer, addr, key, context, flags, &wr);
  return efa_xpu_sq_post_group_(e, &wr, rc, flags, scope);
}

FI_XPU_FUNC int efa_xpu_send(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                             void *dest_addr, void *context, uint64_t flags, int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_SEND, buf, len, desc, data, dest_addr, 0, 0, context, flags, scope);
}

FI_XPU_FUNC int efa_xpu_write(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                              void *dest_addr, uint64_t addr, uint64_t key, void *context, uint64_t flags,
                              int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_RDMA_WRITE, buf, len, desc, data, dest_addr, addr, key, context, flags,
                          scope);
}

FI_XPU_FUNC int efa_xpu_read(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                             uint64_t addr, uint64_t key, void *context, uint64_t flags, int scope) {
  return efa_xpu_post_tx_(ep, EFA_DP_OP_RDMA_READ, buf, len, desc, 0, src_addr, addr, key, context, flags, scope);
}

/* Writes one receive descriptor into claimed RQ slot `slot`. */
FI_XPU_FUNC void efa_xpu_rq_write_(struct efa_xpu_ep *e, uint32_t slot, const struct efa_dp_sge *sge, void *buf,
                                   void *context) {
  struct efa_rq *rq = &e->rq;
  int req_id;
  while ((req_id = efa_dp_reqs_alloc(&rq->reqs, (uint64_t)(uintptr_t)context, 1)) < 0) xpu_relax();
  xpu_store_relaxed_u64(&e->rx_bufs[(uint32_t)req_id & (rq->reqs.count - 1u)], (uint64_t)(uintptr_t)buf);
  struct efa_io_rx_desc d;
  efa_dp_build_rx_desc(&d, sge, (uint16_t)req_id, 1, 1);
  memcpy(efa_dp_ring_entry(&rq->ring, slot), &d, sizeof(d));
}

FI_XPU_FUNC int efa_xpu_recv(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                             void *context, uint64_t flags, int scope) {
  (void)src_addr; /* EFA receives from any source */
  struct efa_xpu_ep *e = NULL;
  int rc = efa_xpu_ep_get_(ep, scope, &e);
  if (rc) return rc;
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

FI_XPU_FUNC int efa_xpu_tsend(struct fid_xpu_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                              void *dest_addr, uint64_t tag, void *context, uint64_t flags, int scope) {
  (void)ep, (void)buf, (void)len, (void)desc, (void)data, (void)dest_addr, (void)tag, (void)context,
      (void)flags, (void)scope;
  return -FI_ENOSYS;
}

FI_XPU_FUNC int efa_xpu_trecv(struct fid_xpu_ep *ep, void *buf, size_t len, void *desc, void *src_addr,
                              uint64_t tag, uint64_t ignore, void *context, uint64_t flags, int scope) {
  (void)ep, (void)buf, (void)len, (void)desc, (void)src_addr, (void)tag, (void)ignore, (void)context,
      (void)flags, (void)scope;
  return -FI_ENOSYS;
}

FI_XPU_FUNC int efa_xpu_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc, void *dest_addr,
                               uint64_t addr, uint64_t key, int datatype, int op, void *context, uint64_t flags,
                               int scope) {
  (void)ep, (void)buf, (void)count, (void)desc, (void)dest_addr, (void)addr, (void)key, (void)datatype, (void)op,
      (void)context, (void)flags, (void)scope;
  return -FI_ENOSYS;
}

FI_XPU_FUNC int efa_xpu_fetch_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc, void *result,
                                     void *result_desc, void *dest_addr, uint64_t addr, uint64_t key, int datatype,
                                     int op, void *context, uint64_t flags, int scope) {
  (void)ep, (void)buf, (void)count, (void)desc, (void)result, (void)result_desc, (void)dest_addr, (void)addr,
      (void)key, (void)datatype, (void)op, (void)context, (void)flags, (void)scope;
  return -FI_ENOSYS;
}

FI_XPU_FUNC int efa_xpu_compare_atomic(struct fid_xpu_ep *ep, const void *buf, size_t count, void *desc,
                                       const void *compare, void *compare_desc, void *result, void *result_desc,
                                       void *dest_addr, uint64_t addr, uint64_t key, int datatype, int op,
                                       void *context, uint64_t flags, int scope) {
  (void)ep, (void)buf, (void)count, (void)desc, (void)compare, (void)compare_desc, (void)result,
      (void)result_desc, (void)dest_addr, (void)addr, (void)key, (void)datatype, (void)op, (void)context,
      (void)flags, (void)scope;
  return -FI_ENOSYS;
}

/* ---- completion queues ------------------------------------------------------- */

/* The EP of a CQE's local QP, or NULL. */
FI_XPU_FUNC struct efa_xpu_ep *efa_xpu_cq_ep_(struct efa_xpu_cq *c, uint32_t qpn) {
  const uint32_t n = xpu_load_acquire_u32(&c->num_eps);
  for (uint32_t i = 0; i < n && i < EFA_XPU_CQ_MAX_EPS; ++i) {
    struct efa_xpu_ep *e = c->eps[i];
    if (e && e->qpn == qpn) return e;
  }
  return NULL;
}

/* The AV index of (ahn, qpn) in the EP's mirror, as the host provider resolves it. */
FI_XPU_FUNC fi_addr_t efa_xpu_src_addr_(const struct efa_xpu_ep *e, uint16_t ahn, uint16_t qpn) {
  if (!e->av || ahn == EFA_IO_AH_UNKNOWN) return FI_ADDR_NOTAVAIL;
  const uint32_t n = xpu_load_acquire_u32((uint32_t *)&e->av_count);
  for (uint32_t i = 0; i < n; ++i) {
    const struct efa_xpu_av_entry *a = &e->av[i];
    if (a->valid && a->ahn == ahn && a->qpn == qpn) return (fi_addr_t)i;
  }
  return FI_ADDR_NOTAVAIL;
}

/* One completion as the host provider reports it. */
struct efa_xpu_comp_ {
  uint64_t op_context;
  uint64_t flags;
  uint64_t len;
  uint64_t buf;
  uint64_t data;
  fi_addr_t src;
  int err;
  uint32_t status;
};

/* Decodes a CQE and returns its queue space; 0, or -1 for a CQE that names no
 * outstanding request (dropped, as the host provider drops it). */
FI_XPU_FUNC int efa_xpu_cq_decode_(struct efa_xpu_cq *c, const struct efa_dp_cqe *q, struct efa_xpu_comp_ *out) {
  struct efa_xpu_ep *e = efa_xpu_cq_ep_(c, q->qp_num);
  if (!e) return -1;
  memset(out, 0, sizeof(*out));
  out->src = FI_ADDR_NOTAVAIL;
  out->status = q->status;
  out->err = efa_io_status_to_fi_errno(q->status);
  if (q->q_type == EFA_IO_SEND_QUEUE) {
    uint64_t ctx = 0;
    if (efa_sq_complete(&e->sq, q->req_id, &ctx) != 0) return -1;
    out->op_context = ctx;
    out->flags = q->op_type == EFA_IO_RDMA_WRITE  ? (FI_RMA | FI_WRITE)
                 : q->op_type == EFA_IO_RDMA_READ ? (FI_RMA | FI_READ)
                                                  : (FI_MSG | FI_SEND);
    return 0;
  }
  const int rdma_write = q->op_type == EFA_IO_RDMA_WRITE;
  if (!q->unsolicited) {
    uint64_t ctx = 0;
    const uint64_t buf = xpu_load_relaxed_u64(&e->rx_bufs[q->req_id & (e->rq.reqs.count - 1u)]);
    if (efa_rq_complete(&e->rq, q->req_id, &ctx) != 0) return -1;
    out->op_context = ctx;
    out->buf = rdma_write ? 0 : buf;
  }
  out->len = q->byte_len;
  out->flags = rdma_write ? (FI_RMA | FI_REMOTE_WRITE) : (FI_MSG | FI_RECV);
  if (q->has_imm) {
    out->flags |= FI_REMOTE_CQ_DATA;
    out->data = q->imm;
  }
  out->src = efa_xpu_src_addr_(e, q->ah, q->src_qp);
  return 0;
}

FI_XPU_FUNC void efa_xpu_cq_put_(const struct efa_xpu_cq *c, const struct efa_xpu_comp_ *x, uint8_t *out) {
  if (c->format == FI_CQ_FORMAT_CONTEXT) {
    struct fi_cq_entry e;
    e.op_context = (void *)(uintptr_t)x->op_context;
    memcpy(out, &e, sizeof(e));
  } else if (c->format == FI_CQ_FORMAT_MSG) {
    struct fi_cq_msg_entry e;
    e.op_context = (void *)(uintptr_t)x->op_context;
    e.flags = x->flags;
    e.len = (size_t)x->len;
    memcpy(out, &e, sizeof(e));
  } else {
    struct fi_cq_data_entry e;
    e.op_context = (void *)(uintptr_t)x->op_context;
    e.flags = x->flags;
    e.len = (size_t)x->len;
    e.buf = (void *)(uintptr_t)x->buf;
    e.data = x->data;
    memcpy(out, &e, sizeof(e));
  }
}

FI_XPU_FUNC int efa_xpu_trylock_(uint32_t *lock) {
  uint32_t unlocked = 0;
  return xpu_cas_u32(lock, &unlocked, 1u);
}

/*
 * Reads up to `count` completions into buf/src (leader only). > 0 entries,
 * -FI_EAGAIN, or -FI_EAVAIL when an error is staged and nothing precedes it.
 */
FI_XPU_FUNC int64_t efa_xpu_cq_poll_(struct efa_xpu_cq *c, void *buf, size_t count, fi_addr_t *src) {
  if (!efa_xpu_trylock_(&c->err_lock)) return -FI_EAGAIN;
  int64_t n = 0;
  int64_t rc = 0;
  if (xpu_load_acquire_u32(&c->err_pending)) {
    rc = -FI_EAVAIL;
  } else {
    struct efa_dp_cqe q;
    struct efa_xpu_comp_ x;
    while ((size_t)n < count && efa_cq_poll(&c->cq, &q) == 0) {
      if (efa_xpu_cq_decode_(c, &q, &x) != 0) continue;
      if (x.err) {
        c->err_status = x.status;
        c->err_op_context = x.op_context;
        c->err_flags = x.flags;
        c->err_len = x.len;
        c->err_data = x.data;
        c->err_buf = x.buf;
        xpu_store_release_u32(&c->err_pending, 1u);
        if (n == 0) rc = -FI_EAVAIL;
        break;
      }
      efa_xpu_cq_put_(c, &x, (uint8_t *)buf + (size_t)n * c->entry_size);
      if (src) src[n] = x.src;
      ++n;
    }
  }
  xpu_store_release_u32(&c->err_lock, 0u);
  if (rc) return rc;
  return n ? n : -FI_EAGAIN;
}

/* Leader reads, result broadcast; sread variants keep reading until `want`. */
FI_XPU_FUNC int64_t efa_xpu_cq_read_common_(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr,
                                            uint64_t want, int scope) {
  struct efa_xpu_cq *c = NULL;
  int64_t rc = efa_xpu_cq_get_(cq, scope, &c);
  if (rc) return rc;
  if (!buf && count) return -FI_EINVAL;
  if (xpu_scope_is_leader(scope)) {
    fi_addr_t *src = (fi_addr_t *)src_addr;
    if (!want) {
      rc = efa_xpu_cq_poll_(c, buf, count, src);
    } else {
      if (want > count) want = count;
      int64_t got = 0;
      for (;;) {
        rc = efa_xpu_cq_poll_(c, (uint8_t *)buf + (size_t)got * c->entry_size, count - (size_t)got,
                              src ? src + got : NULL);
        if (rc > 0) got += rc;
        if ((uint64_t)got >= want || rc == -FI_EAVAIL || (rc < 0 && rc != -FI_EAGAIN)) break;
        xpu_relax();
      }
      if (got) rc = got;
    }
  }
  if (scope == FI_XPU_WORK_ITEM) return rc;
  return (int64_t)xpu_scope_broadcast_u64(scope, (uint64_t)rc, 0);
}

FI_XPU_FUNC int64_t efa_xpu_cq_read(struct fid_xpu_cq *cq, void *buf, size_t count, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, NULL, 0, scope);
}

FI_XPU_FUNC int64_t efa_xpu_cq_readfrom(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, src_addr, 0, scope);
}

FI_XPU_FUNC int64_t efa_xpu_cq_sread(struct fid_xpu_cq *cq, void *buf, size_t count, uint64_t threshold,
                                     int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, NULL, threshold ? threshold : 1u, scope);
}

FI_XPU_FUNC int64_t efa_xpu_cq_sreadfrom(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr,
                                         uint64_t threshold, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, src_addr, threshold ? threshold : 1u, scope);
}

FI_XPU_FUNC int64_t efa_xpu_cq_readerr(struct fid_xpu_cq *cq, void *buf, uint64_t flags, int scope) {
  struct efa_xpu_cq *c = NULL;
  int64_t rc = efa_xpu_cq_get_(cq, scope, &c);
  if (rc) return rc;
  if (!buf || flags) return -FI_EINVAL;
  if (xpu_scope_is_leader(scope)) {
    rc = -FI_EAGAIN;
    if (efa_xpu_trylock_(&c->err_lock)) {
      if (xpu_load_acquire_u32(&c->err_pending)) {
        struct fi_cq_err_entry e;
        memset(&e, 0, sizeof(e));
        e.op_context = (void *)(uintptr_t)c->err_op_context;
        e.flags = c->err_flags;
        e.len = (size_t)c->err_len;
        e.buf = (void *)(uintptr_t)c->err_buf;
        e.data = c->err_data;
        e.err = efa_io_status_to_fi_errno(c->err_status);
        e.prov_errno = (int)c->err_status;
        /* The host fills the fields up to err_data_size and leaves the rest. */
        memcpy(buf, &e, offsetof(struct fi_cq_err_entry, err_data));
        struct fi_cq_err_entry *o = (struct fi_cq_err_entry *)buf;
        o->err_data_size = 0;
        xpu_store_release_u32(&c->err_pending, 0u);
        rc = 1;
      }
      xpu_store_release_u32(&c->err_lock, 0u);
    }
  }
  if (scope == FI_XPU_WORK_ITEM) return rc;
  return (int64_t)xpu_scope_broadcast_u64(scope, (uint64_t)rc, 0);
}

/* ---- counters ----------------------------------------------------------------- */

/* A monotonic clock in nanoseconds, for cntr_wait timeouts. */
FI_XPU_FUNC uint64_t efa_xpu_now_ns_(void) {
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

FI_XPU_FUNC uint64_t efa_xpu_cntr_load_(struct fid_xpu_cntr *cntr, int err, int scope) {
  struct efa_xpu_cntr *c = NULL;
  if (efa_xpu_cntr_get_(cntr, scope, &c)) return 0;
  uint64_t v = 0;
  if (xpu_scope_is_leader(scope)) v = xpu_load_acquire_u64(err ? c->err_value : c->value);
  if (scope == FI_XPU_WORK_ITEM) return v;
  return xpu_scope_broadcast_u64(scope, v, 0);
}

FI_XPU_FUNC uint64_t efa_xpu_cntr_read(struct fid_xpu_cntr *cntr, int scope) {
  return efa_xpu_cntr_load_(cntr, 0, scope);
}

FI_XPU_FUNC uint64_t efa_xpu_cntr_readerr(struct fid_xpu_cntr *cntr, int scope) {
  return efa_xpu_cntr_load_(cntr, 1, scope);
}

FI_XPU_FUNC void efa_xpu_cntr_wait(struct fid_xpu_cntr *cntr, uint64_t threshold, int timeout, int scope) {
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
FI_XPU_FUNC int efa_xpu_cntr_update_(struct fid_xpu_cntr *cntr, uint64_t value, int err, int op, int scope) {
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

FI_XPU_FUNC int efa_xpu_cntr_add(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 0, 0, scope);
}

FI_XPU_FUNC int efa_xpu_cntr_set(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 0, 1, scope);
}

FI_XPU_FUNC int efa_xpu_cntr_adderr(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 1, 0, scope);
}

FI_XPU_FUNC int efa_xpu_cntr_seterr(struct fid_xpu_cntr *cntr, uint64_t value, int scope) {
  return efa_xpu_cntr_update_(cntr, value, 1, 1, scope);
}

#endif /* FI_XPU_DEVICE_EFA_H */
