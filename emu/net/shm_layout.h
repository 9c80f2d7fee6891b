// The shared-memory fabric's layout and the helpers its send and receive sides share: the
// mailbox file's header and ring records, the fabric's per-device and per-peer state, counters.
// Internal to emu/net (shm_fabric.cc, shm_fabric_rx.cc).
#ifndef XPUFAB_EMU_NET_SHM_LAYOUT_H_
#define XPUFAB_EMU_NET_SHM_LAYOUT_H_

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "base/resident.h"
#include "emu/clock.h"
#include "emu/net/shm_fabric.h"
#include "emu/net/wire.h"
#include "base/spin.h"

namespace xpufab {
namespace emu {
namespace net {

using ::xpufab::base::cpu_relax;
using ::xpufab::base::futex;

namespace shm_internal {

constexpr uint64_t kMagic = 0x78707566616273ull;  // "xpufabs"
// 2: the closed mark; 3: the 104-byte packet header; 4: polled_ns; 5: polled_ns is a finished pass;
// 6: the producer lock is a word naming its holder; 7: the lock and the producers' copy of the tail
// on a cache line of their own, consumer_fences; 8: executed and position_answers
constexpr uint32_t kVersion = 8;
constexpr size_t kRingOffset = 4096;

enum Stat {
  kPktTx, kPktRx, kFragTx, kFragRx, kBytesTx, kBytesRx, kFullWaits, kDead, kStale, kMalformed, kLocal,
  kReopened, kLockSteals, kConsumerWakes
};
constexpr int kStats = kConsumerWakes + 1;

// A producer that finds the mailbox lock taken spins this often, then yields; it asks whether the
// holder lives only after kLockProbeNs of waiting (a live holder keeps it for one memcpy).
constexpr int kLockSpins = 128;
constexpr uint64_t kLockProbeNs = 2000000;

// Counters with one writer at a time (a mailbox's consumer, a peer's lock holder), which a
// handover orders: a plain add, not a locked one. Readers sum them in stats().
inline void bump(std::atomic<uint64_t>& c, uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// The engine's clock, which hands its pass times to poll_rx_batch. Times from another process
// (a mailbox's polled_ns) agree with it within kCrossProcessSlackNs, so "a pass began after this
// write" means later by more than that: the comparisons that decide it err on waiting longer.
inline uint64_t now_ns() { return clock::mono_ns(); }
constexpr uint64_t kCrossProcessSlackNs = 2 * clock::kSlackNs;

// Fences across processes on demand (membarrier(2), MEMBARRIER_CMD_GLOBAL_EXPEDITED). A producer
// publishes a record by storing the tail and then reads whether the consumer sleeps; the consumer
// stores that it sleeps and then reads the tail. One side must fence between its store and its
// load, or each may miss the other's store (and the consumer sleep on a published record). A
// seq_cst tail store is that fence on the producer's side, paid at every record: it waits until
// the record's lines are taken from the consumer's cache. Where the kernel offers it, a consumer
// about to sleep fences every running thread of the registered processes instead, and producers
// of registered processes publish with a release store that does not wait (shm_fences() says
// what this process can do). Returns 0, or -1 with errno.
inline int fence_registered_processes() {
  return static_cast<int>(syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0));
}

// Maps the pages every small message uses, the header and the ring up to past the recycle point
// (senders go back to the ring's start there once it was emptied), so that the first messages do
// not take a page fault at every page they reach, on either side. Best effort: a kernel without
// MADV_POPULATE_WRITE (before 5.14) faults them in as they come.
inline void populate_hot_pages(void* mb, size_t map_len, size_t hot_ring_bytes) {
  base::make_resident(mb, std::min(map_len, kRingOffset + hot_ring_bytes));
}

inline bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Unlinks `path` only while it still names the file open as `fd`: a mailbox's name may already
// belong to a successor's file. Whether it did.
inline bool unlink_if_same(const std::string& path, int fd) {
  struct stat st, now;
  return fstat(fd, &st) == 0 && stat(path.c_str(), &now) == 0 && same_file(st, now) && unlink(path.c_str()) == 0;
}

}  // namespace shm_internal

// A fragment record in the ring; `len` data bytes follow, the record is padded to 8 bytes.
struct ShmFabric::RecordHeader {
  uint32_t len;
  uint32_t kind;  // kFragment, or kSkip: the rest of the ring up to its end is unused
  uint64_t sender;
  uint64_t msg_id;
  uint64_t total;
  uint64_t off;
};
namespace shm_internal {
using RecordHeader = ShmFabric::RecordHeader;
constexpr uint32_t kFragment = 1;
constexpr uint32_t kSkip = 2;

// Marks (Fabric::send_marked) name the peer object the packet went through in their top bits and
// its ring position in the rest: a mailbox that replaced another starts its positions again, and
// a mark of the old one must not be taken for one of the new. Outstanding marks lie within a
// ring's capacity of the tail, far less than half the position space, so positions compare
// modulo it.
constexpr int kMarkPosBits = 48;
constexpr uint64_t kMarkPosMask = (uint64_t{1} << kMarkPosBits) - 1;
inline uint64_t make_mark(uint16_t gen, uint64_t pos) { return uint64_t{gen} << kMarkPosBits | (pos & kMarkPosMask); }
inline uint16_t mark_gen(uint64_t mark) { return static_cast<uint16_t>(mark >> kMarkPosBits); }
// Whether position a lies below b (a < b), both from one mailbox.
inline bool pos_below(uint64_t a, uint64_t b) {
  const uint64_t d = (b - a) & kMarkPosMask;
  return d != 0 && d < (uint64_t{1} << (kMarkPosBits - 1));
}

// A producer past ShmFabricOptions::recycle_bytes reads the consumer's head again, to see
// whether the ring was emptied, once per this many bytes it wrote.
constexpr uint64_t kRecycleProbeBytes = 8u << 10;

// The ring bytes past a message's record that a sender takes into its cache for its next one
// (warm_next_record): a small message's record (its header, the packet's 104 bytes and a 64-byte
// payload) from anywhere in a line.
constexpr uint64_t kNextRecordBytes = 256;

inline size_t record_size(size_t len) { return (sizeof(RecordHeader) + len + 7) & ~size_t{7}; }

inline std::string hex(const Gid& g) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : g) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

inline uint64_t gid_hash(const Gid& g) {
  uint64_t a, b;
  std::memcpy(&a, g.data(), 8);
  std::memcpy(&b, g.data() + 8, 8);
  return (a ^ b) * 0x9e3779b97f4a7c15ull;
}

inline uint64_t gid_bit(const Gid& g) { return uint64_t{1} << (gid_hash(g) >> 58); }

// The stripe of the CPU the thread runs on: threads that send at the same time run on different
// CPUs, so they rarely share a counter's line, and the CPU number is a read of the thread's
// rseq area (glibc 2.35+), where a thread_local in a shared library is a __tls_get_addr call.
// A thread that moves to another CPU meanwhile leaves from the stripe it entered (InFlight).
inline int my_tx_stripe(int stripes) {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : cpu % stripes;
}

inline bool same_gid(const Gid& x, const Gid& y) {
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, x.data(), 8);
  std::memcpy(&b0, y.data(), 8);
  std::memcpy(&a1, x.data() + 8, 8);
  std::memcpy(&b1, y.data() + 8, 8);
  return a0 == b0 && a1 == b1;
}

inline bool owner_only(const struct stat& st, mode_t type) {
  return (st.st_mode & S_IFMT) == type && st.st_uid == getuid() && (st.st_mode & 077) == 0;
}

}  // namespace shm_internal

struct ShmFabric::Mailbox {
  uint64_t magic;
  uint32_t version;
  uint32_t owner_pid;
  uint64_t capacity;
  // Producers serialize on this word: 0 when free, else the holder's lock word (its slot in the
  // senders file, which tells a waiter whether the holder still lives). A holder that died never
  // published its record (tail moves last), so whoever takes the lock over finds the ring intact.
  // On a line of its own: a consumer that read the line above would otherwise take it from the
  // producer at every packet, and the producer take it back at its next lock.
  alignas(64) std::atomic<uint64_t> lock_owner;
  // The tail as the lock's holders keep it (equal to `tail` whenever the lock is free, set again
  // from it when a dead holder's lock is taken over): read with the lock, so that a producer does
  // not fetch the line of `tail` that the consumer keeps polling.
  uint64_t tail_shadow;
  alignas(64) std::atomic<uint64_t> tail;  // bytes published by producers
  alignas(64) std::atomic<uint64_t> head;  // bytes released by the consumer
  alignas(64) std::atomic<uint32_t> wake_seq;
  std::atomic<uint32_t> sleeping;
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> closed;  // set by the owner before it unlinks the file
  // 1: the owner fences registered producers before it sleeps (ShmFences), so that those
  // may publish with release stores.
  std::atomic<uint32_t> consumer_fences;
  // Steady-clock start of the owner's last engine pass known to be finished (published when the
  // next one starts): what it had read by then it has also answered. Senders compare it with
  // their last write to tell a starved owner from a silent one (peer_stalled).
  alignas(64) std::atomic<uint64_t> polled_ns;
  // Answers by position (Fabric::executed_mark): the ring position up to which the owner has
  // executed every request it read and sent every answer that travels as a packet. Moved by
  // the owner's passes; read by its senders while they await answers. 0: none yet.
  alignas(64) std::atomic<uint64_t> executed;
  // 1 while the owner takes answers by position (Fabric::set_position_answers): an application
  // thread drives its device, so a moved mark is seen at once. Read by responders at every
  // request of the owner's, written when that changes: a line of its own.
  alignas(64) std::atomic<uint32_t> position_answers;
};
static_assert(sizeof(ShmFabric::Mailbox) <= shm_internal::kRingOffset, "mailbox header fits its page");

// Taken before any peer is looked up without peers_mu_: pairs with reclaim_peers()'s scan of
// the stripes, so a peer found meanwhile stays mapped until the guard goes.
class ShmFabric::InFlight {
 public:
  explicit InFlight(ShmFabric* f) : stripe_(f->tx_stripes_[shm_internal::my_tx_stripe(kTxStripes)]) {
    stripe_.in_flight.fetch_add(1, std::memory_order_seq_cst);
  }
  ~InFlight() { stripe_.in_flight.fetch_sub(1, std::memory_order_release); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  TxStripe& stripe_;
};

struct ShmFabric::Local {
  Gid gid;
  PacketSink* sink = nullptr;
  int fd = -1;
  Mailbox* mb = nullptr;
  size_t map_len = 0;
  std::string path;
  std::atomic<bool> stop{false};
  std::thread thread;
  // The ring has one consumer at a time: the receive thread or a poller; whoever holds this.
  std::atomic<bool> consuming{false};
  uint64_t capacity = 0;  // the ring's, as written at creation (read here, not from shared memory)
  bool fences = false;    // ShmFences::can_issue, as the mailbox's consumer_fences says
  std::atomic<uint64_t> last_poll_ns{0};
  // poll_rx_handed_over: the device's engine thread takes over from stopped pollers and calls
  // poll_rx_stop when it stops, so the receive thread's parks may grow far longer.
  std::atomic<bool> handed_over{false};
  uint64_t pass_ns = 0;  // start of the poll_rx before the latest (whoever holds consuming)
  // Answers by position, the device's (its passes hold its lock): the head after the last
  // poll_rx_batch that took the ring (everything below it is handed over, straight to the pass
  // or through the sink before it), and the mark published last. A malformed record (a packet
  // that never reached the device) ends them.
  std::atomic<uint64_t> handed{0};
  uint64_t executed_shown = 0;
  std::atomic<bool> no_position{false};
  Reassembler reasm;  // consumer's
  std::atomic<uint64_t> frag_rx{0}, pkt_rx{0}, bytes_rx{0};  // consumer's
  std::atomic<uint64_t> rx_parks{0}, rx_park_stops{0}, rx_thread_packets{0};  // the receive thread's
  std::atomic<uint64_t> rx_sleeps{0}, rx_fences{0}, rx_sleep_tries{0};         // the same
};

inline ShmFabric::Local* ShmFabric::local_of(const Gid& gid) {
  Local* lp = rx_hint_.load(std::memory_order_acquire);
  if (lp != nullptr && shm_internal::same_gid(lp->gid, gid)) return lp;
  return local_from_table(gid);
}

struct ShmFabric::Peer {
  Gid gid{};
  uint16_t gen = 0;  // this peer object's number, in the marks of packets sent through it
  int fd = -1;
  Mailbox* mb = nullptr;
  size_t map_len = 0;
  uint64_t capacity = 0;  // the ring's, checked when the mailbox was opened
  // The consumer's head as last read, under the mailbox's lock: a lower bound of the real one, so
  // a record that fits below it fits, and the head's line (the consumer writes it at every drain)
  // is read again only when one seems not to.
  uint64_t head_seen = 0;
  // The tail from which the head is read again to see whether the ring was emptied (a busy
  // consumer's line is not read at every record).
  uint64_t recycle_probe = 0;
  // Records are published with a release store: this process is registered for the owner's
  // fences (ShmFences) and the owner issues them.
  bool light_publish = false;
  std::atomic<uint64_t> checked_ns{0};
  std::atomic<bool> dead{false};
  // Written under the mailbox's lock, which serializes every write of this fabric there.
  std::atomic<uint64_t> sent_end{0};  // the ring position just past this fabric's last record
  std::atomic<uint64_t> written_ns{0};  // when that record was published
  std::atomic<uint64_t> frag_tx{0}, pkt_tx{0}, bytes_tx{0};
  ~Peer() {
    if (mb != nullptr) munmap(mb, map_len);
    if (fd >= 0) close(fd);
  }
};

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_SHM_LAYOUT_H_
