/*
 * efa_cq.h - polling an EFA completion queue, and the NIC-side CQE write.
 * Host and nvcc; valid C11 and C++17.
 *
 * Usage:
 *   struct efa_dp_cq_attr a = {cq_buf, 32, entries, cq_db_or_NULL};   // efadv_query_cq
 *   struct efa_cq cq;  efa_cq_init(&cq, &a);
 *   struct efa_dp_cqe c;
 *   while (efa_cq_poll(&cq, &c) == 0) {
 *     if (c.q_type == EFA_IO_SEND_QUEUE) efa_sq_complete(sq_of(c.qp_num), c.req_id, &ctx);
 *     else if (!c.unsolicited)          efa_rq_complete(rq_of(c.qp_num), c.req_id, &ctx);
 *     ... c.status (efa_io_status.h), c.byte_len, c.imm ...
 *   }
 *   efa_cq_update_db(&cq, 0);   // optional: report the consumer index
 *
 * Entries are 32 B. The expected phase is 1 on the first lap and flips on
 * every lap; the rest of a CQE is read only after its phase matched (acquire).
 * Pollers of one CQ serialize on a try-lock: a poll that finds the CQ busy
 * returns -FI_EAGAIN like an empty one, so polling never blocks.
 *
 * NIC side (emulator, tests): efa_dp_nic_write_cqe writes bytes 4..31 first
 * and then the first 4 bytes (req_id, status, flags with the phase) as one
 * 32-bit release store.
 */
#ifndef XPUFAB_DEVICE_EFA_CQ_H_
#define XPUFAB_DEVICE_EFA_CQ_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "device/efa_dp_ring.h"
#include "device/efa_io_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A CQ as efadv_query_cq reports it (struct efadv_cq_attr). */
struct efa_dp_cq_attr {
  uint8_t *buffer;
  uint32_t entry_size;  /* 32 */
  uint32_t num_entries; /* power of two */
  uint32_t *doorbell;   /* NULL when the CQ has none */
};

struct efa_cq {
  /* Configuration. */
  uint8_t *buf;
  uint32_t *db;
  uint32_t num_entries;
  uint32_t mask;
  uint32_t log2_entries;
  /* Shared. */
  uint32_t consumed; /* CQEs consumed (absolute) */
  uint32_t cmd_sn;   /* events acknowledged (2 bits go to the doorbell) */
  uint32_t lock;     /* poll try-lock */
};

/* A decoded CQE. */
struct efa_dp_cqe {
  uint16_t req_id;
  uint16_t qp_num;     /* local QPN */
  uint8_t status;      /* enum efa_io_comp_status */
  uint8_t q_type;      /* EFA_IO_SEND_QUEUE / EFA_IO_RECV_QUEUE */
  uint8_t op_type;     /* enum efa_io_send_op_type */
  uint8_t has_imm;
  uint8_t unsolicited; /* RX write-with-imm that used no RQ entry */
  uint16_t ah;         /* RX: sender's AH, EFA_IO_AH_UNKNOWN if none */
  uint16_t src_qp;     /* RX */
  uint32_t byte_len;   /* RX: length | length_hi << 16 for RDMA write; TX: 0 */
  uint32_t imm;        /* RX with has_imm */
  struct efa_io_rx_cdesc_ex raw;
};

/* 0; -FI_EINVAL for NULL buffer, entry_size not 32, depth not a power of two in [2, 65536]. */
XPU_FUNC int efa_cq_init(struct efa_cq *cq, const struct efa_dp_cq_attr *a) {
  if (!cq || !a || !a->buffer || a->entry_size != EFA_IO_CQE_SIZE) return -FI_EINVAL;
  if (!efa_dp_is_pow2(a->num_entries) || a->num_entries < 2 || a->num_entries > 65536u) return -FI_EINVAL;
  cq->buf = a->buffer;
  cq->db = a->doorbell;
  cq->num_entries = a->num_entries;
  cq->mask = a->num_entries - 1;
  cq->log2_entries = efa_dp_log2(a->num_entries);
  cq->consumed = 0;
  cq->cmd_sn = 0;
  cq->lock = 0;
  return 0;
}

/* The phase a CQE at absolute index i carries when valid: 1 on the first lap. */
XPU_FUNC uint32_t efa_dp_cq_phase(uint32_t i, uint32_t log2_entries) { return ((i >> log2_entries) & 1u) ^ 1u; }

XPU_FUNC void efa_dp_decode_cqe(const struct efa_io_rx_cdesc_ex *raw, struct efa_dp_cqe *out) {
  const struct efa_io_cdesc_common *c = &raw->base.common;
  out->req_id = c->req_id;
  out->qp_num = c->qp_num;
  out->status = c->status;
  out->q_type = efa_io_cdesc_common_get_q_type(c);
  out->op_type = efa_io_cdesc_common_get_op_type(c);
  out->has_imm = efa_io_cdesc_common_get_has_imm(c);
  out->unsolicited = efa_io_cdesc_common_get_unsolicited(c);
  if (out->q_type == EFA_IO_RECV_QUEUE) {
    out->ah = raw->base.ah;
    out->src_qp = raw->base.src_qp_num;
    out->byte_len = efa_io_rx_cdesc_ex_byte_len(raw);
    out->imm = out->has_imm ? raw->base.imm : 0;
  } else {
    out->ah = 0;
    out->src_qp = 0;
    out->byte_len = 0;
    out->imm = 0;
  }
  out->raw = *raw;
}

/*
 * Whether the CQE at absolute index c carries the phase of its lap, i.e. was written since the
 * ring last wrapped; *w0 gets its first word. Word 0 holds req_id, status and flags; flags bit 0
 * (bit 24 of the word) is the phase.
 */
XPU_FUNC int efa_cq_slot_valid(struct efa_cq *cq, uint32_t c, uint32_t *w0) {
  *w0 = xpu_load_acquire_u32((const uint32_t *)(cq->buf + (size_t)(c & cq->mask) * EFA_IO_CQE_SIZE));
  return ((*w0 >> 24) & 1u) == efa_dp_cq_phase(c, cq->log2_entries);
}

/*
 * Consumes one CQE into *out. 0; -FI_EAGAIN when no new CQE is there (or
 * another thread is polling this CQ right now); -FI_EINVAL for NULL cq/out.
 */
XPU_FUNC int efa_cq_poll(struct efa_cq *cq, struct efa_dp_cqe *out) {
  if (!cq || !out) return -FI_EINVAL;
  uint32_t unlocked = 0;
  if (!xpu_cas_u32(&cq->lock, &unlocked, 1)) return -FI_EAGAIN;
  const uint32_t c = xpu_load_relaxed_u32(&cq->consumed);
  uint8_t *slot = cq->buf + (size_t)(c & cq->mask) * EFA_IO_CQE_SIZE;
  uint32_t w0;
  if (!efa_cq_slot_valid(cq, c, &w0)) {
    xpu_store_release_u32(&cq->lock, 0);
    return -FI_EAGAIN;
  }
  struct efa_io_rx_cdesc_ex raw;
  memcpy(&raw, &w0, sizeof(w0));
  memcpy((uint8_t *)&raw + 4, slot + 4, sizeof(raw) - 4);
  xpu_store_release_u32(&cq->consumed, c + 1);
  xpu_store_release_u32(&cq->lock, 0);
  efa_dp_decode_cqe(&raw, out);
  return 0;
}

/*
 * 1 when the next CQE is valid. Takes no lock and consumes nothing: a hint
 * that lets an idle poller skip efa_cq_poll (whose try-lock is a write).
 */
XPU_FUNC int efa_cq_ready(struct efa_cq *cq) {
  uint32_t w0;
  return efa_cq_slot_valid(cq, xpu_load_relaxed_u32(&cq->consumed), &w0);
}

/* CQEs consumed so far (absolute). */
XPU_FUNC uint32_t efa_cq_consumed(struct efa_cq *cq) { return xpu_load_acquire_u32(&cq->consumed); }

/*
 * Writes the CQ doorbell: consumer index | cmd_sn << 29 | arm << 31. 0;
 * -FI_ENOSYS when the CQ has no doorbell.
 */
XPU_FUNC int efa_cq_update_db(struct efa_cq *cq, uint32_t arm) {
  if (!cq->db) return -FI_ENOSYS;
  const uint32_t v = efa_io_cq_db_make((uint16_t)xpu_load_acquire_u32(&cq->consumed),
                                       xpu_load_relaxed_u32(&cq->cmd_sn), arm ? 1u : 0u);
  xpu_fence_system();
  xpu_mmio_write_u32(cq->db, v);
  return 0;
}

/* Requests a completion event (ibv_req_notify_cq). 0 or -FI_ENOSYS. */
XPU_FUNC int efa_cq_arm(struct efa_cq *cq) { return efa_cq_update_db(cq, 1); }

/* Acknowledges one completion event (ibv_get_cq_event advances cmd_sn). */
XPU_FUNC void efa_cq_ack_event(struct efa_cq *cq) { xpu_fetch_add_u32(&cq->cmd_sn, 1); }

/*
 * NIC side: writes a CQE into `slot` with the given phase: bytes 4..31 first,
 * then bytes 0..3 (req_id, status, flags) in one 32-bit release store.
 */
XPU_FUNC void efa_dp_nic_write_cqe(uint8_t *slot, const struct efa_io_rx_cdesc_ex *cqe, uint32_t phase) {
  struct efa_io_rx_cdesc_ex tmp = *cqe;
  efa_io_cdesc_common_set_phase(&tmp.base.common, (uint8_t)phase);
  memcpy(slot + 4, (const uint8_t *)&tmp + 4, sizeof(tmp) - 4);
  uint32_t w0;
  memcpy(&w0, &tmp, sizeof(w0));
  xpu_store_release_u32((uint32_t *)slot, w0);
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_CQ_H_ */
