/*
 * efa_xpu/proto_ep.h - device access to a protocol-fabric endpoint
 * (EFA_XPU_EP_CAP_PROTO, handles.h): the lock every core call holds, the
 * peer an efa_xpu_peer names, and the CQ read that progresses the core and
 * turns its completions into application entries (tags and truncation
 * included) and counter updates. Valid C11, C++17 and CUDA.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_PROTO_EP_H_
#define XPUFAB_DEVICE_EFA_XPU_PROTO_EP_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "api/proto/proto.h"
#include "device/efa_completion.h"
#include "device/xpu_func.h"
#include "device/xpu_prims.h"
#include "xpufab/efa_xpu/handles.h"

/* The core endpoint of a protocol-fabric EP, or NULL (efa-direct). */
XPU_DEVICE_FUNC struct proto_ep *efa_xpu_proto_of_(const struct efa_xpu_ep *e) {
  return (e->caps & EFA_XPU_EP_CAP_PROTO) ? e->proto : NULL;
}

XPU_DEVICE_FUNC int efa_xpu_proto_trylock_(struct efa_xpu_ep *e) {
  uint32_t unlocked = 0;
  return xpu_cas_u32(&e->proto_lock, &unlocked, 1u);
}

/* Posts hold the lock briefly and never wait for anything while holding it, so spinning is bounded. */
XPU_DEVICE_FUNC void efa_xpu_proto_lock_(struct efa_xpu_ep *e) {
  while (!efa_xpu_proto_trylock_(e)) xpu_relax();
}

XPU_DEVICE_FUNC void efa_xpu_proto_unlock_(struct efa_xpu_ep *e) { xpu_store_release_u32(&e->proto_lock, 0u); }

/* The core's peer for an efa_xpu_peer (fi_av_lookup2 output), or PROTO_NONE. Under the EP's lock. */
XPU_DEVICE_FUNC uint32_t efa_xpu_proto_peer_(struct proto_ep *p, const void *addr) {
  struct efa_xpu_peer a;
  uint32_t i;
  if (!addr) return PROTO_NONE;
  memcpy(&a, addr, sizeof(a));
  i = proto_peer_lookup(p, a.ahn, a.remote_qpn);
  if (i == PROTO_NONE || p->peers[i].qkey != a.remote_qkey) return PROTO_NONE;
  return i;
}

/* The buffer argument of a core call: desc's key is both lkey and rkey (one key per EFA MR). */
XPU_DEVICE_FUNC int efa_xpu_proto_buf_(const void *buf, size_t len, const void *desc, struct proto_buf *b) {
  struct efa_xpu_desc d;
  if (len && (!buf || !desc)) return -FI_EINVAL;
  d.lkey = 0;
  if (desc) memcpy(&d, desc, sizeof(d));
  b->addr = (void *)(uintptr_t)buf;
  b->len = len;
  b->lkey = d.lkey;
  b->rkey = d.lkey;
  return 0;
}

/*
 * Runs one core call `call` under the lock; on -FI_EAGAIN progresses the core
 * once (completions stay queued for the CQ) and tries again, and with
 * FI_XPU_EFA_POST_SPIN keeps doing so until it goes through.
 */
#define EFA_XPU_PROTO_CALL_(e, p, rc, call)       \
  do {                                            \
    int tries_ = 0;                               \
    for (;;) {                                    \
      efa_xpu_proto_lock_(e);                     \
      rc = (call);                                \
      if (rc == -FI_EAGAIN) (void)proto_progress(p, NULL, 0); \
      efa_xpu_proto_unlock_(e);                   \
      if (rc != -FI_EAGAIN) break;                \
      if (++tries_ >= 2 && !EFA_XPU_PROTO_SPIN_) break; \
      xpu_relax();                                \
    }                                             \
  } while (0)

#if defined(FI_XPU_EFA_POST_SPIN)
#define EFA_XPU_PROTO_SPIN_ 1
#else
#define EFA_XPU_PROTO_SPIN_ 0
#endif

/* The counter a core completion advances (libfabric: atomics count as writes, fetching ones as reads). */
XPU_DEVICE_FUNC struct efa_xpu_cntr *efa_xpu_proto_cntr_(const struct efa_xpu_ep *e, uint64_t flags) {
  if (flags & FI_REMOTE_WRITE) return e->cntr_remote_write;
  if (flags & FI_REMOTE_READ) return e->cntr_remote_read;
  if (flags & FI_RECV) return e->cntr_recv;
  if (flags & (FI_ATOMIC | FI_RMA)) return (flags & FI_READ) ? e->cntr_read : e->cntr_write;
  if (flags & FI_SEND) return e->cntr_send;
  return NULL;
}

XPU_DEVICE_FUNC void efa_xpu_proto_count_(const struct efa_xpu_ep *e, const struct proto_comp *pc) {
  struct efa_xpu_cntr *c = efa_xpu_proto_cntr_(e, pc->flags);
  if (!c) return;
  if (pc->err) {
    if (c->err_value) xpu_fetch_add_u64(c->err_value, 1u);
  } else if (c->value) {
    xpu_fetch_add_u64(c->value, 1u);
  }
}

/* The sender of a receive as an AV index (the EP's AV mirror), else FI_ADDR_NOTAVAIL. */
XPU_DEVICE_FUNC fi_addr_t efa_xpu_proto_src_(const struct efa_xpu_ep *e, const struct proto_ep *p,
                                             const struct proto_comp *pc) {
  const struct proto_peer *peer;
  uint32_t i, n;
  if (!(pc->flags & FI_RECV) || pc->src == PROTO_NONE || pc->src >= p->cfg.max_peers || !e->av)
    return FI_ADDR_NOTAVAIL;
  peer = &p->peers[pc->src];
  n = xpu_load_acquire_u32((uint32_t *)&e->av_count);
  for (i = 0; i < n; ++i)
    if (e->av[i].valid && e->av[i].ahn == peer->ahn && e->av[i].qpn == peer->qpn) return (fi_addr_t)i;
  return FI_ADDR_NOTAVAIL;
}

XPU_DEVICE_FUNC void efa_xpu_proto_entry_(int format, const struct proto_comp *pc, void *out) {
  struct fi_cq_tagged_entry t;
  t.op_context = (void *)(uintptr_t)pc->op_context;
  t.flags = pc->flags;
  t.len = (size_t)pc->len;
  t.buf = pc->buf;
  t.data = pc->data;
  t.tag = pc->tag;
  memcpy(out, &t, efa_comp_entry_size(format));
}

/*
 * The CQ read of a CQ whose EPs are protocol-fabric EPs (caller holds
 * c->err_lock, no error staged): progresses each EP whose lock is free (a
 * read of 0 entries too) and takes its completions until `count`; an error
 * completion is staged in
 * c->err / err_tag / err_olen and ends the read. Entries read, or -FI_EAVAIL
 * when the first one is an error.
 */
XPU_DEVICE_FUNC int64_t efa_xpu_proto_cq_poll_(struct efa_xpu_cq *c, void *buf, size_t count, fi_addr_t *src) {
  int64_t n = 0;
  const uint32_t neps = xpu_load_acquire_u32(&c->num_eps);
  uint32_t i;
  int staged = 0;
  for (i = 0; i < neps && i < EFA_XPU_CQ_MAX_EPS; ++i) {
    struct efa_xpu_ep *e = c->eps[i];
    struct proto_ep *p = e ? efa_xpu_proto_of_(e) : NULL;
    if (!p || !efa_xpu_proto_trylock_(e)) continue;
    /* Every read progresses every EP (a target executes atomics even when its reader wants none). */
    if (staged || (size_t)n >= count) (void)proto_progress(p, NULL, 0);
    while (!staged && (size_t)n < count) {
      struct proto_comp pc;
      if (proto_progress(p, &pc, 1) <= 0) break;
      efa_xpu_proto_count_(e, &pc);
      /* A peer's RMA on our memory is counted; only one with remote CQ data is an entry. */
      if ((pc.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ)) && !(pc.flags & FI_REMOTE_CQ_DATA)) continue;
      if (pc.err) {
        c->err.op_context = pc.op_context;
        c->err.flags = pc.flags;
        c->err.len = pc.len;
        c->err.buf = (uint64_t)(uintptr_t)pc.buf;
        c->err.data = pc.data;
        c->err.err = pc.err;
        c->err.prov_errno = (uint32_t)pc.prov_errno;
        c->err_tag = pc.tag;
        c->err_olen = pc.olen;
        xpu_store_release_u32(&c->err_pending, 1u);
        staged = 1;
        break;
      }
      efa_xpu_proto_entry_((int)c->format, &pc, (uint8_t *)buf + (size_t)n * c->entry_size);
      if (src) src[n] = efa_xpu_proto_src_(e, p, &pc);
      ++n;
    }
    efa_xpu_proto_unlock_(e);
  }
  if (n == 0 && staged) return -FI_EAVAIL;
  return n;
}

/* Whether a CQ serves protocol-fabric EPs (a CQ serves the EPs of one fabric). */
XPU_DEVICE_FUNC int efa_xpu_cq_is_proto_(const struct efa_xpu_cq *c) {
  return xpu_load_acquire_u32((uint32_t *)&c->num_eps) > 0 && c->eps[0] && efa_xpu_proto_of_(c->eps[0]) != NULL;
}

#endif /* XPUFAB_DEVICE_EFA_XPU_PROTO_EP_H_ */
