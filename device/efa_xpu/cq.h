/*
 * efa_xpu/cq.h - the efa device CQ calls: read, readfrom, sread, sreadfrom
 * and readerr, performed once per scope by its leader. CQEs are translated
 * by device/efa_completion.h, as the host provider's fi_cq_read translates
 * them. Valid C11, C++17 and CUDA.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_CQ_H_
#define XPUFAB_DEVICE_EFA_XPU_CQ_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>

#include "device/efa_completion.h"
#include "device/efa_dp.h"
#include "device/runtime/xpu_scope.h"
#include "device/xpu_func.h"
#include "xpufab/efa_xpu/check.h"
#include "xpufab/efa_xpu/handles.h"
#include "xpufab/efa_xpu/proto_ep.h"

/* The EP of a CQE's local QP, or NULL. */
XPU_DEVICE_FUNC struct efa_xpu_ep *efa_xpu_cq_ep_(struct efa_xpu_cq *c, uint32_t qpn) {
  const uint32_t n = xpu_load_acquire_u32(&c->num_eps);
  for (uint32_t i = 0; i < n && i < EFA_XPU_CQ_MAX_EPS; ++i) {
    struct efa_xpu_ep *e = c->eps[i];
    if (e && e->qpn == qpn) return e;
  }
  return NULL;
}

/* The AV index of (ahn, qpn) in the EP's mirror, as the host provider resolves it. */
XPU_DEVICE_FUNC fi_addr_t efa_xpu_src_addr_(const struct efa_xpu_ep *e, uint16_t ahn, uint16_t qpn) {
  if (!e->av || ahn == EFA_IO_AH_UNKNOWN) return FI_ADDR_NOTAVAIL;
  const uint32_t n = xpu_load_acquire_u32((uint32_t *)&e->av_count);
  for (uint32_t i = 0; i < n; ++i) {
    const struct efa_xpu_av_entry *a = &e->av[i];
    if (a->valid && a->ahn == ahn && a->qpn == qpn) return (fi_addr_t)i;
  }
  return FI_ADDR_NOTAVAIL;
}

/*
 * Translates a CQE of this CQ and gives its queue space back (efa_completion.h,
 * as the host provider does); *src = the sender's AV index for a receive.
 * 0, or EFA_COMP_STALE for a CQE that names no EP or no outstanding request
 * (dropped and counted in stale_cqes, as the host provider counts it).
 */
XPU_DEVICE_FUNC int efa_xpu_cq_decode_(struct efa_xpu_cq *c, const struct efa_dp_cqe *q, struct efa_comp *out,
                                       fi_addr_t *src) {
  struct efa_xpu_ep *e = efa_xpu_cq_ep_(c, q->qp_num);
  uint64_t ctx = 0;
  uint64_t rx_buf = 0;
  int rc = EFA_COMP_STALE;
  if (e) {
    const uint32_t idx = efa_comp_req_index(&e->sq, &e->rq, q);
    if (q->q_type != EFA_IO_SEND_QUEUE && idx != EFA_COMP_NO_REQ) rx_buf = xpu_load_relaxed_u64(&e->rx_bufs[idx]);
    rc = efa_comp_take(&e->sq, &e->rq, q, &ctx);
  }
  if (rc) {
    efa_comp_count_stale(&c->stale_cqes);
    return rc;
  }
  efa_comp_from_cqe(q, ctx, rx_buf, out);
  *src = q->q_type == EFA_IO_SEND_QUEUE ? FI_ADDR_NOTAVAIL : efa_xpu_src_addr_(e, q->ah, q->src_qp);
  return 0;
}

XPU_DEVICE_FUNC int efa_xpu_trylock_(uint32_t *lock) {
  uint32_t unlocked = 0;
  return xpu_cas_u32(lock, &unlocked, 1u);
}

/*
 * Reads up to `count` completions into buf/src (leader only). > 0 entries,
 * -FI_EAGAIN, or -FI_EAVAIL when an error is staged and nothing precedes it.
 */
XPU_DEVICE_FUNC int64_t efa_xpu_cq_poll_(struct efa_xpu_cq *c, void *buf, size_t count, fi_addr_t *src) {
  if (!efa_xpu_trylock_(&c->err_lock)) return -FI_EAGAIN;
  int64_t n = 0;
  int64_t rc = 0;
  if (xpu_load_acquire_u32(&c->err_pending)) {
    rc = -FI_EAVAIL;
  } else if (efa_xpu_cq_is_proto_(c)) {
    /* The protocol core owns these EPs' CQ ring: its completions, not CQEs. */
    n = efa_xpu_proto_cq_poll_(c, buf, count, src);
    if (n < 0) rc = n;
  } else {
    struct efa_dp_cqe q;
    struct efa_comp x;
    fi_addr_t from;
    while ((size_t)n < count && efa_cq_poll(&c->cq, &q) == 0) {
      if (efa_xpu_cq_decode_(c, &q, &x, &from) != 0) continue;
      if (x.err) {
        c->err = x;
        xpu_store_release_u32(&c->err_pending, 1u);
        if (n == 0) rc = -FI_EAVAIL;
        break;
      }
      efa_comp_write_entry((int)c->format, &x, (uint8_t *)buf + (size_t)n * c->entry_size);
      if (src) src[n] = from;
      ++n;
    }
  }
  xpu_store_release_u32(&c->err_lock, 0u);
  if (rc) return rc;
  return n ? n : -FI_EAGAIN;
}

/* Leader reads, result broadcast; sread variants keep reading until `want`. */
XPU_DEVICE_FUNC int64_t efa_xpu_cq_read_common_(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr,
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

XPU_DEVICE_FUNC int64_t efa_xpu_cq_read(struct fid_xpu_cq *cq, void *buf, size_t count, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, NULL, 0, scope);
}

XPU_DEVICE_FUNC int64_t efa_xpu_cq_readfrom(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, src_addr, 0, scope);
}

XPU_DEVICE_FUNC int64_t efa_xpu_cq_sread(struct fid_xpu_cq *cq, void *buf, size_t count, uint64_t threshold,
                                         int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, NULL, threshold ? threshold : 1u, scope);
}

XPU_DEVICE_FUNC int64_t efa_xpu_cq_sreadfrom(struct fid_xpu_cq *cq, void *buf, size_t count, void *src_addr,
                                             uint64_t threshold, int scope) {
  return efa_xpu_cq_read_common_(cq, buf, count, src_addr, threshold ? threshold : 1u, scope);
}

XPU_DEVICE_FUNC int64_t efa_xpu_cq_readerr(struct fid_xpu_cq *cq, void *buf, uint64_t flags, int scope) {
  struct efa_xpu_cq *c = NULL;
  int64_t rc = efa_xpu_cq_get_(cq, scope, &c);
  if (rc) return rc;
  if (!buf || flags) return -FI_EINVAL;
  if (xpu_scope_is_leader(scope)) {
    rc = -FI_EAGAIN;
    if (efa_xpu_trylock_(&c->err_lock)) {
      if (xpu_load_acquire_u32(&c->err_pending)) {
        efa_comp_write_err(&c->err, (struct fi_cq_err_entry *)buf);
        ((struct fi_cq_err_entry *)buf)->tag = c->err_tag;
        ((struct fi_cq_err_entry *)buf)->olen = (size_t)c->err_olen;
        xpu_store_release_u32(&c->err_pending, 0u);
        rc = 1;
      }
      xpu_store_release_u32(&c->err_lock, 0u);
    }
  }
  if (scope == FI_XPU_WORK_ITEM) return rc;
  return (int64_t)xpu_scope_broadcast_u64(scope, (uint64_t)rc, 0);
}

#endif /* XPUFAB_DEVICE_EFA_XPU_CQ_H_ */
