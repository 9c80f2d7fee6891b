/*
 * core.h - the protocol endpoint's transport: set-up over caller memory (its
 * peer, MR and operation tables are tables.h), transmit buffers and credits, receive buffers and the
 * per-peer reorder window, completion queueing, active messages and
 * progress. Host and nvcc; valid C11 and C++17.
 *
 * Include api/proto/proto.h, not this file. The message, rendezvous and
 * atomic layers (msg.h, amo.h) are called from the receive dispatch here and
 * are declared before it.
 *
 * Flow control. Each endpoint keeps nrx = max_peers * (credits + 2) receive
 * buffers posted. A sender starts with `credits` credits per peer and spends
 * one per numbered packet; the receiver gives a credit back once it handled
 * the packet and reposted its buffer, piggy-backed on the next packet it
 * sends that peer, or in a CREDIT packet once it owes half the window. CREDIT
 * packets spend no credit; the 2 spare buffers per peer absorb them (each one
 * carries at least credits / 2, so no more than 2 are ever outstanding). A
 * peer that follows this never finds an empty receive queue: no RNR, and no
 * reliance on the device's RNR retry (gen1 has none).
 *
 * Order. Numbered packets are handled in the sender's order, whatever order
 * SRD delivers them in: a packet that arrives early waits in its peer's
 * window (its buffer stays unposted, which the credits account for), and a
 * packet whose handling needs a resource that is exhausted (a completion
 * slot, a transmit buffer for a reply, an unexpected-message slot) stalls its
 * peer's stream until a later progress call.
 *
 * Concurrency: one caller at a time per endpoint (a host thread, or the
 * leader of the work-group that owns it on a device).
 */
#ifndef XPUFAB_API_PROTO_CORE_H_
#define XPUFAB_API_PROTO_CORE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/ep.h"
#include "api/proto/tables.h"
#include "api/proto/wire.h"
#include "device/efa_io_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Transmit buffers kept for the core's own packets (replies, CTS, FIN, credits). */
#define PROTO_TX_RESERVE 8u
#define PROTO_CQ_BUDGET 64

/* ---- layers above, called from the receive dispatch ---------------------------------------- */

XPU_FUNC int proto_msg_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload);
XPU_FUNC int proto_amo_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload);
XPU_FUNC void proto_op_wqe_done(struct proto_ep *ep, uint32_t op, uint32_t status);
XPU_FUNC int proto_op_run(struct proto_ep *ep, uint32_t op);
XPU_FUNC void proto_amo_complete(struct proto_ep *ep, uint32_t op, uint32_t status);
XPU_FUNC int proto_rma_run(struct proto_ep *ep, uint32_t op);
XPU_FUNC void proto_rma_wqe_done(struct proto_ep *ep, uint32_t op);
XPU_FUNC int proto_rma_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload);

/* ---- memory layout ---------------------------------------------------------------------------- */

XPU_FUNC void proto_layout(struct proto_carve *k, const struct proto_config *c, const struct proto_dev *d,
                           struct proto_ep *ep, void **sq_scratch, void **rq_scratch) {
  *sq_scratch = proto_carve_take(k, efa_sq_scratch_size(d->sq.num_entries));
  *rq_scratch = proto_carve_take(k, efa_rq_scratch_size(d->rq.num_entries));
  struct proto_peer *peers = (struct proto_peer *)proto_carve_take(k, sizeof(struct proto_peer) * c->max_peers);
  uint32_t *held = (uint32_t *)proto_carve_take(k, sizeof(uint32_t) * c->max_peers * c->credits);
  struct proto_op *ops = (struct proto_op *)proto_carve_take(k, sizeof(struct proto_op) * c->max_ops);
  struct proto_txbuf *tx = (struct proto_txbuf *)proto_carve_take(k, sizeof(struct proto_txbuf) * c->ntx);
  uint32_t *opq = (uint32_t *)proto_carve_take(k, sizeof(uint32_t) * c->max_ops);
  struct proto_unexp *ux = (struct proto_unexp *)proto_carve_take(k, sizeof(struct proto_unexp) * c->max_unexp);
  uint8_t *uxd = (uint8_t *)proto_carve_take(k, (uint64_t)c->max_unexp * proto_eager_max(c, d));
  struct proto_comp *comps = (struct proto_comp *)proto_carve_take(k, sizeof(struct proto_comp) * c->ncomp);
  struct proto_mr *mrs = (struct proto_mr *)proto_carve_take(k, sizeof(struct proto_mr) * PROTO_MAX_MR);
  struct proto_orphan *orphans =
      (struct proto_orphan *)proto_carve_take(k, sizeof(struct proto_orphan) * proto_rx_buffers(c));
  const uint64_t nmatch = (uint64_t)c->max_ops + c->max_unexp;
  struct proto_match_entry *tm = (struct proto_match_entry *)proto_carve_take(k, sizeof(*tm) * nmatch);
  struct proto_match_entry *um = (struct proto_match_entry *)proto_carve_take(k, sizeof(*um) * nmatch);
  if (!ep) return;
  ep->peers = peers;
  ep->held_pool = held;
  ep->ops = ops;
  ep->tx = tx;
  ep->opq = opq;
  ep->unexp = ux;
  ep->unexp_data = uxd;
  ep->comps = comps;
  ep->mrs = mrs;
  ep->orphans = orphans;
  ep->tm_pool = tm;
  ep->um_pool = um;
}

/* Bytes of caller memory (8-byte aligned) proto_ep_init needs besides the bounce region. */
XPU_FUNC size_t proto_ep_mem_size(const struct proto_config *c, const struct proto_dev *d) {
  struct proto_carve k = {0, 0};
  void *a, *b;
  proto_layout(&k, c, d, 0, &a, &b);
  return (size_t)k.off + 64;
}

XPU_FUNC uint8_t *proto_rxbuf(const struct proto_ep *ep, uint32_t i) { return ep->bounce + (size_t)i * ep->buf_size; }
XPU_FUNC uint8_t *proto_txbuf_mem(const struct proto_ep *ep, uint32_t i) {
  return ep->bounce + (size_t)(ep->nrx + i) * ep->buf_size;
}

XPU_FUNC int proto_rx_post(struct proto_ep *ep, uint32_t i) {
  struct efa_dp_sge s;
  s.addr = (uint64_t)(uintptr_t)proto_rxbuf(ep, i);
  s.length = ep->buf_size;
  s.lkey = ep->rx_lkey;
  return efa_rq_post(&ep->rq, &s, 1, i);
}

XPU_FUNC int proto_is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

/*
 * Sets the endpoint up on an RTS SRD QP whose rings `d` describes and posts
 * the receive buffers. `mem` (proto_ep_mem_size bytes) holds every pool;
 * `bounce` (proto_bounce_size bytes, registered with lkey `bounce_lkey`)
 * holds the packets. 0; -FI_EINVAL for inconsistent sizes (a receive queue
 * shorter than proto_rx_buffers, a window that is not a power of two, an MTU
 * that holds no header, memory too short).
 */
XPU_FUNC int proto_ep_init(struct proto_ep *ep, const struct proto_config *c, const struct proto_dev *d, void *mem,
                           size_t mem_len, void *bounce, uint32_t bounce_lkey) {
  if (!ep || !c || !d || !mem || !bounce) return -FI_EINVAL;
  if (c->max_peers == 0 || c->max_peers > 0xfffeu || c->credits < 2 || !proto_is_pow2(c->credits) ||
      c->ntx <= PROTO_TX_RESERVE || c->max_ops == 0 || c->max_ops > 0xffffu || !proto_is_pow2(c->ncomp) || c->ncomp < 4)
    return -FI_EINVAL;
  if (d->mtu <= sizeof(struct proto_hdr) + 8 || d->mtu > 65535u || d->max_sq_sge < 1) return -FI_EINVAL;
  if (proto_rx_buffers(c) > d->rq.num_entries) return -FI_EINVAL;
  if (mem_len < proto_ep_mem_size(c, d) || ((uintptr_t)mem & 7u)) return -FI_EINVAL;
  memset(ep, 0, sizeof(*ep));
  ep->cfg = *c;
  ep->dev = *d;
  struct proto_carve k = {(uint8_t *)mem, 0};
  k.off = proto_align_up((uintptr_t)mem, 64) - (uintptr_t)mem;
  void *sqs, *rqs;
  proto_layout(&k, c, d, ep, &sqs, &rqs);
  int rc = efa_sq_init(&ep->sq, &d->sq, d->max_sq_sge > 2 ? 2 : d->max_sq_sge, sqs,
                       efa_sq_scratch_size(d->sq.num_entries));
  if (rc) return rc;
  rc = efa_rq_init(&ep->rq, &d->rq, d->max_rq_sge ? d->max_rq_sge : 1, rqs, efa_rq_scratch_size(d->rq.num_entries));
  if (rc) return rc;
  rc = efa_cq_init(&ep->cq, &d->cq);
  if (rc) return rc;
  ep->payload_max = d->mtu - (uint32_t)sizeof(struct proto_hdr);
  ep->buf_size = proto_buf_size(d);
  if (ep->buf_size > 65535u) ep->buf_size = d->mtu;
  ep->nrx = proto_rx_buffers(c);
  ep->bounce = (uint8_t *)bounce;
  ep->bounce_lkey = bounce_lkey;
  ep->rx_lkey = bounce_lkey;
  for (uint32_t i = 0; i < c->max_peers; ++i) {
    memset(&ep->peers[i], 0, sizeof(ep->peers[i]));
    ep->peers[i].held = ep->held_pool + (size_t)i * c->credits;
  }
  memset(ep->held_pool, 0, sizeof(uint32_t) * c->max_peers * c->credits);
  for (uint32_t i = 0; i < c->max_ops; ++i) {
    memset(&ep->ops[i], 0, sizeof(ep->ops[i]));
    ep->ops[i].next = i + 1 < c->max_ops ? i + 1 : PROTO_NONE;
  }
  ep->op_free = 0;
  for (uint32_t i = 0; i < c->ntx; ++i) {
    memset(&ep->tx[i], 0, sizeof(ep->tx[i]));
    ep->tx[i].next = i + 1 < c->ntx ? i + 1 : PROTO_NONE;
  }
  ep->tx_free = 0;
  ep->tx_free_count = c->ntx;
  ep->txq.head = ep->txq.tail = PROTO_NONE;
  for (uint32_t i = 0; i < c->max_peers; ++i) ep->peers[i].q.head = ep->peers[i].q.tail = PROTO_NONE;
  const uint32_t ux_max = proto_eager_max(c, d);
  for (uint32_t i = 0; i < c->max_unexp; ++i) {
    memset(&ep->unexp[i], 0, sizeof(ep->unexp[i]));
    ep->unexp[i].payload = ep->unexp_data + (size_t)i * ux_max;
    ep->unexp[i].next = i + 1 < c->max_unexp ? i + 1 : PROTO_NONE;
  }
  ep->unexp_free = c->max_unexp ? 0 : PROTO_NONE;
  ep->max_mr = PROTO_MAX_MR;
  ep->last_peer = PROTO_NONE;
  ep->min_multi_recv = PROTO_MIN_MULTI_RECV_DEFAULT;
  rc = proto_match_init(&ep->tm, ep->tm_pool, c->max_ops + c->max_unexp);
  if (rc == 0) rc = proto_match_init(&ep->um, ep->um_pool, c->max_ops + c->max_unexp);
  if (rc) return rc;
  for (uint32_t i = 0; i < ep->nrx; ++i) {
    rc = proto_rx_post(ep, i);
    if (rc) return rc;
  }
  return 0;
}

/* ---- completions ------------------------------------------------------------------------------- */

XPU_FUNC uint32_t proto_comp_room(const struct proto_ep *ep) { return ep->cfg.ncomp - ep->comp_count; }

XPU_FUNC struct proto_comp *proto_comp_push(struct proto_ep *ep) {
  struct proto_comp *c = &ep->comps[(ep->comp_head + ep->comp_count++) & (ep->cfg.ncomp - 1)];
  memset(c, 0, sizeof(*c));
  c->src = PROTO_NONE;
  return c;
}

/*
 * Completes op i of an RMA or atomic with the EFA `status` (its entry unless
 * silent, `buf` the entry's buffer) and frees it.
 */
XPU_FUNC void proto_op_complete_status(struct proto_ep *ep, uint32_t i, uint32_t status, void *buf) {
  struct proto_op *o = &ep->ops[i];
  if (!(o->mode & PROTO_OPM_SILENT)) {
    struct proto_comp *c = proto_comp_push(ep);
    c->op_context = o->context;
    c->flags = o->flags;
    c->len = o->total;
    c->buf = buf;
    c->src = o->peer;
    if (status != EFA_IO_COMP_STATUS_OK) {
      c->err = efa_io_status_to_fi_errno(status);
      c->prov_errno = (int32_t)status;
    }
  }
  proto_op_free(ep, i);
}

/* ---- transmit ---------------------------------------------------------------------------------- */

/* A transmit buffer; `internal` packets may use the reserve. PROTO_NONE when none is free. */
XPU_FUNC uint32_t proto_tx_alloc(struct proto_ep *ep, int internal) {
  if (ep->tx_free == PROTO_NONE || (!internal && ep->tx_free_count <= PROTO_TX_RESERVE)) return PROTO_NONE;
  const uint32_t i = ep->tx_free;
  ep->tx_free = ep->tx[i].next;
  ep->tx_free_count--;
  ep->tx[i].next = PROTO_NONE;
  ep->tx[i].op = PROTO_NONE;
  ep->tx[i].ext_len = 0;
  return i;
}

XPU_FUNC void proto_tx_release(struct proto_ep *ep, uint32_t i) {
  ep->tx[i].next = ep->tx_free;
  ep->tx_free = i;
  ep->tx_free_count++;
}

XPU_FUNC struct proto_hdr *proto_tx_hdr(const struct proto_ep *ep, uint32_t t) {
  return (struct proto_hdr *)proto_txbuf_mem(ep, t);
}

/* A header for a packet to `peer` in transmit buffer t, payload length len (copied by the caller). */
XPU_FUNC struct proto_hdr *proto_tx_prepare(struct proto_ep *ep, uint32_t t, uint32_t peer, uint8_t op, uint32_t len) {
  struct proto_hdr *h = proto_tx_hdr(ep, t);
  memset(h, 0, sizeof(*h));
  h->op = op;
  h->version = PROTO_WIRE_VERSION;
  h->len = len;
  h->src = ep->peers[peer].src_at_peer;
  ep->tx[t].peer = peer;
  ep->tx[t].len = (uint32_t)sizeof(*h) + len;
  return h;
}

/*
 * Posts transmit buffer t: spends a credit (not for CREDIT packets), numbers
 * the packet and gives back what we owe the peer. 0, or -FI_EAGAIN when the
 * peer has no credit left or the SQ is full (nothing changed).
 */
XPU_FUNC int proto_tx_emit(struct proto_ep *ep, uint32_t t) {
  struct proto_txbuf *b = &ep->tx[t];
  struct proto_peer *p = &ep->peers[b->peer];
  struct proto_hdr *h = proto_tx_hdr(ep, t);
  const int numbered = h->op != PROTO_OP_CREDIT;
  if (numbered && p->tx_credits == 0) {
    ep->stats.credit_stalls++;
    return -FI_EAGAIN;
  }
  const uint32_t give = p->owed > 0xffffu ? 0xffffu : p->owed;
  h->credits = (uint16_t)give;
  if (numbered) h->seq = p->tx_seq;
  struct efa_dp_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.op = EFA_DP_OP_SEND;
  wr.ah = p->ahn;
  wr.dest_qpn = p->qpn;
  wr.qkey = p->qkey;
  wr.num_sge = 1;
  wr.sge[0].addr = (uint64_t)(uintptr_t)h;
  wr.sge[0].length = b->len;
  wr.sge[0].lkey = ep->bounce_lkey;
  if (b->ext_len) {
    wr.num_sge = 2;
    wr.sge[1].addr = b->ext_addr;
    wr.sge[1].length = b->ext_len;
    wr.sge[1].lkey = b->ext_lkey;
  }
  wr.context = PROTO_WRC(PROTO_WRC_TX, t);
  const int rc = efa_sq_post(&ep->sq, &wr);
  if (rc) return rc;
  p->owed -= give;
  if (numbered) {
    p->tx_credits--;
    p->tx_seq++;
  }
  ep->stats.tx_packets++;
  return 0;
}

/*
 * Sends t now if nothing to its peer waits before it, else queues it behind
 * what waits (the peer's order is kept; other peers are not held up).
 */
XPU_FUNC void proto_tx_submit(struct proto_ep *ep, uint32_t t) {
  struct proto_fifo *q = &ep->peers[ep->tx[t].peer].q;
  if (q->count == 0 && proto_tx_emit(ep, t) == 0) return;
  ep->tx[t].next = PROTO_NONE;
  if (q->count) ep->tx[q->tail].next = t;
  else q->head = t;
  q->tail = t;
  q->count++;
  ep->txq.count++;
}

XPU_FUNC void proto_tx_run(struct proto_ep *ep) {
  for (uint32_t i = 0; i < ep->cfg.max_peers && ep->txq.count; ++i) {
    struct proto_fifo *q = &ep->peers[i].q;
    while (q->count) {
      const uint32_t t = q->head;
      if (proto_tx_emit(ep, t)) {
        if (ep->peers[i].tx_credits) return; /* the SQ is full: nobody gets further now */
        break;                              /* this peer owes us credits: the next one */
      }
      q->head = ep->tx[t].next;
      if (--q->count == 0) q->head = q->tail = PROTO_NONE;
      ep->txq.count--;
    }
  }
  uint32_t n = ep->opq_count;
  while (n--) {
    const uint32_t op = ep->opq[ep->opq_head];
    ep->opq_head = (ep->opq_head + 1) % ep->cfg.max_ops;
    ep->opq_count--;
    ep->ops[op].in_txq = 0;
    if (proto_op_run(ep, op) == -FI_EAGAIN) proto_opq_push(ep, op);
  }
}

/* A CREDIT packet to `peer` when it is owed half a window or more. */
XPU_FUNC void proto_credit_maybe(struct proto_ep *ep, uint32_t peer) {
  struct proto_peer *p = &ep->peers[peer];
  if (p->owed < ep->cfg.credits / 2) return;
  const uint32_t t = proto_tx_alloc(ep, 1);
  if (t == PROTO_NONE) {
    ep->credit_due = 1;
    return;
  }
  proto_tx_prepare(ep, t, peer, PROTO_OP_CREDIT, 0);
  if (proto_tx_emit(ep, t)) {
    proto_tx_release(ep, t);
    ep->credit_due = 1;
    return;
  }
  ep->stats.credit_packets++;
}

/* ---- active messages ------------------------------------------------------------------------ */

XPU_FUNC int proto_am_set_handler(struct proto_ep *ep, uint32_t id, proto_am_fn fn, void *arg) {
  if (!ep || id >= PROTO_AM_MAX) return -FI_EINVAL;
  ep->am[id].fn = fn;
  ep->am[id].arg = arg;
  return 0;
}

/* Largest active-message payload (a + b of proto_am_send). */
XPU_FUNC uint32_t proto_am_max(const struct proto_ep *ep) { return ep->payload_max; }

/*
 * Sends active message `id` with payload a (alen bytes) followed by b (blen
 * bytes), copied before returning. 0; -FI_EINVAL (bad peer or id);
 * -FI_EMSGSIZE (more than proto_am_max); -FI_EAGAIN (no transmit buffer free:
 * progress and retry). Handlers at the peer run in this sender's order.
 */
XPU_FUNC int proto_am_send(struct proto_ep *ep, uint32_t peer, uint32_t id, const void *a, uint32_t alen,
                           const void *b, uint32_t blen) {
  if (!proto_peer_valid(ep, peer) || id >= PROTO_AM_MAX) return -FI_EINVAL;
  if ((alen && !a) || (blen && !b)) return -FI_EINVAL;
  if ((uint64_t)alen + blen > ep->payload_max) return -FI_EMSGSIZE;
  const uint32_t t = proto_tx_alloc(ep, 0);
  if (t == PROTO_NONE) return -FI_EAGAIN;
  struct proto_hdr *h = proto_tx_prepare(ep, t, peer, PROTO_OP_AM, alen + blen);
  h->am_id = (uint16_t)id;
  uint8_t *pl = (uint8_t *)(h + 1);
  if (alen) memcpy(pl, a, alen);
  if (blen) memcpy(pl + alen, b, blen);
  proto_tx_submit(ep, t);
  return 0;
}

/* ---- receive ------------------------------------------------------------------------------------ */

/* Handles one numbered packet; -FI_EAGAIN when it must wait. */
XPU_FUNC PROTO_OUTLINE int proto_rx_dispatch(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h) {
  const uint8_t *payload = (const uint8_t *)(h + 1);
  switch (h->op) {
    case PROTO_OP_AM: {
      const struct proto_am_entry *e = &ep->am[h->am_id < PROTO_AM_MAX ? h->am_id : 0];
      if (h->am_id >= PROTO_AM_MAX || !e->fn) return 0; /* nobody listens: dropped, as UCT does */
      return e->fn(e->arg, peer, payload, h->len);
    }
    case PROTO_OP_EAGER:
    case PROTO_OP_RTS:
    case PROTO_OP_CTS:
    case PROTO_OP_DATA:
    case PROTO_OP_FIN:
      return proto_msg_handle(ep, peer, h, payload);
    case PROTO_OP_ATOMIC_REQ:
    case PROTO_OP_ATOMIC_RESP:
      return proto_amo_handle(ep, peer, h, payload);
    case PROTO_OP_WRITE:
    case PROTO_OP_READ_REQ:
    case PROTO_OP_RMA_RESP:
    case PROTO_OP_READ_NOTE:
    case PROTO_OP_WRITE_NOTE:
      return proto_rma_handle(ep, peer, h, payload);
    default:
      return 0;
  }
}

/* Completion slots a packet's handling may need; below that the stream waits. */
#define PROTO_COMP_HEADROOM 2u

/* Handles the peer's packets that are next in its order, as far as resources allow. */
XPU_FUNC void proto_rx_deliver(struct proto_ep *ep, uint32_t peer) {
  struct proto_peer *p = &ep->peers[peer];
  const uint32_t mask = ep->cfg.credits - 1;
  for (;;) {
    const uint32_t b = p->held[p->rx_next & mask];
    if (!b) break;
    const struct proto_hdr *h = (const struct proto_hdr *)proto_rxbuf(ep, b - 1);
    if (proto_comp_room(ep) < PROTO_COMP_HEADROOM || proto_rx_dispatch(ep, peer, h) == -FI_EAGAIN) {
      if (!(p->in_use & 2u)) {
        p->in_use |= 2u;
        ep->stalled++;
      }
      /* What was handled before the stall is still owed: progress returns it. */
      if (p->owed >= ep->cfg.credits / 2) ep->credit_due = 1;
      return;
    }
    p->held[p->rx_next & mask] = 0;
    p->rx_next++;
    p->owed++;
    proto_rx_post(ep, b - 1);
  }
  if (p->in_use & 2u) {
    p->in_use &= ~2u;
    ep->stalled--;
  }
  proto_credit_maybe(ep, peer);
}

/* A well-formed packet in buffer b from `peer`: credits now, then in the peer's order. */
XPU_FUNC void proto_rx_accept(struct proto_ep *ep, uint32_t b, uint32_t peer) {
  const struct proto_hdr *h = (const struct proto_hdr *)proto_rxbuf(ep, b);
  ep->stats.rx_packets++;
  struct proto_peer *p = &ep->peers[peer];
  p->tx_credits += h->credits;
  if (h->op == PROTO_OP_CREDIT) {
    proto_rx_post(ep, b);
    return;
  }
  const uint32_t ahead = h->seq - p->rx_next;
  if (ahead >= ep->cfg.credits || p->held[h->seq & (ep->cfg.credits - 1)]) {
    /* Outside the window the credits allow: not a packet of this protocol run. */
    ep->stats.unknown_src++;
    proto_rx_post(ep, b);
    return;
  }
  if (ahead) ep->stats.reordered++;
  p->held[h->seq & (ep->cfg.credits - 1)] = b + 1;
  if (!ahead) proto_rx_deliver(ep, peer);
}

XPU_FUNC void proto_rx_complete(struct proto_ep *ep, const struct efa_dp_cqe *c) {
  uint64_t ctx = 0;
  if (efa_rq_complete(&ep->rq, c->req_id, &ctx)) return;
  const uint32_t b = (uint32_t)ctx;
  if (c->status != EFA_IO_COMP_STATUS_OK) {
    ep->stats.rx_errors++;
    /* A flushed buffer belongs to a QP going away; anything else is reposted. */
    if (c->status != EFA_IO_COMP_STATUS_FLUSHED) proto_rx_post(ep, b);
    return;
  }
  const struct proto_hdr *h = (const struct proto_hdr *)proto_rxbuf(ep, b);
  if (c->byte_len < sizeof(*h) || h->version != PROTO_WIRE_VERSION || h->len > c->byte_len - sizeof(*h)) {
    ep->stats.unknown_src++;
    proto_rx_post(ep, b);
    return;
  }
  const uint32_t peer = proto_peer_lookup(ep, c->ah, c->src_qp);
  if (peer != PROTO_NONE) {
    proto_rx_accept(ep, b, peer);
    return;
  }
  const int with_gid = c->ah == EFA_IO_AH_UNKNOWN && (ep->dev.caps & PROTO_DEV_CQ_SGID);
  if (c->ah == EFA_IO_AH_UNKNOWN && !with_gid) {
    /* No AH for the sender and no GID in the CQE: nobody can ever say who sent it. */
    ep->stats.unknown_src++;
    proto_rx_post(ep, b);
    return;
  }
  /*
   * A sender that is not a peer yet (it added us before we added it): the
   * packet waits, unposted, until proto_peer_add(_gid) names it. Each waiting
   * packet holds a distinct buffer, so nrx entries always suffice.
   */
  struct proto_orphan *o = &ep->orphans[ep->norphans++];
  o->buf = b;
  o->ah = c->ah;
  o->qpn = c->src_qp;
  o->has_gid = (uint32_t)with_gid;
  if (with_gid) memcpy(o->gid, c->raw.u.src_addr, 16);
  ep->stats.orphans++;
}

XPU_FUNC int proto_same_gid(const uint8_t *x, const uint8_t *y) {
  for (int i = 0; i < 16; ++i)
    if (x[i] != y[i]) return 0;
  return 1;
}

/* The peer an orphan's sender has become, or PROTO_NONE. */
XPU_FUNC uint32_t proto_orphan_peer(struct proto_ep *ep, const struct proto_orphan *o) {
  if (!o->has_gid) return proto_peer_lookup(ep, o->ah, o->qpn);
  for (uint32_t i = 0; i < ep->cfg.max_peers; ++i) {
    const struct proto_peer *p = &ep->peers[i];
    if (p->in_use && p->has_gid && p->qpn == o->qpn && proto_same_gid(p->gid, o->gid)) return i;
  }
  return PROTO_NONE;
}

/* Packets of senders that have become peers since they arrived, in arrival order. */
XPU_FUNC void proto_rx_adopt(struct proto_ep *ep) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < ep->norphans; ++i) {
    const struct proto_orphan o = ep->orphans[i];
    const uint32_t peer = proto_orphan_peer(ep, &o);
    if (peer == PROTO_NONE) ep->orphans[k++] = o;
    else proto_rx_accept(ep, o.buf, peer);
  }
  ep->norphans = k;
}

XPU_FUNC void proto_tx_complete(struct proto_ep *ep, const struct efa_dp_cqe *c) {
  uint64_t ctx = 0;
  if (efa_sq_complete(&ep->sq, c->req_id, &ctx)) return;
  const uint32_t kind = (uint32_t)(ctx >> 32), idx = (uint32_t)ctx;
  if (c->status != EFA_IO_COMP_STATUS_OK) {
    ep->stats.tx_errors++;
    ep->stats.last_tx_status = c->status;
  }
  if (kind == PROTO_WRC_TX) {
    const uint32_t op = ep->tx[idx].op;
    proto_tx_release(ep, idx);
    if (op != PROTO_NONE) proto_op_wqe_done(ep, op, c->status);
  } else if (kind == PROTO_WRC_READ) {
    proto_op_wqe_done(ep, idx, c->status);
  }
}

/*
 * 1 when nothing of ours is in flight or waiting: every packet was sent and
 * its send completed, no rendezvous is moving data. A consumer that closes
 * the QP (or a UCT flush) progresses until then, so no packet is lost with it.
 */
XPU_FUNC int proto_ep_idle(const struct proto_ep *ep) {
  return ep->txq.count == 0 && ep->opq_count == 0 && ep->tx_free_count == ep->cfg.ntx;
}

/*
 * 0 when proto_progress would do nothing: no stalled stream or orphan, nothing
 * queued to transmit, no credit to return, no completion to hand out
 * (proto_progress_pending), and no valid CQE. Reads the endpoint's own fields:
 * the caller holds what serializes its calls.
 */
XPU_FUNC int proto_progress_pending(const struct proto_ep *ep) {
  return (ep->stalled | ep->norphans | ep->txq.count | ep->opq_count | ep->credit_due | ep->comp_count) != 0;
}

XPU_FUNC int proto_progress_due(struct proto_ep *ep) { return proto_progress_pending(ep) || efa_cq_ready(&ep->cq); }

/*
 * Makes progress: handles packets that waited, polls the CQ, returns credits
 * and transmits what waits. Copies up to `max` completions to out (which may
 * be NULL when max is 0); returns how many.
 */
XPU_FUNC PROTO_OUTLINE int proto_progress(struct proto_ep *ep, struct proto_comp *out, int max) {
  if (!ep) return -FI_EINVAL;
  if (!proto_progress_due(ep)) return 0;
  if (ep->stalled) {
    for (uint32_t i = 0; i < ep->cfg.max_peers && ep->stalled; ++i)
      if (ep->peers[i].in_use & 2u) proto_rx_deliver(ep, i);
  }
  if (ep->norphans) proto_rx_adopt(ep);
  for (int n = 0; n < PROTO_CQ_BUDGET && proto_comp_room(ep) >= PROTO_COMP_HEADROOM; ++n) {
    struct efa_dp_cqe c;
    if (efa_cq_poll(&ep->cq, &c)) break;
    if (c.q_type == EFA_IO_SEND_QUEUE) proto_tx_complete(ep, &c);
    else if (!c.unsolicited) proto_rx_complete(ep, &c);
  }
  proto_tx_run(ep);
  /* Credits are returned as packets are handled; only one that could not go out is retried. */
  if (ep->credit_due) {
    ep->credit_due = 0;
    for (uint32_t i = 0; i < ep->cfg.max_peers; ++i)
      if (ep->peers[i].in_use && ep->peers[i].owed >= ep->cfg.credits / 2) proto_credit_maybe(ep, i);
  }
  int n = 0;
  while (n < max && ep->comp_count) {
    out[n++] = ep->comps[ep->comp_head];
    ep->comp_head = (ep->comp_head + 1) & (ep->cfg.ncomp - 1);
    ep->comp_count--;
  }
  return n;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_CORE_H_ */
