// The doorbell page and what a changed doorbell means for its SQ, RQ or CQ.
#include "emu/doorbells.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

DoorbellPage::~DoorbellPage() { free_queue(words_, size_t{capacity_} * sizeof(uint32_t)); }

int DoorbellPage::init(uint32_t capacity) {
  capacity_ = capacity;
  words_ = reinterpret_cast<uint32_t*>(alloc_queue(capacity * sizeof(uint32_t)));
  if (words_ == nullptr) return -ENOMEM;
  shadow_.assign(capacity, 0);
  owner_.assign(capacity, DbOwner{});
  is_hot_.assign(capacity, 0);
  return 0;
}

int DoorbellPage::alloc(DbKind kind, void* obj, uint32_t* index_p) {
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    if (high_ >= capacity_) return -ENOMEM;
    idx = high_;
    __atomic_store_n(&high_, high_ + 1, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&words_[idx], 0u, __ATOMIC_RELAXED);
  set_shadow(idx, 0);
  owner_[idx] = DbOwner{kind, obj, 0};
  *index_p = idx;
  return 0;
}

void DoorbellPage::free(uint32_t index) {
  owner_[index] = DbOwner{};
  free_.push_back(index);
}

void DoorbellPage::forget_hot(uint32_t index) {
  if (!is_hot_[index]) return;
  is_hot_[index] = 0;
  hot_.erase(std::remove(hot_.begin(), hot_.end(), index), hot_.end());
}

void DoorbellPage::mark_hot(uint32_t index, uint64_t pass) {
  owner_[index].hot_until = pass + kHotPasses;
  if (!is_hot_[index]) {
    is_hot_[index] = 1;
    hot_.push_back(index);
  }
}

void DeviceImpl::scan_doorbells(int* work) {
  // The engine thread slept since the last full comparison (engine_loop). A request made while
  // this pass clears the flag is met by the scan below, which comes after.
  if (full_scan_due_.load(std::memory_order_relaxed)) {
    full_scan_due_.store(false, std::memory_order_relaxed);
    db_.request_full_scan();
  }
  db_.scan(pass_, [&](uint32_t index, uint32_t value) { on_doorbell(index, value, work); });
}

void DeviceImpl::on_doorbell(uint32_t index, uint32_t value, int* work) {
  (void)published_writes_.load(std::memory_order_acquire);  // see publish_writes()
  DbOwner& owner = db_.owner(index);
  db_.mark_hot(index, pass_);
  if (opt_.faults != nullptr || trace_) {
    uint32_t qpn = 0;
    uint8_t queue = 0;
    if (owner.kind == DbKind::kSq || owner.kind == DbKind::kRq) {
      qpn = static_cast<EmuQp*>(owner.obj)->qpn_;
      queue = owner.kind == DbKind::kSq ? EFA_IO_SEND_QUEUE : EFA_IO_RECV_QUEUE;
    }
    if (opt_.faults != nullptr) {
      FaultDecision d = ask(FaultContext{FaultPoint::kDoorbellRead, qpn, index, 0, false, queue}, value);
      if (d.action == FaultAction::kDrop) {  // a stalled doorbell: seen again next pass
        if (!d.repeat) bump(kStalls);
        owner.stalled_in = pass_;
        return;
      }
    }
    if (trace_) tr(TraceKind::kDoorbell, qpn, index, queue, 0, 0, 0, value);
  }
  db_.set_shadow(index, value);
  bump(kDoorbells);
  ++*work;
  switch (owner.kind) {
    case DbKind::kSq: {
      auto* qp = static_cast<EmuQp*>(owner.obj);
      uint16_t pc = static_cast<uint16_t>(value);
      uint16_t advance = static_cast<uint16_t>(pc - qp->sq_db_seen);
      if (opt_.check_batch && advance > qp->max_batch) {
        char d[64];
        std::snprintf(d, sizeof(d), "%u WQEs, max_batch %u", advance, qp->max_batch);
        diag(DiagKind::kBatchExceeded, qp->qpn_, qp->sq_db_seen & (qp->sq_entries - 1), d);
      }
      if (static_cast<uint16_t>(pc - qp->sq_completed) > qp->sq_entries) {
        char d[64];
        std::snprintf(d, sizeof(d), "producer %u, completed %u, depth %u", pc, qp->sq_completed,
                      qp->sq_entries);
        diag(DiagKind::kSqOverrun, qp->qpn_, pc & (qp->sq_entries - 1), d);
      }
      qp->sq_db_seen = pc;
      if (!qp->sq_pending) {
        qp->sq_pending = true;
        sq_pending_.push_back(qp);
      }
      break;
    }
    case DbKind::kRq: {
      auto* qp = static_cast<EmuQp*>(owner.obj);
      uint16_t pc = static_cast<uint16_t>(value);
      if (static_cast<uint16_t>(pc - qp->rq_cons) > qp->rq_entries) {
        char d[64];
        std::snprintf(d, sizeof(d), "producer %u, consumed %u, depth %u", pc, qp->rq_cons,
                      qp->rq_entries);
        diag(DiagKind::kRqOverrun, qp->qpn_, pc & (qp->rq_entries - 1), d);
      }
      if (qp->st == QpState::kErr) flush_rq(qp);
      break;
    }
    case DbKind::kCq: {
      auto* cq = static_cast<EmuCq*>(owner.obj);
      cq->db_written = true;
      cq->ci_seen = efa_io_cq_db_get_consumer_index(value);  // write_cqe_now's room check
      // The doorbell is sampled, not seen write by write: libefa's arm (arm bit, fresh cmd_sn)
      // is often overwritten by its next consumer-index update (same cmd_sn, no arm bit) before
      // a pass reads the word. cmd_sn only advances when an event is taken, and the arm that
      // follows carries it, so a new cmd_sn counts as an arm. At worst that raises one extra
      // event; missing the arm left a waiter on the channel with none.
      uint32_t sn = efa_io_cq_db_get_cmd_sn(value);
      bool new_sn = sn != cq->arm_sn_seen;
      cq->arm_sn_seen = sn;
      if ((efa_io_cq_db_get_arm(value) || new_sn) && cq->efd >= 0) cq->armed = true;
      break;
    }
    case DbKind::kNone:
      break;
  }
}

}  // namespace emu
}  // namespace xpufab
