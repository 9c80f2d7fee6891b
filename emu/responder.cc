// The responder: packets arriving from the fabric, receive WQEs taken from the RQ, requests
// executed (at most once: a repeated request gets the first answer again) and answered.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"
#include "emu/remote_dma.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

void DeviceImpl::deliver(Packet&& pkt) {
  {
    std::lock_guard<InboxLock> lock(inbox_mu_);
    inbox_.push_back(std::move(pkt));
    inbox_size_.store(inbox_.size(), std::memory_order_seq_cst);
  }
  // Pairs with the engine thread's store of sleeping_ then load of inbox_size_ (both seq_cst):
  // either it sees this packet before sleeping or this sees it asleep and wakes it.
  if (sleeping_.load(std::memory_order_seq_cst)) kick();
}

void DeviceImpl::deliver_copy(const Packet& pkt) {
  {
    std::lock_guard<InboxLock> lock(inbox_mu_);
    inbox_.push_back(pkt);
    inbox_size_.store(inbox_.size(), std::memory_order_seq_cst);
  }
  if (sleeping_.load(std::memory_order_seq_cst)) kick();  // as in deliver()
}

void DeviceImpl::deliver_batch(std::vector<Packet>* pkts) {
  if (pkts->empty()) return;
  {
    std::lock_guard<InboxLock> lock(inbox_mu_);
    if (inbox_.empty()) {
      inbox_.swap(*pkts);  // the batch becomes the inbox; the sender keeps the empty vector
    } else {
      for (Packet& p : *pkts) inbox_.push_back(std::move(p));
      pkts->clear();
    }
    inbox_size_.store(inbox_.size(), std::memory_order_seq_cst);
  }
  if (sleeping_.load(std::memory_order_seq_cst)) kick();  // as in deliver()
}

void DeviceImpl::queue_answer(const Gid& dst, const AnswerRecord& a) {
  PendingAnswers* p = nullptr;
  if (answers_hint_ < pending_answers_.size() && gid_equal(pending_answers_[answers_hint_].dst, dst)) {
    p = &pending_answers_[answers_hint_];
  } else {
    for (size_t i = 0; i < pending_answers_.size(); ++i) {
      if (gid_equal(pending_answers_[i].dst, dst)) {
        p = &pending_answers_[i];
        answers_hint_ = i;
        break;
      }
    }
    if (p == nullptr) {
      answers_hint_ = pending_answers_.size();
      pending_answers_.emplace_back();
      p = &pending_answers_.back();
      p->dst = dst;
    }
  }
  put_answer(p->bytes + size_t{p->count} * kAnswerBytes, a);
  answers_pending_ = true;
  if (++p->count == kMaxAnswersPerPacket) send_answers(p);
}

void DeviceImpl::send_answers(PendingAnswers* p) {
  Packet out;
  out.src = gid_;
  if (p->count == 1) {
    // Alone (a ping-pong's): as a plain answer, which costs the requester no records to read.
    const AnswerRecord a = get_answer(p->bytes);
    out.type = PacketType::kResponse;
    out.op = a.op;
    out.status = a.status;
    out.attempt = a.attempt;
    out.token = a.token;
    out.dst_qpn = a.qpn;
  } else {
    out.type = PacketType::kAnswers;
    out.payload.assign(p->bytes, p->bytes + size_t{p->count} * kAnswerBytes);
  }
  p->count = 0;
  open_tx_batch();
  // Lost on the way back: the requesters retransmit and get the remembered answers.
  if (fabric_->send(p->dst, std::move(out), send_now()) != 0) bump(kDropped);
}

void DeviceImpl::flush_answers() {
  for (PendingAnswers& p : pending_answers_) {
    if (p.count != 0) send_answers(&p);
  }
  answers_pending_ = false;
  // Entries for many peers are not kept: their buffers would outweigh what they save.
  constexpr size_t kKeptPeers = 16;
  if (pending_answers_.size() > kKeptPeers) pending_answers_.clear();
}

DeviceImpl::Executed* DeviceImpl::executed_lookup(const Gid& gid, uint32_t epoch) {
  auto key = std::make_pair(gid, epoch);
  std::unique_ptr<Executed>& e = executed_[key];
  if (!e) e.reset(new Executed());
  last_executed_ = e.get();
  last_executed_key_ = key;
  return last_executed_;
}

// Returns the next receive WQE of qp's RQ.
int DeviceImpl::take_rx_wqe(EmuQp* qp, RxWqe* rx) {
  uint16_t pc = static_cast<uint16_t>(load_db(qp->rq_db));
  uint16_t avail = static_cast<uint16_t>(pc - qp->rq_cons);
  if (avail == 0 || avail > qp->rq_entries) return 0;  // empty, or overrun (diagnosed at the doorbell)
  uint32_t n = 0;
  bool first_ok = true, done = false;
  while (n < avail) {
    uint32_t slot = static_cast<uint16_t>(qp->rq_cons + n) & (qp->rq_entries - 1);
    efa_io_rx_desc d;
    std::memcpy(&d, qp->rq_buf + size_t{slot} * EFA_IO_RX_DESC_SIZE, sizeof(d));
    if (n == 0 && !efa_io_rx_desc_get_first(&d)) first_ok = false;
    if (n < 16) rx->desc[n] = d;
    ++n;
    if (efa_io_rx_desc_get_last(&d)) {
      done = true;
      break;
    }
    if (n > qp->max_recv_sge) break;
  }
  if (!done && n == avail && n <= qp->max_recv_sge && first_ok) return 0;  // rest not posted yet
  uint32_t slot0 = qp->rq_cons & (qp->rq_entries - 1);
  qp->rq_cons = static_cast<uint16_t>(qp->rq_cons + n);
  if (!done || !first_ok || n > qp->max_recv_sge) {
    diag(DiagKind::kRqMalformed, qp->qpn_, slot0, "receive WQE without first/last framing");
    rx->req_id = rx->desc[0].req_id;
    return -1;
  }
  rx->req_id = rx->desc[0].req_id;
  rx->ndesc = n;
  return 1;
}

void DeviceImpl::handle_request(Packet& pkt, EmuQp* qp) {
  Packet resp;
  resp.type = PacketType::kResponse;
  resp.op = pkt.op;
  resp.token = pkt.token;
  resp.src = gid_;
  resp.src_qpn = pkt.dst_qpn;
  resp.dst_qpn = pkt.src_qpn;
  resp.attempt = pkt.attempt;
  Executed* seen = nullptr;
  auto reply = [&](uint8_t status, bool remember) {
    resp.status = status;
    if (remember && pkt.may_repeat && pkt.seq != 0) {
      if (seen == nullptr) seen = executed_for(pkt.src, pkt.src_epoch);
      seen->slot[pkt.seq & (Executed::kWindow - 1)] = uint64_t{pkt.seq} << 8 | status;
    }
    EmuQp* rqp = qp;
    if (opt_.faults != nullptr) {
      FaultContext c{FaultPoint::kPacketOut, pkt.dst_qpn, 0, pkt.op, true, 0};
      c.size = static_cast<uint32_t>(resp.payload.size());
      c.has_peer = true;
      c.peer = pkt.src;
      FaultDecision d = ask(c, pkt.token);
      if (d.action == FaultAction::kDrop) {
        bump(kDropped);
        if (rqp != nullptr) rqp->qs.dropped_packets++;
        if (trace_) tr(TraceKind::kPacketDrop, pkt.dst_qpn, 0, pkt.op, 1, kDropFault, 0, pkt.token);
        return;
      }
      if (d.action == FaultAction::kFail) resp.status = d.status;
    }
    // Ran as asked, for a requester that reads this end's executed mark: the mark moving past
    // its request at this pass's end answers it (step_locked, after end_pass). A read is
    // answered with its data, even none.
    if (positions_ && pkt.position_seen && pkt.op != EFA_IO_RDMA_READ && resp.status == EFA_IO_COMP_STATUS_OK &&
        resp.payload.empty() && resp.ref.pid == 0 && !resp.copy_refused &&
        fabric_->takes_position_answers(gid_, pkt.src)) {
      bump(kPositionAnswers);
      return;
    }
    bump(kPacketsTx);
    bump(kBytesTx, resp.payload.size());
    if (rqp != nullptr) {
      rqp->qs.packets_tx++;
      rqp->qs.bytes_tx += resp.payload.size();
    }
    if (trace_) {
      tr(TraceKind::kPacketTx, pkt.dst_qpn, 0, pkt.op, 1, resp.status,
         static_cast<uint32_t>(resp.payload.size()), pkt.token);
    }
    // The pass's first answer leaves at once (a ping-pong's only one), later plain ones wait for
    // the pass's end to travel together. A fault plan or a trace sees every answer alone.
    if (answers_in_pass_++ != 0 && in_pass_ && opt_.faults == nullptr && trace_ == nullptr &&
        resp.payload.empty() && resp.ref.pid == 0 && !resp.copy_refused) {
      queue_answer(pkt.src, AnswerRecord{pkt.token, pkt.src_qpn, resp.status, pkt.attempt, pkt.op});
      return;
    }
    open_tx_batch();
    if (fabric_->send(pkt.src, std::move(resp), send_now()) != 0) {
      // Lost on the way back; the requester retransmits and gets the remembered answer.
      bump(kDropped);
      if (rqp != nullptr) rqp->qs.dropped_packets++;
    }
  };
  // At-most-once: a retransmitted SEND/WRITE that already executed gets its first answer again.
  if (pkt.may_repeat && pkt.op != EFA_IO_RDMA_READ && pkt.seq != 0) {
    seen = executed_for(pkt.src, pkt.src_epoch);
    uint64_t e = seen->slot[pkt.seq & (Executed::kWindow - 1)];
    if (e != 0 && (e >> 8) == pkt.seq) return reply(static_cast<uint8_t>(e & 0xff), false);
  }
  if (qp == nullptr || qp->ud || qp->qkey != pkt.qkey ||
      (qp->st != QpState::kRtr && qp->st != QpState::kRts && qp->st != QpState::kSqd &&
       qp->st != QpState::kSqe)) {
    return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN, false);
  }
  const uint32_t caps = profile_->device_caps;
  if (pkt.op > EFA_IO_RDMA_WRITE || (pkt.op == EFA_IO_RDMA_READ && !(caps & kCapRdmaRead)) ||
      (pkt.op == EFA_IO_RDMA_WRITE && !(caps & kCapRdmaWrite))) {
    return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH, false);
  }
  if (pkt.op == EFA_IO_SEND) {
    if (pkt.payload.size() > profile_->mtu) return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH, true);
    RxWqe rx;
    int r = take_rx_wqe(qp, &rx);
    if (r == 0) {
      bump(kRnrNaks);
      qp->qs.rnr_naks_tx++;
      return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR, false);
    }
    if (r < 0) {
      rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR, EFA_IO_SEND, 0, pkt, false);
      return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS, true);
    }
    uint8_t* host[16];
    uint64_t cap = 0;
    for (uint32_t i = 0; i < rx.ndesc; ++i) {
      if ((rx.desc[i].lkey_ctrl & 0x3f000000u) != 0 ||
          !check_key(qp->pd, efa_io_rx_desc_get_lkey(&rx.desc[i]), efa_io_rx_desc_get_addr(&rx.desc[i]),
                     rx.desc[i].length, kAccessLocalWrite, &host[i])) {
        rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY, EFA_IO_SEND, 0, pkt, false);
        return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS, true);
      }
      cap += rx.desc[i].length;
    }
    if (cap < pkt.payload.size()) {
      rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH, EFA_IO_SEND, 0, pkt, false);
      return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH, true);
    }
    size_t off = 0;
    for (uint32_t i = 0; i < rx.ndesc && off < pkt.payload.size(); ++i) {
      size_t n = std::min<size_t>(rx.desc[i].length, pkt.payload.size() - off);
      std::memcpy(host[i], pkt.payload.data() + off, n);
      off += n;
    }
    rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_OK, EFA_IO_SEND, static_cast<uint32_t>(off), pkt, false);
    return reply(EFA_IO_COMP_STATUS_OK, true);
  }
  // RDMA needs an AH for the requester at this end.
  if (ah_for_gid(qp->pd, pkt.src) == nullptr) {
    return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER, false);
  }
  uint8_t* host = nullptr;
  uint32_t need = pkt.op == EFA_IO_RDMA_READ ? kAccessRemoteRead : kAccessRemoteWrite;
  if (!check_key(qp->pd, pkt.rkey, pkt.remote_addr, pkt.length, need, &host)) {
    return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS, false);
  }
  if (pkt.op == EFA_IO_RDMA_READ) {
    if (pkt.ref.pid != 0 && one_copy_) {
      // The requester copies the data out of this memory itself (it offered to).
      resp.ref = self_ref_;
      resp.ref_addr = reinterpret_cast<uint64_t>(host);
    } else {
      RemoteDma dma;
      resp.payload.assign(host, host + pkt.length);
    }
    // A read is answered again each time it is asked (reading twice changes nothing), but
    // counted once: a repeat (a lost answer, or an answer by reference the requester could not
    // copy) is the same operation.
    bool repeat = false;
    if (pkt.may_repeat && pkt.seq != 0) {
      seen = executed_for(pkt.src, pkt.src_epoch);
      uint64_t e = seen->slot[pkt.seq & (Executed::kWindow - 1)];
      repeat = e != 0 && (e >> 8) == pkt.seq;
    }
    if (!repeat) count(qp, kCntrRemoteRdmaRead, true);
    return reply(EFA_IO_COMP_STATUS_OK, true);
  }
  const bool by_ref = pkt.ref.pid != 0;
  if (by_ref && (!one_copy_ || !pkt.payload.empty())) {
    resp.copy_refused = true;  // this end does not copy: the requester sends the bytes instead
    return reply(EFA_IO_COMP_STATUS_OK, false);
  }
  if (!by_ref && pkt.payload.size() != pkt.length) {
    return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH, true);
  }
  bool unsolicited = (qp->flags & kQpUnsolicitedWriteRecv) != 0;
  RxWqe rx;
  const uint16_t rq_cons = qp->rq_cons;
  if (pkt.has_imm && !unsolicited) {
    int r = take_rx_wqe(qp, &rx);
    if (r == 0) {
      bump(kRnrNaks);
      qp->qs.rnr_naks_tx++;
      return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR, false);
    }
    if (r < 0) {
      rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR, EFA_IO_RDMA_WRITE, 0, pkt,
             false);
      return reply(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS, true);
    }
  }
  if (by_ref) {
    // One copy, out of the requester's memory, after the key, bounds, access and receive WQE
    // checks above. A refused copy lands nothing and gives the receive WQE back.
    int copied = 0;
    if (pkt.length != 0) {
      RemoteDma dma;
      copied = fabric_->copy_peer(pkt.ref, pkt.ref_addr, host, pkt.length);
    }
    if (copied != 0) {
      qp->rq_cons = rq_cons;
      bump(kOneCopyRefused);
      resp.copy_refused = true;
      return reply(EFA_IO_COMP_STATUS_OK, false);
    }
    bump(kOneCopyBytes, pkt.length);
  } else if (pkt.length != 0) {
    RemoteDma dma;
    std::memcpy(host, pkt.payload.data(), pkt.length);
  }
  count(qp, kCntrRemoteRdmaWrite, true);
  if (pkt.has_imm) {
    rx_cqe(qp, unsolicited ? 0 : rx.req_id, EFA_IO_COMP_STATUS_OK, EFA_IO_RDMA_WRITE, pkt.length, pkt,
           unsolicited);
  }
  reply(EFA_IO_COMP_STATUS_OK, true);
}

}  // namespace emu
}  // namespace xpufab
