// The QP state machine (reference/efa-queues.md 2.6), failing a QP, and flushing what it has
// outstanding.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

void DeviceImpl::set_failed_locked(EmuQp* qp, int /*status*/, std::vector<EmuQp*>* failed) {
  if (qp->st == QpState::kErr || qp->st == QpState::kReset) return;
  qp->st = QpState::kErr;
  flush_qp(qp);
  if (failed != nullptr) failed->push_back(qp);
}

void DeviceImpl::notify_failed(const std::vector<EmuQp*>& failed, int status) {
  EventHandler* h;
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    h = handler_;
  }
  if (h == nullptr) return;
  for (EmuQp* qp : failed) h->handle_failure(qp, status);
}

int DeviceImpl::set_qp_failed(Qp* q, int status) {
  std::vector<EmuQp*> failed;
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    auto* qp = live_as<EmuQp>(q);
    if (qp == nullptr || qp->st == QpState::kReset) return -EINVAL;
    set_failed_locked(qp, status, &failed);
  }
  notify_failed(failed, status);
  return 0;
}


// reference/efa-queues.md 2.6: the SRD QP state table, which UD shares but for RNR_RETRY.
int DeviceImpl::modify_qp_locked(EmuQp* qp, const QpAttr& attr, uint32_t mask) {
  constexpr uint32_t kKnown = kQpAttrState | kQpAttrCurState | kQpAttrEnSqdAsyncNotify |
                              kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey | kQpAttrSqPsn |
                              kQpAttrRnrRetry;
  if ((mask & ~kKnown) != 0) return -EINVAL;
  QpState cur = qp->st;
  if ((mask & kQpAttrCurState) && attr.cur_state != cur) return -EINVAL;
  QpState next = (mask & kQpAttrState) ? attr.state : cur;
  if (static_cast<uint8_t>(next) > static_cast<uint8_t>(QpState::kErr)) return -EINVAL;
  uint32_t attrs = mask & ~(kQpAttrState);
  uint32_t req = 0, opt = 0;
  bool ok = true;
  using S = QpState;
  if (next == S::kReset) {
    opt = 0;
  } else if (next == S::kErr) {
    ok = cur != S::kReset;
  } else if (cur == S::kReset && next == S::kInit) {
    req = kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey;
  } else if (cur == S::kInit && next == S::kInit) {
    opt = kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey;
  } else if (cur == S::kInit && next == S::kRtr) {
    opt = kQpAttrPkeyIndex | kQpAttrQkey;
  } else if (cur == S::kRtr && next == S::kRts) {
    req = kQpAttrSqPsn;
    opt = kQpAttrCurState | kQpAttrQkey | kQpAttrRnrRetry;
  } else if (cur == S::kRts && next == S::kRts) {
    opt = kQpAttrCurState | kQpAttrQkey;
  } else if (cur == S::kRts && next == S::kSqd) {
    opt = kQpAttrEnSqdAsyncNotify;
  } else if (cur == S::kSqd && next == S::kRts) {
    opt = kQpAttrCurState | kQpAttrQkey;
  } else if (cur == S::kSqd && next == S::kSqd) {
    opt = kQpAttrPkeyIndex | kQpAttrQkey;
  } else if (cur == S::kSqe && next == S::kRts) {
    opt = kQpAttrCurState | kQpAttrQkey;
  } else {
    ok = false;
  }
  if (!ok || (attrs & req) != req || (attrs & ~(req | opt | kQpAttrCurState)) != 0) return -EINVAL;
  if ((attrs & kQpAttrCurState) && !(opt & kQpAttrCurState) && next != S::kReset && next != S::kErr) {
    return -EINVAL;
  }
  if ((mask & kQpAttrPkeyIndex) && attr.pkey_index != 0) return -EINVAL;
  if ((mask & kQpAttrPort) && attr.port != 1) return -EINVAL;
  if ((mask & kQpAttrQkey) && (attr.qkey & 0x80000000u)) return -EINVAL;  // privileged QKEY
  if (mask & kQpAttrRnrRetry) {
    if (qp->ud) return -EINVAL;  // UD never retries (the kernel's UD table has no RNR_RETRY)
    if (attr.rnr_retry > 7) return -EINVAL;
    if (!(profile_->device_caps & kCapRnrRetry)) return -EOPNOTSUPP;
  }
  // Apply.
  if (mask & kQpAttrQkey) qp->qkey = attr.qkey;
  if (mask & kQpAttrRnrRetry) qp->rnr_retry = attr.rnr_retry;
  if (next == S::kErr && cur != S::kErr) {
    qp->st = S::kErr;
    flush_qp(qp);
  } else if (next == S::kReset && cur != S::kReset) {
    // The device forgets the rings; userspace restarts its producer counts at 0.
    for (uint32_t i = 0; i < op_slots_.size(); ++i) {
      if (op_slots_[i].used && op_slots_[i].op.qp == qp) erase_op(token_of(i));
    }
    qp->outstanding = 0;
    sq_pending_.erase(std::remove(sq_pending_.begin(), sq_pending_.end(), qp), sq_pending_.end());
    qp->sq_pending = false;
    __atomic_store_n(qp->sq_db, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(qp->rq_db, 0u, __ATOMIC_RELAXED);
    db_.set_shadow(qp->sq_db_index, 0);
    db_.set_shadow(qp->rq_db_index, 0);
    qp->sq_db_seen = qp->sq_fetch = qp->sq_completed = 0;
    qp->rq_cons = 0;
    qp->stale_reported = -1;
    std::memset(qp->sq_buf, 0, size_t{qp->sq_entries} * qp->wqe_size);
    qp->st = S::kReset;
    qp->qkey = 0;
    qp->rnr_retry = 7;
  } else {
    qp->st = next;
  }
  return 0;
}

// Completes everything the QP has outstanding with FLUSHED: WQEs in flight, WQEs doorbelled but
// not fetched, and posted receive WQEs.
void DeviceImpl::flush_qp(EmuQp* qp) {
  for (uint32_t i = 0; i < op_slots_.size(); ++i) {
    if (!op_slots_[i].used || op_slots_[i].op.qp != qp) continue;
    TxOp& op = op_slots_[i].op;
    complete_tx(qp, op.req_id, op.req_id_ex, op.op, EFA_IO_COMP_STATUS_FLUSHED, op.comp_req);
    erase_op(token_of(i));
  }
  qp->outstanding = 0;
  qp->sq_db_seen = static_cast<uint16_t>(load_db(qp->sq_db));
  db_.set_shadow(qp->sq_db_index, qp->sq_db_seen);
  while (qp->sq_fetch != qp->sq_db_seen) {
    uint32_t slot = qp->sq_fetch & (qp->sq_entries - 1);
    efa_io_tx_meta_desc meta;
    std::memcpy(&meta, qp->sq_buf + size_t{slot} * qp->wqe_size, sizeof(meta));
    qp->sq_fetch++;
    complete_tx(qp, meta.req_id, meta.req_id_ex, efa_io_tx_meta_desc_get_op_type(&meta) & 3,
                EFA_IO_COMP_STATUS_FLUSHED, true);
  }
  flush_rq(qp);
}

void DeviceImpl::flush_rq(EmuQp* qp) {
  Packet none;
  RxWqe rx;
  int r;
  while ((r = take_rx_wqe(qp, &rx)) != 0) {
    if (r > 0) rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_FLUSHED, EFA_IO_SEND, 0, none, false);
  }
}

}  // namespace emu
}  // namespace xpufab
