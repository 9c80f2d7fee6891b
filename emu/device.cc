// The emulated EFA device and its NIC engine. See device.h for the model.
//
// Locking: mu_ guards every table and all engine state; the engine (step_locked) and every
// control call run under it. Packets arrive on inbox_mu_ (never held together with mu_ of another
// device), so two devices sending to each other cannot deadlock. The only state shared with
// applications without a lock is queue memory: doorbell words (atomic 32-bit accesses on both
// sides), WQEs (read after an acquire load of the doorbell that covers them), CQE flags (written
// with a release store after the rest of the entry) and counters (atomic adds).
#include "emu/device.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/efa_cq.h"
#include "device/efa_io_defs.h"
#include "emu/faults/plan.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

const char* diag_name(DiagKind kind) {
  switch (kind) {
    case DiagKind::kStaleWqe: return "doorbell covers an unwritten WQE (stale phase/meta_desc)";
    case DiagKind::kBatchExceeded: return "more than max_batch WQEs behind one doorbell";
    case DiagKind::kSqOverrun: return "SQ overrun";
    case DiagKind::kRqOverrun: return "RQ overrun";
    case DiagKind::kCqOverrun: return "CQ overrun";
    case DiagKind::kRqMalformed: return "malformed RX descriptors (first/last framing)";
  }
  return "unknown diagnostic";
}

namespace {

constexpr uint32_t kCqeSize = EFA_IO_CQE_SIZE;
constexpr uint32_t kMaxQueueDepth = 32768;  // 16-bit producer counts need an even lap count
constexpr uint32_t kScanChunk = 128;        // doorbell words compared per pass besides hot ones
constexpr uint64_t kHotPasses = 4096;       // passes an object stays hot after activity
constexpr uint16_t kAhUnknown = EFA_IO_AH_UNKNOWN;

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint32_t log2_of(uint32_t pow2) {
  uint32_t l = 0;
  while ((1u << l) < pow2) ++l;
  return l;
}

// Queue memory is page aligned and zeroed, as the kernel hands it out.
uint8_t* alloc_queue(size_t bytes) {
  size_t len = (bytes + 4095) & ~size_t{4095};
  void* p = std::aligned_alloc(4096, len);
  if (p != nullptr) std::memset(p, 0, len);
  return static_cast<uint8_t*>(p);
}

// Statuses a responder may put on the wire (reference/efa-queues.md 1.2).
bool known_status(uint8_t s) { return s <= EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE || s == EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH; }

uint32_t load_db(const uint32_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "yes") == 0 ||
                          std::strcmp(v, "true") == 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class Impl;

// ---- objects ----

class EmuPd : public Pd {
 public:
  explicit EmuPd(uint32_t h) : handle_(h) {}
  uint32_t handle() const override { return handle_; }
  uint32_t handle_;
  uint32_t refs = 0;  // MRs, QPs, AHs
};

class EmuMr : public Mr {
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

class EmuAh : public Ah {
 public:
  uint16_t ahn() const override { return ahn_; }
  EmuPd* pd = nullptr;
  uint16_t ahn_ = 0;
  Gid gid{};
};

class EmuCntr : public CompCntr {
 public:
  uint64_t* value = nullptr;
  uint64_t* error = nullptr;
  uint32_t refs = 0;
};

class EmuQp;

class EmuCq : public Cq {
 public:
  int query(CqAttr* attr) const override;
  int arm() override;
  int event_fd() const override { return efd; }

  Impl* dev = nullptr;
  uint8_t* ring = nullptr;
  bool own_ring = false;
  uint32_t entries = 0;
  uint32_t log2_entries = 0;
  uint32_t produced = 0;  // CQEs written (wraps at 2^32, entries divide it)
  uint32_t db_index = 0;
  uint32_t* db = nullptr;
  bool db_written = false;  // the consumer reports its index through the doorbell
  bool with_sgid = false;
  bool armed = false;
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
};

class EmuQp : public Qp {
 public:
  uint32_t qpn() const override { return qpn_; }
  QpState state() const override;
  int modify(const QpAttr& attr, uint32_t attr_mask) override;
  int query_wqs(WqAttr* sq, WqAttr* rq) const override;
  int attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) override;
  int detach_comp_cntr(CompCntr* cntr) override;

  Impl* dev = nullptr;
  uint32_t qpn_ = 0;
  QpState st = QpState::kReset;
  uint32_t qkey = 0;
  uint8_t rnr_retry = 7;
  uint32_t flags = 0;
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

enum class DbKind : uint8_t { kNone, kSq, kRq, kCq };
struct DbOwner {
  DbKind kind = DbKind::kNone;
  void* obj = nullptr;
  uint64_t hot_until = 0;  // pass number
  uint64_t stalled_in = 0;  // pass in which a fault hook stalled this doorbell
};

class Impl : public EmuDevice, public PacketSink {
 public:
  Impl(const DeviceOptions& o, const Profile* profile, std::shared_ptr<Fabric> fabric, Gid gid,
       std::string name);
  ~Impl() override;
  int init();

  // backend::Device
  int query(DeviceAttr* attr) const override;
  int alloc_pd(Pd** pd_p) override;
  int dealloc_pd(Pd* pd) override;
  int reg_mr(Pd* pd, const MrInitAttr& attr, Mr** mr_p) override;
  int dereg_mr(Mr* mr) override;
  int create_cq(const CqInitAttr& attr, Cq** cq_p) override;
  int destroy_cq(Cq* cq) override;
  int create_qp(const QpInitAttr& attr, Qp** qp_p) override;
  int destroy_qp(Qp* qp) override;
  int create_ah(Pd* pd, const uint8_t gid[16], Ah** ah_p) override;
  int destroy_ah(Ah* ah) override;
  int create_comp_cntr(const CompCntrInitAttr& attr, CompCntr** cntr_p) override;
  int destroy_comp_cntr(CompCntr* cntr) override;
  int local_address(const Qp* qp, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const override;
  int set_qp_failed(Qp* qp, int status) override;
  void set_event_handler(EventHandler* handler) override;
  int progress(int budget) override;

  // EmuDevice
  Stats stats() const override;
  std::vector<QpStats> qp_stats() const override;
  const Trace* trace() const override { return trace_.get(); }
  const Profile& profile() const override { return *profile_; }
  Gid gid() const override { return gid_; }
  int step(int budget) override;
  void kick() override;

  // PacketSink
  void deliver(Packet&& pkt) override;

  // Called by objects, under mu_.
  int modify_qp_locked(EmuQp* qp, const QpAttr& attr, uint32_t mask);
  int arm_cq(EmuCq* cq);
  // A handle is trusted (and its dynamic type used) only once it is found among live objects, so
  // a stale or foreign handle gets -EINVAL instead of a use-after-free. Call under mu_.
  template <class T, class B>
  T* live_as(B* handle) const {
    return handle != nullptr && live_.count(static_cast<const void*>(handle)) ? static_cast<T*>(handle)
                                                                              : nullptr;
  }

  mutable std::mutex mu_;
  std::set<const void*> live_;  // every live object, by its backend:: base address (mu_)

  // Set by create_device before init().
  std::unique_ptr<FaultHooks> own_faults_;
  std::unique_ptr<Trace> trace_;
  std::string trace_prefix_;  // FI_EFA_EMU_TRACE
  std::string stats_prefix_;  // FI_EFA_EMU_STATS

 private:
  struct Counters {
    std::atomic<uint64_t> v[22 + 6];
  };
  enum Stat {
    kSteps, kDoorbells, kWqes, kCqes, kErrorCqes, kPacketsTx, kPacketsRx, kBytesTx, kBytesRx,
    kRetransmits, kRnrNaks, kRnrRetries, kDropped, kFaults, kIdleSleeps, kCorrupt, kDuplicates,
    kReordered, kDelayedPkts, kDelayedCqes, kStalls, kTimeouts, kDiag0
  };
  // Statistics change under mu_ only (one writer), so a plain load+store suffices; readers use
  // relaxed loads.
  void bump(int s, uint64_t n = 1) {
    stats_.v[s].store(stats_.v[s].load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  int step_locked(int budget);
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
  void write_cqe_now(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn);
  int alloc_db(DbKind kind, void* obj, uint32_t* index_p);
  void free_db(uint32_t index);
  void scan_doorbells(int* work);
  void on_doorbell(uint32_t index, uint32_t value, int* work);
  int process_sq(EmuQp* qp, int budget);
  void execute_wqe(EmuQp* qp, uint16_t pc, const uint8_t* wqe);
  void start_op(TxOp&& op);
  void send_packet(TxOp* op, uint64_t token);
  void handle_request(Packet& pkt);
  void handle_response(Packet& pkt);
  void fire_timers();
  // Response timeouts share one duration, so they expire in arming order and a FIFO suffices;
  // RNR and unreachable timers go to the heap.
  void arm_timer(uint64_t token, uint64_t when, bool fifo);
  void complete_tx(EmuQp* qp, uint16_t req_id, const efa_io_req_id_ex& ex, uint8_t op, uint8_t status,
                   bool comp_req);
  void write_cqe(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn);
  void count(EmuQp* qp, uint32_t cntr_op, bool ok);
  void flush_qp(EmuQp* qp);
  void flush_rq(EmuQp* qp);
  void diag(DiagKind kind, uint32_t qpn, uint32_t slot, const char* detail);
  EmuQp* qp_by_num(uint32_t qpn);
  EmuAh* ah_for_gid(const EmuPd* pd, const Gid& gid);
  // Local/remote buffer checks; write the host pointer on success.
  bool check_key(const EmuPd* pd, uint32_t key, uint64_t addr, uint64_t len, uint32_t access,
                 uint8_t** host_p);
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
  bool attached_ = false;
  EventHandler* handler_ = nullptr;

  // Tables (mu_).
  uint32_t next_pd_ = 1;
  std::set<EmuPd*> pds_;
  std::vector<EmuMr*> mrs_;         // index = key & 0xffff - 1
  std::vector<uint8_t> mr_gen_;
  std::vector<EmuAh*> ahs_;         // index = ahn
  std::set<EmuCq*> cqs_;
  std::set<EmuCntr*> cntrs_;
  std::vector<EmuQp*> qps_;         // index = qpn
  uint32_t next_qpn_ = 1;

  // Doorbell page (mu_ for owner/shadow; the words themselves are shared with applications).
  uint32_t* db_words_ = nullptr;
  uint32_t db_capacity_ = 0;
  uint32_t db_high_ = 0;
  std::vector<uint32_t> db_shadow_;
  std::vector<DbOwner> db_owner_;
  std::vector<uint32_t> db_free_;
  std::vector<uint32_t> hot_;       // doorbell indices recently active
  std::vector<uint8_t> is_hot_;
  uint32_t scan_cursor_ = 0;
  bool full_scan_ = true;
  uint64_t pass_ = 0;
  uint64_t step_now_ = 0;  // clock read once per pass; timers have microsecond granularity

  std::vector<EmuQp*> sq_pending_;  // QPs with doorbelled WQEs not yet fetched
  std::vector<EmuCq*> overrun_notify_;  // CQs to report to the handler once mu_ is released

  // Operations in flight (mu_).
  // Operations in flight, in reusable slots; token = generation << 32 | slot.
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
    OpSlot& s = op_slots_[idx];
    s.used = false;
    s.op = TxOp();
    op_free_.push_back(idx);
  }
  uint64_t token_of(uint32_t idx) const { return uint64_t{op_slots_[idx].gen} << 32 | idx; }
  using Timer = std::pair<uint64_t, uint64_t>;  // (when, token)
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::deque<Timer> response_timers_;
  std::set<Gid> responded_peers_;
  bool have_last_peer_ = false;
  Gid last_peer_{};  // the last entry added to responded_peers_ (saves a lookup per response)
  // Packets can be lost (lossy fabric or a fault plan): requests are kept for retransmission
  // and responders remember what they executed.
  bool may_lose_ = true;
  bool borrow_payloads_ = false;  // the fabric copies payloads inside send()
  // At-most-once: executed (peer, token) -> status, bounded FIFO.
  struct KeyHash {
    size_t operator()(const std::pair<Gid, uint64_t>& k) const {
      uint64_t h = k.second * 0x9e3779b97f4a7c15ull;
      for (uint8_t b : k.first) h = (h ^ b) * 0x100000001b3ull;
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<std::pair<Gid, uint64_t>, uint8_t, KeyHash> executed_;
  std::deque<std::pair<Gid, uint64_t>> executed_order_;
  uint64_t rng_;

  // Inbox.
  std::mutex inbox_mu_;
  std::vector<Packet> inbox_;
  std::atomic<size_t> inbox_size_{0};
  std::vector<Packet> work_pkts_;
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
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> last_caller_ns_{0};

  Counters stats_;
};

uint64_t next_rand(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---- object methods ----

int EmuCq::query(CqAttr* attr) const {
  if (attr == nullptr) return -EINVAL;
  attr->buffer = ring;
  attr->entry_size = kCqeSize;
  attr->num_entries = entries;
  attr->doorbell = db;
  return 0;
}

int EmuCq::arm() { return dev->arm_cq(this); }

QpState EmuQp::state() const {
  std::lock_guard<std::mutex> lock(dev->mu_);
  return st;
}

int EmuQp::modify(const QpAttr& attr, uint32_t attr_mask) {
  std::lock_guard<std::mutex> lock(dev->mu_);
  return dev->modify_qp_locked(this, attr, attr_mask);
}

int EmuQp::query_wqs(WqAttr* sq, WqAttr* rq) const {
  if (sq == nullptr || rq == nullptr) return -EINVAL;
  sq->buffer = sq_buf;
  sq->entry_size = wqe_size;
  sq->num_entries = sq_entries;
  sq->doorbell = sq_db;
  sq->max_batch = max_batch;
  rq->buffer = rq_buf;
  rq->entry_size = EFA_IO_RX_DESC_SIZE;
  rq->num_entries = rq_entries;
  rq->doorbell = rq_db;
  rq->max_batch = rq_entries;
  return 0;
}

int EmuQp::attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) {
  constexpr uint32_t kAll = kCntrSend | kCntrRecv | kCntrRdmaRead | kCntrRdmaWrite |
                            kCntrRemoteRdmaRead | kCntrRemoteRdmaWrite;
  if (cntr_ops == 0 || (cntr_ops & ~kAll) != 0) return -EINVAL;
  std::lock_guard<std::mutex> lock(dev->mu_);
  auto* c = dev->live_as<EmuCntr>(cntr);
  if (c == nullptr) return -EINVAL;
  for (auto& e : cntrs) {
    if (e.first == c) return -EEXIST;
  }
  cntrs.emplace_back(c, cntr_ops);
  c->refs++;
  return 0;
}

int EmuQp::detach_comp_cntr(CompCntr* cntr) {
  std::lock_guard<std::mutex> lock(dev->mu_);
  for (size_t i = 0; i < cntrs.size(); ++i) {
    if (cntrs[i].first == cntr) {
      cntrs[i].first->refs--;
      cntrs.erase(cntrs.begin() + static_cast<long>(i));
      return 0;
    }
  }
  return -ENOENT;
}

// ---- device ----

Impl::Impl(const DeviceOptions& o, const Profile* profile, std::shared_ptr<Fabric> fabric, Gid gid,
           std::string name)
    : opt_(o), profile_(profile), fabric_(std::move(fabric)), gid_(gid), name_(std::move(name)),
      rng_(o.seed) {
  for (auto& v : stats_.v) v.store(0, std::memory_order_relaxed);
  may_lose_ = opt_.faults != nullptr || !fabric_->lossless();
  borrow_payloads_ = fabric_->copies_on_send();
  step_now_ = opt_.step_clock_ns != 0 ? uint64_t{1000000000} : now_ns();
}

int Impl::init() {
  db_capacity_ = opt_.max_qp * 2 + opt_.max_cq;
  db_words_ = reinterpret_cast<uint32_t*>(alloc_queue(db_capacity_ * sizeof(uint32_t)));
  if (db_words_ == nullptr) return -ENOMEM;
  db_shadow_.assign(db_capacity_, 0);
  db_owner_.assign(db_capacity_, DbOwner{});
  is_hot_.assign(db_capacity_, 0);
  qps_.assign(std::min<uint32_t>(opt_.max_qp, 65535) + 1, nullptr);
  int rc = fabric_->attach(gid_, this);
  if (rc != 0) return rc;
  attached_ = true;
  if (opt_.engine_thread) thread_ = std::thread([this] { engine_loop(); });
  return 0;
}

Impl::~Impl() {
  stop_.store(true);
  kick();
  if (thread_.joinable()) thread_.join();
  if (attached_) fabric_->detach(gid_);
  if (trace_ && !trace_prefix_.empty()) {
    int rc = trace_->write_files(trace_prefix_);
    if (rc != 0) std::fprintf(stderr, "xpufab emu: %s: cannot write trace %s.*: %s\n", name_.c_str(),
                              trace_prefix_.c_str(), std::strerror(-rc));
  }
  if (!stats_prefix_.empty()) {
    std::string path = stats_prefix_ + "." + name_ + ".stats";
    std::string body = format_stats(name_, stats(), qp_stats());
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || std::fwrite(body.data(), 1, body.size(), f) != body.size()) {
      std::fprintf(stderr, "xpufab emu: %s: cannot write %s\n", name_.c_str(), path.c_str());
    }
    if (f != nullptr) std::fclose(f);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (EmuQp* qp : qps_) {
    if (qp == nullptr) continue;
    std::free(qp->sq_buf);
    std::free(qp->rq_buf);
    delete qp;
  }
  for (EmuAh* ah : ahs_) delete ah;
  for (EmuMr* mr : mrs_) {
    if (mr == nullptr) continue;
    if (mr->map_base != nullptr) munmap(mr->map_base, mr->map_len);
    delete mr;
  }
  for (EmuCq* cq : cqs_) {
    if (cq->own_ring) std::free(cq->ring);
    if (cq->efd >= 0) close(cq->efd);
    delete cq;
  }
  for (EmuCntr* c : cntrs_) delete c;
  for (EmuPd* pd : pds_) delete pd;
  std::free(db_words_);
}

int Impl::query(DeviceAttr* a) const {
  if (a == nullptr) return -EINVAL;
  a->name = name_;
  a->profile = profile_->name;
  std::memcpy(a->gid, gid_.data(), 16);
  a->vendor_part_id = profile_->vendor_part_id;
  a->max_qp = opt_.max_qp;
  a->max_cq = opt_.max_cq;
  a->max_mr = 65535;
  a->max_pd = 65535;
  a->max_ah = 65535;
  a->max_sq_wr = std::min(profile_->max_sq_wr, kMaxQueueDepth);
  a->max_rq_wr = std::min(profile_->max_rq_wr, kMaxQueueDepth);
  a->max_sq_sge = profile_->max_sq_sge;
  a->max_rq_sge = profile_->max_rq_sge;
  a->max_rdma_sge = EFA_IO_TX_DESC_NUM_RDMA_BUFS;
  a->inline_buf_size = profile_->inline_buf_size;
  a->inline_buf_size_ex = profile_->inline_buf_size_ex;
  a->device_caps = profile_->device_caps;
  a->max_rdma_size = profile_->max_rdma_size;
  a->mtu = profile_->mtu;
  a->max_tx_batch = profile_->max_tx_batch;
  a->min_sq_wr = profile_->min_sq_wr;
  a->max_cq_depth = kMaxQueueDepth;
  a->link_speed_gbps = 100;
  return 0;
}

int Impl::alloc_pd(Pd** pd_p) {
  if (pd_p == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  auto* pd = new EmuPd(next_pd_++);
  pds_.insert(pd);
  live_.insert(static_cast<Pd*>(pd));
  *pd_p = pd;
  return 0;
}

int Impl::dealloc_pd(Pd* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  if (pd->refs != 0) return -EBUSY;
  pds_.erase(pd);
  live_.erase(p);
  delete pd;
  return 0;
}

int Impl::reg_mr(Pd* p, const MrInitAttr& attr, Mr** mr_p) {
  constexpr uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  if (mr_p == nullptr || attr.length == 0 || (attr.access & ~kAccessAll) != 0) return -EINVAL;
  if (attr.dmabuf_fd < 0 && attr.addr == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  uint8_t* host = static_cast<uint8_t*>(attr.addr);
  void* map_base = nullptr;
  size_t map_len = 0;
  if (attr.dmabuf_fd >= 0) {
    // The emulator reaches dma-buf memory by mapping it (a memfd stands in for a dma-buf).
    long page = sysconf(_SC_PAGESIZE);
    uint64_t off = attr.dmabuf_offset & ~static_cast<uint64_t>(page - 1);
    map_len = attr.length + (attr.dmabuf_offset - off);
    map_base = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, attr.dmabuf_fd,
                    static_cast<off_t>(off));
    if (map_base == MAP_FAILED) return -EINVAL;
    host = static_cast<uint8_t*>(map_base) + (attr.dmabuf_offset - off);
  }
  uint32_t idx = 0;
  while (idx < mrs_.size() && mrs_[idx] != nullptr) ++idx;
  if (idx >= 65535) {
    if (map_base != nullptr) munmap(map_base, map_len);
    return -ENOMEM;
  }
  if (idx == mrs_.size()) {
    mrs_.push_back(nullptr);
    mr_gen_.push_back(0);
  }
  auto* mr = new EmuMr();
  mr->pd = pd;
  mr_gen_[idx]++;
  mr->key = (idx + 1) | (static_cast<uint32_t>(mr_gen_[idx]) << 16);
  mr->iova_ = attr.iova != 0 ? attr.iova : reinterpret_cast<uint64_t>(host);
  mr->host = host;
  mr->len = attr.length;
  mr->access = attr.access;
  mr->map_base = map_base;
  mr->map_len = map_len;
  mrs_[idx] = mr;
  live_.insert(static_cast<Mr*>(mr));
  pd->refs++;
  *mr_p = mr;
  return 0;
}

int Impl::dereg_mr(Mr* m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* mr = live_as<EmuMr>(m);
  if (mr == nullptr) return -EINVAL;
  uint32_t idx = (mr->key & 0xffff) - 1;
  if (idx >= mrs_.size() || mrs_[idx] != mr) return -EINVAL;
  live_.erase(m);
  mrs_[idx] = nullptr;
  mr->pd->refs--;
  if (mr->map_base != nullptr) munmap(mr->map_base, mr->map_len);
  delete mr;
  return 0;
}

int Impl::alloc_db(DbKind kind, void* obj, uint32_t* index_p) {
  uint32_t idx;
  if (!db_free_.empty()) {
    idx = db_free_.back();
    db_free_.pop_back();
  } else {
    if (db_high_ >= db_capacity_) return -ENOMEM;
    idx = db_high_++;
  }
  __atomic_store_n(&db_words_[idx], 0u, __ATOMIC_RELAXED);
  db_shadow_[idx] = 0;
  db_owner_[idx] = DbOwner{kind, obj, 0};
  *index_p = idx;
  return 0;
}

void Impl::free_db(uint32_t index) {
  db_owner_[index] = DbOwner{};
  db_free_.push_back(index);
}

int Impl::create_cq(const CqInitAttr& attr, Cq** cq_p) {
  if (cq_p == nullptr || attr.entries == 0 || attr.entries > kMaxQueueDepth) return -EINVAL;
  uint32_t entries = round_pow2(attr.entries);
  if (attr.ext_buffer != nullptr && attr.ext_length < size_t{entries} * kCqeSize) return -EINVAL;
  if (attr.ext_buffer == nullptr && (attr.ext_fd >= 0 || attr.ext_length != 0)) {
    return -EINVAL;  // the emulator writes CQEs through a CPU-visible address
  }
  if (attr.ext_buffer != nullptr && !(profile_->device_caps & kCapCqWithExtMem)) return -EOPNOTSUPP;
  std::lock_guard<std::mutex> lock(mu_);
  if (cqs_.size() >= opt_.max_cq) return -ENOMEM;
  auto* cq = new EmuCq();
  cq->dev = this;
  cq->entries = entries;
  cq->log2_entries = log2_of(entries);
  cq->with_sgid = attr.with_sgid;
  if (attr.ext_buffer != nullptr) {
    cq->ring = static_cast<uint8_t*>(attr.ext_buffer);
    std::memset(cq->ring, 0, size_t{entries} * kCqeSize);
  } else {
    cq->ring = alloc_queue(size_t{entries} * kCqeSize);
    cq->own_ring = true;
  }
  int rc = cq->ring == nullptr ? -ENOMEM : alloc_db(DbKind::kCq, cq, &cq->db_index);
  if (rc == 0 && attr.with_event_fd) {
    cq->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cq->efd < 0) {
      rc = -errno;
      free_db(cq->db_index);
    }
  }
  if (rc != 0) {
    if (cq->own_ring) std::free(cq->ring);
    delete cq;
    return rc;
  }
  cq->db = &db_words_[cq->db_index];
  cqs_.insert(cq);
  live_.insert(static_cast<Cq*>(cq));
  *cq_p = cq;
  return 0;
}

int Impl::destroy_cq(Cq* c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* cq = live_as<EmuCq>(c);
  if (cq == nullptr) return -EINVAL;
  if (cq->refs != 0) return -EBUSY;
  cqs_.erase(cq);
  live_.erase(c);
  cq_delayed_.erase(std::remove(cq_delayed_.begin(), cq_delayed_.end(), cq), cq_delayed_.end());
  free_db(cq->db_index);
  if (cq->own_ring) std::free(cq->ring);
  if (cq->efd >= 0) close(cq->efd);
  delete cq;
  return 0;
}

int Impl::arm_cq(EmuCq* cq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cq->efd < 0) return -EOPNOTSUPP;
  cq->armed = true;
  return 0;
}

int Impl::create_qp(const QpInitAttr& a, Qp** qp_p) {
  if (qp_p == nullptr) return -EINVAL;
  constexpr uint32_t kFlagsAll = kQpUnsolicitedWriteRecv | kQpInlineWrite;
  if ((a.flags & ~kFlagsAll) != 0) return -EINVAL;
  if ((a.flags & kQpUnsolicitedWriteRecv) && !(profile_->device_caps & kCapUnsolicitedWriteRecv)) {
    return -EOPNOTSUPP;
  }
  bool want128 = (a.flags & kQpInlineWrite) || a.max_inline_data > profile_->inline_buf_size;
  if (want128 && profile_->inline_buf_size_ex == 0) return -EOPNOTSUPP;
  uint32_t max_inline = want128 ? profile_->inline_buf_size_ex : profile_->inline_buf_size;
  if (a.max_send_wr == 0 || a.max_send_wr > std::min(profile_->max_sq_wr, kMaxQueueDepth) ||
      a.max_recv_wr > std::min(profile_->max_rq_wr, kMaxQueueDepth) ||
      a.max_send_sge > profile_->max_sq_sge || a.max_recv_sge == 0 ||
      a.max_recv_sge > profile_->max_rq_sge || a.max_inline_data > max_inline) {
    return -EINVAL;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto* pd = live_as<EmuPd>(a.pd);
  auto* scq = live_as<EmuCq>(a.send_cq);
  auto* rcq = live_as<EmuCq>(a.recv_cq);
  if (pd == nullptr || scq == nullptr || rcq == nullptr) return -EINVAL;
  uint32_t qpn = 0;
  for (size_t n = 1; n < qps_.size(); ++n) {
    uint32_t cand = next_qpn_;
    next_qpn_ = next_qpn_ + 1 >= qps_.size() ? 1 : next_qpn_ + 1;
    if (qps_[cand] == nullptr) {
      qpn = cand;
      break;
    }
  }
  if (qpn == 0) return -ENOMEM;
  auto* qp = new EmuQp();
  qp->dev = this;
  qp->qpn_ = qpn;
  qp->flags = a.flags;
  qp->pd = pd;
  qp->send_cq = scq;
  qp->recv_cq = rcq;
  qp->wqe_size = want128 ? EFA_IO_TX_WQE_128_SIZE : EFA_IO_TX_WQE_SIZE;
  qp->sq_entries = round_pow2(std::max(a.max_send_wr, profile_->min_sq_wr));
  qp->sq_log2 = log2_of(qp->sq_entries);
  uint32_t batch = profile_->max_tx_batch ? (profile_->max_tx_batch * 64) / qp->wqe_size : 65535;
  if (profile_->min_sq_wr != 0) batch = std::min(batch, std::max(qp->sq_entries - 1, 1u));
  qp->max_batch = std::max(batch, 1u);
  qp->max_recv_sge = a.max_recv_sge;
  qp->rq_entries = round_pow2(std::max(a.max_recv_sge * std::max(a.max_recv_wr, 1u), 1u));
  qp->sq_buf = alloc_queue(size_t{qp->sq_entries} * qp->wqe_size);
  qp->rq_buf = alloc_queue(size_t{qp->rq_entries} * EFA_IO_RX_DESC_SIZE);
  int rc = (qp->sq_buf == nullptr || qp->rq_buf == nullptr) ? -ENOMEM : 0;
  if (rc == 0) rc = alloc_db(DbKind::kSq, qp, &qp->sq_db_index);
  if (rc == 0) {
    rc = alloc_db(DbKind::kRq, qp, &qp->rq_db_index);
    if (rc != 0) free_db(qp->sq_db_index);
  }
  if (rc != 0) {
    std::free(qp->sq_buf);
    std::free(qp->rq_buf);
    delete qp;
    return rc;
  }
  qp->sq_db = &db_words_[qp->sq_db_index];
  qp->rq_db = &db_words_[qp->rq_db_index];
  qps_[qpn] = qp;
  live_.insert(static_cast<Qp*>(qp));
  pd->refs++;
  scq->refs++;
  rcq->refs++;
  *qp_p = qp;
  return 0;
}

int Impl::destroy_qp(Qp* q) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto* qp = live_as<EmuQp>(q);
    if (qp == nullptr) return -EINVAL;
    live_.erase(q);
    // Outstanding work completes as FLUSHED before the QP disappears.
    if (qp->st != QpState::kReset) flush_qp(qp);
    qps_[qp->qpn_] = nullptr;
    sq_pending_.erase(std::remove(sq_pending_.begin(), sq_pending_.end(), qp), sq_pending_.end());
    for (uint32_t idx : {qp->sq_db_index, qp->rq_db_index}) {
      if (is_hot_[idx]) {
        is_hot_[idx] = 0;
        hot_.erase(std::remove(hot_.begin(), hot_.end(), idx), hot_.end());
      }
      free_db(idx);
    }
    for (auto& c : qp->cntrs) c.first->refs--;
    qp->pd->refs--;
    qp->send_cq->refs--;
    qp->recv_cq->refs--;
    std::free(qp->sq_buf);
    std::free(qp->rq_buf);
    delete qp;
  }
  return 0;
}

int Impl::create_ah(Pd* p, const uint8_t gid[16], Ah** ah_p) {
  if (ah_p == nullptr || gid == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  // ahn 0xFFFF means "unknown" in RX CQEs, so it is never handed out.
  uint32_t idx = 0;
  while (idx < ahs_.size() && ahs_[idx] != nullptr) ++idx;
  if (idx >= kAhUnknown) return -ENOMEM;
  if (idx == ahs_.size()) ahs_.push_back(nullptr);
  auto* ah = new EmuAh();
  ah->pd = pd;
  ah->ahn_ = static_cast<uint16_t>(idx);
  std::memcpy(ah->gid.data(), gid, 16);
  ahs_[idx] = ah;
  live_.insert(static_cast<Ah*>(ah));
  pd->refs++;
  *ah_p = ah;
  return 0;
}

int Impl::destroy_ah(Ah* a) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* ah = live_as<EmuAh>(a);
  if (ah == nullptr) return -EINVAL;
  live_.erase(a);
  ahs_[ah->ahn_] = nullptr;
  ah->pd->refs--;
  delete ah;
  return 0;
}

int Impl::create_comp_cntr(const CompCntrInitAttr& attr, CompCntr** cntr_p) {
  if (cntr_p == nullptr || (attr.value == nullptr && attr.error == nullptr)) return -EINVAL;
  if (!(profile_->device_caps & kCapCompCntr)) return -EOPNOTSUPP;
  std::lock_guard<std::mutex> lock(mu_);
  auto* c = new EmuCntr();
  c->value = attr.value;
  c->error = attr.error;
  cntrs_.insert(c);
  live_.insert(static_cast<CompCntr*>(c));
  *cntr_p = c;
  return 0;
}

int Impl::destroy_comp_cntr(CompCntr* cntr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* c = live_as<EmuCntr>(cntr);
  if (c == nullptr) return -EINVAL;
  if (c->refs != 0) return -EBUSY;
  cntrs_.erase(c);
  live_.erase(cntr);
  delete c;
  return 0;
}

int Impl::local_address(const Qp* q, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const {
  if (gid == nullptr || qpn == nullptr || qkey == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  auto* qp = live_as<const EmuQp>(q);
  if (qp == nullptr) return -EINVAL;
  std::memcpy(gid, gid_.data(), 16);
  *qpn = qp->qpn_;
  *qkey = qp->qkey;
  return 0;
}

void Impl::set_event_handler(EventHandler* handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = handler;
}

void Impl::set_failed_locked(EmuQp* qp, int /*status*/, std::vector<EmuQp*>* failed) {
  if (qp->st == QpState::kErr || qp->st == QpState::kReset) return;
  qp->st = QpState::kErr;
  flush_qp(qp);
  if (failed != nullptr) failed->push_back(qp);
}

void Impl::notify_failed(const std::vector<EmuQp*>& failed, int status) {
  EventHandler* h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h = handler_;
  }
  if (h == nullptr) return;
  for (EmuQp* qp : failed) h->handle_failure(qp, status);
}

int Impl::set_qp_failed(Qp* q, int status) {
  std::vector<EmuQp*> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto* qp = live_as<EmuQp>(q);
    if (qp == nullptr || qp->st == QpState::kReset) return -EINVAL;
    set_failed_locked(qp, status, &failed);
  }
  notify_failed(failed, status);
  return 0;
}

// reference/efa-queues.md 2.6: the SRD QP state table.
int Impl::modify_qp_locked(EmuQp* qp, const QpAttr& attr, uint32_t mask) {
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
    db_shadow_[qp->sq_db_index] = 0;
    db_shadow_[qp->rq_db_index] = 0;
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

void Impl::diag(DiagKind kind, uint32_t qpn, uint32_t slot, const char* detail) {
  bump(kDiag0 + static_cast<int>(kind));
  if (trace_) tr(TraceKind::kDiag, qpn, slot, static_cast<uint8_t>(kind), 0, 0, 0, 0);
  char msg[256];
  std::snprintf(msg, sizeof(msg), "%s: %s on QP %u slot %u%s%s", name_.c_str(), diag_name(kind), qpn,
                slot, detail[0] ? ": " : "", detail);
  if (opt_.strict) {
    std::fprintf(stderr, "xpufab emu fatal: %s\n", msg);
    std::fflush(stderr);
    std::abort();
  }
  if (opt_.diagnostic_sink) opt_.diagnostic_sink(Diagnostic{kind, name_, qpn, slot, msg});
}

EmuQp* Impl::qp_by_num(uint32_t qpn) { return qpn < qps_.size() ? qps_[qpn] : nullptr; }

EmuAh* Impl::ah_for_gid(const EmuPd* pd, const Gid& gid) {
  for (EmuAh* ah : ahs_) {
    if (ah != nullptr && ah->pd == pd && ah->gid == gid) return ah;
  }
  return nullptr;
}

bool Impl::check_key(const EmuPd* pd, uint32_t key, uint64_t addr, uint64_t len, uint32_t access,
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

// ---- CQEs and counters ----

FaultDecision Impl::ask(FaultContext ctx, uint64_t arg) {
  ctx.local = gid_;
  ctx.now_ns = step_now_;
  FaultDecision d = opt_.faults->at(ctx);
  if (d.action != FaultAction::kPass && !d.repeat) {
    bump(kFaults);
    if (EmuQp* qp = qp_by_num(ctx.qpn)) qp->qs.faults_injected++;
    if (trace_) {
      tr(TraceKind::kFault, ctx.qpn, ctx.slot, static_cast<uint8_t>(ctx.point),
         static_cast<uint8_t>(d.action), d.status, 0, arg);
    }
  }
  return d;
}

void Impl::write_cqe(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn) {
  if (opt_.faults != nullptr) {
    if (!cq->delayed.empty()) {  // keep the CQ in order behind a delayed entry
      cq->delayed.push_back(EmuCq::Delayed{cq->delayed.back().when, *cqe, qpn});
      return;
    }
    FaultDecision d =
        ask(FaultContext{FaultPoint::kCompletionWrite, qpn, cq->produced & (cq->entries - 1), 0, false,
                         efa_io_cdesc_common_get_q_type(&cqe->base.common)},
            cqe->base.common.req_id);
    if (d.action == FaultAction::kDrop) return;
    if (d.action == FaultAction::kFail) cqe->base.common.status = d.status;
    if (d.action == FaultAction::kDelay) {
      bump(kDelayedCqes);
      cq->delayed.push_back(EmuCq::Delayed{step_now_ + uint64_t{d.delay_us} * 1000, *cqe, qpn});
      cq_delayed_.push_back(cq);
      return;
    }
  }
  write_cqe_now(cq, cqe, qpn);
}

void Impl::release_cqes() {
  for (size_t i = 0; i < cq_delayed_.size();) {
    EmuCq* cq = cq_delayed_[i];
    while (!cq->delayed.empty() && cq->delayed.front().when <= step_now_) {
      EmuCq::Delayed e = cq->delayed.front();
      cq->delayed.pop_front();
      write_cqe_now(cq, &e.cqe, e.qpn);
    }
    if (cq->delayed.empty()) {
      cq_delayed_[i] = cq_delayed_.back();
      cq_delayed_.pop_back();
    } else {
      ++i;
    }
  }
}

void Impl::write_cqe_now(EmuCq* cq, efa_io_rx_cdesc_ex* cqe, uint32_t qpn) {
  uint32_t slot = cq->produced & (cq->entries - 1);
  uint32_t dbv = load_db(cq->db);
  if (dbv != 0) cq->db_written = true;
  if (cq->overrun) return;
  if (cq->db_written) {
    uint16_t ci = efa_io_cq_db_get_consumer_index(dbv);
    if (static_cast<uint16_t>(static_cast<uint16_t>(cq->produced) - ci) >= cq->entries) {
      cq->overrun = true;
      diag(DiagKind::kCqOverrun, qpn, slot, "CQE dropped; the CQ stops here");
      overrun_notify_.push_back(cq);
      return;
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
  if (EmuQp* qp = qp_by_num(qpn)) {
    if (q == EFA_IO_SEND_QUEUE) qp->qs.tx_cqes++; else qp->qs.rx_cqes++;
    if (!ok) qp->qs.error_cqes++;
  }
  if (trace_) {
    uint32_t len = q == EFA_IO_RECV_QUEUE ? cqe->base.length : 0;
    tr(TraceKind::kCqe, qpn, slot, q, efa_io_cdesc_common_get_op_type(&cqe->base.common),
       cqe->base.common.status, len, cqe->base.common.req_id);
  }
  if (cq->armed) {
    cq->armed = false;
    uint64_t one = 1;
    ssize_t n = write(cq->efd, &one, sizeof(one));
    (void)n;
  }
}

void Impl::count(EmuQp* qp, uint32_t cntr_op, bool ok) {
  for (auto& c : qp->cntrs) {
    if (!(c.second & cntr_op)) continue;
    uint64_t* target = ok ? c.first->value : c.first->error;
    if (target != nullptr) __atomic_fetch_add(target, 1, __ATOMIC_RELEASE);
  }
}

uint32_t tx_cntr_op(uint8_t op) {
  switch (op) {
    case EFA_IO_RDMA_READ: return kCntrRdmaRead;
    case EFA_IO_RDMA_WRITE: return kCntrRdmaWrite;
    default: return kCntrSend;
  }
}

void Impl::complete_tx(EmuQp* qp, uint16_t req_id, const efa_io_req_id_ex& ex, uint8_t op,
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
  write_cqe(qp->send_cq, &cqe, qp->qpn_);
}

void Impl::rx_cqe(EmuQp* qp, uint16_t req_id, uint8_t status, uint8_t op, uint32_t len,
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
  write_cqe(qp->recv_cq, &cqe, qp->qpn_);
}

// Completes everything the QP has outstanding with FLUSHED: WQEs in flight, WQEs doorbelled but
// not fetched, and posted receive WQEs.
void Impl::flush_qp(EmuQp* qp) {
  for (uint32_t i = 0; i < op_slots_.size(); ++i) {
    if (!op_slots_[i].used || op_slots_[i].op.qp != qp) continue;
    TxOp& op = op_slots_[i].op;
    complete_tx(qp, op.req_id, op.req_id_ex, op.op, EFA_IO_COMP_STATUS_FLUSHED, op.comp_req);
    erase_op(token_of(i));
  }
  qp->outstanding = 0;
  qp->sq_db_seen = static_cast<uint16_t>(load_db(qp->sq_db));
  db_shadow_[qp->sq_db_index] = qp->sq_db_seen;
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

void Impl::flush_rq(EmuQp* qp) {
  Packet none;
  RxWqe rx;
  int r;
  while ((r = take_rx_wqe(qp, &rx)) != 0) {
    if (r > 0) rx_cqe(qp, rx.req_id, EFA_IO_COMP_STATUS_FLUSHED, EFA_IO_SEND, 0, none, false);
  }
}

// ---- doorbells ----

void Impl::on_doorbell(uint32_t index, uint32_t value, int* work) {
  DbOwner& owner = db_owner_[index];
  owner.hot_until = pass_ + kHotPasses;
  if (!is_hot_[index]) {
    is_hot_[index] = 1;
    hot_.push_back(index);
  }
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
  db_shadow_[index] = value;
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
      if (efa_io_cq_db_get_arm(value) && cq->efd >= 0) cq->armed = true;
      break;
    }
    case DbKind::kNone:
      break;
  }
}

void Impl::scan_doorbells(int* work) {
  auto check = [&](uint32_t i) {
    uint32_t v = load_db(&db_words_[i]);
    if (v != db_shadow_[i] && db_owner_[i].kind != DbKind::kNone && db_owner_[i].stalled_in != pass_) {
      on_doorbell(i, v, work);
    }
  };
  if (full_scan_) {
    full_scan_ = false;
    for (uint32_t i = 0; i < db_high_; ++i) check(i);
    return;
  }
  for (size_t h = 0; h < hot_.size();) {
    uint32_t i = hot_[h];
    check(i);
    if (db_owner_[i].hot_until < pass_) {
      is_hot_[i] = 0;
      hot_[h] = hot_.back();
      hot_.pop_back();
    } else {
      ++h;
    }
  }
  for (uint32_t n = 0; n < kScanChunk && db_high_ != 0; ++n) {
    if (scan_cursor_ >= db_high_) scan_cursor_ = 0;
    check(scan_cursor_++);
  }
}

// ---- the SQ ----

// Bytes a WQE moves, for fault rules and the trace (0 for malformed lengths).
uint32_t wqe_bytes(const uint8_t* wqe) {
  efa_io_tx_meta_desc meta;
  std::memcpy(&meta, wqe, sizeof(meta));
  const uint8_t* data = wqe + offsetof(efa_io_tx_wqe, data);
  if (efa_io_tx_meta_desc_get_op_type(&meta) == EFA_IO_SEND) {
    if (efa_io_tx_meta_desc_get_inline_msg(&meta)) return meta.length;
    efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
    std::memcpy(sgl, data, sizeof(sgl));
    uint32_t total = 0;
    for (uint32_t i = 0; i < std::min<uint32_t>(meta.length, EFA_IO_TX_DESC_NUM_BUFS); ++i) total += sgl[i].length;
    return total;
  }
  efa_io_remote_mem_addr remote;
  std::memcpy(&remote, data, sizeof(remote));
  return remote.length;
}

int Impl::process_sq(EmuQp* qp, int budget) {
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
      tr(TraceKind::kWqeFetch, qp->qpn_, slot, efa_io_tx_meta_desc_get_op_type(meta), 0, 0, wqe_bytes(wqe),
         meta->req_id);
    }
    execute_wqe(qp, pc, wqe);
  }
  return done;
}

void Impl::execute_wqe(EmuQp* qp, uint16_t pc, const uint8_t* wqe) {
  efa_io_tx_meta_desc meta;
  std::memcpy(&meta, wqe, sizeof(meta));
  uint8_t op = efa_io_tx_meta_desc_get_op_type(&meta);
  uint8_t cqe_op = op <= EFA_IO_RDMA_WRITE ? op : static_cast<uint8_t>(EFA_IO_SEND);
  bool comp_req = efa_io_tx_meta_desc_get_comp_req(&meta) != 0;
  auto fail = [&](uint8_t status) {
    complete_tx(qp, meta.req_id, meta.req_id_ex, cqe_op, status, comp_req);
  };
  if (qp->st == QpState::kErr) return fail(EFA_IO_COMP_STATUS_FLUSHED);
  if (qp->st != QpState::kRts && qp->st != QpState::kSqd) {
    return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  }
  if (opt_.faults != nullptr) {
    FaultContext c{FaultPoint::kWqeFetch, qp->qpn_, pc & (qp->sq_entries - 1u), op, false,
                   EFA_IO_SEND_QUEUE};
    c.size = wqe_bytes(wqe);
    EmuAh* peer = meta.ah < ahs_.size() ? ahs_[meta.ah] : nullptr;
    if (peer != nullptr) {
      c.has_peer = true;
      c.peer = peer->gid;
    }
    FaultDecision d = ask(c, meta.req_id);
    if (d.action == FaultAction::kFail) return fail(d.status);
    if (d.action == FaultAction::kDrop) return;  // the WQE vanished: no completion ever
  }
  // Descriptor framing: meta_desc, first and last set; reserved bits clear.
  if (!efa_io_tx_meta_desc_get_first(&meta) || !efa_io_tx_meta_desc_get_last(&meta) ||
      efa_io_tx_meta_desc_get_meta_extension(&meta) || (meta.ctrl2 & 0xe2) != 0 ||
      (meta.ctrl3 & 0xfc) != 0) {
    return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  }
  const uint32_t caps = profile_->device_caps;
  bool has_imm = efa_io_tx_meta_desc_get_has_imm(&meta) != 0;
  bool inl = efa_io_tx_meta_desc_get_inline_msg(&meta) != 0;
  if (op > EFA_IO_RDMA_WRITE || (op == EFA_IO_RDMA_READ && !(caps & kCapRdmaRead)) ||
      (op == EFA_IO_RDMA_WRITE && !(caps & kCapRdmaWrite)) || (op == EFA_IO_RDMA_READ && has_imm) ||
      (op == EFA_IO_RDMA_READ && inl) ||
      (op == EFA_IO_RDMA_WRITE && inl && qp->wqe_size != EFA_IO_TX_WQE_128_SIZE)) {
    return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);
  }
  uint16_t ahn = meta.ah;
  EmuAh* ah = ahn < ahs_.size() ? ahs_[ahn] : nullptr;
  if (ah == nullptr || ah->pd != qp->pd) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH);

  TxOp t;
  t.qp = qp;
  t.req_id = meta.req_id;
  t.req_id_ex = meta.req_id_ex;
  t.op = op;
  t.comp_req = comp_req;
  t.dst = ah->gid;
  Packet& p = t.pkt;
  p.type = PacketType::kRequest;
  p.op = op;
  p.has_imm = has_imm;
  p.imm = meta.immediate_data;
  p.src = gid_;
  p.src_qpn = static_cast<uint16_t>(qp->qpn_);
  p.dst_qpn = meta.dest_qp_num;
  p.qkey = meta.qkey;
  const uint32_t inline_max =
      qp->wqe_size == EFA_IO_TX_WQE_128_SIZE ? EFA_IO_TX_DESC_INLINE_MAX_SIZE_128
                                             : EFA_IO_TX_DESC_INLINE_MAX_SIZE;
  if (op == EFA_IO_SEND) {
    const uint8_t* data = wqe + offsetof(efa_io_tx_wqe, data);
    if (inl) {
      if (meta.length > inline_max || meta.length > profile_->mtu) {
        return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      }
      p.payload.assign(data, data + meta.length);
    } else {
      if (meta.length > std::min<uint32_t>(profile_->max_sq_sge, EFA_IO_TX_DESC_NUM_BUFS)) {
        return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      }
      efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
      std::memcpy(sgl, data, sizeof(sgl));
      uint64_t total = 0;
      uint8_t* host[EFA_IO_TX_DESC_NUM_BUFS] = {};
      for (uint32_t i = 0; i < meta.length; ++i) {
        if ((sgl[i].lkey >> 24) != 0 ||
            !check_key(qp->pd, efa_io_tx_buf_desc_get_lkey(&sgl[i]),
                       efa_io_tx_buf_desc_get_addr(&sgl[i]), sgl[i].length, 0, &host[i])) {
          return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
        }
        total += sgl[i].length;
      }
      if (total > profile_->mtu) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      p.payload.resize(total);
      size_t off = 0;
      for (uint32_t i = 0; i < meta.length; ++i) {
        if (sgl[i].length != 0) std::memcpy(p.payload.data() + off, host[i], sgl[i].length);
        off += sgl[i].length;
      }
    }
    p.length = static_cast<uint32_t>(p.payload.size());
  } else {
    efa_io_remote_mem_addr remote;
    std::memcpy(&remote, wqe + offsetof(efa_io_tx_wqe, data), sizeof(remote));
    p.remote_addr = efa_io_remote_mem_addr_get_addr(&remote);
    p.rkey = remote.rkey;
    p.length = remote.length;
    if (remote.length > profile_->max_rdma_size) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
    const uint8_t* local = wqe + offsetof(efa_io_tx_wqe, data) + sizeof(efa_io_remote_mem_addr);
    if (inl) {  // inline RDMA write (128-byte WQE only, checked above)
      if (meta.length != remote.length || meta.length > inline_max) {
        return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      }
      p.payload.assign(local, local + meta.length);
    } else {
      if (meta.length != EFA_IO_TX_DESC_NUM_RDMA_BUFS) {
        return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      }
      efa_io_tx_buf_desc lm;
      std::memcpy(&lm, local, sizeof(lm));
      if (lm.length != remote.length) return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
      uint8_t* host = nullptr;
      uint32_t need = op == EFA_IO_RDMA_READ ? static_cast<uint32_t>(kAccessLocalWrite) : 0u;
      if ((lm.lkey >> 24) != 0 ||
          !check_key(qp->pd, efa_io_tx_buf_desc_get_lkey(&lm), efa_io_tx_buf_desc_get_addr(&lm),
                     lm.length, need, &host)) {
        return fail(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
      }
      if (op == EFA_IO_RDMA_READ) {
        t.read_dst = host;
      } else {
        if (borrow_payloads_ && !may_lose_ && !has_imm && lm.length > Payload::kInline) {
          // Sent once, right now, and copied by the fabric: read the MR directly.
          p.payload.view(host, lm.length);
        } else {
          p.payload.assign(host, host + lm.length);
        }
      }
    }
  }
  start_op(std::move(t));
}

void Impl::start_op(TxOp&& op) {
  uint32_t idx;
  if (!op_free_.empty()) {
    idx = op_free_.back();
    op_free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(op_slots_.size());
    op_slots_.emplace_back();
  }
  OpSlot& slot = op_slots_[idx];
  slot.gen++;
  slot.used = true;
  uint64_t token = token_of(idx);
  op.pkt.token = token;
  op.qp->outstanding++;
  slot.op = std::move(op);
  send_packet(&slot.op, token);
}

void Impl::arm_timer(uint64_t token, uint64_t when, bool fifo) {
  if (fifo) {
    response_timers_.emplace_back(when, token);
  } else {
    timers_.emplace(when, token);
  }
}

void Impl::send_packet(TxOp* op, uint64_t token) {
  uint64_t now = step_now_;
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
    // Only SEND and write-with-immediate can meet RNR and be sent again on a lossless fabric.
    bool keep = may_lose_ || op->op == EFA_IO_SEND || (op->op == EFA_IO_RDMA_WRITE && op->pkt.has_imm);
    if (keep) {
      Packet copy = op->pkt;
      rc = fabric_->send(op->dst, std::move(copy));
    } else {
      rc = fabric_->send(op->dst, std::move(op->pkt));
    }
  } else {
    bump(kDropped);
    op->qp->qs.dropped_packets++;
  }
  if (rc == -EHOSTUNREACH) {
    op->state = OpState::kUnreachable;
    op->deadline_ns = now + uint64_t{opt_.unreach_timeout_us} * 1000;
    arm_timer(token, op->deadline_ns, false);
  } else {
    op->state = OpState::kAwaitResponse;
    op->deadline_ns = now + uint64_t{opt_.response_timeout_us} * 1000;
    arm_timer(token, op->deadline_ns, true);
  }
}

void Impl::fire_timers() {
  if (timers_.empty() && response_timers_.empty()) return;
  uint64_t now = step_now_;
  for (;;) {
    Timer t;
    if (!response_timers_.empty() && response_timers_.front().first <= now &&
        (timers_.empty() || response_timers_.front().first <= timers_.top().first)) {
      t = response_timers_.front();
      response_timers_.pop_front();
    } else if (!timers_.empty() && timers_.top().first <= now) {
      t = timers_.top();
      timers_.pop();
    } else {
      break;
    }
    TxOp* found = find_op(t.second);
    if (found == nullptr || found->deadline_ns != t.first) continue;  // stale timer
    TxOp& op = *found;
    switch (op.state) {
      case OpState::kRnrWait:
        bump(kRnrRetries);
        if (trace_) tr(TraceKind::kRnrRetry, op.qp->qpn_, op.rnr_tries, op.op, 0, 0, 0, t.second);
        send_packet(&op, t.second);
        break;
      case OpState::kAwaitResponse:
        if (op.retransmits < opt_.max_retransmits) {
          op.retransmits++;
          if (may_lose_) {
            bump(kRetransmits);
            op.qp->qs.retransmits++;
            if (trace_) tr(TraceKind::kRetransmit, op.qp->qpn_, op.retransmits, op.op, 0, 0, 0, t.second);
            send_packet(&op, t.second);
          } else {
            // Nothing is lost on this fabric: keep waiting for the slow peer.
            op.deadline_ns = now + uint64_t{opt_.response_timeout_us} * 1000;
            arm_timer(t.second, op.deadline_ns, true);
          }
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
        if (trace_) tr(TraceKind::kTimeout, qp->qpn_, 0, op.op, 0, status, 0, t.second);
        complete_tx(qp, op.req_id, op.req_id_ex, op.op, status, op.comp_req);
        erase_op(t.second);
        break;
      }
    }
  }
}

// ---- packets ----

void Impl::deliver(Packet&& pkt) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.push_back(std::move(pkt));
    inbox_size_.store(inbox_.size(), std::memory_order_seq_cst);
  }
  // Pairs with the engine thread's store of sleeping_ then load of inbox_size_ (both seq_cst):
  // either it sees this packet before sleeping or this sees it asleep and wakes it.
  if (sleeping_.load(std::memory_order_seq_cst)) kick();
}

// Returns the next receive WQE of qp's RQ.
int Impl::take_rx_wqe(EmuQp* qp, RxWqe* rx) {
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

void Impl::handle_request(Packet& pkt) {
  Packet resp;
  resp.type = PacketType::kResponse;
  resp.op = pkt.op;
  resp.token = pkt.token;
  resp.src = gid_;
  resp.src_qpn = pkt.dst_qpn;
  resp.dst_qpn = pkt.src_qpn;
  auto reply = [&](uint8_t status, bool remember) {
    resp.status = status;
    if (remember && may_lose_) {
      auto key = std::make_pair(pkt.src, pkt.token);
      executed_[key] = status;
      executed_order_.push_back(key);
      if (executed_order_.size() > 4096) {
        executed_.erase(executed_order_.front());
        executed_order_.pop_front();
      }
    }
    EmuQp* rqp = qp_by_num(pkt.dst_qpn);
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
    fabric_->send(pkt.src, std::move(resp));
  };
  // At-most-once: a retransmitted SEND/WRITE that already executed gets its first answer again.
  if (may_lose_ && pkt.op != EFA_IO_RDMA_READ) {
    auto it = executed_.find(std::make_pair(pkt.src, pkt.token));
    if (it != executed_.end()) return reply(it->second, false);
  }
  EmuQp* qp = qp_by_num(pkt.dst_qpn);
  if (qp == nullptr || qp->qkey != pkt.qkey ||
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
    resp.payload.assign(host, host + pkt.length);
    count(qp, kCntrRemoteRdmaRead, true);
    return reply(EFA_IO_COMP_STATUS_OK, false);
  }
  bool unsolicited = (qp->flags & kQpUnsolicitedWriteRecv) != 0;
  RxWqe rx;
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
  if (pkt.length != 0) std::memcpy(host, pkt.payload.data(), pkt.length);
  count(qp, kCntrRemoteRdmaWrite, true);
  if (pkt.has_imm) {
    rx_cqe(qp, unsolicited ? 0 : rx.req_id, EFA_IO_COMP_STATUS_OK, EFA_IO_RDMA_WRITE, pkt.length, pkt,
           unsolicited);
  }
  reply(EFA_IO_COMP_STATUS_OK, true);
}

void Impl::handle_response(Packet& pkt) {
  TxOp* found = find_op(pkt.token);
  if (found == nullptr) return;  // flushed, timed out or a duplicate answer
  TxOp& op = *found;
  if (!have_last_peer_ || last_peer_ != pkt.src) {
    responded_peers_.insert(pkt.src);
    last_peer_ = pkt.src;
    have_last_peer_ = true;
  }
  uint8_t status = pkt.status;
  if (status == EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR) {
    op.qp->qs.rnr_naks_rx++;
    uint8_t retry = op.qp->rnr_retry;
    if (retry == 7 || op.rnr_tries < retry) {
      op.rnr_tries++;
      op.state = OpState::kRnrWait;
      op.deadline_ns = step_now_ + uint64_t{opt_.rnr_delay_us} * 1000;
      arm_timer(pkt.token, op.deadline_ns, false);
      return;
    }
  }
  if (!known_status(status)) status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS;
  if (status == EFA_IO_COMP_STATUS_OK && op.op == EFA_IO_RDMA_READ) {
    if (pkt.payload.size() != op.pkt.length) {
      status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS;
    } else if (!pkt.payload.empty()) {
      std::memcpy(op.read_dst, pkt.payload.data(), pkt.payload.size());
    }
  }
  EmuQp* qp = op.qp;
  qp->outstanding--;
  complete_tx(qp, op.req_id, op.req_id_ex, op.op, status, op.comp_req);
  erase_op(pkt.token);
}

// ---- the engine ----

int Impl::step(int budget) {
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = step_locked(budget);
  }
  notify_pending();
  return n;
}

void Impl::notify_pending() {
  std::vector<EmuCq*> cqs;
  EventHandler* h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (overrun_notify_.empty()) return;
    cqs.swap(overrun_notify_);
    h = handler_;
  }
  if (h == nullptr) return;
  for (EmuCq* cq : cqs) h->cq_overrun(cq);
}

int Impl::progress(int budget) {
  last_caller_ns_.store(now_ns(), std::memory_order_relaxed);
  if (!mu_.try_lock()) return 0;  // someone else is driving right now
  int n = step_locked(budget);
  bool notify = !overrun_notify_.empty();
  mu_.unlock();
  if (notify) notify_pending();
  return n;
}

int Impl::step_locked(int budget) {
  if (budget <= 0) budget = 64;
  ++pass_;
  step_now_ = opt_.step_clock_ns != 0 ? step_now_ + opt_.step_clock_ns : now_ns();
  bump(kSteps);
  int work = 0;
  // Drain the wire on this thread: a fabric with a mailbox then needs no receive-thread hand-off
  // while the engine is driven. What arrives lands in the inbox and is processed just below.
  if (attached_) fabric_->poll_rx(gid_, budget);
  if (inbox_size_.load(std::memory_order_acquire) != 0 || !held_.empty() || !delayed_pkts_.empty()) {
    receive_packets(&work);
  }
  if (!cq_delayed_.empty()) {
    release_cqes();
    ++work;  // keep the engine awake until the delayed CQEs are out
  }
  scan_doorbells(&work);
  for (size_t i = 0; i < sq_pending_.size() && work < budget;) {
    EmuQp* qp = sq_pending_[i];
    work += process_sq(qp, budget - work);
    if (qp->sq_fetch == qp->sq_db_seen) {
      qp->sq_pending = false;
      sq_pending_[i] = sq_pending_.back();
      sq_pending_.pop_back();
    } else {
      ++i;
    }
  }
  fire_timers();
  return work;
}

// CRC-32C of the fields that travel and the payload: the link checksum a corrupted packet fails.
uint32_t packet_crc(const Packet& p) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  auto feed = [&](const void* data, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
  };
  uint8_t small[4] = {static_cast<uint8_t>(p.type), p.op, p.status, static_cast<uint8_t>(p.has_imm)};
  feed(small, sizeof(small));
  feed(p.src.data(), p.src.size());
  feed(&p.src_qpn, sizeof(p.src_qpn));
  feed(&p.dst_qpn, sizeof(p.dst_qpn));
  feed(&p.qkey, sizeof(p.qkey));
  feed(&p.imm, sizeof(p.imm));
  feed(&p.token, sizeof(p.token));
  feed(&p.remote_addr, sizeof(p.remote_addr));
  feed(&p.rkey, sizeof(p.rkey));
  feed(&p.length, sizeof(p.length));
  feed(p.payload.data(), p.payload.size());
  return ~crc;
}

// Flips one bit: of the payload, or of the token when the bit falls past it.
void flip_bit(Packet* p, uint32_t bit) {
  uint64_t payload_bits = uint64_t{p->payload.size()} * 8;
  uint64_t b = bit % (payload_bits + 64);
  if (b < payload_bits) {
    p->payload.data()[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
  } else {
    p->token ^= uint64_t{1} << (b - payload_bits);
  }
}

void Impl::process_packet(Packet& p, int* work) {
  bump(kPacketsRx);
  bump(kBytesRx, p.payload.size());
  bool resp = p.type == PacketType::kResponse;
  if (EmuQp* qp = qp_by_num(p.dst_qpn)) {
    qp->qs.packets_rx++;
    qp->qs.bytes_rx += p.payload.size();
  }
  if (trace_) {
    tr(TraceKind::kPacketRx, p.dst_qpn, 0, p.op, resp ? 1 : 0, p.status,
       static_cast<uint32_t>(p.payload.size()), p.token);
  }
  ++*work;
  if (resp) {
    handle_response(p);
  } else {
    handle_request(p);
  }
}

void Impl::receive_packets(int* work) {
  work_pkts_.clear();
  if (inbox_size_.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    work_pkts_.swap(inbox_);
    inbox_size_.store(0, std::memory_order_relaxed);
  }
  // SRD does not keep order between messages; neither do we.
  if (opt_.reorder && work_pkts_.size() > 1) {
    for (size_t i = work_pkts_.size() - 1; i > 0; --i) {
      std::swap(work_pkts_[i], work_pkts_[next_rand(&rng_) % (i + 1)]);
    }
  }
  // Packets the plan held or delayed come back after the fresh ones and are not asked again.
  size_t fresh = work_pkts_.size();
  for (size_t i = 0; i < held_.size();) {
    if (held_[i].left == 0 || held_[i].until <= pass_) {
      work_pkts_.push_back(std::move(held_[i].pkt));
      held_[i] = std::move(held_.back());
      held_.pop_back();
    } else {
      ++i;
    }
  }
  while (!delayed_pkts_.empty() && delayed_pkts_.begin()->first <= step_now_) {
    work_pkts_.push_back(std::move(delayed_pkts_.begin()->second));
    delayed_pkts_.erase(delayed_pkts_.begin());
  }
  if (!held_.empty() || !delayed_pkts_.empty()) ++*work;  // keep the engine awake for them
  for (size_t i = 0; i < work_pkts_.size(); ++i) {
    Packet& p = work_pkts_[i];
    if (opt_.faults != nullptr && i < fresh) {
      bool resp = p.type == PacketType::kResponse;
      FaultContext c{FaultPoint::kPacketIn, p.dst_qpn, 0, p.op, resp, 0};
      c.size = static_cast<uint32_t>(p.payload.size());
      c.has_peer = true;
      c.peer = p.src;
      FaultDecision d = ask(c, p.token);
      EmuQp* qp = qp_by_num(p.dst_qpn);
      switch (d.action) {
        case FaultAction::kDrop:
        case FaultAction::kCorrupt: {
          uint8_t why = kDropFault;
          if (d.action == FaultAction::kCorrupt) {
            uint32_t sent = packet_crc(p);
            flip_bit(&p, d.bit);
            if (packet_crc(p) == sent) break;  // undetected: delivered as is (CRC-32C catches 1-bit flips)
            bump(kCorrupt);
            why = kDropChecksum;
          }
          bump(kDropped);
          if (qp != nullptr) qp->qs.dropped_packets++;
          if (trace_) tr(TraceKind::kPacketDrop, p.dst_qpn, 0, p.op, resp ? 1 : 0, why, 0, p.token);
          continue;
        }
        case FaultAction::kDup: {
          Packet copy = p;
          process_packet(p, work);
          bump(kDuplicates);
          process_packet(copy, work);
          continue;
        }
        case FaultAction::kHold:
          bump(kReordered);
          held_.push_back(Held{std::move(p), d.hold, pass_ + d.hold});
          ++*work;
          continue;
        case FaultAction::kDelay:
          bump(kDelayedPkts);
          delayed_pkts_.emplace(step_now_ + uint64_t{d.delay_us} * 1000, std::move(p));
          ++*work;
          continue;
        default:
          break;
      }
    }
    for (Held& h : held_) {
      if (h.left != 0) --h.left;
    }
    process_packet(p, work);
  }
  work_pkts_.clear();
}

void Impl::kick() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void Impl::engine_loop() {
  uint64_t idle_since = now_ns();
  uint32_t sleep_us = 1;
  uint32_t spins = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t t = now_ns();
    uint64_t last = last_caller_ns_.load(std::memory_order_relaxed);
    if (t - last < uint64_t{opt_.park_us} * 1000 && t >= last) {
      // A caller is driving: stay off the CPU.
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_cv_.wait_for(lock, std::chrono::microseconds(opt_.park_us), [this] { return wake_ || stop_; });
      wake_ = false;
      idle_since = now_ns();
      continue;
    }
    int n = 0;
    if (mu_.try_lock()) {
      n = step_locked(256);
      bool notify = !overrun_notify_.empty();
      mu_.unlock();
      if (notify) notify_pending();
    }
    if (n > 0) {
      idle_since = t;
      sleep_us = 1;
      continue;
    }
    // Spin for a while after the last work, offering the CPU to other runnable threads (the
    // peer device, the application) every few passes, then sleep.
    if (t - idle_since < uint64_t{opt_.idle_spin_us} * 1000) {
      if ((++spins & 15) == 0) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      continue;
    }
    bool woken;
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      woken = wake_cv_.wait_for(lock, std::chrono::microseconds(sleep_us), [this] {
        return wake_ || stop_ || inbox_size_.load(std::memory_order_seq_cst) != 0;
      });
      sleeping_.store(false, std::memory_order_relaxed);
      wake_ = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      bump(kIdleSleeps);
      full_scan_ = true;
    }
    if (woken) {
      idle_since = now_ns();
      sleep_us = 1;
    } else {
      sleep_us = std::min(sleep_us * 2, std::max(opt_.idle_sleep_max_us, 1u));
    }
  }
}

Stats Impl::stats() const {
  Stats s;
  uint64_t* out[] = {&s.steps, &s.doorbells, &s.wqes, &s.cqes, &s.error_cqes, &s.packets_tx,
                     &s.packets_rx, &s.bytes_tx, &s.bytes_rx, &s.retransmits, &s.rnr_naks,
                     &s.rnr_retries, &s.dropped_packets, &s.faults_injected, &s.idle_sleeps,
                     &s.corrupt_dropped, &s.duplicates, &s.reordered, &s.delayed_packets,
                     &s.delayed_cqes, &s.stalls, &s.timeouts};
  static_assert(sizeof(out) / sizeof(out[0]) == kDiag0, "every counter has a field");
  for (int i = 0; i < kDiag0; ++i) *out[i] = stats_.v[i].load(std::memory_order_relaxed);
  for (int i = 0; i < 6; ++i) s.diag[i] = stats_.v[kDiag0 + i].load(std::memory_order_relaxed);
  return s;
}

std::vector<QpStats> Impl::qp_stats() const {
  std::vector<QpStats> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const EmuQp* qp : qps_) {
    if (qp == nullptr) continue;
    QpStats q = qp->qs;
    q.qpn = qp->qpn_;
    q.outstanding = qp->outstanding;
    out.push_back(q);
  }
  return out;
}

std::atomic<uint32_t> g_device_seq{0};

}  // namespace

std::string format_stats(const std::string& device, const Stats& s, const std::vector<QpStats>& qps) {
  std::string out = "device " + device + "\n";
  auto line = [&](const std::string& prefix, const char* name, uint64_t v) {
    out += prefix + name + ": " + std::to_string(v) + "\n";
  };
  const std::pair<const char*, uint64_t> dev[] = {
      {"steps", s.steps}, {"doorbells", s.doorbells}, {"wqes", s.wqes}, {"cqes", s.cqes},
      {"error_cqes", s.error_cqes}, {"packets_tx", s.packets_tx}, {"packets_rx", s.packets_rx},
      {"bytes_tx", s.bytes_tx}, {"bytes_rx", s.bytes_rx}, {"retransmits", s.retransmits},
      {"rnr_naks", s.rnr_naks}, {"rnr_retries", s.rnr_retries}, {"dropped_packets", s.dropped_packets},
      {"faults_injected", s.faults_injected}, {"idle_sleeps", s.idle_sleeps},
      {"corrupt_dropped", s.corrupt_dropped}, {"duplicates", s.duplicates}, {"reordered", s.reordered},
      {"delayed_packets", s.delayed_packets}, {"delayed_cqes", s.delayed_cqes}, {"stalls", s.stalls},
      {"timeouts", s.timeouts}, {"diag_stale_wqe", s.diag[0]}, {"diag_batch_exceeded", s.diag[1]},
      {"diag_sq_overrun", s.diag[2]}, {"diag_rq_overrun", s.diag[3]}, {"diag_cq_overrun", s.diag[4]},
      {"diag_rq_malformed", s.diag[5]}};
  for (const auto& d : dev) line("", d.first, d.second);
  for (const QpStats& q : qps) {
    std::string p = "qp " + std::to_string(q.qpn) + " ";
    const std::pair<const char*, uint64_t> f[] = {
        {"wqes", q.wqes}, {"tx_cqes", q.tx_cqes}, {"rx_cqes", q.rx_cqes}, {"error_cqes", q.error_cqes},
        {"packets_tx", q.packets_tx}, {"packets_rx", q.packets_rx}, {"bytes_tx", q.bytes_tx},
        {"bytes_rx", q.bytes_rx}, {"retransmits", q.retransmits}, {"rnr_naks_rx", q.rnr_naks_rx},
        {"rnr_naks_tx", q.rnr_naks_tx}, {"dropped_packets", q.dropped_packets},
        {"faults_injected", q.faults_injected}, {"timeouts", q.timeouts}, {"outstanding", q.outstanding}};
    for (const auto& x : f) line(p, x.first, x.second);
  }
  return out;
}

int create_device(const DeviceOptions& options, std::unique_ptr<EmuDevice>* device_p) {
  if (device_p == nullptr || options.max_qp == 0 || options.max_cq == 0) return -EINVAL;
  DeviceOptions o = options;
  const Profile* profile = o.profile;
  if (profile == nullptr) {
    int rc = profile_from_env(&profile);
    if (rc != 0) return rc;
  }
  if (env_true("FI_EFA_EMU_STRICT")) o.strict = true;
  if (env_true("FI_EFA_EMU_CHECK_BATCH")) o.check_batch = true;
  if (const char* s = std::getenv("FI_EFA_EMU_SEED")) o.seed = std::strtoull(s, nullptr, 0);
  uint32_t seq = g_device_seq.fetch_add(1);
  std::string name = o.name.empty() ? "efa_emu" + std::to_string(seq) : o.name;
  Gid gid = o.gid;
  if (!o.has_gid) {
    // Link-local fe80::/64 with an interface id unique to this process and device.
    uint32_t pid = static_cast<uint32_t>(getpid());
    gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 'x', static_cast<uint8_t>(pid >> 16),
              static_cast<uint8_t>(pid >> 8), static_cast<uint8_t>(pid), static_cast<uint8_t>(seq >> 16),
              static_cast<uint8_t>(seq >> 8), static_cast<uint8_t>(seq)};
  }
  // The fault plan: options win over the environment; a plan that does nothing installs no hooks.
  std::unique_ptr<faults::FaultPlan> plan;
  if (o.faults == nullptr) {
    faults::PlanSpec spec;
    bool present = !o.fault_plan.empty();
    std::string err;
    int rc = present ? faults::parse_plan(o.fault_plan, &spec, &err)
                     : faults::plan_from_env(&spec, &present, &err);
    if (rc != 0) {
      std::fprintf(stderr, "xpufab emu: %s: fault plan rejected (%s): %s\n", name.c_str(),
                   o.fault_plan.empty() ? "FI_EFA_EMU_FAULTS" : "DeviceOptions::fault_plan", err.c_str());
      return -EINVAL;
    }
    if (present && !spec.empty()) {
      // Random loss needs more attempts than a lossless fabric's defaults, so that no operation
      // fails from bad luck: keep the overall timeout, split it into at least 16 retransmissions.
      if ((spec.drop > 0 || spec.corrupt > 0) && o.max_retransmits < 16) {
        uint64_t total = uint64_t{o.response_timeout_us} * (o.max_retransmits + 1);
        o.max_retransmits = 16;
        o.response_timeout_us = static_cast<uint32_t>(std::max<uint64_t>(total / 17, 1));
      }
      plan.reset(new faults::FaultPlan(spec, o.step_clock_ns != 0 ? 0 : now_ns()));
      plan->personalize(name);
      o.faults = plan.get();
    }
  }
  std::string trace_prefix;
  if (const char* t = std::getenv("FI_EFA_EMU_TRACE")) {
    if (t[0] != '\0') {
      trace_prefix = t;
      o.trace = true;
    }
  }
  if (const char* m = std::getenv("FI_EFA_EMU_TRACE_MAX")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(m, &end, 10);
    if (end == m || *end != '\0' || v == 0) {
      std::fprintf(stderr, "xpufab emu: FI_EFA_EMU_TRACE_MAX: not a positive number: '%s'\n", m);
      return -EINVAL;
    }
    o.trace_capacity = static_cast<size_t>(v);
  }
  std::shared_ptr<Fabric> fabric = o.fabric ? o.fabric : InProcFabric::process_fabric();
  auto* dev = new Impl(o, profile, std::move(fabric), gid, name);
  std::unique_ptr<EmuDevice> holder(dev);
  dev->own_faults_ = std::move(plan);
  if (o.trace) dev->trace_.reset(new Trace(name, o.trace_capacity));
  dev->trace_prefix_ = trace_prefix;
  if (const char* st = std::getenv("FI_EFA_EMU_STATS")) dev->stats_prefix_ = st;
  int rc = dev->init();
  if (rc != 0) return rc;
  *device_p = std::move(holder);
  return 0;
}

}  // namespace emu
}  // namespace xpufab
