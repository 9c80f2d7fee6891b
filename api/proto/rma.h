/*
 * rma.h - fi_read / fi_write between protocol endpoints. Host and nvcc; valid
 * C11 and C++17. Include api/proto/proto.h, not this file.
 *
 * Writes of more than one packet from registered buffers go by the device's
 * RDMA write where it has one (PROTO_DEV_RDMA_WRITE, EFA gen3 on): straight
 * from the writer's buffers
 * into the target's memory, which the device checks against its keys, in
 * rdma_chunk pieces. Once every piece completed, a WRITE_NOTE packet tells the
 * target, which reports the write as below (remote counter, remote CQ data),
 * and the writer completes.
 *
 * Order (FI_ORDER_WAW, FI_ORDER_RMA_WAW). SRD keeps no order between an RDMA
 * write and anything else, so each write and atomic to a peer waits for the
 * earlier ones not completed that may touch the same bytes (the same key and
 * overlapping ranges, or different keys), unless both travel as packets and
 * the earlier one has started (the packet numbers order them): writes to
 * disjoint ranges, RDMA writes among them, are in flight together.
 *
 * Other writes travel as WRITE packets of at most one packet's payload each,
 * numbered like every packet, so a target applies them in the writer's order
 * (after the writer's earlier writes and atomics) on every device generation,
 * with or without RDMA write. The target checks each segment against its MR
 * table (proto_mr_add, as for atomics) and copies it; the last segment makes
 * it reply with the status of the whole range (EFA's
 * REMOTE_ERROR_BAD_ADDRESS for a bad key, range or access) and report the
 * write with a completion of flags FI_RMA | FI_REMOTE_WRITE, plus
 * FI_REMOTE_CQ_DATA and the data when the writer sent some. The writer
 * completes when the reply arrives.
 *
 * Reads use the device's RDMA read where it has one (the device checks the
 * key) and then tell the target with READ_NOTE, which reports FI_RMA |
 * FI_REMOTE_READ there (its remote read counter). Without RDMA read (EFA
 * gen1), or into an unregistered buffer, READ_REQ packets ask for one
 * packet's payload each and the target answers each with the data.
 *
 * The RMA ops to one peer issue their packets one op after the other.
 */
#ifndef XPUFAB_API_PROTO_RMA_H_
#define XPUFAB_API_PROTO_RMA_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/core.h"
#include "api/proto/msg.h"
#include "device/efa_io_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Completes RMA op i with `status`. */
XPU_FUNC void proto_rma_complete(struct proto_ep *ep, uint32_t i, uint32_t status) {
  proto_op_complete_status(ep, i, status, NULL);
}

/* The next WRITE or READ_REQ packet of op i (n bytes from its cursor) into transmit buffer t. */
XPU_FUNC void proto_rma_packet(struct proto_ep *ep, uint32_t i, uint32_t t, int write, uint32_t n) {
  struct proto_op *o = &ep->ops[i];
  struct proto_hdr *h = proto_tx_prepare(ep, t, o->peer, write ? PROTO_OP_WRITE : PROTO_OP_READ_REQ, write ? n : 0u);
  h->u0 = (uint64_t)proto_op_wire_id(ep, i) | ((uint64_t)o->remote_key << 32);
  h->u1 = o->cursor;
  h->u2 = o->remote_addr;
  h->tag = o->total;
  h->data = write ? o->data : n;
  h->flags = (write ? (uint32_t)o->tag : 0u) | (o->cursor + n == o->total ? PROTO_WF_LAST : 0u);
  if (write && n) proto_op_gather(o, o->cursor, (uint8_t *)(h + 1), n);
  o->cursor += n;
  ep->stats.rma_packets++;
}

/* 1 when a write of `total` bytes from op i's buffers goes by RDMA write. */
XPU_FUNC int proto_rma_by_rdma_write(const struct proto_ep *ep, uint64_t total) {
  if (!(ep->dev.caps & PROTO_DEV_RDMA_WRITE)) return 0;
  return ep->cfg.rdma_write_min ? total >= ep->cfg.rdma_write_min : total > ep->payload_max;
}

/*
 * Issues op i's RDMA writes of bytes [cursor, total) of its buffers to the
 * peer's memory; -FI_EAGAIN when the SQ is full (the rest on a later call).
 */
XPU_FUNC int proto_rma_write_issue(struct proto_ep *ep, uint32_t i) {
  return proto_op_rdma_issue(ep, i, EFA_DP_OP_RDMA_WRITE, ep->ops[i].total);
}

/*
 * Starts an RMA of the local buffers b[0..n) (n <= PROTO_IOV_MAX) and the
 * peer's bytes at (addr, key): a write when `write`, else a read. flags:
 * FI_REMOTE_CQ_DATA (writes: the target reports `data`), FI_INJECT (writes of
 * at most proto_am_max bytes: copied before return, and no completion unless
 * FI_COMPLETION is given too). The
 * completion carries FI_RMA | FI_WRITE or FI_READ and `context`; a bad key or
 * range completes with the EFA status as prov_errno. Unregistered local
 * buffers (PROTO_KEY_NONE) are written and read by packets, never by RDMA.
 * 0; -FI_EINVAL; -FI_EMSGSIZE; -FI_EAGAIN (no op or transmit buffer free:
 * progress, retry).
 */
XPU_FUNC int proto_rma(struct proto_ep *ep, uint32_t peer, int write, const struct proto_buf *bufs, uint32_t nbuf,
                       uint64_t addr, uint32_t key, uint64_t data, uint64_t flags, uint64_t context) {
  if (!ep) return -FI_EINVAL;
  const int64_t total = proto_bufs_len(bufs, nbuf);
  if (!proto_peer_valid(ep, peer) || total < 0) return -FI_EINVAL;
  if (!write && (flags & (FI_INJECT | FI_REMOTE_CQ_DATA))) return -FI_EINVAL;
  const int inject = (flags & FI_INJECT) != 0;
  if (inject && (uint64_t)total > ep->payload_max) return -FI_EMSGSIZE;
  /* An inject is issued whole now: behind an RMA still issuing to the peer it would overtake it. */
  if (inject && proto_peer_rma_blocked(ep, peer)) return -FI_EAGAIN;
  const uint32_t i = proto_op_alloc(ep, PROTO_K_RMA);
  if (i == PROTO_NONE) return -FI_EAGAIN;
  uint32_t t = PROTO_NONE;
  if (inject) {
    t = proto_tx_alloc(ep, 0);
    if (t == PROTO_NONE) {
      proto_op_free(ep, i);
      return -FI_EAGAIN;
    }
  }
  struct proto_op *o = &ep->ops[i];
  o->peer = peer;
  o->context = context;
  o->flags = FI_RMA | (write ? FI_WRITE : FI_READ);
  proto_op_set_bufs(o, bufs, nbuf);
  o->total = (uint64_t)total;
  o->remote_addr = addr;
  o->remote_key = key;
  o->data = data;
  o->tag = (flags & FI_REMOTE_CQ_DATA) ? PROTO_WF_CQ_DATA : 0u;
  if (inject && !(flags & FI_COMPLETION)) o->mode |= PROTO_OPM_SILENT;
  proto_op_count(ep, i);
  /* The device reads and writes only registered local buffers; unregistered ones go by packets. */
  const int keyed = proto_op_keyed(o);
  if (write) o->state = !inject && keyed && proto_rma_by_rdma_write(ep, o->total) ? PROTO_S_RDMAW : PROTO_S_WRITE;
  else if ((ep->dev.caps & PROTO_DEV_RDMA_READ) && total > 0 && keyed) o->state = PROTO_S_READ;
  else o->state = PROTO_S_RREQ;
  if (write) proto_write_list(ep, i);
  if (inject) {
    if (!proto_write_may_start(ep, i, 1)) {
      proto_tx_release(ep, t);
      proto_op_free(ep, i);
      return -FI_EAGAIN;
    }
    o->mode |= PROTO_OPM_WSTARTED;
    proto_op_order(ep, i);
    proto_rma_packet(ep, i, t, 1, (uint32_t)total);
    o->state = PROTO_S_WAIT;
    proto_tx_submit(ep, t);
    return 0;
  }
  if (proto_rma_run(ep, i) == -FI_EAGAIN) proto_opq_push(ep, i);
  return 0;
}

/* Issues what RMA op i can issue now; -FI_EAGAIN to be run again later. */
XPU_FUNC int proto_rma_run(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  struct proto_peer *p = &ep->peers[o->peer];
  switch (o->state) {
    case PROTO_S_WRITE:
    case PROTO_S_RREQ: {
      if (p->rma_busy != PROTO_NONE && p->rma_busy != i) return -FI_EAGAIN;
      const int write = o->state == PROTO_S_WRITE;
      if (write && !(o->mode & PROTO_OPM_WSTARTED)) {
        if (!proto_write_may_start(ep, i, 1)) return -FI_EAGAIN;
        o->mode |= PROTO_OPM_WSTARTED;
      }
      p->rma_busy = i;
      if (write) proto_op_order(ep, i);
      do {
        const uint32_t t = proto_tx_alloc(ep, 0);
        if (t == PROTO_NONE) return -FI_EAGAIN;
        const uint64_t left = o->total - o->cursor;
        proto_rma_packet(ep, i, t, write, left < ep->payload_max ? (uint32_t)left : ep->payload_max);
        proto_tx_submit(ep, t);
      } while (o->cursor < o->total);
      p->rma_busy = PROTO_NONE;
      o->state = PROTO_S_WAIT;
      return 0;
    }
    case PROTO_S_READ:
      return proto_op_read_issue(ep, i, o->total);
    case PROTO_S_RDMAW:
      /* Once started (the SQ may take its pieces over several calls) it only continues. */
      if (!(o->mode & PROTO_OPM_WSTARTED)) {
        if (!proto_write_may_start(ep, i, 0)) return -FI_EAGAIN;
        o->mode |= PROTO_OPM_WSTARTED;
      }
      return proto_rma_write_issue(ep, i);
    case PROTO_S_FIN: {
      const uint32_t t = proto_tx_alloc(ep, 1);
      if (t == PROTO_NONE || proto_comp_room(ep) < 1) {
        if (t != PROTO_NONE) proto_tx_release(ep, t);
        return -FI_EAGAIN;
      }
      const int write = (o->flags & FI_WRITE) != 0;
      struct proto_hdr *h = proto_tx_prepare(ep, t, o->peer, write ? PROTO_OP_WRITE_NOTE : PROTO_OP_READ_NOTE, 0);
      h->u0 = o->total;
      if (write) {
        h->u2 = o->remote_addr;
        h->data = o->data;
        h->flags = (uint32_t)o->tag;
      }
      proto_tx_submit(ep, t);
      proto_rma_complete(ep, i, EFA_IO_COMP_STATUS_OK);
      return 0;
    }
    default:
      return 0;
  }
}

/* Op i's RDMA reads or writes all completed (proto_op_wqe_done): the note, or the error. */
XPU_FUNC void proto_rma_wqe_done(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  if ((o->state != PROTO_S_READ && o->state != PROTO_S_RDMAW) || o->cursor < o->total) return;
  /* Landed: the writes after it may go (the note is numbered, behind nothing of ours). */
  if (o->state == PROTO_S_RDMAW && (o->mode & PROTO_OPM_WLISTED)) proto_write_unlist(ep, i);
  if (o->err) {
    proto_rma_complete(ep, i, (uint32_t)o->prov_errno);
    return;
  }
  o->state = PROTO_S_FIN;
  proto_opq_push(ep, i);
}

/* A remote access to report at the target: FI_RMA | FI_REMOTE_WRITE or FI_REMOTE_READ. */
XPU_FUNC struct proto_comp *proto_rma_event(struct proto_ep *ep, uint32_t peer, uint64_t flags, uint64_t len) {
  struct proto_comp *c = proto_comp_push(ep);
  c->flags = FI_RMA | flags;
  c->len = len;
  c->src = peer;
  return c;
}

/* WRITE, READ_REQ and READ_NOTE at the target, RMA_RESP at the requester. */
XPU_FUNC int proto_rma_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  const uint32_t key = (uint32_t)(h->u0 >> 32);
  const int last = (h->flags & PROTO_WF_LAST) != 0;
  switch (h->op) {
    case PROTO_OP_WRITE: {
      uint32_t t = PROTO_NONE;
      if (last) {
        t = proto_tx_alloc(ep, 1);
        if (t == PROTO_NONE) return -FI_EAGAIN; /* nothing copied yet: the retry starts over */
      }
      const uint64_t at = h->u2 + h->u1;
      if (h->len && h->u1 <= h->tag && h->len <= h->tag - h->u1 && proto_mr_check(ep, key, at, h->len, 2u))
        memcpy((uint8_t *)(uintptr_t)at, payload, h->len);
      if (!last) return 0;
      const uint32_t status =
          proto_mr_check(ep, key, h->u2, h->tag, 2u) ? EFA_IO_COMP_STATUS_OK : EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS;
      if (status == EFA_IO_COMP_STATUS_OK) {
        struct proto_comp *c = proto_rma_event(ep, peer, FI_REMOTE_WRITE, h->tag);
        c->buf = (void *)(uintptr_t)h->u2;
        if (h->flags & PROTO_WF_CQ_DATA) {
          c->flags |= FI_REMOTE_CQ_DATA;
          c->data = h->data;
        }
      }
      struct proto_hdr *r = proto_tx_prepare(ep, t, peer, PROTO_OP_RMA_RESP, 0);
      r->u0 = (uint32_t)h->u0;
      r->u1 = status;
      proto_tx_submit(ep, t);
      return 0;
    }
    case PROTO_OP_READ_REQ: {
      const uint32_t t = proto_tx_alloc(ep, 1);
      if (t == PROTO_NONE) return -FI_EAGAIN;
      const uint64_t n = h->data;
      uint32_t status = EFA_IO_COMP_STATUS_OK;
      if (n > ep->payload_max || h->u1 > h->tag || n > h->tag - h->u1)
        status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH;
      else if (!proto_mr_check(ep, key, h->u2 + h->u1, n, 1u))
        status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS;
      struct proto_hdr *r =
          proto_tx_prepare(ep, t, peer, PROTO_OP_RMA_RESP, status == EFA_IO_COMP_STATUS_OK ? (uint32_t)n : 0u);
      r->u0 = (uint32_t)h->u0;
      r->u1 = (uint64_t)status | ((n & 0xffffffffu) << 32);
      r->u2 = h->u1;
      if (status == EFA_IO_COMP_STATUS_OK && n) memcpy(r + 1, (const uint8_t *)(uintptr_t)(h->u2 + h->u1), n);
      if (status == EFA_IO_COMP_STATUS_OK && last) proto_rma_event(ep, peer, FI_REMOTE_READ, h->tag);
      proto_tx_submit(ep, t);
      return 0;
    }
    case PROTO_OP_READ_NOTE:
      proto_rma_event(ep, peer, FI_REMOTE_READ, h->u0);
      return 0;
    case PROTO_OP_WRITE_NOTE: {
      struct proto_comp *c = proto_rma_event(ep, peer, FI_REMOTE_WRITE, h->u0);
      c->buf = (void *)(uintptr_t)h->u2;
      if (h->flags & PROTO_WF_CQ_DATA) {
        c->flags |= FI_REMOTE_CQ_DATA;
        c->data = h->data;
      }
      return 0;
    }
    case PROTO_OP_RMA_RESP: {
      const uint32_t i = proto_op_from_wire(ep, h->u0, PROTO_K_RMA);
      if (i == PROTO_NONE) return 0;
      struct proto_op *o = &ep->ops[i];
      if (o->state != PROTO_S_WAIT && o->state != PROTO_S_RREQ) return 0;
      const uint32_t status = (uint32_t)h->u1;
      if (o->flags & FI_WRITE) {
        proto_rma_complete(ep, i, status);
        return 0;
      }
      const uint64_t n = h->u1 >> 32;
      if (status == EFA_IO_COMP_STATUS_OK) {
        if (n && h->u2 < o->total && n <= o->total - h->u2 && n <= h->len) proto_op_scatter(o, h->u2, payload, n);
      } else if (!o->err) {
        o->err = efa_io_status_to_fi_errno(status);
        o->prov_errno = (int32_t)status;
      }
      o->done += n;
      if (o->done >= o->total && o->state == PROTO_S_WAIT)
        proto_rma_complete(ep, i, o->err ? (uint32_t)o->prov_errno : (uint32_t)EFA_IO_COMP_STATUS_OK);
      return 0;
    }
    default:
      return 0;
  }
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_RMA_H_ */
