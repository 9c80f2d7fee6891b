/*
 * tables.h - the protocol endpoint's tables: its peers, the local memory
 * regions atomics may target, and its operations with their buffers and the
 * per-peer order of writes. Host and nvcc; valid C11 and C++17.
 *
 * Include api/proto/proto.h, not this file; core.h builds on it.
 */
#ifndef XPUFAB_API_PROTO_TABLES_H_
#define XPUFAB_API_PROTO_TABLES_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/ep.h"
#include "api/proto/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- peers ------------------------------------------------------------------------------------ */

/*
 * Adds the peer at (ahn, qpn, qkey); *idx_p = its index, which completions
 * report as `src` and sends take as the destination. The same address twice
 * gives the same index. 0; -FI_ENOSPC when the table is full.
 */
XPU_FUNC int proto_peer_add(struct proto_ep *ep, uint16_t ahn, uint16_t qpn, uint32_t qkey, uint32_t *idx_p) {
  if (!ep || !idx_p) return -FI_EINVAL;
  uint32_t free_idx = PROTO_NONE;
  for (uint32_t i = 0; i < ep->cfg.max_peers; ++i) {
    struct proto_peer *p = &ep->peers[i];
    if (p->in_use && p->ahn == ahn && p->qpn == qpn) {
      *idx_p = i;
      return 0;
    }
    if (!p->in_use && free_idx == PROTO_NONE) free_idx = i;
  }
  if (free_idx == PROTO_NONE) return -FI_ENOSPC;
  struct proto_peer *p = &ep->peers[free_idx];
  uint32_t *held = p->held;
  memset(p, 0, sizeof(*p));
  p->held = held;
  p->ahn = ahn;
  p->qpn = qpn;
  p->qkey = qkey;
  p->in_use = 1;
  p->src_at_peer = PROTO_ADDR_UNKNOWN;
  p->tx_credits = ep->cfg.credits;
  p->q.head = p->q.tail = PROTO_NONE;
  p->rma_busy = PROTO_NONE;
  p->wl_head = p->wl_tail = PROTO_NONE;
  *idx_p = free_idx;
  return 0;
}

XPU_FUNC int proto_peer_valid(const struct proto_ep *ep, uint32_t peer) {
  return ep && peer < ep->cfg.max_peers && ep->peers[peer].in_use;
}

/*
 * Removes a peer (fi_av_remove). 0; -FI_EINVAL for no such peer; -FI_EBUSY
 * while anything of or for it is waiting here (queued or held packets,
 * operations naming it): progress and retry, or keep it.
 * Its credits and packet numbers start afresh if it is added again, so both
 * sides must remove each other.
 */
XPU_FUNC int proto_peer_remove(struct proto_ep *ep, uint32_t peer) {
  if (!proto_peer_valid(ep, peer)) return -FI_EINVAL;
  const struct proto_peer *p = &ep->peers[peer];
  if (p->q.count || (p->in_use & 2u)) return -FI_EBUSY;
  for (uint32_t i = 0; i < ep->cfg.credits; ++i)
    if (p->held[i]) return -FI_EBUSY;
  for (uint32_t i = 0; i < ep->cfg.max_ops; ++i) {
    const struct proto_op *o = &ep->ops[i];
    /* A posted receive names no peer until it matched. */
    if (o->kind != PROTO_K_FREE && o->peer == peer && !(o->kind == PROTO_K_RECV && o->state == PROTO_S_POSTED))
      return -FI_EBUSY;
  }
  ep->peers[peer].in_use = 0;
  if (ep->last_peer == peer) ep->last_peer = PROTO_NONE;
  return 0;
}

/*
 * proto_peer_add for a peer whose GID is known too: packets it sent before it
 * was added, while we had no AH for it, are then handled (PROTO_DEV_CQ_SGID).
 */
XPU_FUNC int proto_peer_add_gid(struct proto_ep *ep, uint16_t ahn, uint16_t qpn, uint32_t qkey, const uint8_t gid[16],
                                uint32_t *idx_p) {
  if (!gid) return -FI_EINVAL;
  const int rc = proto_peer_add(ep, ahn, qpn, qkey, idx_p);
  if (rc) return rc;
  memcpy(ep->peers[*idx_p].gid, gid, 16);
  ep->peers[*idx_p].has_gid = 1;
  return 0;
}

/* Records the index the peer knows us by (carried in `src` of our packets). */
XPU_FUNC int proto_peer_set_src(struct proto_ep *ep, uint32_t peer, uint16_t src_at_peer) {
  if (!ep || peer >= ep->cfg.max_peers || !ep->peers[peer].in_use) return -FI_EINVAL;
  ep->peers[peer].src_at_peer = src_at_peer;
  return 0;
}

XPU_FUNC uint32_t proto_peer_lookup(struct proto_ep *ep, uint16_t ahn, uint16_t qpn) {
  const uint32_t c = ep->last_peer;
  if (c != PROTO_NONE && ep->peers[c].in_use && ep->peers[c].ahn == ahn && ep->peers[c].qpn == qpn) return c;
  for (uint32_t i = 0; i < ep->cfg.max_peers; ++i) {
    const struct proto_peer *p = &ep->peers[i];
    if (p->in_use && p->ahn == ahn && p->qpn == qpn) {
      ep->last_peer = i;
      return i;
    }
  }
  return PROTO_NONE;
}

/* ---- local memory regions atomics may target ------------------------------------------------ */

/* access: FI_REMOTE_READ | FI_REMOTE_WRITE. 0; -FI_ENOSPC; -FI_EBUSY for a key already there. */
XPU_FUNC int proto_mr_add(struct proto_ep *ep, uint64_t addr, uint64_t len, uint32_t key, uint64_t access) {
  if (!ep) return -FI_EINVAL;
  for (uint32_t i = 0; i < ep->nmr; ++i)
    if (ep->mrs[i].key == key) return -FI_EBUSY;
  if (ep->nmr == ep->max_mr) return -FI_ENOSPC;
  struct proto_mr *m = &ep->mrs[ep->nmr++];
  m->addr = addr;
  m->len = len;
  m->key = key;
  m->access = 0;
  if (access & FI_REMOTE_READ) m->access |= 1u;
  if (access & FI_REMOTE_WRITE) m->access |= 2u;
  return 0;
}

XPU_FUNC int proto_mr_remove(struct proto_ep *ep, uint32_t key) {
  if (!ep) return -FI_EINVAL;
  for (uint32_t i = 0; i < ep->nmr; ++i) {
    if (ep->mrs[i].key != key) continue;
    ep->mrs[i] = ep->mrs[--ep->nmr];
    return 0;
  }
  return -FI_ENOENT;
}

/*
 * The region key `key` names if [addr, addr + len) lies inside it and it
 * allows `need` (1 read, 2 write, 3 both); NULL otherwise, which the target
 * reports as EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS, the status EFA
 * gives an RDMA access with a bad key or range.
 */
XPU_FUNC const struct proto_mr *proto_mr_check(const struct proto_ep *ep, uint32_t key, uint64_t addr, uint64_t len,
                                               uint32_t need) {
  for (uint32_t i = 0; i < ep->nmr; ++i) {
    const struct proto_mr *m = &ep->mrs[i];
    if (m->key != key) continue;
    if (addr < m->addr || len > m->len || addr - m->addr > m->len - len) return 0;
    return (m->access & need) == need ? m : 0;
  }
  return 0;
}

/* ---- operations -------------------------------------------------------------------------------- */

XPU_FUNC uint32_t proto_op_alloc(struct proto_ep *ep, uint8_t kind) {
  const uint32_t i = ep->op_free;
  if (i == PROTO_NONE) return PROTO_NONE;
  struct proto_op *o = &ep->ops[i];
  ep->op_free = o->next;
  const uint16_t gen = (uint16_t)(o->gen + 1);
  memset(o, 0, sizeof(*o));
  o->gen = gen;
  o->kind = kind;
  o->next = PROTO_NONE;
  o->src = PROTO_NONE;
  return i;
}

XPU_FUNC void proto_write_unlist(struct proto_ep *ep, uint32_t i);

XPU_FUNC void proto_op_free(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  if (o->mode & PROTO_OPM_WLISTED) proto_write_unlist(ep, i);
  if (o->mode & PROTO_OPM_COUNTED) {
    struct proto_peer *p = &ep->peers[o->peer];
    if (p->ops_out) p->ops_out--;
    if (p->rma_busy == i) p->rma_busy = PROTO_NONE;
  }
  if ((o->mode & PROTO_OPM_ORDERED) && ep->peers[o->peer].writes_out) ep->peers[o->peer].writes_out--;
  o->kind = PROTO_K_FREE;
  o->next = ep->op_free;
  ep->op_free = i;
}

/*
 * Appends write or atomic i (its range: remote_addr, total, remote_key) to
 * its peer's write list, in posting order.
 */
XPU_FUNC void proto_write_list(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  struct proto_peer *p = &ep->peers[o->peer];
  o->mode |= PROTO_OPM_WLISTED;
  o->wnext = PROTO_NONE;
  if (p->wl_tail == PROTO_NONE) p->wl_head = i;
  else ep->ops[p->wl_tail].wnext = i;
  p->wl_tail = i;
}

/* Takes op i off its peer's write list (it completed or failed). */
XPU_FUNC void proto_write_unlist(struct proto_ep *ep, uint32_t i) {
  struct proto_op *o = &ep->ops[i];
  struct proto_peer *p = &ep->peers[o->peer];
  o->mode &= ~PROTO_OPM_WLISTED;
  uint32_t prev = PROTO_NONE;
  for (uint32_t k = p->wl_head; k != PROTO_NONE; prev = k, k = ep->ops[k].wnext) {
    if (k != i) continue;
    if (prev == PROTO_NONE) p->wl_head = o->wnext;
    else ep->ops[prev].wnext = o->wnext;
    if (p->wl_tail == i) p->wl_tail = prev;
    return;
  }
}

/*
 * Whether two writes may touch the same bytes. Addresses are only comparable
 * under one key (without FI_MR_VIRT_ADDR they are offsets into the key's
 * region): writes under different keys are taken to overlap.
 */
XPU_FUNC int proto_write_overlap(const struct proto_op *a, const struct proto_op *b) {
  if (a->remote_key != b->remote_key) return 1;
  if (a->total == 0 || b->total == 0) return 0;
  return a->remote_addr < b->remote_addr + b->total && b->remote_addr < a->remote_addr + a->total;
}

/*
 * Whether write or atomic i (on its peer's write list; `by_packets`: it
 * travels as numbered packets, else by RDMA write) may start now without
 * breaking FI_ORDER_WAW: every earlier write on the list that it may overlap
 * must have completed, except a packet one that already started when i goes
 * by packets too (the packet numbers order the two). Writes to disjoint
 * ranges go in parallel, RDMA writes among them.
 */
XPU_FUNC int proto_write_may_start(const struct proto_ep *ep, uint32_t i, int by_packets) {
  const struct proto_op *o = &ep->ops[i];
  for (uint32_t k = ep->peers[o->peer].wl_head; k != i && k != PROTO_NONE; k = ep->ops[k].wnext) {
    const struct proto_op *e = &ep->ops[k];
    if (by_packets && e->state != PROTO_S_RDMAW && (e->mode & PROTO_OPM_WSTARTED)) continue;
    if (proto_write_overlap(e, o)) return 0;
  }
  return 1;
}

/* 1 while an RMA op is issuing its packets to `peer`: the next RMA or atomic waits its turn. */
XPU_FUNC int proto_peer_rma_blocked(const struct proto_ep *ep, uint32_t peer) {
  return ep->peers[peer].rma_busy != PROTO_NONE;
}

/* Op i was started towards its peer: FI_FENCE waits until it completes. */
XPU_FUNC void proto_op_count(struct proto_ep *ep, uint32_t i) {
  ep->ops[i].mode |= PROTO_OPM_COUNTED;
  ep->peers[ep->ops[i].peer].ops_out++;
}

/* Op i (a packet write or an atomic) changes the peer's memory by packets: RDMA writes wait for it. */
XPU_FUNC void proto_op_order(struct proto_ep *ep, uint32_t i) {
  if (ep->ops[i].mode & PROTO_OPM_ORDERED) return;
  ep->ops[i].mode |= PROTO_OPM_ORDERED;
  ep->peers[ep->ops[i].peer].writes_out++;
}

/*
 * Operations started towards `peer` (sends, atomics, RMA; not inject sends,
 * whose packets are ordered before anything posted later) that have not
 * completed. A fenced operation is posted once this is 0.
 */
XPU_FUNC uint32_t proto_peer_ops_out(const struct proto_ep *ep, uint32_t peer) {
  return proto_peer_valid(ep, peer) ? ep->peers[peer].ops_out : 0;
}

/* ---- an op's buffers ----------------------------------------------------------------------- */

/* Gives op o the buffers b[0..n): one is kept as buf/len, several as segments as well. */
XPU_FUNC void proto_op_set_bufs(struct proto_op *o, const struct proto_buf *b, uint32_t n) {
  o->nseg = 0;
  o->buf = n ? (uint8_t *)b[0].addr : 0;
  o->lkey = n ? b[0].lkey : 0;
  o->rkey = n ? b[0].rkey : 0;
  o->len = n ? b[0].len : 0;
  if (n <= 1) return;
  o->nseg = n;
  o->len = 0;
  for (uint32_t k = 0; k < n; ++k) {
    o->seg[k].addr = (uint64_t)(uintptr_t)b[k].addr;
    o->seg[k].len = b[k].len;
    o->seg[k].lkey = b[k].lkey;
    o->len += b[k].len;
  }
}

/* Whether every byte of op o's buffers is registered (may be the target of an RDMA read). */
XPU_FUNC int proto_op_keyed(const struct proto_op *o) {
  if (o->nseg <= 1) return o->len == 0 || o->lkey != PROTO_KEY_NONE;
  for (uint32_t k = 0; k < o->nseg; ++k)
    if (o->seg[k].len && o->seg[k].lkey == PROTO_KEY_NONE) return 0;
  return 1;
}

/* The contiguous piece of op o's buffers at byte `off`: its address and key; returns its length. */
XPU_FUNC uint64_t proto_op_piece(const struct proto_op *o, uint64_t off, uint8_t **addr, uint32_t *lkey) {
  if (o->nseg <= 1) {
    *addr = o->buf + off;
    *lkey = o->lkey;
    return off < o->len ? o->len - off : 0;
  }
  for (uint32_t k = 0; k < o->nseg; ++k) {
    if (off < o->seg[k].len) {
      *addr = (uint8_t *)(uintptr_t)o->seg[k].addr + off;
      *lkey = o->seg[k].lkey;
      return o->seg[k].len - off;
    }
    off -= o->seg[k].len;
  }
  *addr = 0;
  *lkey = 0;
  return 0;
}

/* Copies n bytes between op o's buffers from byte `off` on and `ext`: into
 * the buffers when `in` (scatter), out of them otherwise (gather). */
XPU_FUNC void proto_op_copy(const struct proto_op *o, uint64_t off, uint8_t *ext, uint64_t n, int in) {
  while (n) {
    uint8_t *a;
    uint32_t k;
    uint64_t m = proto_op_piece(o, off, &a, &k);
    if (m == 0) return;
    if (m > n) m = n;
    if (in)
      memcpy(a, ext, m);
    else
      memcpy(ext, a, m);
    ext += m;
    off += m;
    n -= m;
  }
}

/* Copies n bytes into op o's buffers from byte `off` on (scatter); the caller keeps inside len. */
XPU_FUNC void proto_op_scatter(const struct proto_op *o, uint64_t off, const uint8_t *src, uint64_t n) {
  proto_op_copy(o, off, (uint8_t *)src, n, 1);
}

/* Copies n bytes of op o's buffers from byte `off` on to dst (gather). */
XPU_FUNC void proto_op_gather(const struct proto_op *o, uint64_t off, uint8_t *dst, uint64_t n) {
  proto_op_copy(o, off, dst, n, 0);
}

/* The id an op goes by on the wire: index and generation. */
XPU_FUNC uint32_t proto_op_wire_id(const struct proto_ep *ep, uint32_t i) {
  return i | ((uint32_t)ep->ops[i].gen << 16);
}

/* The op a wire id names, or PROTO_NONE when it is stale or of another kind. */
XPU_FUNC uint32_t proto_op_from_wire(const struct proto_ep *ep, uint64_t id, uint8_t kind) {
  const uint32_t i = (uint32_t)id & 0xffffu;
  if (i >= ep->cfg.max_ops) return PROTO_NONE;
  const struct proto_op *o = &ep->ops[i];
  if (o->kind != kind || o->gen != (uint16_t)((uint32_t)id >> 16)) return PROTO_NONE;
  return i;
}

/* Ops with WQEs still to issue (rendezvous reads and pushes), run after the transmit queue. */
XPU_FUNC void proto_opq_push(struct proto_ep *ep, uint32_t op) {
  if (ep->ops[op].in_txq) return;
  ep->ops[op].in_txq = 1;
  ep->opq[(ep->opq_head + ep->opq_count++) % ep->cfg.max_ops] = op;
}

#ifdef __cplusplus
}
#endif

#endif  /* XPUFAB_API_PROTO_TABLES_H_ */
