// The requester: fetching WQEs from the SQ, executing them (wqe_decode.h parses the bytes), sending
// request packets, response and RNR timers (retransmission itself: retransmit.cc), and handling
// responses.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"
#include "emu/wqe_decode.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

namespace {

// Statuses a responder may put on the wire (reference/efa-queues.md 1.2).
bool known_status(uint8_t s) { return s <= EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE || s == EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH; }

}  // namespace

int DeviceImpl::process_sq(EmuQp* qp, int budget) {
  int done = 0;
  while (qp->sq_fetch != qp->sq_db_seen && done < budget) {
    uint16_t pc = qp->sq_fetch;
    uint32_t slot = pc & (qp->sq_entries - 1);
    alignas(8) uint8_t wqe[EFA_IO_TX_WQE_128_SIZE];
    std::memcpy(wqe, qp->sq_buf + size_t{slot} * qp->wqe_size, qp->wqe_size);
    auto* meta = reinterpret_cast<efa_io_tx_meta_desc*>(wqe);
    uint8_t expect = static_cast<uint8_t>((pc >> qp->sq_log2) & 1);
    if (qp->st != QpState::kErr && (efa_io_tx_meta_desc_get_meta_desc(meta) == 0 ||
                                    efa_io_tx_meta_desc_get_phase(meta) != expect)) {
      // Not written yet: wait for it rather than execute stale bytes.
      if (qp->stale_reported != pc) {
        qp->stale_reported = pc;
        char d[64];
        std::snprintf(d, sizeof(d), "pc %u expects phase %u", pc, expect);
        diag(DiagKind::kStaleWqe, qp->qpn_, slot, d);
      }
      break;
    }
    qp->sq_fetch++;
    bump(kWqes);
    qp->qs.wqes++;
    ++done;
    if (trace_) {
      tr(TraceKind::kWqeFetch, qp->qpn_, slot, efa_io_tx_meta_desc_get_op_type(meta), 0, 0, wqe_length(wqe),
         meta->req_id);
    }
    execute_wqe(qp, pc, wqe);
  }
  return done;
}

void DeviceImpl::execute_wqe(EmuQp* qp, uint16_t pc, const uint8_t* wqe) {
  const WqeDecode d = decode_wqe(wqe, qp->wqe_size, *profile_);
  const WqeRequest& r = d.req;
  auto fail = [&](uint8_t status) { complete_tx(qp, r.req_id, r.req_id_ex, r.cqe_op, status, r.comp_req); };
  if (qp->st == QpState::kErr) return fail(EFA_IO_COMP_STATUS_FLUSHED);
  if (qp->st != QpState::kRts && qp->st != QpState::kSqd) {
    return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  }
  if (opt_.faults != nullptr) {
    FaultContext c{FaultPoint::kWqeFetch, qp->qpn_, pc & (qp->sq_entries - 1u), r.op, false,
                   EFA_IO_SEND_QUEUE};
    c.size = wqe_length(wqe);
    EmuAh* peer = r.ah < ahs_.size() ? ahs_[r.ah] : nullptr;
    if (peer != nullptr) {
      c.has_peer = true;
      c.peer = peer->gid;
    }
    FaultDecision fd = ask(c, r.req_id);
    if (fd.action == FaultAction::kFail) return fail(fd.status);
    if (fd.action == FaultAction::kDrop) return;  // the WQE vanished: no completion ever
  }
  // A bad length ranks below the AH (wqe_decode.h).
  if (d.status != EFA_IO_COMP_STATUS_OK && d.status != EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH) {
    return fail(d.status);
  }
  EmuAh* ah = r.ah < ahs_.size() ? ahs_[r.ah] : nullptr;
  if (ah == nullptr || ah->pd != qp->pd) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH);
  if (d.status != EFA_IO_COMP_STATUS_OK) return fail(d.status);
  if (qp->ud && r.op != EFA_IO_SEND) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);

  // A request is built where it is kept until answered (a datagram, sent once, on the stack).
  uint8_t status;
  if (qp->ud) {
    TxOp t;
    if ((status = build_request(qp, r, ah, &t)) != EFA_IO_COMP_STATUS_OK) return fail(status);
    return send_datagram(std::move(t));
  }
  const uint32_t idx = claim_op_slot();
  if ((status = build_request(qp, r, ah, &op_slots_[idx].op)) != EFA_IO_COMP_STATUS_OK) {
    release_op_slot(idx);
    return fail(status);
  }
  start_op(idx);
}

uint8_t DeviceImpl::build_request(EmuQp* qp, const WqeRequest& r, EmuAh* ah, TxOp* op) {
  const bool ud = qp->ud;
  TxOp& t = *op;
  t.qp = qp;
  t.req_id = r.req_id;
  t.req_id_ex = r.req_id_ex;
  t.op = r.op;
  t.comp_req = r.comp_req;
  t.dst = ah->gid;
  if (!ud) t.path = ah->path != nullptr ? ah->path : (ah->path = path_to(ah->gid));
  Packet& p = t.pkt;
  p.type = PacketType::kRequest;
  p.op = r.op;
  p.has_imm = r.has_imm;
  p.may_repeat = true;
  p.imm = r.imm;
  p.src = gid_;
  p.src_epoch = epoch_;
  p.src_qpn = static_cast<uint16_t>(qp->qpn_);
  p.dst_qpn = r.dest_qpn;
  p.qkey = r.qkey;
  if (r.op == EFA_IO_SEND) {
    if (r.is_inline) {
      p.payload.assign(r.inline_data, r.inline_data + r.inline_len);
    } else {
      uint64_t total = 0;
      uint8_t* host[EFA_IO_TX_DESC_NUM_BUFS] = {};
      for (uint32_t i = 0; i < r.num_sge; ++i) {
        const WqeBuffer& b = r.sge[i];
        if (b.lkey_reserved || !check_key(qp->pd, b.lkey, b.addr, b.length, 0, &host[i])) {
          return EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY;
        }
        total += b.length;
      }
      if (total > profile_->mtu) return EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
      p.payload.resize(total);
      size_t off = 0;
      for (uint32_t i = 0; i < r.num_sge; ++i) {
        if (r.sge[i].length != 0) std::memcpy(p.payload.data() + off, host[i], r.sge[i].length);
        off += r.sge[i].length;
      }
    }
    p.length = static_cast<uint32_t>(p.payload.size());
  } else {
    p.remote_addr = r.remote_addr;
    p.rkey = r.rkey;
    p.length = r.length;
    if (r.is_inline) {
      p.payload.assign(r.inline_data, r.inline_data + r.inline_len);
    } else {
      const WqeBuffer& lm = r.local;
      uint8_t* host = nullptr;
      uint32_t need = r.op == EFA_IO_RDMA_READ ? static_cast<uint32_t>(kAccessLocalWrite) : 0u;
      if (lm.lkey_reserved || !check_key(qp->pd, lm.lkey, lm.addr, lm.length, need, &host)) {
        return EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY;
      }
      const bool by_ref = one_copy_ && lm.length >= kOneCopyMin && !t.path->copy_refused;
      if (r.op == EFA_IO_RDMA_READ) {
        t.read_dst = host;
        if (by_ref) p.ref = self_ref_;  // offer to copy the data out of the responder
      } else if (by_ref) {
        // The responder copies the bytes out of this memory once it checked its key.
        t.write_src = host;
        p.ref = self_ref_;
        p.ref_addr = reinterpret_cast<uint64_t>(host);
      } else {
        t.write_src = host;
        if (borrow_payloads_ && lm.length > Payload::kInline) {
          // The fabric copies at each send, and the buffer stays unchanged until the op
          // completes: read the MR directly, for retransmissions too (as a NIC re-reads host
          // memory).
          p.payload.view(host, lm.length);
        } else {
          p.payload.assign(host, host + lm.length);
        }
      }
    }
  }
  return EFA_IO_COMP_STATUS_OK;
}

uint32_t DeviceImpl::claim_op_slot() {
  uint32_t idx;
  if (!op_free_.empty()) {
    idx = op_free_.back();
    op_free_.pop_back();
    // Nothing of its predecessor carries over (TxOp::reuse, build_request).
    op_slots_[idx].op.reuse();
  } else {
    idx = static_cast<uint32_t>(op_slots_.size());
    op_slots_.emplace_back();
  }
  return idx;
}

void DeviceImpl::start_op(uint32_t idx) {
  OpSlot& slot = op_slots_[idx];
  slot.gen++;
  slot.used = true;
  uint64_t token = token_of(idx);
  TxOp& op = slot.op;
  op.pkt.token = token;
  op.qp->outstanding++;
  if (op.path == nullptr) op.path = path_to(op.dst);
  PeerPath& path = *op.path;
  if (++path.next_seq == 0) path.next_seq = 1;  // 0 is "no request" in the responder's window
  op.pkt.seq = path.next_seq;
  op.silent_since_ns = step_now_;
  send_packet(&op, token);
}

PeerPath* DeviceImpl::path_to(const Gid& gid) {
  PeerPath& path = paths_[gid];
  if (path.rto_ns == 0) {
    path.gid = gid;
    path.rto_ns = initial_rto_ns_;
    path.index = static_cast<uint32_t>(path_list_.size());
    path_list_.push_back(&path);
  }
  return &path;
}

void DeviceImpl::send_packet(TxOp* op, uint64_t token) {
  uint64_t now = step_now_;
  op->pkt.attempt = static_cast<uint8_t>(op->attempts & 63);
  op->sent_at[op->attempts & 3] = now;
  op->attempts++;
  bool drop = false;
  if (opt_.faults != nullptr) {
    FaultContext c{FaultPoint::kPacketOut, op->qp->qpn_, 0, op->op, false, 0};
    c.size = op->pkt.length;
    c.has_peer = true;
    c.peer = op->dst;
    drop = ask(c, token).action == FaultAction::kDrop;
  }
  bump(kPacketsTx);
  bump(kBytesTx, op->pkt.payload.size());
  op->qp->qs.packets_tx++;
  op->qp->qs.bytes_tx += op->pkt.payload.size();
  if (trace_) {
    tr(drop ? TraceKind::kPacketDrop : TraceKind::kPacketTx, op->qp->qpn_, 0, op->op, 0,
       drop ? static_cast<uint8_t>(kDropFault) : 0, static_cast<uint32_t>(op->pkt.payload.size()), token);
  }
  int rc = 0;
  if (!drop) {
    // The request is kept for retransmission: the fabric sends a copy (a fabric that reads it in
    // place makes none; a borrowed payload is lent again, not copied).
    open_tx_batch();
    rc = fabric_->send_copy(op->dst, op->pkt, &op->tx_mark, send_now());
    if (positions_ && op->tx_mark != 0 && !op->path->position_listed) {
      op->path->position_listed = true;
      position_paths_.push_back(op->path);
    }
    if (rc != 0 && rc != -EHOSTUNREACH) {
      // Not delivered (a mailbox that stayed full, a send that failed): lost like a dropped
      // packet, and retransmitted when its timeout expires.
      bump(kDropped);
      op->qp->qs.dropped_packets++;
    }
  } else {
    op->tx_mark = 0;
    bump(kDropped);
    op->qp->qs.dropped_packets++;
  }
  if (rc == -EHOSTUNREACH) {
    op->state = OpState::kUnreachable;
    op->deadline_ns = now + uint64_t{opt_.unreach_timeout_us} * 1000;
    arm_timer(token, op->deadline_ns);
  } else {
    arm_rto(op, token);
  }
}

void DeviceImpl::fire_timers() {
  timers_.fire(
      step_now_,
      [this](uint64_t when, uint64_t token) {
        if (token & kPathTimer) return path_list_[static_cast<uint32_t>(token)]->timer_ns == when;
        TxOp* op = find_op(token);
        return op != nullptr && op->deadline_ns == when;  // else stale: the op moved on
      },
      [this](uint64_t when, uint64_t token) {
        if (token & kPathTimer) {
          fire_path(when, static_cast<uint32_t>(token));
        } else {
          fire_timer(when, token);
        }
      });
}

void DeviceImpl::fire_timer(uint64_t when, uint64_t token) {
  const uint64_t now = step_now_;
  TxOp* found = find_op(token);
  if (found == nullptr || found->deadline_ns != when) return;  // an earlier timer moved it on
  TxOp& op = *found;
  switch (op.state) {
    case OpState::kRnrWait:
      bump(kRnrRetries);
      if (trace_) tr(TraceKind::kRnrRetry, op.qp->qpn_, op.rnr_tries, op.op, 0, 0, 0, token);
      send_packet(&op, token);
      break;
    case OpState::kAwaitResponse:
      // Unresponsive: silent for the limit, and asked max_retransmits times meanwhile (an
      // engine that did not run for a while has not given the peer its chances).
      if (now - op.silent_since_ns < silence_limit_ns_ || op.unanswered < opt_.max_retransmits) {
        // A request still unread in the peer's mailbox, or read by no pass that has finished, is
        // not lost: the peer is behind (many processes on few cores). Another copy would only
        // lengthen its backlog; wait, backing off, up to the longer limit the stalled get.
        // Where nothing is lost (a lossless fabric, no fault plan), a served request's answer is
        // on its way; if packets wait unread here, it may be among them: read them first.
        // (Answers to later requests do not change either: the peer may have served those
        // first, and their answers may have overtaken this one's on this device's budget.)
        if (opt_.step_clock_ns == 0 && now - op.silent_since_ns < silence_limit_ns_ * kStarvedSilences) {
          const bool unserved = fabric_->unserved(op.dst, op.tx_mark, op.sent_ns);
          if (unserved || (!may_lose_ && (inbox_size_.load(std::memory_order_acquire) != 0 ||
                                          fabric_->rx_pending(gid_)))) {
            bump(unserved ? kUnservedWaits : kBacklogWaits);
            op.rto_ns = std::min(op.rto_ns * 2, max_rto_ns_);
            op.deadline_ns = now + op.rto_ns;
            arm_timer(token, op.deadline_ns);
            break;
          }
        }
        if (op.later_answered >= kAnswersBeforeFastRetransmit) {
          retransmit(&op, token);  // overtaken by later answers (see on_answer)
        } else {
          rto_expired(&op, token);
        }
        break;
      }
      // The answer may be here already, unread: an engine that runs rarely (a starved process)
      // or whose mailbox many peers fill reads a budget per pass, so the clock's silence is not
      // yet the peer's. Look again once this backlog is read, within the same longer limit.
      if (now - op.silent_since_ns < silence_limit_ns_ * kStarvedSilences && opt_.step_clock_ns == 0 &&
          (inbox_size_.load(std::memory_order_acquire) != 0 || fabric_->rx_pending(gid_))) {
        bump(kBacklogWaits);
        op.deadline_ns = now + min_rto_ns_;
        arm_timer(token, op.deadline_ns);
        break;
      }
      // A peer that has not yet taken in what was sent to it, or whose engine has not run
      // since, is behind (many processes on few cores), not unresponsive. Wait for it, without
      // adding copies to its backlog, up to kStarvedSilences silence limits. (A device on its
      // own step clock has no time to compare with the peer's.)
      if (now - op.silent_since_ns < silence_limit_ns_ * kStarvedSilences && opt_.step_clock_ns == 0 &&
          fabric_->peer_stalled(op.dst, op.sent_ns)) {
        bump(kStalledWaits);
        op.deadline_ns = now + op.rto_ns;
        arm_timer(token, op.deadline_ns);
        break;
      }
      [[fallthrough]];
    case OpState::kUnreachable: {
      uint8_t status = responded_peers_.count(op.dst) ? EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE
                                                      : EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE;
      EmuQp* qp = op.qp;
      qp->outstanding--;
      bump(kTimeouts);
      qp->qs.timeouts++;
      if (trace_) tr(TraceKind::kTimeout, qp->qpn_, 0, op.op, 0, status, 0, token);
      complete_tx(qp, op.req_id, op.req_id_ex, op.op, status, op.comp_req);
      erase_op(token);
      break;
    }
  }
}

void DeviceImpl::resend_by_value(TxOp* op, uint64_t token) {
  op->path->copy_refused = true;
  op->pkt.ref = PeerRef();
  op->pkt.ref_addr = 0;
  if (op->op == EFA_IO_RDMA_WRITE && op->pkt.payload.empty() && op->pkt.length != 0) {
    if (borrow_payloads_) {
      op->pkt.payload.view(op->write_src, op->pkt.length);
    } else {
      op->pkt.payload.assign(op->write_src, op->write_src + op->pkt.length);
    }
  }
  send_packet(op, token);
}

bool DeviceImpl::executed_marks_moved() {
  for (PeerPath* path : position_paths_) {
    uint64_t rx_end;
    const uint64_t m = fabric_->executed_mark(gid_, path->gid, &rx_end);
    if (m != 0 && m != path->executed) return true;
  }
  return false;
}

void DeviceImpl::read_executed_marks() {
  for (PeerPath* path : position_paths_) {
    if (path->executed_next != 0) continue;  // the last one read is not in force yet
    const uint64_t m = fabric_->executed_mark(gid_, path->gid, &path->executed_rx_end);
    if (m != path->executed) path->executed_next = m;
  }
}

void DeviceImpl::take_position_answers(int* work) {
  for (size_t i = 0; i < position_paths_.size();) {
    PeerPath* path = position_paths_[i];
    if (path->executed_next != 0 && fabric_->polled_past(gid_, path->executed_rx_end)) {
      path->executed = path->executed_next;
      path->executed_next = 0;
    }
    auto& q = path->in_flight;
    // In the order they left, which is the order of their marks: the first one the mark does
    // not cover ends the look (a read's data, an RNR, a transmission that found no room, all
    // answered by packet or by their timer, stop it too).
    while (!q.empty()) {
      const uint64_t token = q.front().second;
      TxOp* t = find_op(token);
      if (t == nullptr || t->path != path || t->tx_seq != q.front().first) {
        q.pop_front();  // answered or sent again since
        continue;
      }
      if (t->state != OpState::kAwaitResponse || t->op == EFA_IO_RDMA_READ ||
          !fabric_->mark_covered(path->executed, t->tx_mark)) {
        break;
      }
      bump(kAnsweredByPosition);
      ++*work;
      // The mark passed the latest transmission; on_answer takes this entry off the front.
      handle_answer(path->gid, token, EFA_IO_COMP_STATUS_OK, static_cast<uint8_t>((t->attempts - 1) & 63), nullptr);
    }
    if (q.empty()) {
      path->position_listed = false;
      path->executed = path->executed_next = 0;
      position_paths_[i] = position_paths_.back();
      position_paths_.pop_back();
    } else {
      ++i;
    }
  }
}

void DeviceImpl::handle_response(Packet& pkt) { handle_answer(pkt.src, pkt.token, pkt.status, pkt.attempt, &pkt); }

void DeviceImpl::handle_answers(const Packet& pkt, int* work) {
  const size_t n = pkt.payload.size() / kAnswerBytes;
  const uint8_t* d = pkt.payload.data();
  for (size_t i = 0; i < n; ++i) {
    const AnswerRecord a = get_answer(d + i * kAnswerBytes);
    // Counted and traced as the packets they stand for.
    bump(kPacketsRx);
    if (EmuQp* qp = qp_by_num(a.qpn)) qp->qs.packets_rx++;
    if (trace_) tr(TraceKind::kPacketRx, a.qpn, 0, a.op, 1, a.status, 0, a.token);
    ++*work;
    handle_answer(pkt.src, a.token, a.status, a.attempt, nullptr);
  }
}

void DeviceImpl::handle_answer(const Gid& src, uint64_t token, uint8_t status, uint8_t attempt,
                               const Packet* full) {
  TxOp* found = find_op(token);
  if (found == nullptr) {  // flushed, timed out or a duplicate answer
    on_late_answer(src, token, attempt);
    return;
  }
  TxOp& op = *found;
  on_answer(&op, attempt);
  if (!have_last_peer_ || !gid_equal(last_peer_, src)) {
    responded_peers_.insert(src);
    last_peer_ = src;
    have_last_peer_ = true;
  }
  if (status == EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR) {
    op.qp->qs.rnr_naks_rx++;
    uint8_t retry = op.qp->rnr_retry;
    if (retry == 7 || op.rnr_tries < retry) {
      op.rnr_tries++;
      op.state = OpState::kRnrWait;
      op.deadline_ns = step_now_ + rnr_delay_ns(op.rnr_tries);
      arm_timer(token, op.deadline_ns);
      return;
    }
  }
  const bool by_ref = full != nullptr && full->ref.pid != 0;
  if ((full != nullptr && full->copy_refused) || (by_ref && op.pkt.ref.pid == 0)) {
    // Refused: send the bytes instead. An answer by reference to a request that no longer
    // offered one is a duplicate from before the fallback: the answer by value is on its way.
    if (op.pkt.ref.pid != 0) resend_by_value(&op, token);
    return;
  }
  if (!known_status(status)) status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS;
  if (status == EFA_IO_COMP_STATUS_OK && op.op == EFA_IO_RDMA_READ) {
    const size_t got = full != nullptr ? full->payload.size() : 0;
    if (by_ref && got == 0) {
      // Answered by reference: the data is copied out of the responder's memory now.
      if (op.pkt.length != 0 && fabric_->copy_peer(full->ref, full->ref_addr, op.read_dst, op.pkt.length) != 0) {
        bump(kOneCopyRefused);
        return resend_by_value(&op, token);
      }
      bump(kOneCopyBytes, op.pkt.length);
    } else if (got != op.pkt.length) {
      status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS;
    } else if (got != 0) {
      std::memcpy(op.read_dst, full->payload.data(), got);
    }
  }
  EmuQp* qp = op.qp;
  qp->outstanding--;
  remember_done(op, token);
  complete_tx(qp, op.req_id, op.req_id_ex, op.op, status, op.comp_req);
  erase_op(token);
}

}  // namespace emu
}  // namespace xpufab
