/*
 * amo.h - atomics executed at the target endpoint. Host and nvcc; valid C11
 * and C++17. Include api/proto/proto.h, not this file.
 *
 * The requester sends ATOMIC_REQ (op, datatype, kind, count, address, key,
 * then the operands and, for compare atomics, the compare values). Whoever
 * progresses the target endpoint checks the key, bounds and access against
 * the endpoint's MR table (proto_mr_add), executes the elements with the
 * target memory's own atomics (atomic.h), and replies with ATOMIC_RESP: the
 * EFA completion status (REMOTE_ERROR_BAD_ADDRESS for a bad key or range, as
 * an RDMA access gets; REMOTE_ERROR_BAD_LENGTH for a request whose payload is
 * short) and, for fetch and compare atomics, the prior values. The requester
 * completes when the reply arrives, with the status as prov_errno and its
 * libfabric error as err. Requests are handled in each sender's order, like
 * every numbered packet.
 */
#ifndef XPUFAB_API_PROTO_AMO_H_
#define XPUFAB_API_PROTO_AMO_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/atomic.h"
#include "api/proto/core.h"
#include "device/efa_io_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What fi_query_atomic / fi_atomicvalid answer for this endpoint: elements per request, or -FI_EOPNOTSUPP. */
XPU_FUNC int64_t proto_atomic_max_count(const struct proto_ep *ep, int kind, int op, int datatype) {
  return proto_atomic_valid(kind, op, datatype, ep->payload_max);
}

/*
 * Starts an atomic of `count` elements at (addr, key) of `peer`. kind is
 * PROTO_ATOMIC_PLAIN / FETCH / COMPARE (atomic.h); operand holds count values
 * (NULL for FI_ATOMIC_READ), compare count values for COMPARE, and result
 * receives count prior values for FETCH and COMPARE when the completion comes
 * (FI_ATOMIC | FI_WRITE for plain atomics, FI_ATOMIC | FI_READ otherwise).
 * FI_INJECT in flags: no completion. 0; before anything is sent:
 * -FI_EOPNOTSUPP (kind/op/datatype not offered), -FI_EINVAL (bad peer,
 * count 0, a buffer the kind needs missing), -FI_EMSGSIZE (more elements than
 * proto_atomic_max_count), -FI_EAGAIN (no op or transmit buffer free, or an
 * RMA write to the peer still issuing or landing).
 */
XPU_FUNC int proto_atomic(struct proto_ep *ep, uint32_t peer, int kind, int op, int datatype, const void *operand,
                          const void *compare, size_t count, uint64_t addr, uint32_t key, void *result, uint64_t flags,
                          uint64_t context) {
  if (!ep) return -FI_EINVAL;
  const int64_t max = proto_atomic_max_count(ep, kind, op, datatype);
  if (max < 0) return (int)max;
  if (!proto_peer_valid(ep, peer) || count == 0) return -FI_EINVAL;
  if ((int64_t)count > max) return -FI_EMSGSIZE;
  /* Behind an RMA still issuing its packets to the peer it could overtake it (FI_ORDER_WAW). */
  if (proto_peer_rma_blocked(ep, peer)) return -FI_EAGAIN;
  if ((!operand && op != FI_ATOMIC_READ) || (kind == PROTO_ATOMIC_COMPARE && !compare) ||
      (kind != PROTO_ATOMIC_PLAIN && !result))
    return -FI_EINVAL;
  const uint32_t size = (uint32_t)proto_atomic_datatype_size(datatype);
  const uint32_t bytes = (uint32_t)count * size;
  const uint32_t plen = (op == FI_ATOMIC_READ ? 0u : bytes) + (kind == PROTO_ATOMIC_COMPARE ? bytes : 0u);
  const uint32_t i = proto_op_alloc(ep, PROTO_K_ATOMIC);
  if (i == PROTO_NONE) return -FI_EAGAIN;
  const uint32_t t = proto_tx_alloc(ep, 0);
  if (t == PROTO_NONE) {
    proto_op_free(ep, i);
    return -FI_EAGAIN;
  }
  struct proto_op *o = &ep->ops[i];
  o->peer = peer;
  o->remote_addr = addr;
  o->remote_key = key;
  o->total = bytes;
  /* Behind an earlier write it may overlap that has not landed yet it could overtake it. */
  proto_write_list(ep, i);
  if (!proto_write_may_start(ep, i, 1)) {
    proto_tx_release(ep, t);
    proto_op_free(ep, i);
    return -FI_EAGAIN;
  }
  o->mode |= PROTO_OPM_WSTARTED;
  proto_op_count(ep, i);
  o->context = context;
  o->flags = FI_ATOMIC | (kind == PROTO_ATOMIC_PLAIN ? FI_WRITE : FI_READ);
  o->result = kind == PROTO_ATOMIC_PLAIN ? 0 : (uint8_t *)result;
  o->result_len = kind == PROTO_ATOMIC_PLAIN ? 0 : bytes;
  o->total = bytes;
  o->state = PROTO_S_POSTED;
  proto_op_order(ep, i);
  if (flags & FI_INJECT) o->mode |= PROTO_OPM_SILENT;
  struct proto_hdr *h = proto_tx_prepare(ep, t, peer, PROTO_OP_ATOMIC_REQ, plen);
  h->u0 = (uint64_t)proto_op_wire_id(ep, i) | ((uint64_t)(uint8_t)op << 32) | ((uint64_t)(uint8_t)datatype << 40) |
          ((uint64_t)(uint8_t)kind << 48);
  h->u1 = (uint64_t)(uint32_t)count | ((uint64_t)key << 32);
  h->u2 = addr;
  uint8_t *pl = (uint8_t *)(h + 1);
  if (op != FI_ATOMIC_READ) {
    memcpy(pl, operand, bytes);
    pl += bytes;
  }
  if (kind == PROTO_ATOMIC_COMPARE) memcpy(pl, compare, bytes);
  ep->tx[t].op = i;
  o->inflight = 1;
  proto_tx_submit(ep, t);
  return 0;
}

/* The access a request needs: 1 read, 2 write. */
XPU_FUNC uint32_t proto_atomic_access(int kind, int op) {
  if (kind == PROTO_ATOMIC_PLAIN) return 2u;
  if (op == FI_ATOMIC_READ) return 1u;
  return 3u;
}

/* Target side: executes the request in h and replies; -FI_EAGAIN (nothing done) when no buffer is free. */
XPU_FUNC int proto_amo_request(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  const uint32_t t = proto_tx_alloc(ep, 1);
  if (t == PROTO_NONE) return -FI_EAGAIN;
  const int op = (int)(uint8_t)(h->u0 >> 32), datatype = (int)(uint8_t)(h->u0 >> 40), kind = (int)(uint8_t)(h->u0 >> 48);
  const uint64_t count = (uint32_t)h->u1;
  const uint32_t key = (uint32_t)(h->u1 >> 32);
  const uint64_t size = proto_atomic_datatype_size(datatype);
  const uint64_t bytes = count * size;
  const uint64_t need = (op == FI_ATOMIC_READ ? 0u : bytes) + (kind == PROTO_ATOMIC_COMPARE ? bytes : 0u);
  struct proto_hdr *r = proto_tx_prepare(ep, t, peer, PROTO_OP_ATOMIC_RESP, 0);
  r->u0 = (uint32_t)h->u0;
  uint32_t status = EFA_IO_COMP_STATUS_OK;
  if (!proto_atomic_supported(kind, op, datatype)) {
    status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS;
  } else if (count == 0 || need > h->len || bytes > ep->payload_max) {
    status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH;
  } else if (!proto_mr_check(ep, key, h->u2, bytes, proto_atomic_access(kind, op))) {
    status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS;
  } else {
    const uint8_t *operand = op == FI_ATOMIC_READ ? 0 : payload;
    const uint8_t *compare = kind == PROTO_ATOMIC_COMPARE ? payload + (op == FI_ATOMIC_READ ? 0 : bytes) : 0;
    uint8_t *fetched = kind == PROTO_ATOMIC_PLAIN ? 0 : (uint8_t *)(r + 1);
    if (proto_atomic_execute(kind, op, datatype, (void *)(uintptr_t)h->u2, operand, compare, fetched, count))
      status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS; /* misaligned */
    else if (fetched)
      r->len = (uint32_t)bytes;
  }
  r->u1 = status;
  ep->tx[t].len = (uint32_t)sizeof(*r) + r->len;
  proto_tx_submit(ep, t);
  return 0;
}

/* Completes atomic op i with `status` (its prior values are in place). */
XPU_FUNC void proto_amo_complete(struct proto_ep *ep, uint32_t i, uint32_t status) {
  proto_op_complete_status(ep, i, status, ep->ops[i].result);
}

/* Requester side: the reply to op u0. The request's own send completion may still be due. */
XPU_FUNC void proto_amo_response(struct proto_ep *ep, const struct proto_hdr *h, const uint8_t *payload) {
  const uint32_t i = proto_op_from_wire(ep, h->u0, PROTO_K_ATOMIC);
  if (i == PROTO_NONE || ep->ops[i].state != PROTO_S_POSTED) return;
  struct proto_op *o = &ep->ops[i];
  const uint32_t status = (uint32_t)h->u1;
  if (status == EFA_IO_COMP_STATUS_OK && o->result)
    memcpy(o->result, payload, h->len < o->result_len ? h->len : o->result_len);
  if (o->inflight) {
    o->state = PROTO_S_FIN;
    o->prov_errno = (int32_t)status;
    return;
  }
  proto_amo_complete(ep, i, status);
}

XPU_FUNC int proto_amo_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  if (h->op == PROTO_OP_ATOMIC_REQ) return proto_amo_request(ep, peer, h, payload);
  proto_amo_response(ep, h, payload);
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_AMO_H_ */
