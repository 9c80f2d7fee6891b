#include "emu/net/shm_fabric.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "emu/net/shm_layout.h"

namespace xpufab {
namespace emu {
namespace net {

using namespace shm_internal;

const ShmFences& shm_fences() {
  static const ShmFences f = [] {
    ShmFences r;
    const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    constexpr long kNeeded = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    if (cmds < 0 || (cmds & kNeeded) != kNeeded) return r;
    r.can_issue = true;
    r.registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
    return r;
  }();
  return f;
}

int ShmFabric::create(const ShmFabricOptions& options, std::shared_ptr<ShmFabric>* fabric_p) {
  if (fabric_p == nullptr) return -EINVAL;
  ShmFabricOptions o = options;
  if (o.ring_bytes < (64u << 10) || (o.ring_bytes & (o.ring_bytes - 1)) != 0) return -EINVAL;
  if (o.fragment_bytes < 4096 || o.fragment_bytes > o.ring_bytes / 4) return -EINVAL;
  if (o.base_dir.empty()) {
    const char* env = std::getenv("FI_EFA_EMU_SHM_DIR");
    o.base_dir = (env != nullptr && env[0] != '\0') ? env : "/dev/shm";
  }
  if (o.key.empty()) o.key = fabric_key_string();
  MacKey k = derive_key(o.key);
  char name[96];
  std::snprintf(name, sizeof(name), "/xpufab-%u-%016llx", static_cast<unsigned>(getuid()),
                static_cast<unsigned long long>(k.k0));
  std::shared_ptr<ShmFabric> f(new ShmFabric(o));
  f->dir_ = o.base_dir + name;
  std::random_device rd;
  f->sender_id_ = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  int rc = -EAGAIN;
  // Again while the last fabric of the key removes the directory under our feet.
  for (int attempt = 0; rc == -EAGAIN && attempt < 100; ++attempt) {
    if (mkdir(f->dir_.c_str(), 0700) != 0 && errno != EEXIST) return -errno;
    struct stat st;
    if (lstat(f->dir_.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return -errno;
    }
    // Someone else's directory (or a link planted there) must not receive our packets.
    if (!owner_only(st, S_IFDIR)) return -EACCES;
    rc = f->take_sender_slot();
  }
  if (rc != 0) return rc;
  f->sweep_stale();
  *fabric_p = std::move(f);
  return 0;
}

ShmFabric::ShmFabric(const ShmFabricOptions& o) : opt_(o) {}

ShmFabric::~ShmFabric() {
  std::vector<Gid> gids;
  {
    std::lock_guard<std::mutex> lock(locals_mu_);
    for (auto& kv : locals_) gids.push_back(kv.first);
  }
  for (const Gid& g : gids) detach(g);
  // No send runs any more: every peer, retired or not, goes with its mapping.
  bool left;
  {
    std::lock_guard<std::mutex> lock(locals_mu_);
    left = left_;
  }
  if (!left) remove_dir_if_unused();
  // Closing the last descriptor of the senders file's description releases the slot (a forked
  // child that shares the description keeps it while it lives).
  if (senders_fd_ >= 0) close(senders_fd_);
}

int ShmFabric::lock_mailbox_slow(Mailbox* mb) {
  std::atomic<uint64_t>& w = mb->lock_owner;
  uint64_t start = 0, probe_at = 0;
  for (int round = 0;; ++round) {
    uint64_t expect = 0;
    if (w.load(std::memory_order_relaxed) == 0 &&
        w.compare_exchange_weak(expect, lock_word_, std::memory_order_acquire, std::memory_order_relaxed)) {
      return 0;
    }
    if (round < kLockSpins) {
      cpu_relax();
      continue;
    }
    const uint64_t now = now_ns();
    if (start == 0) {
      start = now;
      probe_at = now + kLockProbeNs;
    }
    if (mb->closed.load(std::memory_order_acquire) != 0) return -ECONNRESET;
    if (now >= probe_at) {
      uint64_t holder = w.load(std::memory_order_acquire);
      if (holder != 0 && holder != lock_word_ && !sender_alive(holder)) {
        // Its record was never published: the ring is as the last live holder left it.
        if (w.compare_exchange_strong(holder, lock_word_, std::memory_order_acquire, std::memory_order_relaxed)) {
          mb->tail_shadow = mb->tail.load(std::memory_order_relaxed);  // it may have died in between
          st_[kLockSteals].fetch_add(1, std::memory_order_relaxed);
          return 0;
        }
        continue;
      }
      probe_at = now + kLockProbeNs;
    }
    // A live holder that does not let go (stopped, or starved of CPU): give up like on a full ring.
    if (now - start > uint64_t{opt_.full_timeout_ms} * 1000000) return -ENOBUFS;
    if (round < 4 * kLockSpins) {
      sched_yield();
    } else {
      timespec ts{0, 20 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
}

std::string ShmFabric::path_of(const Gid& gid) const { return dir_ + "/" + hex(gid); }

int ShmFabric::attach(const Gid& gid, PacketSink* sink) {
  if (sink == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> lock(locals_mu_);
  if (locals_.count(gid)) return -EEXIST;
  std::unique_ptr<Local> l(new Local());
  l->gid = gid;
  l->sink = sink;
  l->path = path_of(gid);
  const size_t len = kRingOffset + opt_.ring_bytes;
  for (int attempt = 0;; ++attempt) {
    l->fd = open(l->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (l->fd >= 0) break;
    if (errno != EEXIST || attempt > 0) return -errno;
    // A mailbox of this GID exists: a live owner means the GID is taken, a dead one is swept.
    sweep_stale();
  }
  if (flock(l->fd, LOCK_EX | LOCK_NB) != 0 || ftruncate(l->fd, static_cast<off_t>(len)) != 0) {
    int err = -errno;
    unlink(l->path.c_str());
    close(l->fd);
    return err;
  }
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, l->fd, 0);
  if (m == MAP_FAILED) {
    int err = -errno;
    unlink(l->path.c_str());
    close(l->fd);
    return err;
  }
  l->mb = static_cast<Mailbox*>(m);
  l->map_len = len;
  populate_hot_pages(m, len, hot_ring_bytes());
  Mailbox* mb = l->mb;
  mb->magic = kMagic;
  mb->version = kVersion;
  mb->owner_pid = static_cast<uint32_t>(getpid());
  mb->capacity = opt_.ring_bytes;
  l->capacity = opt_.ring_bytes;
  mb->lock_owner.store(0);
  mb->tail_shadow = 0;
  mb->tail.store(0);
  mb->head.store(0);
  mb->wake_seq.store(0);
  mb->sleeping.store(0);
  mb->closed.store(0);
  l->fences = shm_fences().can_issue;
  mb->consumer_fences.store(l->fences ? 1 : 0);
  mb->polled_ns.store(now_ns());
  mb->executed.store(0);
  mb->position_answers.store(0);
  mb->ready.store(1, std::memory_order_release);

  Local* lp = l.get();
  lp->thread = std::thread([this, lp] { receive_loop(lp); });
  locals_.emplace(gid, std::move(l));
  local_bits_.fetch_or(gid_bit(gid), std::memory_order_release);
  return 0;
}

void ShmFabric::detach(const Gid& gid) {
  Local* l;
  {
    std::lock_guard<std::mutex> lock(locals_mu_);
    auto it = locals_.find(gid);
    if (it == locals_.end()) return;
    l = it->second.get();
    retired_.push_back(std::move(it->second));
    locals_.erase(it);
    uint64_t bits = 0;
    for (const auto& kv : locals_) bits |= gid_bit(kv.first);
    local_bits_.store(bits, std::memory_order_relaxed);
    Local* expect = l;
    rx_hint_.compare_exchange_strong(expect, nullptr, std::memory_order_acq_rel);
  }
  l->stop.store(true);
  l->mb->wake_seq.fetch_add(1);
  futex(&l->mb->wake_seq, FUTEX_WAKE, 1, nullptr);
  if (l->thread.joinable()) l->thread.join();
  // A poller that took the ring before the entry left the table finishes first.
  while (l->consuming.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  // Closed first: a sender that still maps this file looks for a successor on its next send.
  // Unlink before unlocking so that no sender mistakes the file for a stale one it must sweep.
  l->mb->closed.store(1, std::memory_order_seq_cst);
  unlink_if_same(l->path, l->fd);
  munmap(l->mb, l->map_len);
  l->mb = nullptr;
  close(l->fd);
  l->fd = -1;
  l->reasm = Reassembler();  // its partial messages' memory; the object itself stays
  {
    std::unique_lock<std::shared_mutex> plock(peers_mu_);
    auto it = peers_.find(gid);
    if (it != peers_.end()) retire_peer_locked(it);
  }
  reclaim_peers();
}

std::atomic<ShmFabric::Peer*>& ShmFabric::tx_hint(const Gid& dst) {
  return tx_hints_[gid_hash(dst) >> 60];
}

void ShmFabric::retire_peer_locked(std::map<Gid, std::unique_ptr<Peer>>::iterator it) {
  Peer* p = it->second.get();
  Peer* expect = p;
  tx_hint(it->first).compare_exchange_strong(expect, nullptr, std::memory_order_seq_cst);
  retired_peers_.push_back(std::move(it->second));
  peers_.erase(it);
  retired_count_.store(retired_peers_.size(), std::memory_order_relaxed);
}

void ShmFabric::reclaim_peers() {
  std::unique_lock<std::shared_mutex> lock(peers_mu_, std::try_to_lock);
  if (!lock.owns_lock() || retired_peers_.empty()) return;
  // A sender that could still hold a retired peer marked its stripe before it loaded the hint or
  // searched the table, both of which lost the peer before this: an empty stripe seen now means
  // that sender has left. A busy stripe postpones the freeing to a later call.
  for (TxStripe& s : tx_stripes_) {
    if (s.in_flight.load(std::memory_order_seq_cst) != 0) return;
  }
  for (const auto& p : retired_peers_) {  // their counts outlive them
    st_[kFragTx].fetch_add(p->frag_tx.load(std::memory_order_relaxed), std::memory_order_relaxed);
    st_[kPktTx].fetch_add(p->pkt_tx.load(std::memory_order_relaxed), std::memory_order_relaxed);
    st_[kBytesTx].fetch_add(p->bytes_tx.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  retired_peers_.clear();
  retired_count_.store(0, std::memory_order_relaxed);
}

int ShmFabric::open_peer(const Gid& dst, Peer** peer_p) {
  std::atomic<Peer*>& hint = tx_hint(dst);
  {
    std::shared_lock<std::shared_mutex> lock(peers_mu_);
    auto it = peers_.find(dst);
    if (it != peers_.end()) {
      *peer_p = it->second.get();
      // Under the lock, so that a retire (exclusive) cannot slip between the find and the store.
      hint.store(*peer_p, std::memory_order_seq_cst);
      return 0;
    }
  }
  std::string p = path_of(dst);
  int fd = open(p.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -EHOSTUNREACH;
  std::unique_ptr<Peer> peer(new Peer());
  peer->gid = dst;
  peer->fd = fd;
  do {
    peer->gen = next_peer_gen_.fetch_add(1, std::memory_order_relaxed);
  } while (peer->gen == 0);
  struct stat st;
  if (fstat(fd, &st) != 0 || !owner_only(st, S_IFREG) ||
      static_cast<uint64_t>(st.st_size) < kRingOffset + 65536) {
    return -EHOSTUNREACH;
  }
  void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return -EHOSTUNREACH;
  peer->mb = static_cast<Mailbox*>(m);
  peer->map_len = static_cast<size_t>(st.st_size);
  Mailbox* mb = peer->mb;
  if (mb->ready.load(std::memory_order_acquire) != 1 || mb->magic != kMagic || mb->version != kVersion ||
      mb->closed.load(std::memory_order_acquire) != 0) {
    return -EHOSTUNREACH;  // still being created, or not ours
  }
  // Read once: what is checked is what the sends use.
  const uint64_t cap = mb->capacity;
  if (cap == 0 || cap + kRingOffset > peer->map_len || (cap & (cap - 1)) != 0) return -EHOSTUNREACH;
  peer->capacity = cap;
  populate_hot_pages(m, peer->map_len, hot_ring_bytes());
  peer->light_publish = shm_fences().registered && mb->consumer_fences.load(std::memory_order_relaxed) == 1;
  if (!peer_alive(peer.get(), true, 0)) {
    drop_peer(dst, peer.get());  // not in the table: only its file goes
    return -EHOSTUNREACH;
  }
  std::unique_lock<std::shared_mutex> lock(peers_mu_);
  // A concurrent open that won keeps its peer; ours was never seen by anyone and goes now.
  auto ins = peers_.emplace(dst, std::move(peer));
  *peer_p = ins.first->second.get();
  hint.store(*peer_p, std::memory_order_seq_cst);
  return 0;
}

inline bool ShmFabric::peer_alive(Peer* p, bool force, uint64_t t) {
  if (p->dead.load(std::memory_order_relaxed)) return false;
  if (t == 0) t = now_ns();
  if (!force && t - p->checked_ns.load(std::memory_order_relaxed) < uint64_t{opt_.liveness_check_ms} * 1000000) {
    return true;
  }
  return probe_peer(p, t);
}

bool ShmFabric::probe_peer(Peer* p, uint64_t t) {
  p->checked_ns.store(t, std::memory_order_relaxed);
  // The owner holds LOCK_EX for its lifetime; a free lock means it is gone. Our probe holds the
  // lock only for an instant, so a concurrent probe may see it busy: that errs on "alive".
  if (flock(p->fd, LOCK_EX | LOCK_NB) != 0) return true;
  flock(p->fd, LOCK_UN);
  p->dead.store(true);
  return false;
}

void ShmFabric::drop_peer(const Gid& dst, Peer* p) {
  unlink_if_same(path_of(dst), p->fd);
  st_[kDead].fetch_add(1, std::memory_order_relaxed);
  std::unique_lock<std::shared_mutex> lock(peers_mu_);
  auto it = peers_.find(dst);
  if (it != peers_.end() && it->second.get() == p) retire_peer_locked(it);
}

void ShmFabric::prepare_peer(const Gid& dst) {
  if ((local_bits_.load(std::memory_order_acquire) & gid_bit(dst)) != 0) {
    std::lock_guard<std::mutex> lock(locals_mu_);
    if (locals_.count(dst) != 0) return;  // delivered within the process: no mailbox
  }
  InFlight in_flight(this);  // as a send (open_peer)
  Peer* peer = nullptr;
  (void)open_peer(dst, &peer);
}

int ShmFabric::send_local(const Gid& dst, Packet* pkt) {
  if ((local_bits_.load(std::memory_order_acquire) & gid_bit(dst)) == 0) return 0;
  std::lock_guard<std::mutex> lock(locals_mu_);
  auto it = locals_.find(dst);
  if (it == locals_.end()) return 0;
  // The receiver keeps the packet: what the sender only lent is copied now, as a mailbox would.
  if (pkt->payload.borrowed()) {
    Payload owned(pkt->payload);
    pkt->payload = std::move(owned);
  }
  st_[kLocal].fetch_add(1, std::memory_order_relaxed);
  st_[kPktTx].fetch_add(1, std::memory_order_relaxed);
  st_[kBytesTx].fetch_add(pkt->payload.size(), std::memory_order_relaxed);
  it->second->sink->deliver(std::move(*pkt));
  return 1;
}

int ShmFabric::send(const Gid& dst, Packet&& pkt, uint64_t now) {
  uint64_t mark;
  return send_marked(dst, std::move(pkt), &mark, now);
}

int ShmFabric::send_marked(const Gid& dst, Packet&& pkt, uint64_t* mark, uint64_t now) {
  *mark = 0;
  // Most sends go to other processes: a clear bit tells without a call.
  if ((local_bits_.load(std::memory_order_acquire) & gid_bit(dst)) != 0 && send_local(dst, &pkt) == 1) return 0;
  return send_to_mailbox(dst, pkt, mark, now);
}

int ShmFabric::send_copy(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now) {
  *mark = 0;
  if (local_bits_.load(std::memory_order_acquire) & gid_bit(dst)) {
    Packet copy = pkt;
    if (send_local(dst, &copy) == 1) return 0;
  }
  return send_to_mailbox(dst, pkt, mark, now);
}

int ShmFabric::send_to_mailbox(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now) {
  int rc;
  {
    InFlight in_flight(this);
    bool closed = false;
    rc = send_remote(dst, pkt, &closed, mark, now);
    if (closed) {
      // The owner detached; a device that came back under this GID has a new mailbox.
      st_[kReopened].fetch_add(1, std::memory_order_relaxed);
      rc = send_remote(dst, pkt, &closed, mark, now);
      if (closed) rc = -EHOSTUNREACH;
    }
  }
  if (rc != 0) *mark = 0;
  if (retired_count_.load(std::memory_order_relaxed) != 0) reclaim_peers();
  return rc;
}

const ShmFabric::Peer* ShmFabric::open_live_peer(const Gid& dst) const {
  auto it = peers_.find(dst);
  if (it == peers_.end() || it->second->dead.load(std::memory_order_relaxed)) return nullptr;
  if (it->second->mb->closed.load(std::memory_order_acquire) != 0) return nullptr;
  return it->second.get();
}

bool ShmFabric::unserved(const Gid& dst, uint64_t mark, uint64_t sent_ns) {
  if (mark == 0) return false;
  std::shared_lock<std::shared_mutex> lock(peers_mu_);
  const Peer* live = open_live_peer(dst);
  if (live == nullptr) return false;
  const Peer& p = *live;
  Mailbox* mb = p.mb;
  // A mark of a mailbox since replaced names another peer object.
  if (mark_gen(mark) != p.gen) return false;
  const uint64_t pos = mark & kMarkPosMask;
  if (pos_below(p.sent_end.load(std::memory_order_relaxed), pos)) return false;
  // Taken in only once the consumer released the bytes up to the mark; served only once a pass
  // begun after the send finished (what that pass read, it also executed and answered).
  return pos_below(mb->head.load(std::memory_order_acquire), pos) ||
         mb->polled_ns.load(std::memory_order_relaxed) < sent_ns + kCrossProcessSlackNs;
}

inline int ShmFabric::lock_mailbox(Mailbox* mb) {
  uint64_t expect = 0;
  if (mb->lock_owner.compare_exchange_strong(expect, lock_word_, std::memory_order_acquire,
                                             std::memory_order_relaxed)) {
    return 0;
  }
  return lock_mailbox_slow(mb);
}

inline void ShmFabric::unlock_mailbox(Mailbox* mb) { mb->lock_owner.store(0, std::memory_order_release); }

// The sender that takes `sleeping` back wakes the thread. A woken consumer reads every record
// before it sleeps again, and until it runs (on a machine whose cores the application's pollers
// keep busy, that can be milliseconds) the others' records need no wake, nor a system call each.
// The load first: a sender that finds the thread awake does not take the line. A sender killed
// between taking the flag and its wake call leaves the thread to its sleep's timeout.
void ShmFabric::wake_sleeping_consumer(Mailbox* mb) {
  if (mb->sleeping.load(std::memory_order_seq_cst) == 0) return;
  if (mb->sleeping.exchange(0, std::memory_order_seq_cst) == 0) return;
  mb->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&mb->wake_seq, FUTEX_WAKE, 1, nullptr);
  st_[kConsumerWakes].fetch_add(1, std::memory_order_relaxed);
}

// Whether the consumer has taken in everything up to `tail` (under the mailbox lock). The head
// seen last answers without touching the consumer's line while it is still behind.
inline bool ShmFabric::emptied(Peer* peer, uint64_t tail) {
  if (peer->head_seen == tail) return true;
  if (tail < peer->recycle_probe) return false;
  peer->head_seen = peer->mb->head.load(std::memory_order_acquire);
  if (peer->head_seen == tail) return true;
  peer->recycle_probe = tail + kRecycleProbeBytes;
  return false;
}

namespace {

// Takes into this cache, under the mailbox's lock and just after a message's last record, the
// lines the next record will most likely be written to: a store to each, in free space past the
// tail (`end`), which the consumer does not read. The consumer holds copies of those lines (it
// read them a lap ago). Left to the next send, they would be taken back only as that record is
// written, and the tail, which becomes visible after the record's bytes, would reach the
// consumer one line trip later: two trips a message where one will do. Here the trip happens
// while this process awaits the answer (a prefetch for writing does not take the lines on the
// machines measured; a store does). Skipped when the ring has not that much room past the
// tail; not done across the ring's end, nor for the record a recycled ring puts back at its
// start (one in some 300 small messages).
void warm_next_record(uint8_t* ring, uint64_t cap, uint64_t end, uint64_t head_seen) {
  if (cap - (end - head_seen) < kNextRecordBytes) return;
  const uint64_t pos = end & (cap - 1);
  const uint64_t stop = std::min(cap, pos + kNextRecordBytes);
  for (uint64_t o = pos; o < stop; o = (o | 63) + 1) std::memset(ring + o, 0, 8);
}

}  // namespace

int ShmFabric::send_remote(const Gid& dst, const Packet& pkt, bool* closed, uint64_t* end_p,
                           uint64_t pass_ns) {
  *closed = false;
  *end_p = 0;
  Peer* peer = tx_hint(dst).load(std::memory_order_seq_cst);
  if (peer == nullptr || !same_gid(peer->gid, dst)) {
    int rc = open_peer(dst, &peer);
    if (rc != 0) return rc;
  }
  if (peer->mb->closed.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::shared_mutex> lock(peers_mu_);
    auto it = peers_.find(dst);
    if (it != peers_.end() && it->second.get() == peer) retire_peer_locked(it);
    *closed = true;
    return -EHOSTUNREACH;
  }
  // The liveness check's time and the time of the write: the sender's pass time when it gives
  // one (unserved() and peer_stalled() compare the peer's passes with that time anyway), else
  // one clock read per packet (a packet's fragments are written within microseconds unless the
  // ring is full, which reads it again).
  uint64_t sent_ns = pass_ns != 0 ? pass_ns : now_ns();
  if (!peer_alive(peer, false, sent_ns)) {
    drop_peer(dst, peer);
    return -EHOSTUNREACH;
  }
  Mailbox* mb = peer->mb;
  uint8_t* ring = reinterpret_cast<uint8_t*>(mb) + kRingOffset;
  const uint64_t cap = peer->capacity;
  const uint64_t total = kPacketHeaderSize + pkt.payload.size();
  const uint64_t frag = opt_.fragment_bytes;
  // Only fragments of one message need to be told apart from another's: a message that fits
  // one fragment is never reassembled.
  const uint64_t msg_id = total > frag ? next_msg_.fetch_add(1, std::memory_order_relaxed) : 0;
  uint64_t off = 0;
  uint64_t wait_start = 0;
  while (off < total) {
    const size_t len = static_cast<size_t>(std::min(frag, total - off));
    const size_t rs = record_size(len);
    int lr = lock_mailbox(mb);
    if (lr == -ECONNRESET) {
      *closed = off == 0;  // as below: a partly written packet goes with its mailbox
      return -EHOSTUNREACH;
    }
    if (lr != 0) return lr;
    uint64_t t = mb->tail_shadow;
    uint64_t pos = t & (cap - 1);
    const bool wrap = pos + rs > cap ||
                      (opt_.recycle_bytes != 0 && pos >= opt_.recycle_bytes && rs <= pos && emptied(peer, t));
    uint64_t need = wrap ? (cap - pos) + rs : rs;
    // Free space from the head seen last (it only grows), read again when that is not enough.
    auto fits = [&](uint64_t h) { return t - h <= cap && cap - (t - h) >= need; };
    if (!fits(peer->head_seen)) peer->head_seen = mb->head.load(std::memory_order_acquire);
    if (!fits(peer->head_seen)) {
      unlock_mailbox(mb);
      uint64_t now = now_ns();
      if (wait_start == 0) {
        wait_start = now;
        st_[kFullWaits].fetch_add(1, std::memory_order_relaxed);
      }
      sent_ns = now;
      if (!peer_alive(peer, false, now)) {
        drop_peer(dst, peer);
        return -EHOSTUNREACH;
      }
      if (mb->closed.load(std::memory_order_acquire) != 0) {
        // Closed while we waited: a partly written packet is dropped with its mailbox.
        *closed = off == 0;
        return -EHOSTUNREACH;
      }
      if (now - wait_start > uint64_t{opt_.full_timeout_ms} * 1000000) return -ENOBUFS;
      // Make sure the consumer is awake to drain, then give it the CPU.
      wake_sleeping_consumer(mb);
      timespec ts{0, 20 * 1000};
      nanosleep(&ts, nullptr);
      continue;
    }
    wait_start = 0;
    if (wrap) {
      RecordHeader skip{};
      skip.kind = kSkip;
      std::memcpy(ring + pos, &skip, 8);
      t += cap - pos;
      pos = 0;
    }
    RecordHeader r{static_cast<uint32_t>(len), kFragment, sender_id_, msg_id, total, off};
    std::memcpy(ring + pos, &r, sizeof(r));
    uint8_t* d = ring + pos + sizeof(r);
    size_t done = 0;
    if (off == 0) {
      encode_header(pkt, d);
      done = kPacketHeaderSize;
    }
    if (opt_.test_abandon_lock) return -EIO;  // what a producer killed mid-record leaves
    if (len > done) std::memcpy(d + done, pkt.payload.data() + (off + done - kPacketHeaderSize), len - done);
    if (peer->light_publish) {
      mb->tail.store(t + rs, std::memory_order_release);
    } else {
      mb->tail.store(t + rs, std::memory_order_seq_cst);
    }
    mb->tail_shadow = t + rs;
    // The tail only grows, so under the lock this fabric's latest end is the largest.
    peer->sent_end.store(t + rs, std::memory_order_relaxed);
    peer->written_ns.store(sent_ns, std::memory_order_relaxed);
    bump(peer->frag_tx, 1);
    if (off + len == total) {
      bump(peer->pkt_tx, 1);
      bump(peer->bytes_tx, pkt.payload.size());
      warm_next_record(ring, cap, t + rs, peer->head_seen);
    }
    unlock_mailbox(mb);
    *end_p = make_mark(peer->gen, t + rs);
    // Pairs with the consumer's store of `sleeping` then load of `tail`: either a seq_cst pair,
    // or the consumer's fence of this process between them (light_publish).
    wake_sleeping_consumer(mb);
    off += len;
  }
  return 0;
}

int ShmFabric::copy_peer(const PeerRef& from, uint64_t addr, void* local, size_t len) {
  if (!opt_.peer_memory) return -EOPNOTSUPP;
  if (opt_.peer_copy_errno != 0) return -opt_.peer_copy_errno;
  return PeerMemory::read(from, addr, local, len);
}

bool ShmFabric::peer_stalled(const Gid& dst, uint64_t since_ns) {
  std::shared_lock<std::shared_mutex> lock(peers_mu_);
  const Peer* live = open_live_peer(dst);
  if (live == nullptr) return false;
  const Peer& p = *live;
  Mailbox* mb = p.mb;
  // The owner had our latest packet in hand only once a pass that began after we wrote it has
  // finished; until then its silence may be the scheduler's, not its own.
  const uint64_t since = std::max(since_ns, p.written_ns.load(std::memory_order_relaxed));
  return mb->head.load(std::memory_order_acquire) < p.sent_end.load(std::memory_order_relaxed) ||
         mb->polled_ns.load(std::memory_order_relaxed) < since + kCrossProcessSlackNs;
}

bool ShmFabric::rx_pending(const Gid& gid) {
  std::lock_guard<std::mutex> lock(locals_mu_);
  auto it = locals_.find(gid);
  if (it == locals_.end()) return false;
  Mailbox* box = it->second->mb;
  return box->head.load(std::memory_order_acquire) != box->tail.load(std::memory_order_acquire);
}

template <typename F>
auto ShmFabric::with_open_peer(const Gid& dst, F f) -> decltype(f(static_cast<const Peer*>(nullptr))) {
  InFlight in_flight(this);  // as a send: the peer stays mapped
  const Peer* peer = tx_hint(dst).load(std::memory_order_seq_cst);
  if (peer != nullptr && same_gid(peer->gid, dst)) return f(peer);
  // Another peer holds the hint's slot (there are few slots): the table knows.
  std::shared_lock<std::shared_mutex> lock(peers_mu_);
  auto it = peers_.find(dst);
  return f(it != peers_.end() ? it->second.get() : nullptr);
}

bool ShmFabric::takes_position_answers(const Gid& gid, const Gid& requester) {
  // This end's mark no longer moves after a malformed record: a request answered by position
  // before that was read is sent again, and its repeat gets a packet.
  const Local* lp = local_of(gid);
  if (lp == nullptr || lp->no_position.load(std::memory_order_relaxed)) return false;
  // A requester this end has not sent to yet has no peer here: it gets a packet, which opens one.
  return with_open_peer(requester, [](const Peer* p) {
    return p != nullptr && !p->dead.load(std::memory_order_relaxed) &&
           p->mb->position_answers.load(std::memory_order_relaxed) == 1;
  });
}

ShmFabric::Local* ShmFabric::local_from_table(const Gid& gid) {
  std::lock_guard<std::mutex> lock(locals_mu_);
  auto it = locals_.find(gid);
  if (it == locals_.end()) return nullptr;
  // Under the lock, so that a detach (which clears the hint under it) cannot slip in between.
  rx_hint_.store(it->second.get(), std::memory_order_release);
  return it->second.get();
}

void ShmFabric::executed_polled(const Gid& gid) {
  Local* lp = local_of(gid);
  if (lp == nullptr || lp->no_position.load(std::memory_order_relaxed)) return;
  const uint64_t h = lp->handed.load(std::memory_order_relaxed);
  if (h == lp->executed_shown) return;
  lp->executed_shown = h;
  // After the answer packets it vouches for were published (their tail stores come first).
  lp->mb->executed.store(h, std::memory_order_release);
}

void ShmFabric::set_position_answers(const Gid& gid, bool on) {
  Local* lp = local_of(gid);
  if (lp == nullptr) return;
  const uint32_t v = on && !lp->no_position.load(std::memory_order_relaxed) ? 1 : 0;
  if (lp->mb->position_answers.load(std::memory_order_relaxed) != v) {
    // seq_cst: a withdrawn wish comes before whatever marks the caller reads next.
    lp->mb->position_answers.store(v, std::memory_order_seq_cst);
  }
}

uint64_t ShmFabric::executed_mark(const Gid& gid, const Gid& dst, uint64_t* rx_end) {
  *rx_end = 0;
  Local* lp = local_of(gid);
  if (lp == nullptr) return 0;
  const uint64_t mark = with_open_peer(dst, [](const Peer* p) -> uint64_t {
    if (p == nullptr) return 0;
    // Acquire: the answer packets dst published before its mark lie below the tail read next.
    const uint64_t pos = p->mb->executed.load(std::memory_order_acquire);
    return pos == 0 ? 0 : make_mark(p->gen, pos);
  });
  if (mark != 0) *rx_end = lp->mb->tail.load(std::memory_order_acquire);
  return mark;
}

bool ShmFabric::mark_covered(uint64_t executed, uint64_t mark) const {
  return executed != 0 && mark_gen(executed) == mark_gen(mark) &&
         !pos_below(executed & kMarkPosMask, mark & kMarkPosMask);
}

bool ShmFabric::polled_past(const Gid& gid, uint64_t rx_end) {
  Local* lp = local_of(gid);
  return lp != nullptr && lp->handed.load(std::memory_order_relaxed) >= rx_end;
}

ShmFabricStats ShmFabric::stats() const {
  ShmFabricStats s{};
  uint64_t* out[] = {&s.packets_tx, &s.packets_rx, &s.fragments_tx, &s.fragments_rx,
                     &s.bytes_tx, &s.bytes_rx, &s.full_waits, &s.dead_peers,
                     &s.stale_removed, &s.malformed, &s.local_packets, &s.reopened,
                     &s.lock_steals, &s.consumer_wakes};
  static_assert(sizeof(out) / sizeof(out[0]) == kStats && sizeof(st_) / sizeof(st_[0]) == kStats,
                "every counter is kept and reported");
  for (int i = 0; i < kStats; ++i) *out[i] = st_[i].load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(locals_mu_);
    auto add_rx = [&s](const Local& l) {
      s.fragments_rx += l.frag_rx.load(std::memory_order_relaxed);
      s.packets_rx += l.pkt_rx.load(std::memory_order_relaxed);
      s.bytes_rx += l.bytes_rx.load(std::memory_order_relaxed);
      s.rx_parks += l.rx_parks.load(std::memory_order_relaxed);
      s.rx_park_stops += l.rx_park_stops.load(std::memory_order_relaxed);
      s.rx_thread_packets += l.rx_thread_packets.load(std::memory_order_relaxed);
      s.rx_sleeps += l.rx_sleeps.load(std::memory_order_relaxed);
      s.rx_fences += l.rx_fences.load(std::memory_order_relaxed);
      s.rx_sleep_tries += l.rx_sleep_tries.load(std::memory_order_relaxed);
    };
    for (const auto& kv : locals_) add_rx(*kv.second);
    for (const auto& l : retired_) add_rx(*l);
  }
  std::shared_lock<std::shared_mutex> lock(peers_mu_);
  auto add_tx = [&s](const Peer& p) {
    s.fragments_tx += p.frag_tx.load(std::memory_order_relaxed);
    s.packets_tx += p.pkt_tx.load(std::memory_order_relaxed);
    s.bytes_tx += p.bytes_tx.load(std::memory_order_relaxed);
  };
  for (const auto& kv : peers_) {
    add_tx(*kv.second);
    ++s.open_peers;
    if (kv.second->light_publish) ++s.light_peers;
  }
  for (const auto& p : retired_peers_) add_tx(*p);
  return s;
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab
