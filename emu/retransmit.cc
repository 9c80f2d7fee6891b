// Retransmission, on every fabric: each request's timeout comes from the round trip measured to
// its peer (RFC 6298), backs off per expiry, and a request that answers to three later-sent
// requests overtook is sent again at once (fast retransmit). Answers echo the transmission they
// answer (Packet::attempt), so every answer, a late one too, is an unambiguous RTT sample.
#include <algorithm>
#include <cstring>
#include <vector>

#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

void DeviceImpl::arm_rto(TxOp* op, uint64_t token) {
  PeerPath* path = op->path;
  auto& q = path->in_flight;
  // Dead entries leave from the front (on_answer does the same), so the queue holds about as
  // many entries as there are requests in flight.
  while (!q.empty()) {
    TxOp* t = find_op(q.front().second);
    if (t != nullptr && t->path == path && t->tx_seq == q.front().first) break;
    q.pop_front();
  }
  op->tx_seq = ++tx_seq_;  // an earlier entry of this op is dead from now on
  q.push_back({op->tx_seq, token});
  op->later_answered = 0;
  op->sent_ns = step_now_;
  if (op->state != OpState::kAwaitResponse || op->rto_ns == 0) {
    // A first transmission, or the first after an answer (RNR): a fresh timeout from the path.
    op->rto_ns = path->rto_ns;
  }
  op->state = OpState::kAwaitResponse;
  // The last timeout ends when the peer has been silent for the limit, not later.
  op->deadline_ns = step_now_ + op->rto_ns;
  uint64_t limit = op->silent_since_ns + silence_limit_ns_;
  if (limit > step_now_) op->deadline_ns = std::min(op->deadline_ns, limit);
  arm_path_timer(path, op->deadline_ns);
}

void DeviceImpl::arm_path_timer(PeerPath* path, uint64_t when) {
  if (path->timer_ns != 0 && path->timer_ns <= when) return;
  path->timer_ns = when;
  arm_timer(kPathTimer | path->index, when);
}

void DeviceImpl::fire_path(uint64_t when, uint32_t index) {
  PeerPath* path = path_list_[index];
  if (path->timer_ns != when) return;  // fired already in this pass, or moved earlier since
  path->timer_ns = 0;
  // The path's transmissions due now fire in the order of their deadlines, then of sending (as
  // timers of their own would); the earliest later deadline keeps the path's timer armed.
  due_tx_.clear();
  uint64_t next = 0;
  for (size_t i = 0; i < path->in_flight.size(); ++i) {
    const auto& e = path->in_flight[i];
    TxOp* t = find_op(e.second);
    if (t == nullptr || t->path != path || t->tx_seq != e.first) continue;
    if (t->deadline_ns <= step_now_) {
      due_tx_.push_back(DueTx{t->deadline_ns, e.first, e.second});
    } else if (next == 0 || t->deadline_ns < next) {
      next = t->deadline_ns;
    }
  }
  if (next != 0) arm_path_timer(path, next);
  if (due_tx_.size() > 1) {
    std::sort(due_tx_.begin(), due_tx_.end(), [](const DueTx& a, const DueTx& b) {
      return a.when != b.when ? a.when < b.when : a.tx_seq < b.tx_seq;
    });
  }
  // fire_timer may retransmit, which appends to in_flight (hence the list) and arms this timer
  // again, never fire_path. It checks each op again: an earlier one may have moved it on.
  for (const DueTx& d : due_tx_) fire_timer(d.when, d.token);
}

void DeviceImpl::retransmit(TxOp* op, uint64_t token) {
  op->retransmits++;
  op->unanswered++;
  bump(kRetransmits);
  op->qp->qs.retransmits++;
  if (trace_) tr(TraceKind::kRetransmit, op->qp->qpn_, op->retransmits, op->op, 0, 0, 0, token);
  send_packet(op, token);
}

void DeviceImpl::rto_expired(TxOp* op, uint64_t token) {
  // RFC 6298 5.5: back off, and keep the backed-off value for the path until a new sample.
  op->rto_ns = std::min(op->rto_ns * 2, max_rto_ns_);
  op->path->rto_ns = std::max(op->path->rto_ns, op->rto_ns);
  retransmit(op, token);
}

void DeviceImpl::on_answer(TxOp* op, uint8_t attempt) {
  PeerPath* path = op->path;
  const uint64_t answered_seq = op->tx_seq;
  op->tx_seq = 0;  // its entry is dead
  op->silent_since_ns = step_now_;
  op->unanswered = 0;
  // The answer names the transmission it answers: one of the last four times the path (a
  // duplicate answer, arriving once the op moved on, does not).
  uint32_t last = op->attempts - 1;
  uint32_t back = (last - attempt) & 63;
  uint64_t sent = op->sent_at[(last - back) & 3];
  if (op->state == OpState::kAwaitResponse && op->attempts != 0 && back < 4 && back <= last &&
      step_now_ >= sent) {
    sample_rtt(path, step_now_ - sent);
  }
  // Fast retransmit: every answer selectively acknowledges one request; a request still
  // unanswered after answers to three requests sent after it, and older than the slowest recent
  // answer (so that a path that delays some packets does not look lossy), is taken for lost.
  auto live = [&](const std::pair<uint64_t, uint64_t>& e) -> TxOp* {
    TxOp* t = find_op(e.second);
    return t != nullptr && t->path == path && t->tx_seq == e.first ? t : nullptr;
  };
  auto& q = path->in_flight;
  // The common case: the answered transmission is the oldest outstanding one, so no earlier
  // request is left to count the answer against.
  if (!q.empty() && q.front().first == answered_seq) {
    q.pop_front();
    return;
  }
  while (!q.empty() && live(q.front()) == nullptr) q.pop_front();
  for (size_t i = 0; i < q.size() && q[i].first < answered_seq; ++i) {
    TxOp* earlier = live(q[i]);
    if (earlier == nullptr) continue;  // answered or resent since
    if (earlier->state == OpState::kAwaitResponse &&
        ++earlier->later_answered >= kAnswersBeforeFastRetransmit) {
      // Sent again by fire_timer (without back-off) at the end of this pass at the earliest:
      // its own answer may be further down the batch this pass reads in a shuffled order.
      uint64_t due = std::max(earlier->sent_ns + path->rtt_high_ns + 1, step_now_);
      if (due < earlier->deadline_ns) {
        earlier->deadline_ns = due;
        arm_timer(q[i].second, due);
      }
    }
  }
}

void DeviceImpl::sample_rtt(PeerPath* path, uint64_t r) {
  // RFC 6298 2.2/2.3 (alpha 1/8, beta 1/4, K 4); the clock granularity term is the floor.
  if (!path->have_rtt) {
    path->have_rtt = true;
    path->srtt_ns = r;
    path->rttvar_ns = r / 2;
  } else {
    uint64_t err = r > path->srtt_ns ? r - path->srtt_ns : path->srtt_ns - r;
    path->rttvar_ns = (3 * path->rttvar_ns + err) / 4;
    path->srtt_ns = (7 * path->srtt_ns + r) / 8;
  }
  path->rto_ns = std::min(std::max(path->srtt_ns + 4 * path->rttvar_ns, min_rto_ns_), max_rto_ns_);
  path->rtt_high_ns = std::max(r, path->rtt_high_ns - path->rtt_high_ns / 256);
}

void DeviceImpl::remember_done(const TxOp& op, uint64_t token) {
  if (op.attempts <= 1) return;  // only retransmitted ops can be answered late
  PeerPath::Done& d = op.path->done[op.path->done_next++ % 64];
  d.token = token;
  d.attempts = op.attempts;
  std::memcpy(d.sent_at, op.sent_at, sizeof(d.sent_at));
}

void DeviceImpl::on_late_answer(const Gid& src, uint64_t token, uint8_t attempt) {
  auto it = paths_.find(src);
  if (it == paths_.end()) return;
  PeerPath* path = &it->second;
  for (const PeerPath::Done& d : path->done) {
    if (d.token != token || d.attempts == 0) continue;
    uint32_t last = d.attempts - 1;
    uint32_t back = (last - attempt) & 63;
    // Only an earlier transmission than the one that completed the op teaches anything.
    if (back != 0 && back < 4 && back <= last && step_now_ >= d.sent_at[(last - back) & 3]) {
      sample_rtt(path, step_now_ - d.sent_at[(last - back) & 3]);
    }
    return;
  }
}

}  // namespace emu
}  // namespace xpufab
