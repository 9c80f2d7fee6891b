/*
 * efa_rq.h - posting receives to an EFA receive queue. Host and nvcc; valid
 * C11 and C++17.
 *
 * Usage:
 *   struct efa_dp_wq_attr a = {rq_buf, 16, num_desc, rq_db, num_desc};  // efadv_query_qp_wqs
 *   struct efa_rq rq;  efa_rq_init(&rq, &a, max_rq_sge, scratch, efa_rq_scratch_size(num_desc));
 *   struct efa_dp_sge sge = {addr, len, lkey};
 *   int rc = efa_rq_post(&rq, &sge, 1, (uint64_t)my_ctx);   // 0, -FI_EAGAIN, -FI_EINVAL
 *   // after polling an RX CQE (q_type RECV, not unsolicited) for this QP:
 *   uint64_t ctx;  efa_rq_complete(&rq, cqe.req_id, &ctx);  // gives the descriptors back
 *
 * A receive of k SGEs is k consecutive efa_io_rx_desc (first on the first,
 * last on the last, the req_id on every one, as libfabric's direct path does;
 * lengths clamped to 65535 as rdma-core does). Space is counted in
 * descriptors and comes back when the receive's completion is consumed. The
 * doorbell is the absolute 16-bit descriptor count, written after a store
 * fence, once per post, in claim order (efa_dp_ring.h).
 */
#ifndef XPUFAB_DEVICE_EFA_RQ_H_
#define XPUFAB_DEVICE_EFA_RQ_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "device/efa_dp_ring.h"
#include "device/efa_io_defs.h"
#include "device/efa_sq.h"

#ifdef __cplusplus
extern "C" {
#endif

struct efa_rq {
  struct efa_dp_ring ring;
  struct efa_dp_reqs reqs;
  uint32_t max_sge; /* device max_rq_sge */
};

XPU_FUNC size_t efa_rq_scratch_size(uint32_t num_entries) { return efa_dp_reqs_scratch_size(num_entries); }

/* 0; -FI_EINVAL for a bad attr (entry_size must be 16), max_sge 0 or above the depth, bad scratch. */
XPU_FUNC int efa_rq_init(struct efa_rq *rq, const struct efa_dp_wq_attr *a, uint32_t max_sge, void *scratch,
                         size_t scratch_len) {
  if (!rq || !a) return -FI_EINVAL;
  int rc = efa_dp_ring_init(&rq->ring, a, EFA_IO_RX_DESC_SIZE);
  if (rc) return rc;
  if (max_sge == 0 || max_sge > a->num_entries) return -FI_EINVAL;
  rc = efa_dp_reqs_init(&rq->reqs, a->num_entries, scratch, scratch_len);
  if (rc) return rc;
  rq->max_sge = max_sge;
  return 0;
}

/* Fills one RX descriptor. */
XPU_FUNC void efa_dp_build_rx_desc(struct efa_io_rx_desc *d, const struct efa_dp_sge *s, uint16_t req_id,
                                   int first, int last) {
  memset(d, 0, sizeof(*d));
  efa_io_rx_desc_set_addr(d, s->addr);
  d->req_id = req_id;
  d->length = (uint16_t)(s->length > 0xffffu ? 0xffffu : s->length);
  efa_io_rx_desc_set_lkey(d, s->lkey);
  efa_io_rx_desc_set_first(d, first ? 1 : 0);
  efa_io_rx_desc_set_last(d, last ? 1 : 0);
}

/*
 * Writes one receive of nsge buffers into the claimed entries [first, first +
 * nsge) with a fresh req_id bound to ctx; returns the req_id (whose table
 * index, req_id & (reqs.count - 1), is where a caller keeps more per-receive
 * state). Nothing is published. The table always has an id for claimed
 * entries; should it not, the poster waits for a completion.
 */
XPU_FUNC int efa_rq_write(struct efa_rq *rq, uint32_t first, const struct efa_dp_sge *sgl, uint32_t nsge,
                          uint64_t ctx) {
  int req_id;
  while ((req_id = efa_dp_reqs_alloc(&rq->reqs, ctx, nsge)) < 0) xpu_relax();
  for (uint32_t i = 0; i < nsge; ++i) {
    struct efa_io_rx_desc d;
    efa_dp_build_rx_desc(&d, &sgl[i], (uint16_t)req_id, i == 0, i + 1 == nsge);
    memcpy(efa_dp_ring_entry(&rq->ring, first + i), &d, sizeof(d));
  }
  return req_id;
}

/* 0, or the error efa_rq_post would return before claiming (nsge 0 or above max_sge, rq or sgl NULL). */
XPU_FUNC int efa_rq_check(const struct efa_rq *rq, const struct efa_dp_sge *sgl, uint32_t nsge) {
  if (!rq || !sgl || nsge == 0 || nsge > rq->max_sge) return -FI_EINVAL;
  return 0;
}

/*
 * Posts one receive of nsge buffers. 0; -FI_EINVAL (nsge 0 or above max_sge,
 * rq or sgl NULL); -FI_EAGAIN (not enough free descriptors).
 */
XPU_FUNC int efa_rq_post(struct efa_rq *rq, const struct efa_dp_sge *sgl, uint32_t nsge, uint64_t ctx) {
  int rc = efa_rq_check(rq, sgl, nsge);
  if (rc) return rc;
  uint32_t first;
  rc = efa_dp_ring_claim(&rq->ring, nsge, &first);
  if (rc) return rc;
  efa_rq_write(rq, first, sgl, nsge, ctx);
  efa_dp_ring_publish(&rq->ring, first, nsge, 0);
  return 0;
}

/*
 * After consuming an RX CQE that used an RQ entry: frees req_id, returns the
 * receive's context, gives its descriptors back. 0; -FI_EINVAL when req_id is
 * not outstanding. Unsolicited RDMA-write completions used no RQ entry and
 * must not be passed here.
 */
XPU_FUNC int efa_rq_complete(struct efa_rq *rq, uint16_t req_id, uint64_t *ctx_p) {
  if (!rq) return -FI_EINVAL;
  uint32_t ndesc = 0;
  int rc = efa_dp_reqs_free(&rq->reqs, req_id, ctx_p, &ndesc);
  if (rc) return rc;
  efa_dp_ring_give_back(&rq->ring, ndesc);
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_RQ_H_ */
