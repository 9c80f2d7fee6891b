/*
 * efa_completion.h - a polled CQE turned into what libfabric reports: the
 * request it completes, the fi_cq_{entry,msg_entry,data_entry,tagged_entry}
 * or fi_cq_err_entry fields, and what to do with a CQE that names no
 * outstanding request. Written once for the host provider (fi_cq_read) and
 * for device code (fi_xpu_cq_read). Host and nvcc; valid C11 and C++17.
 *
 * Per CQE, with `sq`/`rq` the queues of the CQE's QP:
 *   idx = efa_comp_req_index(sq, rq, &cqe);   the request's table index, where
 *                                             the caller keeps what the CQE
 *                                             lacks (the receive buffer); read
 *                                             it now, the index is reused once
 *                                             the request is freed
 *   efa_comp_take(sq, rq, &cqe, &ctx)         frees the request, gives its queue
 *                                             space back; EFA_COMP_STALE for a
 *                                             CQE that names none
 *   efa_comp_from_cqe(&cqe, ctx, buf, &c)     the completion's fields
 *   efa_comp_write_entry(fmt, &c, out)        one application entry
 *   efa_comp_write_err(&c, &err_entry)        fi_cq_readerr's entry
 *
 * Stale CQEs (an unknown QP, a req_id that is not outstanding: a duplicate, or
 * one from before the request table was reset) are dropped and counted with
 * efa_comp_count_stale, which tells the caller when it dropped the first one
 * (the host provider logs that one).
 */
#ifndef XPUFAB_DEVICE_EFA_COMPLETION_H_
#define XPUFAB_DEVICE_EFA_COMPLETION_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include "device/efa_cq.h"
#include "device/efa_io_status.h"
#include "device/efa_rq.h"
#include "device/efa_sq.h"
#include "device/xpu_func.h"
#include "device/xpu_prims.h"

#ifdef __cplusplus
extern "C" {
#endif

/* efa_comp_take: the CQE names no outstanding request (drop it, count it). */
#define EFA_COMP_STALE 1
/* efa_comp_req_index: the CQE used no request (an unsolicited RDMA write). */
#define EFA_COMP_NO_REQ 0xffffffffu

/* One completion as libfabric reports it. */
struct efa_comp {
  uint64_t op_context;
  uint64_t flags;
  uint64_t len;
  uint64_t buf;
  uint64_t data;
  int32_t err;         /* positive FI_E* code, 0 for a success */
  uint32_t prov_errno; /* enum efa_io_comp_status */
};

/*
 * The completion flags of a CQE, from its queue and operation alone (the one
 * table): TX SEND, RDMA write, RDMA read; RX SEND (a receive), RDMA write with
 * immediate data (remote write); FI_REMOTE_CQ_DATA when it carries some.
 */
XPU_FUNC uint64_t efa_comp_op_flags(uint32_t q_type, uint32_t op_type, uint32_t has_imm) {
  uint64_t f;
  if (q_type == EFA_IO_SEND_QUEUE) {
    f = op_type == EFA_IO_RDMA_WRITE  ? (FI_RMA | FI_WRITE)
        : op_type == EFA_IO_RDMA_READ ? (FI_RMA | FI_READ)
                                      : (FI_MSG | FI_SEND);
    return f;
  }
  f = op_type == EFA_IO_RDMA_WRITE ? (FI_RMA | FI_REMOTE_WRITE) : (FI_MSG | FI_RECV);
  if (has_imm) f |= FI_REMOTE_CQ_DATA;
  return f;
}

/* The request-table index of the request q completes, or EFA_COMP_NO_REQ. */
XPU_FUNC uint32_t efa_comp_req_index(const struct efa_sq *sq, const struct efa_rq *rq, const struct efa_dp_cqe *q) {
  if (q->q_type == EFA_IO_SEND_QUEUE) return (uint32_t)q->req_id & (sq->reqs.count - 1u);
  if (q->unsolicited) return EFA_COMP_NO_REQ;
  return (uint32_t)q->req_id & (rq->reqs.count - 1u);
}

/*
 * Frees the request q completes and returns its context (0 for an
 * unsolicited RDMA write, which used none). 0 or EFA_COMP_STALE.
 */
XPU_FUNC int efa_comp_take(struct efa_sq *sq, struct efa_rq *rq, const struct efa_dp_cqe *q, uint64_t *op_context) {
  *op_context = 0;
  int rc = 0;
  if (q->q_type == EFA_IO_SEND_QUEUE) rc = efa_sq_complete(sq, q->req_id, op_context);
  else if (!q->unsolicited) rc = efa_rq_complete(rq, q->req_id, op_context);
  return rc ? EFA_COMP_STALE : 0;
}

/*
 * The completion of q: op_context = the request's context; len = bytes
 * received (0 for transmits); buf = rx_buf for a receive (0 otherwise);
 * data = the immediate data; err/prov_errno from the CQE's status.
 */
XPU_FUNC void efa_comp_from_cqe(const struct efa_dp_cqe *q, uint64_t op_context, uint64_t rx_buf,
                                struct efa_comp *out) {
  memset(out, 0, sizeof(*out));
  out->op_context = op_context;
  out->flags = efa_comp_op_flags(q->q_type, q->op_type, q->has_imm);
  if (q->q_type != EFA_IO_SEND_QUEUE) {
    out->len = q->byte_len;
    if (q->op_type != EFA_IO_RDMA_WRITE) out->buf = rx_buf;
    if (q->has_imm) out->data = q->imm;
  }
  out->err = efa_io_status_to_fi_errno(q->status);
  out->prov_errno = q->status;
}

/* Bytes of one entry of `format`; 0 for a format libfabric does not define. */
XPU_FUNC size_t efa_comp_entry_size(int format) {
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT: return sizeof(struct fi_cq_entry);
    case FI_CQ_FORMAT_MSG: return sizeof(struct fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(struct fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED: return sizeof(struct fi_cq_tagged_entry);
    default: return 0;
  }
}

/* Writes c as one entry of `format` at out (unaligned is fine; tag is 0: EFA has no tags). */
XPU_FUNC void efa_comp_write_entry(int format, const struct efa_comp *c, void *out) {
  struct fi_cq_tagged_entry e;
  e.op_context = (void *)(uintptr_t)c->op_context;
  e.flags = c->flags;
  e.len = (size_t)c->len;
  e.buf = (void *)(uintptr_t)c->buf;
  e.data = c->data;
  e.tag = 0;
  /* Every format is a prefix of the tagged entry. A copy of a constant size per format is a
   * few moves; one of a size known only at run time is a loop. */
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT: memcpy(out, &e, sizeof(struct fi_cq_entry)); break;
    case FI_CQ_FORMAT_MSG: memcpy(out, &e, sizeof(struct fi_cq_msg_entry)); break;
    case FI_CQ_FORMAT_DATA: memcpy(out, &e, sizeof(struct fi_cq_data_entry)); break;
    case FI_CQ_FORMAT_TAGGED: memcpy(out, &e, sizeof(struct fi_cq_tagged_entry)); break;
    default: break;
  }
}

/*
 * Fills fi_cq_readerr's entry: every field up to err_data from c (tag and
 * olen 0), err_data_size 0; err_data (the caller's) and the fields after
 * err_data_size are left alone.
 */
XPU_FUNC void efa_comp_write_err(const struct efa_comp *c, struct fi_cq_err_entry *out) {
  out->op_context = (void *)(uintptr_t)c->op_context;
  out->flags = c->flags;
  out->len = (size_t)c->len;
  out->buf = (void *)(uintptr_t)c->buf;
  out->data = c->data;
  out->tag = 0;
  out->olen = 0;
  out->err = c->err;
  out->prov_errno = (int)c->prov_errno;
  out->err_data_size = 0;
}

/* Counts one dropped stale CQE; 1 when it is the first for this counter. */
XPU_FUNC int efa_comp_count_stale(uint32_t *count) { return xpu_fetch_add_u32(count, 1u) == 0u; }

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_COMPLETION_H_ */
