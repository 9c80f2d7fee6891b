/*
 * efa_wr.h - the send-queue work request of a libfabric post, built once for
 * the host provider (fi_send, fi_write, fi_read, ...) and for device code
 * (fi_xpu_send, fi_xpu_write, fi_xpu_read). Host and nvcc; valid C11 and
 * C++17.
 *
 * The callers turn their own buffer descriptions into SGEs (the host from
 * iovecs and struct fid_mr descriptors, device code from fi_mr_get_xpu_desc
 * bytes) and their address into the peer's AH, QPN and QKEY; everything from
 * there on is here: the libfabric flags a WQE encodes, the size limits and the
 * error codes.
 *
 *   FI_REMOTE_CQ_DATA  SEND / RDMA write carry the low 32 bits of `data` as
 *                      immediate data; an RDMA read with it is -FI_EINVAL
 *   FI_INJECT          the SGEs' bytes go into the WQE (inline)
 *   FI_MORE            the doorbell is deferred (EFA_DP_WR_MORE)
 *   anything else      not encoded (completion flags are the callers')
 */
#ifndef XPUFAB_DEVICE_EFA_WR_H_
#define XPUFAB_DEVICE_EFA_WR_H_

#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "device/efa_sq.h"
#include "device/xpu_func.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sizes an operation may not exceed. */
struct efa_wr_limits {
  uint32_t max_msg;    /* largest SEND: the MTU */
  uint32_t max_rdma;   /* largest RDMA read/write */
  uint32_t max_inline; /* largest FI_INJECT send */
};

/* One post: the operation, its local buffers, the peer and the libfabric arguments. */
struct efa_wr_args {
  uint32_t op; /* enum efa_dp_op */
  uint32_t num_sge;
  const struct efa_dp_sge *sge;
  uint16_t ah; /* the peer (fi_av_lookup2 / the AV entry) */
  uint16_t dest_qpn;
  uint32_t qkey;
  uint64_t remote_addr; /* RDMA */
  uint64_t key;         /* RDMA: the remote key, 32 bits on EFA */
  uint64_t data;        /* immediate data with FI_REMOTE_CQ_DATA */
  uint64_t context;     /* what the completion reports as op_context */
  uint64_t flags;       /* FI_REMOTE_CQ_DATA, FI_INJECT, FI_MORE (others ignored) */
};

/* The rule on (op, flags) alone, checked before anything else: 0 or -FI_EINVAL. */
XPU_FUNC int efa_wr_check_op(uint32_t op, uint64_t flags) {
  if (op == EFA_DP_OP_RDMA_READ && (flags & FI_REMOTE_CQ_DATA)) return -FI_EINVAL;
  return 0;
}

/*
 * Fills *wr (zeroed first). 0; -FI_EINVAL (see efa_wr_check_op, more SGEs
 * than a WQE has); -FI_EMSGSIZE (inline data above max_inline, a SEND above
 * max_msg, RDMA above max_rdma). The queue-specific checks are
 * efa_sq_check_wr's.
 */
XPU_FUNC int efa_wr_build(const struct efa_wr_args *a, const struct efa_wr_limits *lim, struct efa_dp_wr *wr) {
  memset(wr, 0, sizeof(*wr));
  int rc = efa_wr_check_op(a->op, a->flags);
  if (rc) return rc;
  if (a->num_sge > EFA_IO_TX_DESC_NUM_BUFS || (a->num_sge && !a->sge)) return -FI_EINVAL;
  uint64_t total = 0;
  for (uint32_t i = 0; i < a->num_sge; ++i) total += a->sge[i].length;
  if (a->flags & FI_INJECT) {
    if (total > lim->max_inline) return -FI_EMSGSIZE;
    wr->flags |= EFA_DP_WR_INLINE;
  }
  if (total > (a->op == EFA_DP_OP_SEND ? lim->max_msg : lim->max_rdma)) return -FI_EMSGSIZE;
  wr->op = a->op;
  wr->ah = a->ah;
  wr->dest_qpn = a->dest_qpn;
  wr->qkey = a->qkey;
  wr->num_sge = a->num_sge;
  for (uint32_t i = 0; i < a->num_sge; ++i) wr->sge[i] = a->sge[i];
  wr->remote_addr = a->remote_addr;
  wr->rkey = (uint32_t)a->key;
  if (a->flags & FI_REMOTE_CQ_DATA) {
    wr->flags |= EFA_DP_WR_IMM;
    wr->imm = (uint32_t)a->data;
  }
  if (a->flags & FI_MORE) wr->flags |= EFA_DP_WR_MORE;
  wr->context = a->context;
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_WR_H_ */
