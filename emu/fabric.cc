#include "emu/fabric.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <unordered_map>
#include <mutex>
#include <random>
#include <thread>

#include "emu/peer_mappings.h"

namespace xpufab {
namespace emu {
namespace {

// Threads spread over the stripes so that two engine threads rarely share a counter's line.
int my_stripe(int stripes) {
  static std::atomic<uint32_t> next{0};
  thread_local int stripe = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % stripes);
  return stripe;
}

// Table generations, unique in the process (0: no table).
std::atomic<uint64_t> next_table_gen{1};

// A thread's last look-ups, a few destinations direct-mapped by the GID's last byte (a
// device's own byte, distinct among the devices of a process): an entry is trusted only for
// the table it was read from, so an attach or a detach invalidates every entry at once.
struct CachedSink {
  uint64_t gen = 0;
  Gid gid{};
  PacketSink* sink = nullptr;
};
constexpr uint32_t kCachedSinks = 4;
thread_local CachedSink cached_sinks[kCachedSinks];

// The calling thread's open batch (Fabric::batch_begin), null when none.
thread_local SendBatch* open_batch = nullptr;

// The queue of batch `b` for `s`, or null when every queue serves another sink.
inline std::vector<Packet>* queue_for(SendBatch* b, PacketSink* s) {
  for (int i = 0; i < b->queues; ++i) {
    if (b->sink[i] == s) return &b->pkts[i];
  }
  if (b->queues == SendBatch::kQueues) return nullptr;
  b->sink[b->queues] = s;
  return &b->pkts[b->queues++];
}

// This process's identity word: random, drawn again in a child after fork(). The descriptor of
// its PeerMappings table follows it, so that a peer reads both at once.
struct Published {
  uint64_t word = 0;
  int64_t table_fd = -1;
};
static_assert(offsetof(Published, table_fd) == sizeof(uint64_t),
              "peers read the identity word and the table descriptor in one copy");
struct SelfId {
  std::mutex mu;
  pid_t pid = -1;
  Published pub;
};
SelfId& self_id() {
  static SelfId* s = new SelfId();
  return *s;
}

// One readv that may move fewer bytes than asked (a range crossing into an unmapped page, or a
// kernel that splits large copies); -errno or the count.
ssize_t read_some(pid_t pid, uint64_t addr, void* local, size_t len) {
  iovec l{local, len};
  iovec r{reinterpret_cast<void*>(addr), len};
  return process_vm_readv(pid, &l, 1, &r, 1, 0);
}

}  // namespace

int Fabric::copy_peer(const PeerRef& from, uint64_t addr, void* local, size_t len) {
  if (!peer_memory()) return -EOPNOTSUPP;
  return PeerMemory::read(from, addr, local, len);
}

PeerRef PeerMemory::self() {
  SelfId& s = self_id();
  std::lock_guard<std::mutex> lock(s.mu);
  pid_t pid = getpid();
  if (s.pid != pid) {
    std::random_device rd;
    s.pub.word = (uint64_t{rd()} << 32 | rd()) | 1;  // never 0
    s.pid = pid;
    s.pub.table_fd = PeerMappings::table_fd();
  }
  PeerRef r;
  r.pid = static_cast<uint32_t>(pid);
  r.id_addr = reinterpret_cast<uint64_t>(&s.pub.word);
  r.id = s.pub.word;
  return r;
}

int PeerMemory::read(const PeerRef& from, uint64_t addr, void* local, size_t len) {
  if (from.pid == 0) return -EINVAL;
  // A PID is trusted once its identity word has been read back: the cache remembers the last
  // identity seen per PID, so a process that took over a PID is checked again.
  // The same read fetches the descriptor of its PeerMappings table.
  static std::mutex mu;
  static auto* verified = new std::unordered_map<uint32_t, std::pair<uint64_t, int64_t>>();
  bool known;
  int64_t table_fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = verified->find(from.pid);
    known = it != verified->end() && it->second.first == from.id;
    if (known) table_fd = it->second.second;
  }
  if (!known) {
    uint64_t id[2] = {0, 0};
    ssize_t n = read_some(static_cast<pid_t>(from.pid), from.id_addr, id, sizeof(id));
    if (n < 0) return -errno;
    if (n != sizeof(id) || id[0] != from.id) return -ESRCH;
    table_fd = static_cast<int64_t>(id[1]);
    std::lock_guard<std::mutex> lock(mu);
    if (verified->size() > 4096) verified->clear();
    (*verified)[from.pid] = {from.id, table_fd};
  }
  // File-backed memory the peer published is copied through a mapping of the file.
  if (PeerMappings::read(from, table_fd, addr, local, len) == 0) return 0;
  uint8_t* dst = static_cast<uint8_t*>(local);
  size_t done = 0;
  while (done < len) {
    ssize_t n = read_some(static_cast<pid_t>(from.pid), addr + done, dst + done, len - done);
    if (n < 0) return -errno;
    if (n == 0) return -EFAULT;
    done += static_cast<size_t>(n);
  }
  return 0;
}

InProcFabric::InProcFabric() : table_(new Table{next_table_gen.fetch_add(1), {}}) {}

InProcFabric::~InProcFabric() { delete table_.load(); }

void InProcFabric::publish(Table* next) {
  const Table* old = table_.exchange(next, std::memory_order_seq_cst);
  // A send that marked itself in flight before the exchange may still use `old`; one that marks
  // itself after it loads `next`. Waiting for each stripe to drain once is a grace period.
  for (Stripe& s : stripes_) {
    while (s.in_flight.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  delete old;
}

int InProcFabric::attach(const Gid& gid, PacketSink* sink) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const Table* cur = table_.load(std::memory_order_relaxed);
  if (cur->sinks.count(gid)) return -EEXIST;
  Table* next = new Table{next_table_gen.fetch_add(1), cur->sinks};
  next->sinks.emplace(gid, sink);
  publish(next);
  return 0;
}

void InProcFabric::detach(const Gid& gid) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const Table* cur = table_.load(std::memory_order_relaxed);
  if (!cur->sinks.count(gid)) return;
  Table* next = new Table{next_table_gen.fetch_add(1), cur->sinks};
  next->sinks.erase(gid);
  publish(next);
}

inline PacketSink* InProcFabric::find_sink(const Gid& dst) {
  const Table* t = table_.load(std::memory_order_seq_cst);
  // The table is live while this send is in flight, and so is every sink it names.
  CachedSink& c = cached_sinks[dst[15] % kCachedSinks];
  if (c.gen == t->gen && gid_equal(c.gid, dst)) return c.sink;
  auto it = t->sinks.find(dst);
  if (it == t->sinks.end()) return nullptr;
  c = CachedSink{t->gen, dst, it->second};
  return it->second;
}

template <class H>
int InProcFabric::with_sink(const Gid& dst, H&& hand) {
  Stripe& s = stripes_[my_stripe(kStripes)];
  s.in_flight.fetch_add(1, std::memory_order_seq_cst);
  PacketSink* sink = find_sink(dst);
  int rc = -EHOSTUNREACH;
  if (sink != nullptr) {
    hand(sink);
    rc = 0;
  }
  s.in_flight.fetch_sub(1, std::memory_order_release);
  return rc;
}

inline PacketSink* InProcFabric::batch_sink(SendBatch* b, const Gid& dst) {
  if (b->in_flight == nullptr) {
    // A table loaded from now on outlives the batch (publish waits for the stripe), and so do
    // the sinks it names: a detach returns only after the packets queued for its sink are in.
    b->in_flight = &stripes_[my_stripe(kStripes)].in_flight;
    b->in_flight->fetch_add(1, std::memory_order_seq_cst);
  }
  return find_sink(dst);
}

void InProcFabric::batch_begin(SendBatch* b) {
  SendBatch* open = open_batch;
  if (open == nullptr) {
    b->owner = this;
    b->depth = 1;
    open_batch = b;
  } else if (open->owner == this) {
    ++open->depth;
  }
}

void InProcFabric::batch_end() {
  SendBatch* b = open_batch;
  if (b == nullptr || b->owner != this || --b->depth > 0) return;
  for (int i = 0; i < b->queues; ++i) {
    if (!b->pkts[i].empty()) b->sink[i]->deliver_batch(&b->pkts[i]);
    b->pkts[i].clear();
  }
  b->queues = 0;
  if (b->in_flight != nullptr) b->in_flight->fetch_sub(1, std::memory_order_release);
  b->in_flight = nullptr;
  b->owner = nullptr;
  open_batch = nullptr;
}

template <class Q, class H>
inline int InProcFabric::route(const Gid& dst, Q&& enqueue, H&& hand) {
  SendBatch* b = open_batch;
  if (b == nullptr || b->owner != this) return with_sink(dst, hand);
  PacketSink* sink = batch_sink(b, dst);
  if (sink == nullptr) return -EHOSTUNREACH;
  if (std::vector<Packet>* q = queue_for(b, sink)) {
    enqueue(q);
  } else {
    hand(sink);
  }
  return 0;
}

int InProcFabric::send(const Gid& dst, Packet&& pkt, uint64_t now_ns) {
  (void)now_ns;  // delivery takes no time
  return route(
      dst, [&](std::vector<Packet>* q) { q->push_back(std::move(pkt)); },
      [&](PacketSink* sink) { sink->deliver(std::move(pkt)); });
}

int InProcFabric::send_copy(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now_ns) {
  (void)now_ns;
  *mark = 0;  // handed over at once: never on the wire
  return route(
      dst, [&](std::vector<Packet>* q) { q->push_back(pkt); },
      [&](PacketSink* sink) { sink->deliver_copy(pkt); });
}

uint64_t process_nonce() {
  static std::mutex mu;
  static pid_t drawn_for = -1;
  static uint64_t nonce = 0;
  std::lock_guard<std::mutex> lock(mu);
  pid_t pid = getpid();
  if (drawn_for != pid) {
    std::random_device rd;
    uint64_t r = (uint64_t{rd()} << 32 | rd()) ^ static_cast<uint64_t>(pid) * 0x9e3779b97f4a7c15ull;
    nonce = r & ((uint64_t{1} << 40) - 1);
    drawn_for = pid;
  }
  return nonce;
}

std::shared_ptr<InProcFabric> InProcFabric::process_fabric() {
  static std::shared_ptr<InProcFabric>* f = new std::shared_ptr<InProcFabric>(new InProcFabric());
  return *f;
}

}  // namespace emu
}  // namespace xpufab
