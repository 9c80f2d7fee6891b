/*
 * msg.h - tagged and untagged messages over the protocol transport: eager up
 * to the eager limit, rendezvous above it, any length up to 2^64 - 1 (in
 * practice max_msg_size). Host and nvcc; valid C11 and C++17.
 *
 * Include api/proto/proto.h, not this file.
 *
 * Eager: the payload travels in the EAGER packet. The receiver matches it
 * against posted receives (match.h; untagged receives use a second list with
 * tag 0 and no ignore bits), or copies it into an unexpected slot.
 *
 * Rendezvous: the sender offers its buffer (RTS: length, address, remote
 * key). When a receive matches, a receiver whose device has RDMA read reads
 * the data straight into the receive buffer in rdma_chunk pieces and then
 * sends FIN; one without RDMA read (EFA gen1) sends CTS and the sender pushes
 * the data in DATA packets, which spend credits like any other packet, and
 * completes once the device completed the last one (SRD is reliable). The
 * push also serves a sender with several buffers or an unregistered one, and a
 * receiver whose buffer is unregistered (PROTO_KEY_NONE). A
 * receive shorter than the message takes what fits and completes with
 * FI_ETRUNC; the sender completes normally.
 *
 * Matching order follows the sender's posting order because packets are
 * handled in each sender's order (core.h).
 */
#ifndef XPUFAB_API_PROTO_MSG_H_
#define XPUFAB_API_PROTO_MSG_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/core.h"

#ifdef __cplusplus
extern "C" {
#endif

XPU_FUNC uint64_t proto_msg_kind_flag(int tagged) { return tagged ? FI_TAGGED : FI_MSG; }

XPU_FUNC struct proto_match *proto_matcher(struct proto_ep *ep, int tagged) { return tagged ? &ep->tm : &ep->um; }

/* ---- completing ------------------------------------------------------------------------------- */

XPU_FUNC void proto_recv_complete(struct proto_ep *ep, uint32_t i);

/*
 * The last part of a released multi-receive buffer completed: its entry `c`
 * carries FI_MULTI_RECV, the buffer is the application's again. A cancelled
 * buffer reports its own FI_ECANCELED entry instead, after the part's.
 */
XPU_FUNC void proto_multi_part_done(struct proto_ep *ep, uint32_t p, struct proto_comp *c) {
  struct proto_op *m = &ep->ops[p];
  if (m->inflight) m->inflight--;
  if (!(m->mode & PROTO_OPM_MULTI_RELEASED) || m->inflight) return;
  if (m->err) {
    m->total = 0;
    proto_recv_complete(ep, p);
    return;
  }
  c->flags |= FI_MULTI_RECV;
  proto_op_free(ep, p);
}

/*
 * Takes multi-receive buffer p off the posted list. With no message of it in
 * progress it completes at once (length 0, FI_MULTI_RECV); otherwise its last
 * part does (proto_multi_part_done).
 */
XPU_FUNC void proto_multi_release(struct proto_ep *ep, uint32_t p) {
  struct proto_op *m = &ep->ops[p];
  struct proto_match_hit hit;
  proto_match_cancel(proto_matcher(ep, (int)m->matcher), p, &hit);
  m->mode |= PROTO_OPM_MULTI_RELEASED;
  m->flags |= FI_MULTI_RECV;
  if (m->inflight) return;
  m->total = 0;
  proto_recv_complete(ep, p);
}

XPU_FUNC void proto_send_complete(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  if (!(o->mode & PROTO_OPM_SILENT)) {
    struct proto_comp *c = proto_comp_push(ep);
    c->op_context = o->context;
    c->flags = o->flags;
    c->len = o->total;
    c->tag = o->tag;
    c->err = o->err;
    c->prov_errno = o->prov_errno;
    c->src = o->peer;
  }
  proto_op_free(ep, i);
}

XPU_FUNC void proto_recv_complete(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  if (o->mode & PROTO_OPM_SILENT) {
    proto_op_free(ep, i);
    return;
  }
  struct proto_comp *c = proto_comp_push(ep);
  c->op_context = o->context;
  c->flags = o->flags;
  c->len = o->total < o->len ? o->total : o->len;
  c->buf = o->buf;
  c->data = o->data;
  c->tag = o->tag;
  c->src = o->src;
  c->err = o->err;
  c->prov_errno = o->prov_errno;
  if (o->mode & PROTO_OPM_DISCARD) {
    c->len = 0;
    c->buf = 0;
  } else if (!c->err && o->total > o->len) {
    c->err = FI_ETRUNC;
    c->olen = o->total - o->len;
  }
  const uint32_t parent = (o->mode & PROTO_OPM_MULTI_PART) ? o->parent : PROTO_NONE;
  proto_op_free(ep, i);
  if (parent != PROTO_NONE) proto_multi_part_done(ep, parent, c);
}

/* Completion entries op i's completion may push: a multi-receive part may also release a cancelled buffer. */
XPU_FUNC uint32_t proto_recv_comps_needed(const struct proto_ep *ep, uint32_t i) {
  return (ep->ops[i].mode & PROTO_OPM_MULTI_PART) ? 2u : 1u;
}

/* ---- sending ------------------------------------------------------------------------------------ */

/* The total length of b[0..n); -1 for a buffer without memory or too many buffers. */
XPU_FUNC int64_t proto_bufs_len(const struct proto_buf *b, uint32_t n) {
  if (n > PROTO_IOV_MAX || (n && !b)) return -1;
  uint64_t t = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (b[k].len && !b[k].addr) return -1;
    t += b[k].len;
  }
  return (int64_t)t;
}

/*
 * Sends the concatenation of b[0..n) (n <= PROTO_IOV_MAX) to `peer`: tagged
 * with `tag` when flags has FI_TAGGED, with remote CQ data `data` when it has
 * FI_REMOTE_CQ_DATA. The completion (FI_SEND | FI_TAGGED or FI_MSG) carries
 * `context`; FI_INJECT sends of eager size have none and their buffers are
 * free on return. A rendezvous of several buffers, or of an unregistered
 * one, is pushed (the receiver cannot read a gather list, nor memory without
 * a key). 0; -FI_EINVAL; -FI_EAGAIN (no transmit buffer
 * or op free: progress and retry).
 */
XPU_FUNC PROTO_OUTLINE int proto_sendv(struct proto_ep *ep, uint32_t peer, const struct proto_buf *bufs, uint32_t nbuf, uint64_t tag,
                         uint64_t data, uint64_t flags, uint64_t context) {
  const int64_t total = proto_bufs_len(bufs, nbuf);
  if (!proto_peer_valid(ep, peer) || total < 0) return -FI_EINVAL;
  const struct proto_buf one = {nbuf ? bufs[0].addr : 0, (uint64_t)total, nbuf ? bufs[0].lkey : 0,
                                nbuf ? bufs[0].rkey : 0};
  const struct proto_buf *b = &one;
  const int tagged = (flags & FI_TAGGED) != 0;
  const uint32_t eager = proto_eager_max(&ep->cfg, &ep->dev);
  const int rndv = b->len > eager;
  if (rndv && (flags & FI_INJECT)) return -FI_EMSGSIZE;
  uint32_t op = PROTO_NONE;
  if (!(flags & FI_INJECT)) {
    op = proto_op_alloc(ep, PROTO_K_SEND);
    if (op == PROTO_NONE) return -FI_EAGAIN;
  }
  const uint32_t t = proto_tx_alloc(ep, 0);
  if (t == PROTO_NONE) {
    if (op != PROTO_NONE) proto_op_free(ep, op);
    return -FI_EAGAIN;
  }
  struct proto_hdr *h = proto_tx_prepare(ep, t, peer, rndv ? PROTO_OP_RTS : PROTO_OP_EAGER, rndv ? 0 : (uint32_t)b->len);
  h->tag = tag;
  h->data = data;
  h->flags = (tagged ? PROTO_WF_TAGGED : 0u) | ((flags & FI_REMOTE_CQ_DATA) ? PROTO_WF_CQ_DATA : 0u) |
             (rndv && (nbuf > 1 || b->rkey == PROTO_KEY_NONE) ? PROTO_WF_PUSH : 0u);
  h->u0 = b->len;
  if (op != PROTO_NONE) {
    struct proto_op *o = &ep->ops[op];
    o->peer = peer;
    o->context = context;
    o->flags = FI_SEND | proto_msg_kind_flag(tagged);
    o->tag = tag;
    proto_op_set_bufs(o, bufs, nbuf);
    o->total = b->len;
    o->state = rndv ? PROTO_S_RTS : PROTO_S_POSTED;
    proto_op_count(ep, op);
    /* Even an RTS counts: its completion may come after the FIN and must find the op. */
    ep->tx[t].op = op;
    o->inflight = 1;
  }
  if (rndv) {
    h->u1 = (uint64_t)proto_op_wire_id(ep, op) | ((uint64_t)b->rkey << 32);
    h->u2 = (uint64_t)(uintptr_t)b->addr;
  } else if (nbuf == 1 && b->len) {
    memcpy(h + 1, b->addr, b->len);
  } else {
    uint8_t *d = (uint8_t *)(h + 1);
    for (uint32_t k = 0; k < nbuf; ++k) {
      if (bufs[k].len) memcpy(d, bufs[k].addr, bufs[k].len);
      d += bufs[k].len;
    }
  }
  proto_tx_submit(ep, t);
  return 0;
}

/* proto_sendv of the one buffer b. */
XPU_FUNC int proto_send(struct proto_ep *ep, uint32_t peer, const struct proto_buf *b, uint64_t tag, uint64_t data,
                        uint64_t flags, uint64_t context) {
  if (!b) return -FI_EINVAL;
  return proto_sendv(ep, peer, b, 1, tag, data, flags, context);
}

/* ---- receiving ------------------------------------------------------------------------------- */

/* Starts the rendezvous of op i for the RTS `h` from `peer`. */
XPU_FUNC void proto_rndv_start(struct proto_ep *ep, uint32_t i, uint32_t peer, const struct proto_hdr *h) {
  struct proto_op *o = &ep->ops[i];
  o->peer = peer;
  o->total = h->u0;
  o->remote_id = (uint32_t)h->u1;
  o->remote_key = (uint32_t)(h->u1 >> 32);
  o->remote_addr = h->u2;
  o->cursor = 0;
  o->done = 0;
  const uint64_t want = o->total < o->len ? o->total : o->len;
  if (want == 0) o->state = PROTO_S_FIN;
  else if ((ep->dev.caps & PROTO_DEV_RDMA_READ) && !(h->flags & PROTO_WF_PUSH) && proto_op_keyed(o))
    o->state = PROTO_S_READ;
  else o->state = PROTO_S_CTS;
  proto_opq_push(ep, i);
}

/* Gives op i (a matched receive) the message in `h` / `payload`. */
XPU_FUNC void proto_recv_deliver(struct proto_ep *ep, uint32_t i, uint32_t peer, const struct proto_hdr *h,
                                 const uint8_t *payload) {
  struct proto_op *o = &ep->ops[i];
  o->src = peer;
  o->tag = h->tag;
  if (h->flags & PROTO_WF_CQ_DATA) {
    o->data = h->data;
    o->flags |= FI_REMOTE_CQ_DATA;
  }
  if (h->op == PROTO_OP_RTS) {
    proto_rndv_start(ep, i, peer, h);
    return;
  }
  o->total = h->len;
  const uint64_t n = o->total < o->len ? o->total : o->len;
  if (n) proto_op_scatter(o, 0, payload, n);
  proto_recv_complete(ep, i);
}

XPU_FUNC uint32_t proto_unexp_alloc(struct proto_ep *ep) {
  const uint32_t u = ep->unexp_free;
  if (u != PROTO_NONE) {
    ep->unexp_free = ep->unexp[u].next;
    ep->unexp[u].claimed = 0;
    ep->unexp[u].claim_ctx = 0;
  }
  return u;
}

XPU_FUNC void proto_unexp_release(struct proto_ep *ep, uint32_t u) {
  ep->unexp[u].next = ep->unexp_free;
  ep->unexp_free = u;
}

/* The length of the message an EAGER or RTS packet starts. */
XPU_FUNC uint64_t proto_msg_len(const struct proto_hdr *h) { return h->op == PROTO_OP_RTS ? h->u0 : h->len; }

/* Whether posted receive op i takes a message of `len` bytes: a multi-receive buffer only while it fits. */
XPU_FUNC int proto_recv_fits(const struct proto_ep *ep, uint32_t i, uint64_t len) {
  const struct proto_op *o = &ep->ops[i];
  return !(o->mode & PROTO_OPM_MULTI) || len <= o->len - o->cursor;
}

/*
 * A message of `len` bytes lands in multi-receive buffer p at the next
 * offset: the op that receives it (completing with the buffer's context), or
 * PROTO_NONE when no op is free. The buffer is released once the space left
 * falls below min_multi_recv.
 */
XPU_FUNC uint32_t proto_multi_take(struct proto_ep *ep, uint32_t p, uint64_t len) {
  const uint32_t i = proto_op_alloc(ep, PROTO_K_RECV);
  if (i == PROTO_NONE) return PROTO_NONE;
  struct proto_op *m = &ep->ops[p];
  struct proto_op *o = &ep->ops[i];
  struct proto_buf b;
  b.addr = m->buf + m->cursor;
  b.len = len;
  b.lkey = m->lkey;
  b.rkey = m->rkey;
  proto_op_set_bufs(o, &b, 1);
  o->context = m->context;
  o->flags = m->flags & ~(uint64_t)FI_MULTI_RECV;
  o->state = PROTO_S_POSTED;
  o->mode = PROTO_OPM_MULTI_PART;
  o->parent = p;
  m->cursor += len;
  m->inflight++;
  if (m->len - m->cursor < ep->min_multi_recv) proto_multi_release(ep, p);
  return i;
}

/* An EAGER or RTS packet: to the oldest matching receive, or kept as unexpected. */
XPU_FUNC int proto_msg_arrive(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  const int tagged = (h->flags & PROTO_WF_TAGGED) != 0;
  struct proto_match *m = proto_matcher(ep, tagged);
  const uint64_t tag = tagged ? h->tag : 0;
  uint32_t p = proto_match_find_posted(m, tag, peer);
  /* A message a multi-receive buffer has no room for goes to the next receive (fi_msg(3)). */
  while (p != PROTO_MATCH_NIL && !proto_recv_fits(ep, (uint32_t)m->pool[p].cookie, proto_msg_len(h)))
    p = proto_match_find_posted_after(m, p, tag, peer);
  if (p != PROTO_MATCH_NIL && (ep->ops[(uint32_t)m->pool[p].cookie].mode & PROTO_OPM_MULTI)) {
    const uint32_t part = proto_multi_take(ep, (uint32_t)m->pool[p].cookie, proto_msg_len(h));
    if (part == PROTO_NONE) return -FI_EAGAIN;
    proto_recv_deliver(ep, part, peer, h, payload);
    return 0;
  }
  if (p != PROTO_MATCH_NIL) {
    struct proto_match_hit hit;
    proto_match_remove(m, p, &hit);
    proto_recv_deliver(ep, (uint32_t)hit.cookie, peer, h, payload);
    return 0;
  }
  if (h->op == PROTO_OP_EAGER && h->len > proto_eager_max(&ep->cfg, &ep->dev)) return 0; /* not ours */
  const uint32_t u = proto_unexp_alloc(ep);
  if (u == PROTO_NONE) return -FI_EAGAIN;
  struct proto_match_hit hit;
  if (proto_match_arrive(m, tag, peer, u, &hit) != 0) {
    proto_unexp_release(ep, u);
    return -FI_EAGAIN;
  }
  ep->unexp[u].hdr = *h;
  ep->unexp[u].peer = peer;
  if (h->op == PROTO_OP_EAGER && h->len) memcpy(ep->unexp[u].payload, payload, h->len);
  return 0;
}

/*
 * Posts multi-receive buffer `b` (FI_MULTI_RECV): the messages from `src`
 * fill it in arrival order, those already here first (proto_recvv); untagged
 * ones, or with `tagged` those whose tag matches `tag` under `ignore`
 * (FI_TAGGED_MULTI_RECV).
 */
XPU_FUNC int proto_multi_post(struct proto_ep *ep, uint64_t src, const struct proto_buf *b, int tagged, uint64_t tag,
                              uint64_t ignore, uint64_t context) {
  struct proto_match *mt = proto_matcher(ep, tagged);
  const uint32_t p = proto_op_alloc(ep, PROTO_K_RECV);
  if (p == PROTO_NONE) return -FI_EAGAIN;
  struct proto_op *m = &ep->ops[p];
  m->context = context;
  m->flags = FI_RECV | proto_msg_kind_flag(tagged);
  m->tag = tag;
  m->ignore = ignore;
  proto_op_set_bufs(m, b, 1);
  m->matcher = (uint32_t)tagged;
  m->state = PROTO_S_POSTED;
  m->mode = PROTO_OPM_MULTI;
  if (proto_match_post_only(mt, tag, ignore, src, p) == PROTO_MATCH_NIL) {
    proto_op_free(ep, p);
    return -FI_EAGAIN;
  }
  /*
   * The messages already here, oldest first, as if they arrived now. Should
   * the completion queue or the op pool run short, the rest wait for later
   * receives: the pools are sized so that an application reading its CQ
   * never sees that.
   */
  int released = 0;
  uint32_t u = mt->unexpected.head;
  while (u != PROTO_MATCH_NIL && !released && proto_comp_room(ep) >= PROTO_COMP_HEADROOM) {
    const struct proto_match_entry *e = &mt->pool[u];
    const uint32_t next = e->next;
    const uint32_t x = (uint32_t)e->cookie;
    const uint64_t len = proto_msg_len(&ep->unexp[x].hdr);
    /* A message an FI_PEEK | FI_CLAIM reserved is that claim's. */
    if (!e->claimed && proto_match_tag_matches(tag, ignore, src, e->tag, e->src) && proto_recv_fits(ep, p, len)) {
      const uint32_t part = proto_multi_take(ep, p, len);
      if (part == PROTO_NONE) break;
      released = (ep->ops[p].mode & PROTO_OPM_MULTI_RELEASED) != 0;
      struct proto_match_hit hit;
      proto_match_remove(mt, u, &hit);
      proto_recv_deliver(ep, part, ep->unexp[x].peer, &ep->unexp[x].hdr, ep->unexp[x].payload);
      proto_unexp_release(ep, x);
    }
    u = next;
  }
  if (!released && m->len - m->cursor < ep->min_multi_recv) proto_multi_release(ep, p);
  return 0;
}

/*
 * Posts a receive into `b`. flags: FI_TAGGED (match `tag` under `ignore`,
 * else untagged), and for tagged receives FI_PEEK, FI_CLAIM, FI_DISCARD with
 * libfabric's meaning; FI_MULTI_RECV (one buffer `b` that the untagged
 * messages, or for a tagged receive those matching `tag` under `ignore`
 * (FI_TAGGED_MULTI_RECV), fill at successive offsets, each completing on its
 * own with the buffer's context; the completion after which the buffer is
 * the caller's again carries FI_MULTI_RECV, see proto_multi_take). `src` is a
 * peer index or PROTO_ADDR_ANY. A receive
 * that matches a message already here completes before this returns (seen at
 * the next progress call). FI_PEEK finds nothing: an error completion with
 * FI_ENOMSG. 0; -FI_EINVAL; -FI_EAGAIN (no op, match entry or completion
 * slot free: progress and retry).
 */
XPU_FUNC PROTO_OUTLINE int proto_recvv(struct proto_ep *ep, uint64_t src, const struct proto_buf *bufs, uint32_t nbuf, uint64_t tag,
                         uint64_t ignore, uint64_t flags, uint64_t context) {
  if (!ep || proto_bufs_len(bufs, nbuf) < 0) return -FI_EINVAL;
  if (src != PROTO_ADDR_ANY && !proto_peer_valid(ep, (uint32_t)src)) return -FI_EINVAL;
  const int tagged = (flags & FI_TAGGED) != 0;
  if (!tagged && (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD))) return -FI_EINVAL;
  if ((flags & FI_DISCARD) && !(flags & (FI_PEEK | FI_CLAIM))) return -FI_EINVAL;
  if (proto_comp_room(ep) < PROTO_COMP_HEADROOM) return -FI_EAGAIN;
  struct proto_match *m = proto_matcher(ep, tagged);
  if (!tagged) {
    tag = 0;
    ignore = 0;
  }
  struct proto_match_hit hit;
  const uint64_t kind = FI_RECV | proto_msg_kind_flag(tagged);
  /* Tagged ones are FI_TAGGED_MULTI_RECV's: a consumer without it refuses them before this. */
  if (flags & FI_MULTI_RECV) {
    if (nbuf != 1 || (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD))) return -FI_EINVAL;
    return proto_multi_post(ep, src, bufs, tagged, tag, ignore, context);
  }
  if (flags & FI_PEEK) {
    /* A discarded rendezvous still owes its sender a FIN, sent by an op taken before anything changes. */
    uint32_t fin_op = PROTO_NONE;
    if ((flags & FI_DISCARD) && !(flags & FI_CLAIM)) {
      fin_op = proto_op_alloc(ep, PROTO_K_RECV);
      if (fin_op == PROTO_NONE) return -FI_EAGAIN;
    }
    const int mode = (flags & FI_CLAIM) ? PROTO_MATCH_PEEK_CLAIM
                     : (flags & FI_DISCARD) ? PROTO_MATCH_PEEK_DISCARD
                                            : PROTO_MATCH_PEEK;
    const int found = proto_match_peek(m, tag, ignore, src, mode, &hit);
    if (fin_op != PROTO_NONE && (found <= 0 || ep->unexp[(uint32_t)hit.cookie].hdr.op != PROTO_OP_RTS)) {
      proto_op_free(ep, fin_op);
      fin_op = PROTO_NONE;
    }
    if (found < 0) return found;
    struct proto_comp *c = proto_comp_push(ep);
    c->op_context = context;
    c->flags = kind;
    if (!found) {
      c->err = FI_ENOMSG;
      return 0;
    }
    struct proto_unexp *u = &ep->unexp[(uint32_t)hit.cookie];
    c->len = u->hdr.u0;
    c->tag = u->hdr.tag;
    c->src = u->peer;
    if (u->hdr.flags & PROTO_WF_CQ_DATA) {
      c->data = u->hdr.data;
      c->flags |= FI_REMOTE_CQ_DATA;
    }
    if (mode == PROTO_MATCH_PEEK_CLAIM) {
      u->claimed = 1;
      u->claim_ctx = context;
    } else if (mode == PROTO_MATCH_PEEK_DISCARD) {
      if (fin_op != PROTO_NONE) {
        /* The sender waits for its FIN: a silent receive of nothing sends it. */
        ep->ops[fin_op].mode = PROTO_OPM_SILENT;
        ep->ops[fin_op].len = 0;
        proto_rndv_start(ep, fin_op, u->peer, &u->hdr);
      }
      proto_unexp_release(ep, (uint32_t)hit.cookie);
    }
    return 0;
  }
  const uint32_t i = proto_op_alloc(ep, PROTO_K_RECV);
  if (i == PROTO_NONE) return -FI_EAGAIN;
  struct proto_op *o = &ep->ops[i];
  o->context = context;
  o->flags = kind;
  o->tag = tag;
  o->ignore = ignore;
  proto_op_set_bufs(o, bufs, nbuf);
  o->matcher = (uint32_t)tagged;
  o->state = PROTO_S_POSTED;
  if (flags & FI_CLAIM) {
    uint32_t u = PROTO_NONE;
    for (uint32_t k = 0; k < ep->cfg.max_unexp; ++k)
      if (ep->unexp[k].claimed && ep->unexp[k].claim_ctx == context) u = k;
    if (u == PROTO_NONE || proto_match_claim(m, u, &hit) != 0) {
      proto_op_free(ep, i);
      return -FI_ENOMSG;
    }
    struct proto_unexp *x = &ep->unexp[u];
    if (flags & FI_DISCARD) {
      o->len = 0;
      o->nseg = 0;
      o->mode = PROTO_OPM_DISCARD;
    }
    proto_recv_deliver(ep, i, x->peer, &x->hdr, x->payload);
    proto_unexp_release(ep, u);
    return 0;
  }
  const int rc = proto_match_post_recv(m, tag, ignore, src, i, &hit);
  if (rc < 0) {
    proto_op_free(ep, i);
    return rc;
  }
  if (rc == 1) {
    struct proto_unexp *x = &ep->unexp[(uint32_t)hit.cookie];
    proto_recv_deliver(ep, i, x->peer, &x->hdr, x->payload);
    proto_unexp_release(ep, (uint32_t)hit.cookie);
  }
  return 0;
}

/*
 * Posts a receive into `b` (the one-buffer form of proto_recvv, which takes
 * up to PROTO_IOV_MAX buffers filled in order).
 */
XPU_FUNC int proto_recv(struct proto_ep *ep, uint64_t src, const struct proto_buf *b, uint64_t tag, uint64_t ignore,
                        uint64_t flags, uint64_t context) {
  if (!b) return -FI_EINVAL;
  return proto_recvv(ep, src, b, 1, tag, ignore, flags, context);
}

/*
 * fi_cancel: a receive posted with `context` and not matched yet completes
 * with FI_ECANCELED. 0; -FI_ENOENT when there is none; -FI_EAGAIN when no
 * completion slot is free.
 */
XPU_FUNC int proto_cancel(struct proto_ep *ep, uint64_t context) {
  if (!ep) return -FI_EINVAL;
  if (proto_comp_room(ep) < 1) return -FI_EAGAIN;
  for (uint32_t i = 0; i < ep->cfg.max_ops; ++i) {
    struct proto_op *o = &ep->ops[i];
    if (o->kind != PROTO_K_RECV || o->state != PROTO_S_POSTED || o->context != context) continue;
    struct proto_match_hit hit;
    if (proto_match_cancel(proto_matcher(ep, (int)o->matcher), i, &hit) != 0) continue;
    o->err = FI_ECANCELED;
    if (o->mode & PROTO_OPM_MULTI) {
      /* Released: its FI_ECANCELED entry comes after those of the messages still landing in it. */
      o->mode |= PROTO_OPM_MULTI_RELEASED;
      o->flags |= FI_MULTI_RECV;
      if (o->inflight) return 0;
    }
    o->total = 0;
    proto_recv_complete(ep, i);
    return 0;
  }
  return -FI_ENOENT;
}

/* ---- rendezvous progress ----------------------------------------------------------------------- */

/* Sends a CTS or FIN for op i; -FI_EAGAIN when no buffer, credit or SQ slot is free. */
XPU_FUNC int proto_rndv_reply(struct proto_ep *ep, uint32_t i, uint8_t op) {
  struct proto_op *o = &ep->ops[i];
  const uint32_t t = proto_tx_alloc(ep, 1);
  if (t == PROTO_NONE) return -FI_EAGAIN;
  struct proto_hdr *h = proto_tx_prepare(ep, t, o->peer, op, 0);
  h->u0 = o->remote_id;
  if (op == PROTO_OP_CTS) {
    h->u1 = proto_op_wire_id(ep, i);
    h->u2 = o->total < o->len ? o->total : o->len;
  } else {
    h->u1 = o->done;
  }
  if (proto_tx_emit(ep, t)) {
    proto_tx_release(ep, t);
    return -FI_EAGAIN;
  }
  return 0;
}

/*
 * Issues op i's RDMA operations `op` (EFA_DP_OP_RDMA_READ or _WRITE) over
 * bytes [cursor, want) of its buffers against its remote address,
 * rdma_chunk at a time and never across two buffers; -FI_EAGAIN when the SQ
 * is full (the rest on a later call).
 */
XPU_FUNC int proto_op_rdma_issue(struct proto_ep *ep, uint32_t i, uint32_t op, uint64_t want) {
  struct proto_op *o = &ep->ops[i];
  uint64_t chunk = ep->cfg.rdma_chunk ? ep->cfg.rdma_chunk : ep->dev.max_rdma_size;
  if (chunk > ep->dev.max_rdma_size) chunk = ep->dev.max_rdma_size;
  while (o->cursor < want) {
    uint8_t *a;
    uint32_t lkey;
    uint64_t n = proto_op_piece(o, o->cursor, &a, &lkey);
    if (n > want - o->cursor) n = want - o->cursor;
    if (n > chunk) n = chunk;
    struct efa_dp_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.op = op;
    wr.ah = ep->peers[o->peer].ahn;
    wr.dest_qpn = ep->peers[o->peer].qpn;
    wr.qkey = ep->peers[o->peer].qkey;
    wr.num_sge = 1;
    wr.sge[0].addr = (uint64_t)(uintptr_t)a;
    wr.sge[0].length = (uint32_t)n;
    wr.sge[0].lkey = lkey;
    wr.remote_addr = o->remote_addr + o->cursor;
    wr.rkey = o->remote_key;
    wr.context = PROTO_WRC(PROTO_WRC_READ, i);
    if (efa_sq_post(&ep->sq, &wr)) return -FI_EAGAIN;
    o->cursor += n;
    o->inflight++;
    if (op == EFA_DP_OP_RDMA_READ)
      ep->stats.rdma_reads++;
    else
      ep->stats.rdma_writes++;
  }
  return 0;
}

/* Op i's RDMA reads of bytes [cursor, want) into its buffers. */
XPU_FUNC int proto_op_read_issue(struct proto_ep *ep, uint32_t i, uint64_t want) {
  return proto_op_rdma_issue(ep, i, EFA_DP_OP_RDMA_READ, want);
}

/* Issues what op i can issue now; -FI_EAGAIN to be run again later. */
XPU_FUNC PROTO_OUTLINE int proto_op_run(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  if (o->kind == PROTO_K_RMA) return proto_rma_run(ep, i);
  switch (o->state) {
    case PROTO_S_READ:
      return proto_op_read_issue(ep, i, o->total < o->len ? o->total : o->len);
    case PROTO_S_CTS:
      if (proto_rndv_reply(ep, i, PROTO_OP_CTS)) return -FI_EAGAIN;
      o->state = PROTO_S_RXPUSH;
      return 0;
    case PROTO_S_FIN:
      if (proto_comp_room(ep) < proto_recv_comps_needed(ep, i) || proto_rndv_reply(ep, i, PROTO_OP_FIN))
        return -FI_EAGAIN;
      proto_recv_complete(ep, i);
      return 0;
    case PROTO_S_PUSH: {
      while (o->cursor < o->total) {
        const uint32_t t = proto_tx_alloc(ep, 0);
        if (t == PROTO_NONE) return -FI_EAGAIN;
        const uint64_t left = o->total - o->cursor;
        const uint32_t n = left < ep->payload_max ? (uint32_t)left : ep->payload_max;
        struct proto_hdr *h = proto_tx_prepare(ep, t, o->peer, PROTO_OP_DATA, n);
        h->u0 = o->remote_id;
        h->u1 = o->cursor;
        proto_op_gather(o, o->cursor, (uint8_t *)(h + 1), n);
        ep->tx[t].op = i;
        if (proto_tx_emit(ep, t)) {
          proto_tx_release(ep, t);
          return -FI_EAGAIN;
        }
        o->cursor += n;
        o->inflight++;
        ep->stats.pushed++;
      }
      return 0;
    }
    default:
      return 0;
  }
}

/* A WQE of op i completed with `status` (a SEND of its packet or one of its reads). */
XPU_FUNC void proto_op_wqe_done(struct proto_ep *ep, uint32_t i, uint32_t status) {
  struct proto_op *o = &ep->ops[i];
  if (o->kind == PROTO_K_FREE) return;
  if (o->inflight) o->inflight--;
  if (status != EFA_IO_COMP_STATUS_OK && !o->err) {
    o->err = efa_io_status_to_fi_errno(status);
    o->prov_errno = (int32_t)status;
  }
  if (o->inflight) return;
  if (o->kind == PROTO_K_RMA) {
    proto_rma_wqe_done(ep, i);
  } else if (o->kind == PROTO_K_SEND) {
    /* POSTED: an eager packet, or a rendezvous whose FIN came first; RTS with an error: it never arrived. */
    if (o->state == PROTO_S_POSTED || (o->state == PROTO_S_PUSH && o->cursor >= o->total) ||
        (o->state == PROTO_S_RTS && o->err))
      proto_send_complete(ep, i);
  } else if (o->kind == PROTO_K_ATOMIC) {
    /* FIN: the reply came first; an error: the request never arrived. */
    if (o->state == PROTO_S_FIN) proto_amo_complete(ep, i, (uint32_t)o->prov_errno);
    else if (o->err) proto_amo_complete(ep, i, (uint32_t)o->prov_errno);
  } else if (o->kind == PROTO_K_RECV && o->state == PROTO_S_READ) {
    const uint64_t want = o->total < o->len ? o->total : o->len;
    if (o->cursor < want) return;
    o->done = want;
    o->state = PROTO_S_FIN;
    proto_opq_push(ep, i);
  }
}

/* The rendezvous send op i is done at the receiver; it completes once its own WQEs have. */
XPU_FUNC void proto_send_finish(struct proto_ep *ep, uint32_t i) {
  if (ep->ops[i].inflight) ep->ops[i].state = PROTO_S_POSTED;
  else proto_send_complete(ep, i);
}

/* CTS, DATA and FIN, and EAGER / RTS. */
XPU_FUNC int proto_msg_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  switch (h->op) {
    case PROTO_OP_EAGER:
    case PROTO_OP_RTS:
      return proto_msg_arrive(ep, peer, h, payload);
    case PROTO_OP_CTS: {
      const uint32_t i = proto_op_from_wire(ep, h->u0, PROTO_K_SEND);
      if (i == PROTO_NONE || ep->ops[i].state != PROTO_S_RTS) return 0;
      struct proto_op *o = &ep->ops[i];
      o->remote_id = (uint32_t)h->u1;
      if (h->u2 < o->total) o->total = h->u2;
      o->state = PROTO_S_PUSH;
      o->cursor = 0;
      if (o->total == 0) {
        proto_send_finish(ep, i);
        return 0;
      }
      proto_opq_push(ep, i);
      return 0;
    }
    case PROTO_OP_DATA: {
      const uint32_t i = proto_op_from_wire(ep, h->u0, PROTO_K_RECV);
      if (i == PROTO_NONE || ep->ops[i].state != PROTO_S_RXPUSH) return 0;
      struct proto_op *o = &ep->ops[i];
      const uint64_t want = o->total < o->len ? o->total : o->len;
      if (h->u1 >= want) return 0;
      const uint64_t n = want - h->u1 < h->len ? want - h->u1 : h->len;
      proto_op_scatter(o, h->u1, payload, n);
      o->done += n;
      if (o->done >= want) proto_recv_complete(ep, i);
      return 0;
    }
    case PROTO_OP_FIN: {
      const uint32_t i = proto_op_from_wire(ep, h->u0, PROTO_K_SEND);
      if (i == PROTO_NONE || ep->ops[i].state != PROTO_S_RTS) return 0;
      proto_send_finish(ep, i);
      return 0;
    }
    default:
      return 0;
  }
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_MSG_H_ */
