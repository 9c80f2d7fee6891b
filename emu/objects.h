// The objects of an emulated device (PD, MR, AH, counter, CQ, QP) and the operations in flight.
// Internal to emu/: the device model's .cc files share them through device_impl.h. Every field
// is guarded by the owning device's mu_ unless it says otherwise.
#ifndef XPUFAB_EMU_OBJECTS_H_
#define XPUFAB_EMU_OBJECTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "api/backend/backend.h"
#include "device/efa_io_defs.h"
#include "emu/device.h"
#include "emu/fabric.h"
#include "emu/fifo.h"

namespace xpufab {
namespace emu {

class DeviceImpl;

constexpr uint32_t kCqeSize = EFA_IO_CQE_SIZE;
constexpr uint16_t kAhUnknown = EFA_IO_AH_UNKNOWN;  // "no AH" in RX CQEs, never handed out

// Queue memory (rings, the doorbell page) is page aligned and zeroed, as the kernel hands it out,
// and only the pages a queue touches become resident: an idle QP's deep rings cost address space,
// not memory. The first `resident_bytes` are resident at once (base/resident.h): a NIC's queues
// are pinned, and the rings a job's first messages take on their timed path (the SQ, the CQ) would
// otherwise fault there. Null when out of memory; free_queue takes the same size.
uint8_t* alloc_queue(size_t bytes, size_t resident_bytes = 0);
void free_queue(void* p, size_t bytes);

class EmuPd : public backend::Pd {
 public:
  explicit EmuPd(uint32_t h) : handle_(h) {}
  uint32_t handle() const override { return handle_; }
  uint32_t handle_;
  uint32_t refs = 0;  // MRs, QPs, AHs
};

class EmuMr : public backend::Mr {
 public:
  uint32_t lkey() const override { return key; }
  uint32_t rkey() const override { return key; }
  uint64_t iova() const override { return iova_; }
  size_t length() const override { return len; }
  EmuPd* pd = nullptr;
  uint32_t key = 0;
  uint64_t iova_ = 0;
  uint8_t* host = nullptr;
  size_t len = 0;
  uint32_t access = 0;
  void* map_base = nullptr;  // dma-buf mapping to undo
  size_t map_len = 0;
};

struct PeerPath;

class EmuAh : public backend::Ah {
 public:
  uint16_t ahn() const override { return ahn_; }
  EmuPd* pd = nullptr;
  uint16_t ahn_ = 0;
  Gid gid{};
  PeerPath* path = nullptr;  // the device's path to gid, found on first use (paths live as long)
};

class EmuCntr : public backend::CompCntr {
 public:
  uint64_t* value = nullptr;
  uint64_t* error = nullptr;
  uint32_t refs = 0;
};

class EmuQp;

class EmuCq : public backend::Cq {
 public:
  int query(backend::CqAttr* attr) const override;
  int arm() override;
  int event_fd() const override { return efd; }

  DeviceImpl* dev = nullptr;
  uint8_t* ring = nullptr;
  bool own_ring = false;
  uint32_t entries = 0;
  uint32_t log2_entries = 0;
  uint32_t produced = 0;  // CQEs written (wraps at 2^32, entries divide it)
  uint32_t db_index = 0;
  uint32_t* db = nullptr;
  bool db_written = false;  // the consumer reports its index through the doorbell
  uint16_t ci_seen = 0;     // its consumer index when the doorbell was last read
  bool with_sgid = false;
  bool armed = false;
  uint32_t arm_sn_seen = 0;  // cmd_sn of the last CQ doorbell value sampled
  bool overrun = false;
  int efd = -1;
  uint32_t refs = 0;  // QPs
  // CQEs a fault plan delays, in order; later CQEs of this CQ queue behind them.
  struct Delayed {
    uint64_t when;
    efa_io_rx_cdesc_ex cqe;
    uint32_t qpn;
  };
  std::deque<Delayed> delayed;
};

enum class OpState : uint8_t { kAwaitResponse, kRnrWait, kUnreachable };

// What a requester knows of the path to one peer (RFC 6298): the smoothed round-trip time and
// its variance, the retransmission timeout they give (kept backed off after a timeout until a
// new sample), and the requests awaiting a response in the order of their last transmission,
// for fast retransmit. Every fabric has one per peer: none is assumed lossless, because a
// responder's fault plan, a full or replaced mailbox or a failed send lose packets on any wire.
struct PeerPath {
  Gid gid{};  // the peer
  bool have_rtt = false;
  uint64_t srtt_ns = 0;
  uint64_t rttvar_ns = 0;
  uint64_t rto_ns = 0;
  uint64_t rtt_high_ns = 0;  // the slowest recent answer (decays by 1/256 per sample)
  // Transmissions in the order they left: (transmission sequence, token). An entry is live
  // while its op's tx_seq still names it; answered and resent ones stay until they reach the
  // front (no allocation per packet, unlike a map keyed by sequence).
  Fifo<std::pair<uint64_t, uint64_t>> in_flight;
  uint32_t next_seq = 0;       // Packet::seq of the last new request to this peer
  // One timer covers every transmission in in_flight: it is due no later than the earliest
  // deadline among them (0: none armed), so a transmission arms nothing of its own unless it is
  // due before all the others (most are answered long before). index: its token in the wheel.
  uint64_t timer_ns = 0;
  uint32_t index = 0;
  bool copy_refused = false;   // a one-copy transfer with this peer failed: use the wire
  // Answers by position (DeviceOptions::position_answers): on the device's list of paths to
  // look at; the peer's executed mark in force; and one read since, with where this device's
  // wire ended then, in force once the polls have handed everything below that end over (the
  // answer packets the peer sent before it come first).
  bool position_listed = false;
  uint64_t executed = 0;
  uint64_t executed_next = 0;
  uint64_t executed_rx_end = 0;
  // Requests completed lately and when their transmissions left: an answer that comes after
  // the op completed (to a transmission that was only delayed) still times the path, so that
  // delays are learnt rather than hidden by the retransmissions they cause.
  struct Done {
    uint64_t token = 0;
    uint32_t attempts = 0;
    uint64_t sent_at[4] = {};
  };
  Done done[64];
  uint32_t done_next = 0;
};

struct TxOp {
  EmuQp* qp = nullptr;
  uint16_t req_id = 0;
  efa_io_req_id_ex req_id_ex{};
  uint8_t op = 0;
  bool comp_req = true;
  uint8_t* read_dst = nullptr;  // RDMA READ: where the data lands
  Gid dst{};
  Packet pkt;                   // kept for retransmission and RNR retry
  OpState state = OpState::kAwaitResponse;
  uint32_t rnr_tries = 0;
  uint32_t retransmits = 0;
  uint64_t deadline_ns = 0;
  // Retransmission (see PeerPath).
  PeerPath* path = nullptr;
  uint64_t silent_since_ns = 0;  // first transmission since the peer last answered this op
  uint64_t sent_ns = 0;          // last transmission
  uint64_t sent_at[4] = {};      // times of the last four transmissions, by attempt & 3
  uint32_t attempts = 0;         // transmissions so far
  uint64_t rto_ns = 0;           // this op's timeout, doubled at each expiry
  uint64_t tx_seq = 0;           // key of the last transmission in path->in_flight
  uint32_t later_answered = 0;   // answers to requests sent after this one's last transmission
  uint32_t unanswered = 0;       // retransmissions since the peer last answered this op
  uint64_t tx_mark = 0;          // where the last transmission lies on the wire (Fabric::send_marked)
  const uint8_t* write_src = nullptr;  // RDMA WRITE: the source, to resend the bytes over the wire

  // Makes a finished op (its payload already given back) a fresh one: what a transmission and
  // its answers changed, and what only some requests set, returns to its initial value; the
  // fields every request sets (DeviceImpl::build_request: its QP, ids, op, destination, path
  // and the packet's header) are left to it, and so are the payload's unused inline bytes.
  void reuse() {
    read_dst = nullptr;
    write_src = nullptr;
    state = OpState::kAwaitResponse;
    rnr_tries = 0;
    retransmits = 0;
    deadline_ns = 0;
    silent_since_ns = 0;
    sent_ns = 0;
    for (uint64_t& t : sent_at) t = 0;
    attempts = 0;
    rto_ns = 0;
    tx_seq = 0;
    later_answered = 0;
    unanswered = 0;
    tx_mark = 0;
    pkt.status = 0;
    pkt.attempt = 0;
    pkt.remote_addr = 0;
    pkt.rkey = 0;
    pkt.ref = PeerRef();
    pkt.ref_addr = 0;
    pkt.copy_refused = false;
  }
};

class EmuQp : public backend::Qp {
 public:
  uint32_t qpn() const override { return qpn_; }
  backend::QpState state() const override;
  int modify(const backend::QpAttr& attr, uint32_t attr_mask) override;
  int query_wqs(backend::WqAttr* sq, backend::WqAttr* rq) const override;
  int attach_comp_cntr(backend::CompCntr* cntr, uint32_t cntr_ops) override;
  int detach_comp_cntr(backend::CompCntr* cntr) override;

  DeviceImpl* dev = nullptr;
  uint32_t qpn_ = 0;
  backend::QpState st = backend::QpState::kReset;
  uint32_t qkey = 0;
  uint8_t rnr_retry = 7;
  uint32_t flags = 0;
  bool ud = false;             // backend::QpType::kUd (emu/ud.cc)
  EmuPd* pd = nullptr;
  EmuCq* send_cq = nullptr;
  EmuCq* recv_cq = nullptr;
  // SQ
  uint8_t* sq_buf = nullptr;
  uint32_t sq_entries = 0, sq_log2 = 0, wqe_size = 64, max_batch = 0;
  uint32_t sq_db_index = 0;
  uint32_t* sq_db = nullptr;
  uint16_t sq_db_seen = 0;     // last producer count noticed
  uint16_t sq_fetch = 0;       // next WQE to fetch
  uint16_t sq_completed = 0;   // WQEs whose completion was produced
  int32_t stale_reported = -1; // pc already diagnosed as stale
  bool sq_pending = false;     // on the pending list
  // RQ
  uint8_t* rq_buf = nullptr;
  uint32_t rq_entries = 0;     // descriptors
  uint32_t rq_db_index = 0;
  uint32_t* rq_db = nullptr;
  uint16_t rq_cons = 0;        // descriptors consumed
  uint32_t max_recv_sge = 1;
  std::vector<std::pair<EmuCntr*, uint32_t>> cntrs;
  uint64_t outstanding = 0;    // TxOps in flight
  QpStats qs;                  // mu_
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_OBJECTS_H_
