// The emulated device's internal class, shared by the .cc files that implement it, one per
// responsibility:
//   device.cc       construction, destruction, query, diagnostics, create_device
//   control.cc      control verbs: PD, MR, CQ, QP, AH and counter objects, key checks
//   qp_state.cc     the QP state machine, failing a QP, flushing its queues
//   doorbells.cc    the doorbell page and what a changed doorbell means
//   requester.cc    SQ processing, WQE execution, sending, timers, responses
//   retransmit.cc   retransmission timed by the measured round trip, fast retransmit
//   responder.cc    arriving packets: receive WQEs, executing requests, answering
//   completions.cc  CQE writing (delays, overruns), TX/RX completions, counters
//   engine.cc       the engine pass, packet arrival and fault decisions, the engine thread
//   stats.cc        statistics
// Internal to emu/: other packages use device.h.
//
// Locking: mu_ guards every table and all engine state; the engine (step_locked) and every
// control call run under it. Packets arrive on inbox_mu_ (never held together with mu_ of another
// device), so two devices sending to each other cannot deadlock. The only state shared with
// applications without a lock is queue memory: doorbell words (atomic 32-bit accesses on both
// sides), WQEs (read after an acquire load of the doorbell that covers them), CQE flags (written
// with a release store after the rest of the entry) and counters (atomic adds).
//
// An idle caller's progress() takes no lock: a pass that left nothing pending says until when
// the device stays idle (DeviceMutex::quiet_until_ns), and the caller
// checks what can change meanwhile without mu_: the inbox, the wire (Fabric::rx_quiet), the
// doorbell words (DoorbellPage::unchanged). Whoever else takes mu_ may leave work, so taking it
// clears the mark.
#ifndef XPUFAB_EMU_DEVICE_IMPL_H_
#define XPUFAB_EMU_DEVICE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/backend/backend.h"
#include "device/efa_io_defs.h"
#include "emu/clock.h"
#include "emu/device.h"
#include "emu/device_mutex.h"
#include "emu/doorbells.h"
#include "emu/fabric.h"
#include "emu/fault.h"
#include "emu/objects.h"
#include "emu/profile.h"
#include "emu/timer_wheel.h"
#include "emu/trace/trace.h"
#include "emu/wqe_decode.h"

namespace xpufab {
namespace emu {

constexpr uint32_t kMaxQueueDepth = 32768;  // 16-bit producer counts need an even lap count
constexpr uint32_t kAnswersBeforeFastRetransmit = 3;  // TCP's duplicate-ack threshold
constexpr uint64_t kStarvedSilences = 16;  // how much longer a busy or stalled peer is waited for

// The engine's clock (emu/clock.h: the TSC where it is invariant; a kernel read costs 30-80 ns
// on a virtual machine, and the engine reads the clock once a pass).
inline uint64_t now_ns() { return clock::mono_ns(); }

// The inbox's lock. It is held only to append one packet or to take the whole inbox, never
// across anything that blocks, so an uncontended lock and unlock are one exchange and one store
// (a mutex cost about 80 instructions a WQE for its two packets); a holder that was preempted
// is waited for by yielding.
class InboxLock {
 public:
  void lock() {
    for (int n = 0; held_.exchange(true, std::memory_order_acquire);) {
      while (held_.load(std::memory_order_relaxed)) {
        if (++n > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

class DeviceImpl : public EmuDevice, public PacketSink {
 public:
  DeviceImpl(const DeviceOptions& o, const Profile* profile, std::shared_ptr<Fabric> fabric, Gid gid,
             std::string name, std::unique_ptr<FaultHooks> own_faults);
  ~DeviceImpl() override;
  int init();

  // backend::Device
  int query(backend::DeviceAttr* attr) const override;
  int alloc_pd(backend::Pd** pd_p) override;
  int dealloc_pd(backend::Pd* pd) override;
  int reg_mr(backend::Pd* pd, const backend::MrInitAttr& attr, backend::Mr** mr_p) override;
  int dereg_mr(backend::Mr* mr) override;
  int create_cq(const backend::CqInitAttr& attr, backend::Cq** cq_p) override;
  int destroy_cq(backend::Cq* cq) override;
  int create_qp(const backend::QpInitAttr& attr, backend::Qp** qp_p) override;
  int destroy_qp(backend::Qp* qp) override;
  int create_ah(backend::Pd* pd, const uint8_t gid[16], backend::Ah** ah_p) override;
  // create_ah's part under the lock: the AH itself.
  int add_ah(backend::Pd* pd, const uint8_t gid[16], backend::Ah** ah_p);
  int destroy_ah(backend::Ah* ah) override;
  int create_comp_cntr(const backend::CompCntrInitAttr& attr, backend::CompCntr** cntr_p) override;
  int destroy_comp_cntr(backend::CompCntr* cntr) override;
  int local_address(const backend::Qp* qp, uint8_t gid[16], uint32_t* qpn,
                    uint32_t* qkey) const override;
  int set_qp_failed(backend::Qp* qp, int status) override;
  void set_event_handler(backend::EventHandler* handler) override;
  int progress(int budget) override;
  int ring_sq(backend::Qp* qp, int budget) override;

  // EmuDevice
  Stats stats() const override;
  std::vector<QpStats> qp_stats() const override;
  const Trace* trace() const override { return trace_.get(); }
  const Profile& profile() const override { return *profile_; }
  Gid gid() const override { return gid_; }
  int step(int budget) override;
  void kick() override;
  void publish_writes() override { published_writes_.fetch_add(1, std::memory_order_release); }

  // PacketSink
  void deliver(Packet&& pkt) override;
  void deliver_copy(const Packet& pkt) override;
  void deliver_batch(std::vector<Packet>* pkts) override;

  // Called by objects, under mu_.
  int modify_qp_locked(EmuQp* qp, const backend::QpAttr& attr, uint32_t mask);
  int arm_cq(EmuCq* cq);
  // A handle is trusted (and its dynamic type used) only once it is found among live objects, so
  // a stale or foreign handle gets -EINVAL instead of a use-after-free. Call under mu_.
  template <class T, class B>
  T* live_as(B* handle) const {
    return handle != nullptr && live_.count(static_cast<const void*>(handle)) ? static_cast<T*>(handle)
                                                                              : nullptr;
  }

  mutable DeviceMutex mu_;
  std::set<const void*> live_;  // every live object, by its backend:: base address (mu_)

 private:
  struct Counters {
    std::atomic<uint64_t> v[22 + 6 + 13];
  };
  enum Stat {
    kSteps, kDoorbells, kWqes, kCqes, kErrorCqes, kPacketsTx, kPacketsRx, kBytesTx, kBytesRx,
    kRetransmits, kRnrNaks, kRnrRetries, kDropped, kFaults, kIdleSleeps, kCorrupt, kDuplicates,
    kReordered, kDelayedPkts, kDelayedCqes, kStalls, kTimeouts, kDiag0,
    kOneCopyBytes = kDiag0 + 6, kOneCopyRefused, kStalledWaits, kBacklogWaits, kUnservedWaits,
    kPositionAnswers, kAnsweredByPosition,
    kLongestSleepUs, kLongestParkUs, kParks, kParkKicks, kTakeovers,  // written by the engine thread alone
    kIdlePolls  // written by callers without mu_ (progress)
  };
  // Statistics change under mu_ only (one writer), so a plain load+store suffices; readers use
  // relaxed loads.
  void bump(int s, uint64_t n = 1) {
    stats_.v[s].store(stats_.v[s].load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  // `now`: the steady clock the caller just read (0: read it here).
  int step_locked(int budget, uint64_t now = 0);
  // A pass that only takes in qp's send-queue doorbell and executes its new WQEs (ring_sq).
  int ring_sq_locked(EmuQp* qp, int budget, uint64_t now);
  // The bookkeeping every pass opens with (its number, clock and answer count) and closes with.
  void begin_pass(uint64_t now);
  void end_pass();
  // Counts a caller's call in, for the engine thread's parking (engine_loop).
  void note_caller(uint64_t now);
  // Without mu_: true when a pass at `now` would find nothing to do (see the top of this file).
  bool idle_at(uint64_t now);
  // The engine thread's first idle sleep (engine_loop).
  uint32_t first_sleep_us() const;
  // At the end of a pass: marks the device idle if the pass left nothing pending.
  void mark_quiet();
  // Trace points cost one test of trace_ when tracing is off.
  void tr(TraceKind k, uint32_t qpn, uint32_t slot, uint8_t a, uint8_t b, uint8_t status, uint32_t len,
          uint64_t arg) {
    TraceEvent e;
    e.t_ns = step_now_;
    e.kind = k;
    e.a = a;
    e.b = b;
    e.status = status;
    e.qpn = qpn;
    e.slot = slot;
    e.len = len;
    e.arg = arg;
    trace_->add(e);
  }
  // Asks the fault hooks; counts and traces what they inject. Only with opt_.faults set.
  FaultDecision ask(FaultContext ctx, uint64_t arg);
  // Packets: the arrival path (fault decision, then execution).
  void receive_packets(int* work);
  void process_packet(Packet& p, int* work);
  void release_cqes();
  // Writes the CQE into the ring (or finds the CQ overrun); qp: its QP, null when gone.
  void write_cqe_now(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn, EmuQp* qp);
  // Its rare steps: the CQ found full, a trace point, the event of an armed CQ.
  [[gnu::cold, gnu::noinline]] void cq_overrun(EmuCq* cq, uint32_t qpn, uint32_t slot);
  [[gnu::noinline]] void trace_cqe(const efa_io_rx_cdesc_ex* cqe, uint32_t qpn, uint32_t slot);
  [[gnu::noinline]] void signal_cq(EmuCq* cq);
  void scan_doorbells(int* work);
  void on_doorbell(uint32_t index, uint32_t value, int* work);
  int process_sq(EmuQp* qp, int budget);
  void execute_wqe(EmuQp* qp, uint16_t pc, const uint8_t* wqe);
  // Fills *op with the request a decoded WQE makes (its keys checked, its payload gathered);
  // OK or the completion status of its failure.
  uint8_t build_request(EmuQp* qp, const WqeRequest& r, EmuAh* ah, TxOp* op);
  // An op slot for a request being built (claim), given back if the WQE fails before it is
  // sent (release, which erase_op also ends with); start_op sends the request built in it and
  // makes its token live. claim_op_slot makes a fresh op of a slot given back: only the bytes
  // are returned now.
  uint32_t claim_op_slot();
  void release_op_slot(uint32_t idx) {
    op_slots_[idx].op.pkt.payload.clear();
    op_free_.push_back(idx);
  }
  void start_op(uint32_t idx);
  void send_packet(TxOp* op, uint64_t token);
  // qp: the destination QP, qp_by_num(pkt.dst_qpn) (null when there is none).
  void handle_request(Packet& pkt, EmuQp* qp);
  // UD (emu/ud.cc): a datagram leaves once and completes; an arriving one lands or is dropped.
  void send_datagram(TxOp&& op);
  void receive_datagram(Packet& pkt);
  void handle_response(Packet& pkt);
  // A kAnswers packet's answers, each as handle_response handles a plain one.
  void handle_answers(const Packet& pkt, int* work);
  // full: the kResponse itself (data, a reference, a refusal), null for a plain answer.
  void handle_answer(const Gid& src, uint64_t token, uint8_t status, uint8_t attempt, const Packet* full);
  // A plain answer of this pass to `dst`, sent with the others to dst at the pass's end
  // (flush_answers) or once kMaxAnswersPerPacket wait.
  void queue_answer(const Gid& dst, const AnswerRecord& a);
  void flush_answers();
  // Answers by position, the requester's side: reads the executed marks of the listed paths'
  // peers (before the pass's poll), and takes the transmissions a mark covers as answered OK
  // once the polls handed over every answer packet sent before it (PeerPath::executed_next).
  void read_executed_marks();
  void take_position_answers(int* work);
  // A listed path's peer moved its mark since this device last took it.
  bool executed_marks_moved();
  void fire_timers();
  // Retransmission (retransmit.cc, PeerPath in objects.h): arms the op's timeout after a
  // transmission, times the path and fast-retransmits from an answer, and expires a timeout.
  void arm_rto(TxOp* op, uint64_t token);
  void on_answer(TxOp* op, uint8_t attempt);
  void on_late_answer(const Gid& src, uint64_t token, uint8_t attempt);
  void remember_done(const TxOp& op, uint64_t token);
  void sample_rtt(PeerPath* path, uint64_t r);
  void rto_expired(TxOp* op, uint64_t token);
  void retransmit(TxOp* op, uint64_t token);
  // The path to a peer, created on first use; an AH caches it.
  PeerPath* path_to(const Gid& gid);
  // One-copy fallback: the peer could not copy (copy_refused); send the bytes on the wire.
  void resend_by_value(TxOp* op, uint64_t token);
  void fire_timer(uint64_t when, uint64_t token);
  // The wait before an op's `tries`-th RNR retry (1-based): rnr_delay_us / 8, / 4, / 2, then
  // rnr_delay_us itself. A receiver short of buffers mostly posts the next one within
  // microseconds (a ping-pong that reposts after its own send completed), so the first retries
  // come soon; one that stays short is asked at the full delay.
  uint64_t rnr_delay_ns(uint32_t tries) const {
    constexpr uint32_t kRamp = 3;
    const uint32_t shift = tries > kRamp ? 0 : kRamp + 1 - std::max(tries, 1u);
    return (uint64_t{opt_.rnr_delay_us} * 1000) >> shift;
  }
  void arm_timer(uint64_t token, uint64_t when) { timers_.add(when, token); }
  // The path's timer (PeerPath::timer_ns): armed at `when` unless one is due by then already;
  // when it fires, the path's transmissions that are due fire (fire_path).
  void arm_path_timer(PeerPath* path, uint64_t when);
  void fire_path(uint64_t when, uint32_t index);
  static constexpr uint64_t kPathTimer = uint64_t{1} << 63;  // wheel tokens of path timers
  void complete_tx(EmuQp* qp, uint16_t req_id, const efa_io_req_id_ex& ex, uint8_t op, uint8_t status,
                   bool comp_req);
  // A completion of `qp`'s: the fault plan's say first (true: it dropped, delayed or queued
  // the entry), then the ring.
  bool cqe_fault(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn);
  void write_cqe(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, EmuQp* qp) {
    if (opt_.faults != nullptr && cqe_fault(cq, cqe, qp->qpn_)) return;
    write_cqe_now(cq, cqe, qp->qpn_, qp);
  }
  // Advances the completion counters bound to qp for cntr_op (most QPs have none).
  void count(EmuQp* qp, uint32_t cntr_op, bool ok) {
    if (!qp->cntrs.empty()) count_bound(qp, cntr_op, ok);
  }
  void count_bound(EmuQp* qp, uint32_t cntr_op, bool ok);
  void flush_qp(EmuQp* qp);
  void flush_rq(EmuQp* qp);
  // Counts, traces and reports a diagnostic; in strict mode logs it and aborts.
  void diag(DiagKind kind, uint32_t qpn, uint32_t slot, const char* detail);
  // One line to DeviceOptions::log (dropped without a sink).
  void log(const std::string& line) const {
    if (opt_.log) opt_.log(line);
  }
  EmuQp* qp_by_num(uint32_t qpn) { return qpn < qps_.size() ? qps_[qpn] : nullptr; }
  // The AH an arriving packet's source is reported as: pd's lowest-numbered AH for gid, null
  // when it has none. A look-up, not a scan: a device with many peers reads one per packet.
  EmuAh* ah_for_gid(const EmuPd* pd, const Gid& gid) {
    if (last_ah_ != nullptr && last_ah_->pd == pd && gid_equal(last_ah_->gid, gid)) return last_ah_;
    return ah_lookup(pd, gid);
  }
  EmuAh* ah_lookup(const EmuPd* pd, const Gid& gid);
  // Local/remote buffer checks; write the host pointer on success. Inline: every WQE and
  // every request that lands makes one or two.
  bool check_key(const EmuPd* pd, uint32_t key, uint64_t addr, uint64_t len, uint32_t access,
                 uint8_t** host_p) {
    uint32_t idx = (key & 0xffff);
    if (idx == 0 || (key >> 24) != 0 || idx - 1 >= mrs_.size()) return false;
    EmuMr* mr = mrs_[idx - 1];
    if (mr == nullptr || mr->key != key || mr->pd != pd) return false;
    if ((mr->access & access) != access) return false;
    if (addr < mr->iova_ || len > mr->len || addr - mr->iova_ > mr->len - len) return false;
    *host_p = mr->host + (addr - mr->iova_);
    return true;
  }
  struct RxWqe {
    uint16_t req_id = 0;
    uint32_t ndesc = 0;
    efa_io_rx_desc desc[16];
  };
  // 1: got one; 0: RQ empty; -1: malformed (consumed and diagnosed).
  int take_rx_wqe(EmuQp* qp, RxWqe* rx);
  void rx_cqe(EmuQp* qp, uint16_t req_id, uint8_t status, uint8_t op, uint32_t len, const Packet& pkt,
              bool unsolicited);
  void engine_loop();
  // Reports CQ overruns found by the last pass; call without mu_ held.
  void notify_pending();
  void set_failed_locked(EmuQp* qp, int status, std::vector<EmuQp*>* failed);
  void notify_failed(const std::vector<EmuQp*>& failed, int status);

  DeviceOptions opt_;
  const Profile* profile_;
  std::shared_ptr<Fabric> fabric_;
  Gid gid_;
  std::string name_;
  std::unique_ptr<FaultHooks> own_faults_;  // a plan from DeviceOptions::fault_plan
  std::unique_ptr<Trace> trace_;
  bool attached_ = false;
  backend::EventHandler* handler_ = nullptr;

  // Tables (mu_).
  uint32_t next_pd_ = 1;
  std::set<EmuPd*> pds_;
  std::vector<EmuMr*> mrs_;         // index = key & 0xffff - 1
  std::vector<uint8_t> mr_gen_;
  std::vector<EmuAh*> ahs_;         // index = ahn
  // The hash of the tables keyed by a GID and one word besides (a PD, a requester's epoch).
  struct GidKeyHash {
    static size_t of(const Gid& gid, uint64_t word) {
      uint64_t h = word * 0x9e3779b97f4a7c15ull;
      for (uint8_t b : gid) h = (h ^ b) * 0x100000001b3ull;
      return static_cast<size_t>(h);
    }
    size_t operator()(const std::pair<const EmuPd*, Gid>& k) const {
      return of(k.second, reinterpret_cast<uintptr_t>(k.first));
    }
    size_t operator()(const std::pair<Gid, uint32_t>& k) const { return of(k.first, k.second); }
  };
  // ah_for_gid's answer for each (PD, GID) that has an AH, kept by add_ah and destroy_ah; the
  // last answer is at hand (a burst comes from one peer).
  std::unordered_map<std::pair<const EmuPd*, Gid>, EmuAh*, GidKeyHash> ah_by_gid_;
  EmuAh* last_ah_ = nullptr;
  std::set<EmuCq*> cqs_;
  std::set<EmuCntr*> cntrs_;
  std::vector<EmuQp*> qps_;         // index = qpn
  uint32_t next_qpn_ = 1;

  // Doorbell page (doorbells.h).
  DoorbellPage db_;
  uint64_t pass_ = 0;
  uint64_t step_now_ = 0;  // clock read once per pass; timers have microsecond granularity

  std::vector<EmuQp*> sq_pending_;  // QPs with doorbelled WQEs not yet fetched
  std::vector<EmuCq*> overrun_notify_;  // CQs to report to the handler once mu_ is released

  // Operations in flight (mu_), in reusable slots; token = generation << 32 | slot.
  struct OpSlot {
    TxOp op;
    uint32_t gen = 0;
    bool used = false;
  };
  std::vector<OpSlot> op_slots_;
  std::vector<uint32_t> op_free_;
  TxOp* find_op(uint64_t token) {
    uint32_t idx = static_cast<uint32_t>(token);
    if (idx >= op_slots_.size()) return nullptr;
    OpSlot& s = op_slots_[idx];
    return s.used && s.gen == static_cast<uint32_t>(token >> 32) ? &s.op : nullptr;
  }
  void erase_op(uint64_t token) {
    uint32_t idx = static_cast<uint32_t>(token);
    op_slots_[idx].used = false;
    release_op_slot(idx);
  }
  uint64_t token_of(uint32_t idx) const { return uint64_t{op_slots_[idx].gen} << 32 | idx; }
  // (when, token) of ops, and of paths (kPathTimer | index: their requests awaiting an answer);
  // stale ones are skipped when they fire.
  TimerWheel timers_;
  std::set<Gid> responded_peers_;
  std::map<Gid, PeerPath> paths_;  // peers of address handles and of requests
  std::vector<PeerPath*> path_list_;  // the same, by PeerPath::index
  struct DueTx {
    uint64_t when, tx_seq, token;
  };
  std::vector<DueTx> due_tx_;  // fire_path's scratch
  uint64_t tx_seq_ = 0;
  uint64_t min_rto_ns_ = 0, max_rto_ns_ = 0, initial_rto_ns_ = 0;
  uint64_t silence_limit_ns_ = 0;  // a peer silent this long is unresponsive
  // This device's incarnation (Packet::src_epoch), different for every device.
  uint32_t epoch_ = 0;
  bool have_last_peer_ = false;
  Gid last_peer_{};  // the last entry added to responded_peers_ (saves a lookup per response)
  // This device expects loss (a lossy fabric or a fault plan): the RTO floor is min_rto_us.
  bool may_lose_ = true;
  bool borrow_payloads_ = false;  // the fabric copies payloads inside send()
  bool one_copy_ = false;         // DeviceOptions::one_copy on a fabric with peer memory
  // DeviceOptions::position_answers, where nothing needs to see every answer as a packet (no
  // fault plan, no trace).
  bool positions_ = false;
  // This device's wish for answers by position is on at the fabric (set by a pass, cleared with
  // it when the engine thread stops polling). mu_
  bool position_wish_ = false;
  // Paths with transmissions that may be answered by position. mu_
  std::vector<PeerPath*> position_paths_;
  PeerRef self_ref_;              // this process, for Packet::ref
  // At-most-once, per requester incarnation (GID, epoch): the answers to its last kWindow
  // requests, direct-mapped by their dense sequence number (Packet::seq): seq << 8 | status,
  // 0 for none. A request older than the window runs again, as it did when a global FIFO of
  // 4,096 answers forgot it. The slots are queue memory made resident at once (alloc_queue):
  // two system calls on a new requester's first request, where a zeroed heap block took a page
  // fault at each of its eight pages on that request's path.
  struct Executed {
    static constexpr uint32_t kWindow = 4096;
    static constexpr size_t kBytes = kWindow * sizeof(uint64_t);
    struct Free {
      void operator()(uint64_t* p) const { free_queue(p, kBytes); }
    };
    std::unique_ptr<uint64_t[], Free> slot{zeroed_slots()};
    static uint64_t* zeroed_slots() {
      auto* p = reinterpret_cast<uint64_t*>(alloc_queue(kBytes, kBytes));
      if (p == nullptr) throw std::bad_alloc();
      return p;
    }
  };
  // The window of requester (gid, epoch); the last one looked up is at hand (one look-up per
  // peer burst).
  Executed* executed_for(const Gid& gid, uint32_t epoch) {
    if (last_executed_ != nullptr && last_executed_key_.second == epoch &&
        gid_equal(last_executed_key_.first, gid)) {
      return last_executed_;
    }
    return executed_lookup(gid, epoch);
  }
  Executed* executed_lookup(const Gid& gid, uint32_t epoch);
  std::unordered_map<std::pair<Gid, uint32_t>, std::unique_ptr<Executed>, GidKeyHash> executed_;
  Executed* last_executed_ = nullptr;  // the last one looked up
  std::pair<Gid, uint32_t> last_executed_key_{};
  uint64_t rng_;

  // Inbox.
  InboxLock inbox_mu_;
  std::vector<Packet> inbox_;
  std::atomic<size_t> inbox_size_{0};
  std::vector<Packet> work_pkts_;
  // What a pass sends goes in one batch (Fabric::batch_begin) where the fabric batches sends,
  // opened by the pass's first send (a pass that sends nothing pays nothing) and closed at the
  // pass's end.
  SendBatch tx_batch_;
  bool batch_sends_ = false;  // Fabric::batches_sends
  bool in_pass_ = false;
  bool tx_batch_open_ = false;
  void open_tx_batch() {
    if (!batch_sends_ || tx_batch_open_ || !in_pass_) return;
    tx_batch_open_ = true;
    fabric_->batch_begin(&tx_batch_);
  }
  // Plain answers waiting for the pass's end, per requester. Entries outlive a pass (their
  // buffers are reused) unless there were many peers.
  static constexpr size_t kMaxAnswersPerPacket = 64;
  struct PendingAnswers {
    Gid dst;
    uint32_t count = 0;
    uint8_t bytes[kMaxAnswersPerPacket * kAnswerBytes];  // AnswerRecords
  };
  std::vector<PendingAnswers> pending_answers_;
  size_t answers_hint_ = 0;       // the entry used last
  uint32_t answers_in_pass_ = 0;  // answers this pass made so far
  bool answers_pending_ = false;  // some entry holds answers
  void send_answers(PendingAnswers* p);
  // The pass time for Fabric::send (0 on a step clock, which is not the steady clock).
  uint64_t send_now() const { return opt_.step_clock_ns != 0 ? 0 : step_now_; }
  // Packets a fault plan holds back (reordering: released after `left` later packets or at pass
  // `until`) or delays (released at a time).
  struct Held {
    Packet pkt;
    uint32_t left;
    uint64_t until;
  };
  std::vector<Held> held_;
  std::multimap<uint64_t, Packet> delayed_pkts_;
  std::vector<EmuCq*> cq_delayed_;  // CQs with delayed CQEs

  // Engine thread.
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  uint64_t kicked_ns_ = 0;  // the last kick (wake_mu_): callers before it no longer park the thread
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> last_caller_ns_{0};
  // Released by publish_writes() (a read-modify-write, so that every caller's release stays in
  // the sequence), acquired by a pass that sees a doorbell change.
  std::atomic<uint64_t> published_writes_{0};
  // Set by the engine thread after each of its sleeps, without the lock; taken by the next pass.
  std::atomic<bool> full_scan_due_{false};
  std::atomic<uint64_t> caller_calls_{0};  // progress() calls: how often callers drive (engine_loop)
  // Live CQs in external memory: device code polls them without calling in, so the engine
  // thread must not sleep deep or park long while one exists.
  std::atomic<uint32_t> ext_cqs_{0};
  void count_engine(int s) {  // one writer, as note_longest
    stats_.v[s].store(stats_.v[s].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void note_longest(int s, uint64_t us) {
    if (us > stats_.v[s].load(std::memory_order_relaxed)) stats_.v[s].store(us, std::memory_order_relaxed);
  }

  Counters stats_;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_DEVICE_IMPL_H_
