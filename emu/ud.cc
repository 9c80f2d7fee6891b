// UD queue pairs: the datagram side of the NIC. The requester and responder hand UD work here at
// their dispatch points; everything that differs from SRD lives in this file.
//  - A datagram leaves once. Its send completion is written as soon as it is on the wire (or lost
//    on the way: a fault plan's drop, a destination nobody owns): UD gives no delivery guarantee,
//    so there is no response, no retransmission and no RNR retry.
//  - At the receiver, a datagram that cannot be placed vanishes: unknown or non-UD QPN, QP not
//    ready to receive, QKEY mismatch, no receive posted. Only a receive that was taken and then
//    cannot hold the data gets an error completion (as the RQ entry is consumed).
//  - Every receive buffer starts with a 40-byte GRH (IPv6-style header: version 6, payload
//    length, next header, hop limit, source and destination GID); the CQE length counts it.
#include <algorithm>
#include <cstring>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

namespace {

constexpr size_t kGrh = kGrhSize;

// The GRH as the receiver finds it at the start of its buffer (network byte order).
void write_grh(uint8_t grh[kGrh], uint32_t payload_len, const Gid& sgid, const Gid& dgid) {
  std::memset(grh, 0, kGrh);
  grh[0] = 6 << 4;  // IP version 6, traffic class and flow label 0
  grh[4] = static_cast<uint8_t>(payload_len >> 8);
  grh[5] = static_cast<uint8_t>(payload_len);
  grh[6] = 0x1b;  // next header: the IBA transport header
  grh[7] = 64;    // hop limit
  std::memcpy(grh + 8, sgid.data(), 16);
  std::memcpy(grh + 24, dgid.data(), 16);
}

bool can_receive(QpState s) {
  return s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe;
}

}  // namespace

void DeviceImpl::send_datagram(TxOp&& op) {
  EmuQp* qp = op.qp;
  Packet& p = op.pkt;
  p.type = PacketType::kDatagram;
  p.token = 0;
  bool drop = false;
  if (opt_.faults != nullptr) {
    FaultContext c{FaultPoint::kPacketOut, qp->qpn_, 0, op.op, false, 0};
    c.size = p.length;
    c.has_peer = true;
    c.peer = op.dst;
    drop = ask(c, 0).action == FaultAction::kDrop;
  }
  size_t bytes = p.payload.size();
  bump(kPacketsTx);
  bump(kBytesTx, bytes);
  qp->qs.packets_tx++;
  qp->qs.bytes_tx += bytes;
  if (trace_) {
    tr(drop ? TraceKind::kPacketDrop : TraceKind::kPacketTx, qp->qpn_, 0, op.op, 0,
       drop ? static_cast<uint8_t>(kDropFault) : 0, static_cast<uint32_t>(bytes), 0);
  }
  if (drop) {
    bump(kDropped);
    qp->qs.dropped_packets++;
  } else {
    open_tx_batch();
    (void)fabric_->send(op.dst, std::move(p), send_now());  // an unowned destination is one more loss
  }
  complete_tx(qp, op.req_id, op.req_id_ex, op.op, EFA_IO_COMP_STATUS_OK, op.comp_req);
}

void DeviceImpl::receive_datagram(Packet& pkt) {
  EmuQp* qp = qp_by_num(pkt.dst_qpn);
  auto drop = [&] {
    bump(kDropped);
    if (qp != nullptr) qp->qs.dropped_packets++;
    if (trace_) tr(TraceKind::kPacketDrop, pkt.dst_qpn, 0, pkt.op, 0, 0, 0, 0);
  };
  if (qp == nullptr || !qp->ud || !can_receive(qp->st) || qp->qkey != pkt.qkey ||
      pkt.op != EFA_IO_SEND || pkt.payload.size() > profile_->mtu) {
    return drop();
  }
  RxWqe rx;
  int r = take_rx_wqe(qp, &rx);
  if (r == 0) return drop();
  if (r < 0) {
    return rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR, EFA_IO_SEND, 0, pkt,
                  false);
  }
  uint8_t* host[16];
  uint64_t cap = 0;
  for (uint32_t i = 0; i < rx.ndesc; ++i) {
    if ((rx.desc[i].lkey_ctrl & 0x3f000000u) != 0 ||
        !check_key(qp->pd, efa_io_rx_desc_get_lkey(&rx.desc[i]), efa_io_rx_desc_get_addr(&rx.desc[i]),
                   rx.desc[i].length, kAccessLocalWrite, &host[i])) {
      return rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY, EFA_IO_SEND, 0, pkt, false);
    }
    cap += rx.desc[i].length;
  }
  const size_t total = kGrh + pkt.payload.size();
  if (cap < total) {
    return rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH, EFA_IO_SEND, 0, pkt, false);
  }
  uint8_t grh[kGrh];
  write_grh(grh, static_cast<uint32_t>(pkt.payload.size()), pkt.src, gid_);
  // The GRH and the payload are one byte stream scattered over the descriptors.
  size_t off = 0;
  for (uint32_t i = 0; i < rx.ndesc && off < total; ++i) {
    size_t n = std::min<size_t>(rx.desc[i].length, total - off);
    for (size_t done = 0; done < n;) {
      size_t at = off + done;
      size_t chunk;
      if (at < kGrh) {
        chunk = std::min(n - done, kGrh - at);
        std::memcpy(host[i] + done, grh + at, chunk);
      } else {
        chunk = n - done;
        std::memcpy(host[i] + done, pkt.payload.data() + (at - kGrh), chunk);
      }
      done += chunk;
    }
    off += n;
  }
  rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_OK, EFA_IO_SEND, static_cast<uint32_t>(total), pkt, false);
}

}  // namespace emu
}  // namespace xpufab
