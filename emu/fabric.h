// The wire between emulated EFA devices. A Fabric carries SRD packets between attached GIDs; it
// is an interface so that devices in one process (InProcFabric, here), in several processes on
// one host (shared memory) and on several hosts (UDP) share one device model.
//
// Contract: send() either hands the packet to the destination's sink or returns -EHOSTUNREACH
// when no device owns the destination GID. Delivery order between packets is not guaranteed
// (the receiving device reorders on purpose). Reliability and at-most-once are the devices'
// job (SRD runs end to end), so a fabric may drop packets when a fault plan says so.
#ifndef XPUFAB_EMU_FABRIC_H_
#define XPUFAB_EMU_FABRIC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace xpufab {
namespace emu {

using Gid = std::array<uint8_t, 16>;

// Two 64-bit compares; std::array's == calls memcmp, which the engine paid on every packet.
inline bool gid_equal(const Gid& a, const Gid& b) {
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a.data(), 8);
  std::memcpy(&b0, b.data(), 8);
  std::memcpy(&a1, a.data() + 8, 8);
  std::memcpy(&b1, b.data() + 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

enum class PacketType : uint8_t {
  kRequest = 1,   // SEND, RDMA WRITE (payload) or RDMA READ (no payload)
  kResponse = 2,  // ack/nak with a completion status; RDMA READ data as payload
  kDatagram = 3,  // UD SEND: never answered, never sent again
  // Plain answers (a status, no data) from one responder's pass to one requester, as
  // AnswerRecords in the payload: a NIC acks what it served together, not one packet per request.
  kAnswers = 4,
};

// One answer of a kAnswers packet: what the requester reads of a plain kResponse.
struct AnswerRecord {
  uint64_t token;
  uint16_t qpn;  // the requester's QP (the request's src_qpn)
  uint8_t status;
  uint8_t attempt;
  uint8_t op;  // the request's
};
// Its bytes in the payload: token, qpn (little-endian), status, attempt, op, 3 zero bytes.
constexpr size_t kAnswerBytes = 16;
inline void put_answer(uint8_t* out, const AnswerRecord& a) {
  std::memcpy(out, &a.token, 8);
  std::memcpy(out + 8, &a.qpn, 2);
  out[10] = a.status;
  out[11] = a.attempt;
  out[12] = a.op;
  out[13] = out[14] = out[15] = 0;
}
inline AnswerRecord get_answer(const uint8_t* in) {
  AnswerRecord a;
  std::memcpy(&a.token, in, 8);
  std::memcpy(&a.qpn, in + 8, 2);
  a.status = in[10];
  a.attempt = in[11];
  a.op = in[12];
  return a;
}

// Packet bytes: up to kInline bytes live in the packet itself, so small messages (the common
// case, a 64-byte protocol header and up to 128 bytes after it included) cost no allocation;
// larger ones use one heap block. A payload may instead borrow bytes it does not own (view()):
// only for a packet handed straight to a fabric whose send() copies it
// (Fabric::copies_on_send), so that a large RDMA write is read from the MR exactly once. Copying
// a borrowed payload, or asking it for writable bytes, makes it own its bytes first.
class Payload {
 public:
  static constexpr size_t kInline = 192;
  Payload() = default;
  Payload(const Payload& o) {
    if (o.ext_ == nullptr && !o.big_) {  // inline bytes (most packets): one copy, no checks
      size_ = o.size_;
      std::memcpy(small_, o.small_, size_);
    } else {
      assign(o.data(), o.data() + o.size_);
    }
  }
  Payload(Payload&& o) noexcept { take(std::move(o)); }
  Payload& operator=(const Payload& o) {
    if (this != &o) assign(o.data(), o.data() + o.size_);
    return *this;
  }
  Payload& operator=(Payload&& o) noexcept {
    if (this != &o) take(std::move(o));
    return *this;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool borrowed() const { return ext_ != nullptr; }
  uint8_t* data() {
    if (ext_ != nullptr) own();
    return big_ ? big_.get() : small_;
  }
  const uint8_t* data() const { return ext_ != nullptr ? ext_ : big_ ? big_.get() : small_; }
  // Contents are unspecified after a resize that grows.
  void resize(size_t n) {
    ext_ = nullptr;
    if (n > kInline && (!big_ || n > cap_)) {
      big_.reset(new uint8_t[n]);
      cap_ = n;
    } else if (n <= kInline) {
      big_.reset();
      cap_ = 0;
    }
    size_ = n;
  }
  void assign(const uint8_t* b, const uint8_t* e) {
    size_t n = static_cast<size_t>(e - b);
    if (ext_ != nullptr && ext_ <= b && b < ext_ + size_) own();  // assigning from ourselves
    resize(n);
    if (n != 0) std::memmove(data(), b, n);
  }
  // Empty, holding no heap bytes and borrowing nothing (the inline bytes are left as they are).
  void clear() {
    if (big_) big_.reset();
    cap_ = 0;
    ext_ = nullptr;
    size_ = 0;
  }
  // Borrows [b, b + n); the caller keeps it alive and unchanged while this payload refers to it.
  void view(const uint8_t* b, size_t n) {
    if (n == 0) return resize(0);
    big_.reset();
    cap_ = 0;
    ext_ = b;
    size_ = n;
  }

 private:
  void own() {
    const uint8_t* src = ext_;
    size_t n = size_;
    ext_ = nullptr;
    size_ = 0;
    resize(n);
    std::memcpy(big_ ? big_.get() : small_, src, n);
  }
  void take(Payload&& o) {
    size_ = o.size_;
    cap_ = o.cap_;
    big_ = std::move(o.big_);
    ext_ = o.ext_;
    if (!big_ && ext_ == nullptr && size_ != 0) std::memcpy(small_, o.small_, size_);
    o.size_ = 0;
    o.cap_ = 0;
    o.ext_ = nullptr;
  }
  size_t size_ = 0;
  size_t cap_ = 0;
  std::unique_ptr<uint8_t[]> big_;
  const uint8_t* ext_ = nullptr;
  uint8_t small_[kInline];
};

// A process whose memory a packet refers to: its PID, and where and what its identity word is
// (PeerMemory checks it before trusting the PID, so that a PID reused or seen from another PID
// namespace is never read from).
struct PeerRef {
  uint32_t pid = 0;  // 0: none
  uint64_t id_addr = 0;
  uint64_t id = 0;
};

struct Packet {
  // User-provided, so that a value-initialized packet (a batch's emplace_back()) is not first
  // zeroed whole: the fields take their initializers below, the payload's inline bytes none.
  Packet() noexcept {}
  PacketType type = PacketType::kRequest;
  uint8_t op = 0;           // efa_io_send_op_type
  uint8_t status = 0;       // response: efa_io_comp_status seen by the requester
  bool has_imm = false;
  // A request its sender may send again (it retransmits after a timeout): the responder then
  // remembers what it executed, so that a repeat is answered, not run twice.
  bool may_repeat = false;
  // Requests that may repeat: the sender's transmission number (mod 64); a response echoes the
  // one it answers, so that every answer times the path (no retransmission ambiguity).
  uint8_t attempt = 0;
  Gid src{};
  // The sending device's incarnation: a device reopened under the same GID restarts its tokens,
  // and a responder must not take its first requests for repeats of its predecessor's.
  uint32_t src_epoch = 0;
  uint16_t src_qpn = 0;
  uint16_t dst_qpn = 0;
  uint32_t qkey = 0;
  uint32_t imm = 0;
  uint64_t token = 0;       // requester's id of the operation, echoed in the response
  uint64_t remote_addr = 0; // RDMA
  uint32_t rkey = 0;
  uint32_t length = 0;      // RDMA: total bytes; SEND: payload bytes
  // Requests that may repeat: the request's number on its path (one per new request from a
  // device to a peer, dense, kept by retransmissions), which the responder's at-most-once
  // window is indexed by.
  uint32_t seq = 0;
  // One-copy transfers (PeerMemory): instead of a payload, bytes that stay in process
  // ref.pid at ref_addr. An RDMA WRITE request carries its source this way; an RDMA READ
  // request with ref.pid set offers to fetch the data itself, and its answer then names where
  // the data lies at the responder.
  PeerRef ref;
  uint64_t ref_addr = 0;
  // Response: the responder could not reach the requester's memory (or does not do one-copy);
  // the request is to be sent again with its bytes.
  bool copy_refused = false;
  // Not on the wire: set by a fabric that took the packet from where its sender sees how far
  // this end has executed (Fabric::executed_mark), so that an answer may go by position.
  bool position_seen = false;
  Payload payload;
};

// Implemented by a device: receives packets addressed to its GID. Called from any thread; must
// only queue the packet.
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void deliver(Packet&& pkt) = 0;
  // deliver() of a copy of `pkt`: a sink that queues packets copies it into its queue at once.
  virtual void deliver_copy(const Packet& pkt) {
    Packet copy = pkt;
    deliver(std::move(copy));
  }
  // deliver() of every packet of *pkts, which is left empty: a sink that queues takes the batch
  // under one lock (or takes the vector itself), and wakes its consumer once.
  virtual void deliver_batch(std::vector<Packet>* pkts) {
    for (Packet& p : *pkts) deliver(std::move(p));
    pkts->clear();
  }
};

class Fabric;

// A caller's storage for its batches of sends (Fabric::batch_begin): kept by the caller (an
// engine), so that a batch costs neither an allocation nor a thread-local object to construct.
// Only the fabric that opened a batch in it reads or writes it.
struct SendBatch {
  static constexpr int kQueues = 4;  // destinations queued for; beyond them a send goes at once
  const Fabric* owner = nullptr;
  int depth = 0;
  std::atomic<uint32_t>* in_flight = nullptr;  // InProcFabric: its stripe, held from a first send
  int queues = 0;
  PacketSink* sink[kQueues] = {};
  std::vector<Packet> pkts[kQueues];
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  // -EEXIST if the GID is taken.
  virtual int attach(const Gid& gid, PacketSink* sink) = 0;
  // After detach returns, the sink is never called again.
  virtual void detach(const Gid& gid) = 0;
  // An address handle to dst was made. A fabric that opens something per destination (a mailbox)
  // may do it now, off the data path, as a NIC sets its address handles up when they are
  // created. Best effort: a destination not there yet is opened at the first send.
  virtual void prepare_peer(const Gid& dst) { (void)dst; }
  // 0, or -EHOSTUNREACH when nothing owns dst. `now_ns`: the caller's steady clock (an engine's
  // pass time; 0: a fabric that needs the time reads it).
  virtual int send(const Gid& dst, Packet&& pkt, uint64_t now_ns = 0) = 0;
  // What the calling thread sends between batch_begin() and batch_end() may be handed to the
  // destinations only at batch_end(), per destination at once (an engine pass's packets for one
  // device cost one queue lock and one wake check, not one each). A send's result is known when
  // it returns all the same. `b` lives until batch_end(). Pairs nest (the outer pair's storage
  // serves); a thread's open batch belongs to the fabric that opened it, and sends through
  // another fabric meanwhile go out at once.
  virtual void batch_begin(SendBatch* b) { (void)b; }
  virtual void batch_end() {}
  // True when batch_begin/batch_end do something here (a caller may skip them otherwise).
  virtual bool batches_sends() const { return false; }
  // True when a packet handed to send() always reaches an attached destination. Devices then
  // skip retransmission copies and duplicate filtering unless a fault plan drops packets.
  virtual bool lossless() const { return false; }
  // Hands packets that arrived for `gid` to its sink on the calling thread, at most `budget`
  // of them; returns how many. A device calls this from every engine pass, so a thread that
  // drives the engine also drains the wire and no receive thread hands packets over meanwhile.
  // Fabrics that deliver from send() (or from their own thread only) return 0.
  virtual int poll_rx(const Gid& gid, int budget) {
    (void)gid;
    (void)budget;
    return 0;
  }
  // poll_rx() for a caller that processes what arrived itself: the packets are appended to
  // `out` instead of handed to the sink one by one. `now_ns` is the caller's steady clock for
  // this pass (0: the fabric reads it). Returns how many. The default hands them to the sink.
  virtual int poll_rx_batch(const Gid& gid, int budget, uint64_t now_ns, std::vector<Packet>* out) {
    (void)now_ns;
    (void)out;
    return poll_rx(gid, budget);
  }
  // Without the device's lock: true when nothing for the local `gid` waits on the wire, so an
  // engine pass would find nothing there; the call counts as a poll (a receive thread that
  // parks while the device polls stays parked). False when the fabric cannot tell cheaply.
  virtual bool rx_quiet(const Gid& gid, uint64_t now_ns) {
    (void)gid;
    (void)now_ns;
    return false;
  }
  // The device of `gid` stops polling its wire for a while (its engine goes to sleep): a fabric
  // with a receive thread that parks while polls come in hands packets to the sink from now on.
  virtual void poll_rx_stop(const Gid& gid) { (void)gid; }
  // The device of `gid` has a thread of its own that drives it whenever its callers stop, and
  // that says poll_rx_stop before it stops too: a receive thread need not wake on its own to see
  // whether the polls went on.
  virtual void poll_rx_handed_over(const Gid& gid) { (void)gid; }
  // True when send() has finished reading the payload by the time it returns, so a payload may
  // point at memory that is only guaranteed to live until then.
  virtual bool copies_on_send() const { return false; }
  // True when the processes behind this fabric's GIDs share a host and a user, so that a
  // packet may refer to memory of its sender (Packet::ref) and the other end copies it
  // directly (PeerMemory). A refused copy falls back to carrying the bytes.
  virtual bool peer_memory() const { return false; }
  // True when the live receiver behind `dst` has not yet taken in everything sent to it, or
  // has not finished an engine pass begun after `since_ns` (steady clock) and after the last
  // packet sent to it: it is behind (many processes on few cores), not unresponsive, and has
  // not had a chance to answer.
  virtual bool peer_stalled(const Gid& dst, uint64_t since_ns) {
    (void)dst;
    (void)since_ns;
    return false;
  }
  // send(), and where the packet lies on the way to `dst`: a mark that unserved() takes. 0 (the
  // default, and for a packet handed over at once) means it is no longer on the wire.
  virtual int send_marked(const Gid& dst, Packet&& pkt, uint64_t* mark, uint64_t now_ns = 0) {
    *mark = 0;
    return send(dst, std::move(pkt), now_ns);
  }
  // send_marked() of a copy of `pkt`, which stays the caller's (a request kept for
  // retransmission): a fabric that only reads the packet need not copy it first.
  virtual int send_copy(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now_ns = 0) {
    Packet copy = pkt;
    return send_marked(dst, std::move(copy), mark, now_ns);
  }
  // True when the packet that send_marked() gave `mark` has provably not been served yet: it
  // still waits unread on the way to the live `dst`, or no engine pass of dst begun after
  // `sent_ns` (steady clock) has finished. Its sender then has no reason to think it lost.
  virtual bool unserved(const Gid& dst, uint64_t mark, uint64_t sent_ns) {
    (void)dst;
    (void)mark;
    (void)sent_ns;
    return false;
  }
  // True when packets for the local `gid` wait on the wire unread (a mailbox not yet drained):
  // an answer a device is about to give up on may be among them.
  virtual bool rx_pending(const Gid& gid) {
    (void)gid;
    return false;
  }
  // Answers by position. Where a sender can see how far its receiver has executed what it
  // read, a request that ran as asked (status OK, no data, nothing refused) needs no answer
  // packet: its requester takes every transmission below the responder's executed mark as
  // answered OK. Every other answer still travels, and before the mark that covers its request.
  // Fabrics without it keep these defaults, and every answer is a packet.
  //
  // Responder: whether the device behind `requester` takes answers by position now (it asked
  // for them, set_position_answers) from the local `gid` (whose mark still moves); only for a
  // request that came with position_seen.
  virtual bool takes_position_answers(const Gid& gid, const Gid& requester) {
    (void)gid;
    (void)requester;
    return false;
  }
  // Responder: every request the polls of the local `gid` handed over so far has run, and its
  // answer packets are sent: moves the executed mark its senders see up to there.
  virtual void executed_polled(const Gid& gid) { (void)gid; }
  // Requester: the local `gid` wants answers by position (on), or not (off: its device is not
  // polled often enough to see a mark move soon). poll_rx_stop turns it off too.
  virtual void set_position_answers(const Gid& gid, bool on) {
    (void)gid;
    (void)on;
  }
  // Requester: dst's executed mark (0: none), compared with transmissions' marks by
  // mark_covered, and then where the wire into the local `gid` ends (*rx_end): every answer
  // packet dst sent before its mark lies below that end, and the mark may be taken once the
  // polls of `gid` have handed everything below it over (polled_past).
  virtual uint64_t executed_mark(const Gid& gid, const Gid& dst, uint64_t* rx_end) {
    (void)gid;
    (void)dst;
    *rx_end = 0;
    return 0;
  }
  // Requester: whether the transmission that send_marked() gave `mark` lies below `executed`.
  virtual bool mark_covered(uint64_t executed, uint64_t mark) const {
    (void)executed;
    (void)mark;
    return false;
  }
  // Requester: the polls of the local `gid` (poll_rx_batch) have handed over everything below
  // `rx_end`.
  virtual bool polled_past(const Gid& gid, uint64_t rx_end) {
    (void)gid;
    (void)rx_end;
    return false;
  }
  // Copies `len` bytes at `addr` in the process `from` into `local` (PeerMemory::read). 0, or
  // -errno: -EPERM/-ESRCH (the kernel refused, or the process is not the one `from` names),
  // -EFAULT (not mapped there), -EOPNOTSUPP (this fabric does not do it).
  virtual int copy_peer(const PeerRef& from, uint64_t addr, void* local, size_t len);
};

// Cross-process memory copies between processes of one user (process_vm_readv), and this
// process's own identity for Packet::ref. Thread-safe.
class PeerMemory {
 public:
  // This process: its PID and identity word (fresh after fork()).
  static PeerRef self();
  // Reads `len` bytes at `addr` of the process `from` into `local`, after checking (once per
  // process) that `from.pid` is the process whose identity `from` carries. 0 or -errno.
  static int read(const PeerRef& from, uint64_t addr, void* local, size_t len);
};

// Devices in one process. Delivery is a call into the destination's sink (in a batch, one call
// per destination at the batch's end). The GID table is an
// immutable snapshot replaced on attach/detach (read-copy-update): send() takes no lock, only
// marks itself in flight on a per-thread stripe, and detach() waits until every send that could
// have seen the old table has left before it returns. Each thread remembers its last look-ups
// per table, so a sender to a few peers does not search the table per packet.
// 40 random bits drawn once per process (again in a child after fork()), for GIDs that must
// differ between processes that share a fabric even where PIDs repeat (PID namespaces).
uint64_t process_nonce();

class InProcFabric : public Fabric {
 public:
  InProcFabric();
  ~InProcFabric() override;
  int attach(const Gid& gid, PacketSink* sink) override;
  void detach(const Gid& gid) override;
  int send(const Gid& dst, Packet&& pkt, uint64_t now_ns = 0) override;
  // The copy is made once: by the destination's sink (PacketSink::deliver_copy), or, in a batch,
  // into the batch that the sink takes whole.
  int send_copy(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now_ns = 0) override;
  // A batch holds its thread's stripe from its first send to its end, so that every sink it
  // queued packets for stays attached until they are handed over.
  void batch_begin(SendBatch* b) override;
  void batch_end() override;
  bool batches_sends() const override { return true; }
  bool lossless() const override { return true; }
  // Packets go straight to the destination's sink (its inbox): the wire never holds any.
  bool rx_quiet(const Gid&, uint64_t) override { return true; }
  // Every device is in this process; its copies are checked ones (a buffer freed under a late
  // request faults the copy, not the process).
  bool peer_memory() const override { return true; }

  // The process-wide fabric emulated devices opened through the backend registry share.
  static std::shared_ptr<InProcFabric> process_fabric();

 private:
  // Ordered by the GID's two 64-bit halves: one or two integer compares per level instead of a
  // byte-wise compare (the order itself does not matter).
  struct GidLess {
    bool operator()(const Gid& a, const Gid& b) const {
      uint64_t a0, a1, b0, b1;
      std::memcpy(&a0, a.data(), 8);
      std::memcpy(&b0, b.data(), 8);
      if (a0 != b0) return a0 < b0;
      std::memcpy(&a1, a.data() + 8, 8);
      std::memcpy(&b1, b.data() + 8, 8);
      return a1 < b1;
    }
  };
  // A snapshot: never changed once published. gen is unique among every table of every
  // InProcFabric, so a sender's cached look-up (fabric.cc) is valid exactly while its table is.
  struct Table {
    uint64_t gen = 0;
    std::map<Gid, PacketSink*, GidLess> sinks;
  };
  static constexpr int kStripes = 64;
  struct alignas(64) Stripe {
    std::atomic<uint32_t> in_flight{0};
  };
  // Publishes `next` and waits out the readers of the previous table (called under write_mu_).
  void publish(Table* next);
  // Calls hand(sink) with the sink of `dst`, marked in flight meanwhile; 0 or -EHOSTUNREACH.
  template <class H>
  int with_sink(const Gid& dst, H&& hand);
  // A send's packet to `dst`: queued by enqueue(queue) in the thread's open batch of this fabric
  // when it has room for the sink, else handed over by hand(sink) at once.
  template <class Q, class H>
  [[gnu::always_inline]] inline int route(const Gid& dst, Q&& enqueue, H&& hand);
  // The sink of `dst` in the current table, or null; call while marked in flight.
  [[gnu::always_inline]] inline PacketSink* find_sink(const Gid& dst);
  // For a send in the thread's open batch `b` of this fabric: the sink of `dst` (null when
  // nothing owns it), the batch's stripe held from now until batch_end.
  [[gnu::always_inline]] inline PacketSink* batch_sink(SendBatch* b, const Gid& dst);

  std::mutex write_mu_;               // serializes attach/detach
  std::atomic<const Table*> table_;   // never null
  Stripe stripes_[kStripes];
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FABRIC_H_
