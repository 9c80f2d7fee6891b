/*
 * efa_sq.h - posting to an EFA send queue: the one routine the host provider,
 * device kernels and tests all use. Host and nvcc; valid C11 and C++17.
 *
 * Usage:
 *   struct efa_dp_wq_attr a = {sq_buf, 64, depth, sq_db, max_batch};  // efadv_query_qp_wqs
 *   void *scratch = aligned_alloc(8, efa_sq_scratch_size(depth));
 *   struct efa_sq sq;  efa_sq_init(&sq, &a, 2, scratch, efa_sq_scratch_size(depth));
 *
 *   struct efa_dp_wr wr = {0};
 *   wr.op = EFA_DP_OP_SEND; wr.ah = ahn; wr.dest_qpn = qpn; wr.qkey = qkey;
 *   wr.num_sge = 1; wr.sge[0] = (struct efa_dp_sge){addr, len, lkey};
 *   wr.context = (uint64_t)my_ctx;
 *   int rc = efa_sq_post(&sq, &wr);      // 0, -FI_EAGAIN (queue full), -FI_EINVAL, ...
 *
 *   // after polling a TX CQE (q_type SEND) for this QP:
 *   uint64_t ctx;  efa_sq_complete(&sq, cqe.req_id, &ctx);   // gives the slot back
 *
 * A group (work-group, subgroup) posts with one claim and one doorbell:
 *   leader: efa_sq_claim(&sq, n, &first)       (check every wr first: efa_sq_check_wr)
 *   member i: efa_sq_write(&sq, first + i, &wr_i)
 *   leader, after all members wrote: efa_sq_publish(&sq, first, n, flags)
 *
 * WQE contents follow rdma-core: meta_desc, first, last and comp_req are
 * always 1 (every WQE asks for a completion), phase = lap parity of the slot
 * index starting at 0, the WQE is built off-ring and copied in with its first
 * 8 bytes (req_id, ctrl1, ctrl2 with the phase) stored last behind a release
 * fence. See efa_dp_ring.h for the concurrency contract and req ids.
 */
#ifndef XPUFAB_DEVICE_EFA_SQ_H_
#define XPUFAB_DEVICE_EFA_SQ_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "device/efa_dp_ring.h"
#include "device/efa_io_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

enum efa_dp_op {
  EFA_DP_OP_SEND = EFA_IO_SEND,
  EFA_DP_OP_RDMA_READ = EFA_IO_RDMA_READ,
  EFA_DP_OP_RDMA_WRITE = EFA_IO_RDMA_WRITE,
};

#define EFA_DP_WR_IMM (1u << 0)      /* SEND / RDMA_WRITE carry wr.imm */
#define EFA_DP_WR_INLINE (1u << 1)   /* copy the SGEs' bytes into the WQE */
#define EFA_DP_WR_MORE (1u << 2)     /* FI_MORE: defer the doorbell (bounded by max_batch) */
#define EFA_DP_WR_PPS_HINT (1u << 3) /* meta.ctrl3 BURST_PPS_SENSITIVE */
#define EFA_DP_WR_ALL_FLAGS (EFA_DP_WR_IMM | EFA_DP_WR_INLINE | EFA_DP_WR_MORE | EFA_DP_WR_PPS_HINT)

/* A local buffer. For inline posts addr is a pointer the poster can read. */
struct efa_dp_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

/* One send-queue work request. */
struct efa_dp_wr {
  uint32_t op;    /* enum efa_dp_op */
  uint32_t flags; /* EFA_DP_WR_* */
  uint16_t ah;    /* efadv ahn of the destination */
  uint16_t dest_qpn;
  uint32_t qkey;
  uint32_t imm; /* with EFA_DP_WR_IMM, host order */
  uint32_t num_sge;
  struct efa_dp_sge sge[EFA_IO_TX_DESC_NUM_BUFS];
  uint64_t remote_addr; /* RDMA */
  uint32_t rkey;        /* RDMA */
  uint64_t context;     /* returned by efa_sq_complete */
};

struct efa_sq {
  struct efa_dp_ring ring;
  struct efa_dp_reqs reqs;
  uint32_t max_sge;    /* device max_sq_sge, at most 2 */
  uint32_t inline_max; /* 32 (64-B WQE) or 80 (128-B WQE) */
};

XPU_FUNC size_t efa_sq_scratch_size(uint32_t num_entries) { return efa_dp_reqs_scratch_size(num_entries); }

/*
 * 0; -FI_EINVAL for a bad attr (entry_size not 64/128, see efa_dp_ring_init),
 * max_sge outside 1..2, or scratch too small / misaligned.
 */
XPU_FUNC int efa_sq_init(struct efa_sq *sq, const struct efa_dp_wq_attr *a, uint32_t max_sge, void *scratch,
                         size_t scratch_len) {
  if (!sq || !a || (a->entry_size != EFA_IO_TX_WQE_SIZE && a->entry_size != EFA_IO_TX_WQE_128_SIZE))
    return -FI_EINVAL;
  if (max_sge < 1 || max_sge > EFA_IO_TX_DESC_NUM_BUFS) return -FI_EINVAL;
  int rc = efa_dp_ring_init(&sq->ring, a, a->entry_size);
  if (rc) return rc;
  rc = efa_dp_reqs_init(&sq->reqs, a->num_entries, scratch, scratch_len);
  if (rc) return rc;
  sq->max_sge = max_sge;
  sq->inline_max = a->entry_size == EFA_IO_TX_WQE_SIZE ? EFA_IO_TX_DESC_INLINE_MAX_SIZE
                                                       : EFA_IO_TX_DESC_INLINE_MAX_SIZE_128;
  return 0;
}

XPU_FUNC uint32_t efa_dp_wr_total_len(const struct efa_dp_wr *wr) {
  uint32_t total = 0;
  for (uint32_t i = 0; i < wr->num_sge && i < EFA_IO_TX_DESC_NUM_BUFS; ++i) total += wr->sge[i].length;
  return total;
}

/*
 * Whether wr can be posted to this SQ: 0; -FI_EINVAL (NULL sq/wr, unknown op
 * or flags, SGE count wrong for the op, imm on a read, inline read, inline
 * data at address 0); -FI_EMSGSIZE
 * (inline data larger than the WQE holds); -FI_EOPNOTSUPP (inline RDMA write
 * on a 64-B WQE queue).
 */
XPU_FUNC int efa_sq_check_wr(const struct efa_sq *sq, const struct efa_dp_wr *wr) {
  if (!sq || !wr || (wr->flags & ~EFA_DP_WR_ALL_FLAGS)) return -FI_EINVAL;
  const int is_inline = (wr->flags & EFA_DP_WR_INLINE) != 0;
  if (is_inline) {
    /* Inline data is read from the SGE addresses right away. */
    for (uint32_t i = 0; i < wr->num_sge && i < EFA_IO_TX_DESC_NUM_BUFS; ++i)
      if (wr->sge[i].addr == 0 && wr->sge[i].length != 0) return -FI_EINVAL;
  }
  switch (wr->op) {
    case EFA_DP_OP_SEND:
      if (wr->num_sge > (is_inline ? (uint32_t)EFA_IO_TX_DESC_NUM_BUFS : sq->max_sge)) return -FI_EINVAL;
      if (is_inline && efa_dp_wr_total_len(wr) > sq->inline_max) return -FI_EMSGSIZE;
      return 0;
    case EFA_DP_OP_RDMA_READ:
      if (wr->num_sge != EFA_IO_TX_DESC_NUM_RDMA_BUFS || is_inline || (wr->flags & EFA_DP_WR_IMM))
        return -FI_EINVAL;
      return 0;
    case EFA_DP_OP_RDMA_WRITE:
      if (!is_inline) return wr->num_sge == EFA_IO_TX_DESC_NUM_RDMA_BUFS ? 0 : -FI_EINVAL;
      if (wr->num_sge > EFA_IO_TX_DESC_NUM_BUFS) return -FI_EINVAL;
      if (sq->ring.entry_size != EFA_IO_TX_WQE_128_SIZE) return -FI_EOPNOTSUPP;
      return efa_dp_wr_total_len(wr) > EFA_IO_TX_DESC_INLINE_MAX_SIZE_128 ? -FI_EMSGSIZE : 0;
    default:
      return -FI_EINVAL;
  }
}

XPU_FUNC void efa_dp_copy_bytes(uint8_t *dst, const uint8_t *src, uint32_t len) {
  for (uint32_t i = 0; i < len; ++i) dst[i] = src[i];
}

/* Concatenates the SGEs' bytes at dst (inline data). */
XPU_FUNC void efa_dp_gather_inline(uint8_t *dst, const struct efa_dp_wr *wr) {
  uint32_t off = 0;
  for (uint32_t i = 0; i < wr->num_sge; ++i) {
    efa_dp_copy_bytes(dst + off, (const uint8_t *)(uintptr_t)wr->sge[i].addr, wr->sge[i].length);
    off += wr->sge[i].length;
  }
}

XPU_FUNC void efa_dp_set_buf_desc(struct efa_io_tx_buf_desc *d, const struct efa_dp_sge *s) {
  d->length = s->length;
  efa_io_tx_buf_desc_set_lkey(d, s->lkey);
  efa_io_tx_buf_desc_set_addr(d, s->addr);
}

/*
 * Builds the WQE for a checked wr into out (wqe_size bytes, 64 or 128, zeroed
 * here first). Pure: touches nothing else, so tests and the emulator can use it.
 */
XPU_FUNC void efa_dp_build_tx_wqe(const struct efa_dp_wr *wr, uint32_t wqe_size, uint16_t req_id, uint32_t phase,
                                  struct efa_io_tx_wqe_128 *out) {
  memset(out, 0, wqe_size);
  struct efa_io_tx_meta_desc *m = &out->meta;
  const int is_inline = (wr->flags & EFA_DP_WR_INLINE) != 0;
  m->req_id = req_id;
  efa_io_tx_meta_desc_set_op_type(m, (uint8_t)wr->op);
  efa_io_tx_meta_desc_set_meta_desc(m, 1);
  efa_io_tx_meta_desc_set_phase(m, (uint8_t)phase);
  efa_io_tx_meta_desc_set_first(m, 1);
  efa_io_tx_meta_desc_set_last(m, 1);
  efa_io_tx_meta_desc_set_comp_req(m, 1);
  m->dest_qp_num = wr->dest_qpn;
  m->ah = wr->ah;
  m->qkey = wr->qkey;
  if (wr->flags & EFA_DP_WR_IMM) {
    efa_io_tx_meta_desc_set_has_imm(m, 1);
    m->immediate_data = wr->imm;
  }
  if (wr->flags & EFA_DP_WR_PPS_HINT)
    efa_io_tx_meta_desc_set_processing_hints(m, EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE);
  if (is_inline) efa_io_tx_meta_desc_set_inline_msg(m, 1);

  if (wr->op == EFA_DP_OP_SEND) {
    if (is_inline) {
      m->length = (uint16_t)efa_dp_wr_total_len(wr);
      efa_dp_gather_inline(out->data.inline_data, wr);
    } else {
      m->length = (uint16_t)wr->num_sge;
      for (uint32_t i = 0; i < wr->num_sge; ++i) efa_dp_set_buf_desc(&out->data.sgl[i], &wr->sge[i]);
    }
    return;
  }
  /* RDMA read/write: the 64-B and 128-B layouts agree up to local_mem at 48. */
  struct efa_io_rdma_req_128 *rdma = &out->data.rdma_req_128;
  efa_io_remote_mem_addr_set_addr(&rdma->remote_mem, wr->remote_addr);
  rdma->remote_mem.rkey = wr->rkey;
  if (is_inline) {
    const uint32_t total = efa_dp_wr_total_len(wr);
    m->length = (uint16_t)total;
    rdma->remote_mem.length = total;
    efa_dp_gather_inline(rdma->inline_data, wr);
  } else {
    m->length = 1;
    rdma->remote_mem.length = wr->sge[0].length;
    efa_dp_set_buf_desc(&rdma->local_mem[0], &wr->sge[0]);
  }
}

/*
 * Copies a built WQE into its ring slot: 64-bit stores, the first 8 bytes
 * (with the phase) last behind a release fence, so a NIC that sees the new
 * phase sees the whole WQE.
 */
XPU_FUNC void efa_dp_copy_wqe(uint8_t *slot, const struct efa_io_tx_wqe_128 *wqe, uint32_t wqe_size) {
  const uint8_t *src = (const uint8_t *)wqe;
  uint64_t *dst = (uint64_t *)slot;
  uint64_t w;
  for (uint32_t i = 1; i < wqe_size / 8; ++i) {
    memcpy(&w, src + 8 * i, 8);
    dst[i] = w;
  }
  memcpy(&w, src, 8);
  xpu_fence_release();
  dst[0] = w;
}

/* Reserves n slots; see efa_dp_ring_claim. */
XPU_FUNC int efa_sq_claim(struct efa_sq *sq, uint32_t n, uint32_t *first_p) {
  return efa_dp_ring_claim(&sq->ring, n, first_p);
}

/*
 * Writes a checked wr into claimed slot `slot` (absolute index) with a fresh
 * req_id; returns the req_id. The table always has an id for a claimed slot;
 * should it not, the poster waits for a completion rather than leave the slot
 * unpublished.
 */
XPU_FUNC int efa_sq_write(struct efa_sq *sq, uint32_t slot, const struct efa_dp_wr *wr) {
  int req_id;
  while ((req_id = efa_dp_reqs_alloc(&sq->reqs, wr->context, 1)) < 0) xpu_relax();
  struct efa_io_tx_wqe_128 wqe;
  efa_dp_build_tx_wqe(wr, sq->ring.entry_size, (uint16_t)req_id, efa_dp_ring_phase(&sq->ring, slot), &wqe);
  efa_dp_copy_wqe(efa_dp_ring_entry(&sq->ring, slot), &wqe, sq->ring.entry_size);
  return req_id;
}

/* Publishes slots [first, first + n) in claim order and rings unless flags has EFA_DP_WR_MORE. */
XPU_FUNC void efa_sq_publish(struct efa_sq *sq, uint32_t first, uint32_t n, uint32_t flags) {
  efa_dp_ring_publish(&sq->ring, first, n, (flags & EFA_DP_WR_MORE) != 0);
}

/* Check, claim one slot, write, publish. 0 or a negative FI_E* (see check/claim). */
XPU_FUNC int efa_sq_post(struct efa_sq *sq, const struct efa_dp_wr *wr) {
  int rc = efa_sq_check_wr(sq, wr);
  if (rc) return rc;
  uint32_t slot;
  rc = efa_sq_claim(sq, 1, &slot);
  if (rc) return rc;
  efa_sq_write(sq, slot, wr);
  efa_sq_publish(sq, slot, 1, wr->flags);
  return 0;
}

/*
 * Posts n work requests with one claim; the doorbell rings once (in max_batch
 * chunks) unless `flags` has EFA_DP_WR_MORE (per-wr MORE flags are ignored).
 * All or nothing: 0, or a negative FI_E* with nothing posted.
 */
XPU_FUNC int efa_sq_post_batch(struct efa_sq *sq, const struct efa_dp_wr *wrs, uint32_t n, uint32_t flags) {
  if (!wrs && n) return -FI_EINVAL;
  for (uint32_t i = 0; i < n; ++i) {
    int rc = efa_sq_check_wr(sq, &wrs[i]);
    if (rc) return rc;
  }
  uint32_t first;
  int rc = efa_sq_claim(sq, n, &first);
  if (rc) return rc;
  for (uint32_t i = 0; i < n; ++i) efa_sq_write(sq, first + i, &wrs[i]);
  efa_sq_publish(sq, first, n, flags);
  return 0;
}

/* Rings everything published (after posts with EFA_DP_WR_MORE). */
XPU_FUNC void efa_sq_flush(struct efa_sq *sq) { efa_dp_ring_flush(&sq->ring); }

/*
 * After consuming a TX CQE of this SQ: frees req_id, returns the wr's
 * context, gives its slot back. 0; -FI_EINVAL when req_id is not outstanding
 * (stale or bogus CQE; nothing is given back).
 */
XPU_FUNC int efa_sq_complete(struct efa_sq *sq, uint16_t req_id, uint64_t *ctx_p) {
  if (!sq) return -FI_EINVAL;
  int rc = efa_dp_reqs_free(&sq->reqs, req_id, ctx_p, NULL);
  if (rc) return rc;
  efa_dp_ring_give_back(&sq->ring, 1);
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_SQ_H_ */
