// Completions: writing CQEs (fault-delayed entries, overrun detection, CQ events), TX and RX
// completions, and the completion counters.
#include <unistd.h>

#include <cstring>

#include "device/efa_cq.h"
#include "device/efa_io_defs.h"
#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

namespace {

uint32_t tx_cntr_op(uint8_t op) {
  switch (op) {
    case EFA_IO_RDMA_READ: return kCntrRdmaRead;
    case EFA_IO_RDMA_WRITE: return kCntrRdmaWrite;
    default: return kCntrSend;
  }
}

}  // namespace

bool DeviceImpl::cqe_fault(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn) {
  if (!cq->delayed.empty()) {  // keep the CQ in order behind a delayed entry
    cq->delayed.push_back(EmuCq::Delayed{cq->delayed.back().when, *cqe, qpn});
    return true;
  }
  FaultDecision d =
      ask(FaultContext{FaultPoint::kCompletionWrite, qpn, cq->produced & (cq->entries - 1), 0, false,
                       efa_io_cdesc_common_get_q_type(&cqe->base.common)},
          cqe->base.common.req_id);
  if (d.action == FaultAction::kDrop) return true;
  if (d.action == FaultAction::kFail) cqe->base.common.status = d.status;
  if (d.action == FaultAction::kDelay) {
    bump(kDelayedCqes);
    cq->delayed.push_back(EmuCq::Delayed{step_now_ + uint64_t{d.delay_us} * 1000, *cqe, qpn});
    cq_delayed_.push_back(cq);
    return true;
  }
  return false;
}

void DeviceImpl::release_cqes() {
  for (size_t i = 0; i < cq_delayed_.size();) {
    EmuCq* cq = cq_delayed_[i];
    while (!cq->delayed.empty() && cq->delayed.front().when <= step_now_) {
      EmuCq::Delayed e = cq->delayed.front();
      cq->delayed.pop_front();
      write_cqe_now(cq, &e.cqe, e.qpn, qp_by_num(e.qpn));  // its QP may be gone
    }
    if (cq->delayed.empty()) {
      cq_delayed_[i] = cq_delayed_.back();
      cq_delayed_.pop_back();
    } else {
      ++i;
    }
  }
}

void DeviceImpl::write_cqe_now(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn, EmuQp* qp) {
  uint32_t slot = cq->produced & (cq->entries - 1);
  if (cq->overrun) return;
  // The consumer's index only grows, so while the ring has room beyond the index read last,
  // it has room beyond the current one: the doorbell word (a line the consumer writes) is read
  // only when the ring looks full.
  if (static_cast<uint16_t>(static_cast<uint16_t>(cq->produced) - cq->ci_seen) >= cq->entries) {
    const uint32_t dbv = load_db(cq->db);
    if (dbv != 0) cq->db_written = true;
    if (cq->db_written) {
      cq->ci_seen = efa_io_cq_db_get_consumer_index(dbv);
      if (static_cast<uint16_t>(static_cast<uint16_t>(cq->produced) - cq->ci_seen) >= cq->entries) {
        return cq_overrun(cq, qpn, slot);
      }
    } else {
      // A consumer that reports nothing cannot be checked: look again a ring later (the pass
      // that first sees its doorbell written sets the index it reports).
      cq->ci_seen = static_cast<uint16_t>(cq->produced);
    }
  }
  uint8_t phase = static_cast<uint8_t>(((cq->produced >> cq->log2_entries) & 1) ^ 1);
  // Everything but the first word, then the first word (with the phase) with release, so a
  // poller that sees the new phase sees the whole entry (the data path's own NIC-side writer).
  efa_dp_nic_write_cqe(cq->ring + size_t{slot} * kCqeSize, cqe, phase);
  cq->produced++;
  bump(kCqes);
  bool ok = cqe->base.common.status == EFA_IO_COMP_STATUS_OK;
  if (!ok) bump(kErrorCqes);
  uint8_t q = efa_io_cdesc_common_get_q_type(&cqe->base.common);
  if (qp != nullptr) {
    if (q == EFA_IO_SEND_QUEUE) qp->qs.tx_cqes++; else qp->qs.rx_cqes++;
    if (!ok) qp->qs.error_cqes++;
  }
  if (trace_) trace_cqe(cqe, qpn, slot);
  if (cq->armed) signal_cq(cq);
}

// Out of line, with the other rare steps below: the common write keeps few registers to save.
void DeviceImpl::cq_overrun(EmuCq* cq, uint32_t qpn, uint32_t slot) {
  cq->overrun = true;
  diag(DiagKind::kCqOverrun, qpn, slot, "CQE dropped; the CQ stops here");
  overrun_notify_.push_back(cq);
}

void DeviceImpl::trace_cqe(const efa_io_rx_cdesc_ex* cqe, uint32_t qpn, uint32_t slot) {
  uint8_t q = efa_io_cdesc_common_get_q_type(&cqe->base.common);
  uint32_t len = q == EFA_IO_RECV_QUEUE ? cqe->base.length : 0;
  tr(TraceKind::kCqe, qpn, slot, q, efa_io_cdesc_common_get_op_type(&cqe->base.common),
     cqe->base.common.status, len, cqe->base.common.req_id);
}

void DeviceImpl::signal_cq(EmuCq* cq) {
  cq->armed = false;
  uint64_t one = 1;
  ssize_t n = write(cq->efd, &one, sizeof(one));
  (void)n;
}

void DeviceImpl::count_bound(EmuQp* qp, uint32_t cntr_op, bool ok) {
  for (auto& c : qp->cntrs) {
    if (!(c.second & cntr_op)) continue;
    uint64_t* target = ok ? c.first->value : c.first->error;
    if (target != nullptr) __atomic_fetch_add(target, 1, __ATOMIC_RELEASE);
  }
}

void DeviceImpl::complete_tx(EmuQp* qp, uint16_t req_id, const efa_io_req_id_ex& ex, uint8_t op,
                       uint8_t status, bool comp_req) {
  qp->sq_completed++;
  count(qp, tx_cntr_op(op), status == EFA_IO_COMP_STATUS_OK);
  if (!comp_req && status == EFA_IO_COMP_STATUS_OK) return;
  efa_io_rx_cdesc_ex cqe;
  std::memset(&cqe, 0, sizeof(cqe));
  auto* tx = reinterpret_cast<efa_io_tx_cdesc*>(&cqe);
  tx->common.req_id = req_id;
  tx->common.status = status;
  tx->common.qp_num = static_cast<uint16_t>(qp->qpn_);
  efa_io_cdesc_common_set_q_type(&tx->common, EFA_IO_SEND_QUEUE);
  efa_io_cdesc_common_set_op_type(&tx->common, op <= EFA_IO_RDMA_WRITE ? op : 0);
  tx->req_id_ex = ex;
  write_cqe(qp->send_cq, &cqe, qp);
}

void DeviceImpl::rx_cqe(EmuQp* qp, uint16_t req_id, uint8_t status, uint8_t op, uint32_t len,
                  const Packet& pkt, bool unsolicited) {
  efa_io_rx_cdesc_ex cqe;
  std::memset(&cqe, 0, sizeof(cqe));
  cqe.base.common.req_id = req_id;
  cqe.base.common.status = status;
  cqe.base.common.qp_num = static_cast<uint16_t>(qp->qpn_);
  efa_io_cdesc_common_set_q_type(&cqe.base.common, EFA_IO_RECV_QUEUE);
  efa_io_cdesc_common_set_op_type(&cqe.base.common, op);
  efa_io_cdesc_common_set_has_imm(&cqe.base.common, pkt.has_imm ? 1 : 0);
  efa_io_cdesc_common_set_unsolicited(&cqe.base.common, unsolicited ? 1 : 0);
  cqe.base.length = static_cast<uint16_t>(len);
  cqe.base.src_qp_num = pkt.src_qpn;
  cqe.base.imm = pkt.has_imm ? pkt.imm : 0;
  EmuAh* ah = ah_for_gid(qp->pd, pkt.src);
  cqe.base.ah = ah != nullptr ? ah->ahn_ : kAhUnknown;
  if (op == EFA_IO_RDMA_WRITE) {
    cqe.u.rdma_write.length_hi = static_cast<uint16_t>(len >> 16);
  } else if (ah == nullptr && qp->recv_cq->with_sgid) {
    std::memcpy(cqe.u.src_addr, pkt.src.data(), 16);
  }
  count(qp, kCntrRecv, status == EFA_IO_COMP_STATUS_OK);
  write_cqe(qp->recv_cq, &cqe, qp);
}

}  // namespace emu
}  // namespace xpufab
