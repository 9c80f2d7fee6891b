// Compiles every device header with nvcc for sm_90 and calls its functions from
// device code, so host-only constructs in them fail the build. Nothing here runs.
#include "device/efa_completion.h"
#include "device/efa_dp.h"
#include "device/efa_io_defs.h"
#include "device/efa_io_layout.h"
#include "device/efa_io_status.h"
#include "device/efa_wr.h"

namespace {

__global__ void efa_io_formats_kernel(efa_io_tx_wqe* wqe, const efa_io_rx_cdesc_ex* cqe, int* out) {
  efa_io_tx_meta_desc_set_op_type(&wqe->meta, EFA_IO_RDMA_WRITE);
  efa_io_tx_meta_desc_set_phase(&wqe->meta, 1);
  efa_io_tx_buf_desc_set_addr(&wqe->data.sgl[0], 0x1000);
  out[0] = efa_io_cdesc_common_get_phase(&cqe->base.common);
  out[1] = efa_io_status_to_fi_errno(cqe->base.common.status);
  out[2] = efa_io_status_to_ibv_wc_status(cqe->base.common.status);
  out[3] = static_cast<int>(efa_io_rx_cdesc_ex_byte_len(cqe));
  out[4] = efa_io_status_name(cqe->base.common.status)[0];
  out[5] = static_cast<int>(efa_io_cq_db_make(1, 0, 1));
}

// Every data-path entry point from device code, one work-item per call.
__global__ void efa_dp_kernel(efa_sq* sq, efa_rq* rq, efa_cq* cq, const efa_dp_wr* wr, const efa_dp_sge* sge,
                              int* out) {
  out[0] = efa_sq_check_wr(sq, wr);
  out[1] = efa_sq_post(sq, wr);
  out[2] = efa_sq_post_batch(sq, wr, 1, EFA_DP_WR_MORE);
  uint32_t first = 0;
  if (efa_sq_claim(sq, 1, &first) == 0) {
    out[3] = efa_sq_write(sq, first, wr);
    efa_sq_publish(sq, first, 1, 0);
  }
  efa_sq_flush(sq);
  out[4] = efa_rq_post(rq, sge, 1, 7);
  efa_dp_cqe c;
  if (efa_cq_poll(cq, &c) == 0) {
    uint64_t ctx = 0;
    out[5] = c.q_type == EFA_IO_SEND_QUEUE ? efa_sq_complete(sq, c.req_id, &ctx) : efa_rq_complete(rq, c.req_id, &ctx);
    out[6] = efa_io_status_to_fi_errno(c.status);
  }
  out[7] = efa_cq_update_db(cq, 0) + efa_cq_arm(cq);
  efa_cq_ack_event(cq);
  out[8] = static_cast<int>(efa_dp_ring_inflight(&sq->ring) + efa_cq_consumed(cq));
  efa_io_rx_cdesc_ex raw{};
  efa_dp_nic_write_cqe(cq->buf, &raw, 1);
  uint64_t v64 = 0;
  out[9] = xpu_cas_u64(reinterpret_cast<uint64_t*>(out + 10), &v64, 1) + static_cast<int>(xpu_fetch_add_u64(&v64, 1));
}

// The shared work-request build and completion translation from device code.
__global__ void efa_wr_completion_kernel(efa_sq* sq, efa_rq* rq, const efa_dp_sge* sge, const efa_dp_cqe* q,
                                         uint8_t* entry, fi_cq_err_entry* err, uint32_t* stale, int* out) {
  efa_wr_args a{};
  a.op = EFA_DP_OP_SEND;
  a.num_sge = 1;
  a.sge = sge;
  a.flags = FI_REMOTE_CQ_DATA;
  const efa_wr_limits lim{4096, 1u << 30, 32};
  efa_dp_wr wr;
  out[0] = efa_wr_check_op(a.op, a.flags) + efa_wr_build(&a, &lim, &wr);
  const uint32_t idx = efa_comp_req_index(sq, rq, q);
  uint64_t ctx = 0;
  out[1] = efa_comp_take(sq, rq, q, &ctx);
  if (out[1]) out[2] = efa_comp_count_stale(stale);
  efa_comp c;
  efa_comp_from_cqe(q, ctx, idx, &c);
  efa_comp_write_entry(FI_CQ_FORMAT_DATA, &c, entry);
  efa_comp_write_err(&c, err);
  out[3] = static_cast<int>(efa_comp_entry_size(FI_CQ_FORMAT_TAGGED) + efa_comp_op_flags(q->q_type, q->op_type, 0));
}

}  // namespace

// Keep the kernels referenced so nvcc emits them.
void* xpufab_nvcc_check_formats_kernel() { return reinterpret_cast<void*>(&efa_io_formats_kernel); }
void* xpufab_nvcc_check_dp_kernel() { return reinterpret_cast<void*>(&efa_dp_kernel); }
void* xpufab_nvcc_check_wr_completion_kernel() { return reinterpret_cast<void*>(&efa_wr_completion_kernel); }
