// A Fabric between processes on one host. Every attached GID owns a mailbox: a file in a
// per-user, owner-only directory (0700, files 0600) mapped by every sender, holding a
// multi-producer ring of packet fragments. Producers serialize on a lock word that names its
// holder's slot in the directory's senders file, which every fabric keeps locked for its
// lifetime: a producer that waits long on the word asks whether the holder lives, and takes the
// lock over from one that died (which had not published its record: the ring is intact). The
// ring has one consumer at a time: a thread that drives the owning device (poll_rx(), called
// from every engine pass) drains it itself, so a ping-pong between polling processes pays no
// thread hand-off; the owner's receive thread parks while such polls come in and takes over
// when they stop. It sleeps on a futex in the mailbox when the ring is empty, so an idle fabric
// costs no CPU, and spins briefly after traffic so that a ping-pong does not pay a wakeup per
// message.
//
// Payload bytes are written into the receiver's ring once by the sender and copied out once by
// the receiver; large packets are cut into fragments so that a packet may exceed the ring and
// producers interleave. A packet between two devices attached to the same fabric object (one
// process) skips the mailbox: it goes straight to the receiving device, as on InProcFabric.
//
// Liveness: the owner holds an exclusive flock on its mailbox for its lifetime, and the kernel
// drops it when the process dies. A sender that finds the lock free knows the owner is dead,
// removes the file and reports -EHOSTUNREACH; attach() removes stale mailboxes of dead
// processes. Different fabric keys (FI_EFA_EMU_FABRIC_KEY) use different directories.
//
// A detached mailbox is marked closed before its file goes, and a sender checks the mark on
// every send: a device that detaches and attaches again under the same GID (a reopened device)
// is reached in its new mailbox by the very next send, not after a liveness check.
// Large RDMA payloads need not cross the mailbox at all: the packet names the sender's memory
// (Packet::ref) and the receiving device copies it with one process_vm_readv after it checked
// keys and bounds (peer_memory); where the kernel refuses (Yama ptrace_scope, another PID
// namespace) the device sends the bytes through the mailbox instead.
// A send that cannot place its packet within full_timeout_ms (a live receiver that does not
// drain) fails with -ENOBUFS; the device retransmits it later.
//
// Answers by position (Fabric::executed_mark): a mailbox's header also holds how far its owner
// has executed what it read (`executed`, moved at the end of the owner's engine passes, after
// the answer packets of the pass) and whether the owner wants answers that way (its device is
// polled, so it sees the mark move at once). A sender's mark names the ring position just past
// its packet and the peer object it went through, so a mark of a mailbox since replaced is never
// taken for one of its successor's. The owner reads the mark before its own poll, and takes it
// once its polls have passed where its own ring ended then: every answer packet sent before the
// mark moved is read first.
#ifndef XPUFAB_EMU_NET_SHM_FABRIC_H_
#define XPUFAB_EMU_NET_SHM_FABRIC_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "emu/fabric.h"

namespace xpufab {
namespace emu {
namespace net {

struct ShmFabricOptions {
  std::string base_dir;           // default FI_EFA_EMU_SHM_DIR or /dev/shm
  std::string key;                // default: the fabric key from the environment
  uint32_t ring_bytes = 4u << 20;  // per mailbox, a power of two >= 64 KiB
  uint32_t fragment_bytes = 256u << 10;
  // A producer that finds a peer's ring emptied at least this far into it starts again at its
  // beginning, so that light traffic keeps writing the same few pages, mapped and warm in both
  // processes' caches, rather than faulting its way through the whole ring once. 0: never.
  uint32_t recycle_bytes = 64u << 10;
  uint32_t spin_us = 30;          // receive thread: poll this long after traffic before sleeping
  uint32_t park_us = 200;         // receive thread: stays parked while poll_rx() ran within this
  uint32_t park_max_us = 4000;    // a park doubles from park_us up to this while polls go on
  uint32_t full_timeout_ms = 2000;  // a sender gives up on a mailbox that stays full
  uint32_t liveness_check_ms = 20;  // how often a sender re-checks that a peer lives
  // Large RDMA transfers refer to the sender's memory and the other end copies it across with
  // one process_vm_readv (Fabric::peer_memory); off, every byte goes through the mailbox.
  bool peer_memory = true;
  // Tests: every cross-process copy fails with this errno (EPERM as under Yama's ptrace_scope,
  // ESRCH), so that the fallback through the mailbox is exercised. 0: real copies.
  int peer_copy_errno = 0;
  // Tests: a send takes the mailbox lock, writes its record's header and returns -EIO without
  // publishing the record or letting go of the lock, as a producer killed right there leaves it.
  bool test_abandon_lock = false;
};

// Fences across processes (membarrier(2)), as this process can use them: a consumer that can
// issue them lets producers publish records with release stores (see shm_layout.h).
struct ShmFences {
  bool can_issue = false;   // this process may fence every registered process's running threads
  bool registered = false;  // this process is fenced by such a call (inherited by fork)
};
// Queried and registered once per process.
const ShmFences& shm_fences();

struct ShmFabricStats {
  uint64_t packets_tx, packets_rx, fragments_tx, fragments_rx, bytes_tx, bytes_rx;
  uint64_t full_waits, dead_peers, stale_removed, malformed;
  uint64_t local_packets;  // delivered without a mailbox (both devices attached here)
  uint64_t reopened;       // sends that found a closed mailbox and went to its successor
  uint64_t lock_steals;    // mailbox locks taken over from a producer that died holding one
  // The receive threads': parks while pollers drove, those a poll_rx_stop (or detach) ended,
  // and packets they delivered themselves (not a poller).
  uint64_t rx_parks, rx_park_stops, rx_thread_packets;
  // The receive threads' sleeps, and the fences they issued first (ShmFences: producers of
  // registered processes then publish with release stores).
  uint64_t rx_sleeps, rx_fences;
  // The receive threads' raises of `sleeping` (a sleep begun; it waits unless a record came
  // meanwhile), and the wakes this fabric's senders gave sleeping receive threads: at most one
  // per raise.
  uint64_t rx_sleep_tries, consumer_wakes;
  uint64_t open_peers;   // mailboxes of other processes' devices this fabric has open
  uint64_t light_peers;  // open peers this fabric publishes to with release stores
};

class ShmFabric : public Fabric {
 public:
  // -EACCES when the directory exists with the wrong owner or mode, -errno on other failures.
  static int create(const ShmFabricOptions& options, std::shared_ptr<ShmFabric>* fabric_p);
  ~ShmFabric() override;

  int attach(const Gid& gid, PacketSink* sink) override;
  void detach(const Gid& gid) override;
  // Opens dst's mailbox (and maps its hot pages) unless dst is attached here.
  void prepare_peer(const Gid& dst) override;
  // `now_ns` is the time of the write (unserved(), peer_stalled()) and of the liveness check.
  int send(const Gid& dst, Packet&& pkt, uint64_t now_ns = 0) override;
  // The mark is the mailbox position just past the packet's last fragment.
  int send_marked(const Gid& dst, Packet&& pkt, uint64_t* mark, uint64_t now_ns = 0) override;
  // Reads the packet in place unless the destination is attached here.
  int send_copy(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now_ns = 0) override;
  bool unserved(const Gid& dst, uint64_t mark, uint64_t sent_ns) override;
  bool lossless() const override { return true; }
  int poll_rx(const Gid& gid, int budget) override;
  int poll_rx_batch(const Gid& gid, int budget, uint64_t now_ns, std::vector<Packet>* out) override;
  bool rx_quiet(const Gid& gid, uint64_t now_ns) override;
  // Wakes the parked receive thread of `gid`, which drains the mailbox from then on.
  void poll_rx_stop(const Gid& gid) override;
  void poll_rx_handed_over(const Gid& gid) override;
  bool copies_on_send() const override { return true; }
  bool peer_memory() const override { return opt_.peer_memory; }
  int copy_peer(const PeerRef& from, uint64_t addr, void* local, size_t len) override;
  // From the destination's mailbox: its read position against the end of what this fabric
  // wrote there last, and whether its owner finished an engine pass begun after that write (and
  // after since_ns).
  bool peer_stalled(const Gid& dst, uint64_t since_ns) override;
  // The local mailbox of `gid` holds bytes its consumer has not released yet.
  bool rx_pending(const Gid& gid) override;
  // Answers by position: the executed mark lives in the responder's mailbox, the requester's
  // wish in its own; packets read off a ring are position_seen. A malformed record ends the
  // marks of its mailbox for good (something was read that no device ran).
  bool takes_position_answers(const Gid& gid, const Gid& requester) override;
  void executed_polled(const Gid& gid) override;
  void set_position_answers(const Gid& gid, bool on) override;
  uint64_t executed_mark(const Gid& gid, const Gid& dst, uint64_t* rx_end) override;
  bool mark_covered(uint64_t executed, uint64_t mark) const override;
  bool polled_past(const Gid& gid, uint64_t rx_end) override;

  const std::string& dir() const { return dir_; }
  ShmFabricStats stats() const;
  // Removes mailboxes whose owners died; returns how many.
  int sweep_stale();
  // For a process that exits with this fabric still in use (the provider keeps its fabric to
  // the end, since devices may outlive static destructors): its mailboxes close (their files go,
  // and senders get -EHOSTUNREACH), the key's directory goes unless another fabric of the key
  // lives, and so do the directories of this user's keys whose processes all died
  // (sweep_dead_keys). Mappings, threads and the slot stay for whatever still runs until the
  // process ends. Once only.
  void leave();
  // Removes this user's directories of other keys, in the base directory, that no live fabric
  // holds (killed processes leave theirs); returns how many.
  int sweep_dead_keys();

  struct Mailbox;  // implementation detail, public for the .cc's helpers
  struct Local;
  struct Peer;
  struct RecordHeader;

 private:
  explicit ShmFabric(const ShmFabricOptions& o);
  // The open peer dst when its hint does not name it: from the table, else its mailbox file. The
  // pointer stays valid while the caller is in flight (tx_stripes_).
  int open_peer(const Gid& dst, Peer** peer_p);
  // The ring bytes small messages keep to, mapped when a mailbox is made or opened
  // (populate_hot_pages): up to the recycle point, and a page for the record that crosses it.
  // Larger records reach further and fault their pages in, once, as before.
  size_t hot_ring_bytes() const { return size_t{opt_.recycle_bytes} + 4096; }
  // 1: delivered to a device of this fabric object; 0: not attached here.
  int send_local(const Gid& dst, Packet* pkt);
  // Through the mailbox of dst, found again if its owner reopened it; *mark as send_marked.
  int send_to_mailbox(const Gid& dst, const Packet& pkt, uint64_t* mark, uint64_t now_ns);
  // *end: the ring position just past the packet's last fragment; now_ns as send()'s.
  int send_remote(const Gid& dst, const Packet& pkt, bool* closed, uint64_t* end, uint64_t now_ns);
  bool emptied(Peer* peer, uint64_t tail);
  // `now_ns`: the steady clock (0: read it here).
  bool peer_alive(Peer* p, bool force, uint64_t now_ns);
  // The flock probe behind peer_alive, at most once per liveness_check_ms.
  bool probe_peer(Peer* p, uint64_t now_ns);
  // The open, live peer dst (its mailbox not closed), or null; caller holds peers_mu_.
  const Peer* open_live_peer(const Gid& dst) const;
  void drop_peer(const Gid& dst, Peer* p);
  std::string path_of(const Gid& gid) const;
  // A slot of the directory's senders file, locked for this fabric's lifetime: the lock word it
  // puts in a mailbox's lock names the slot, so that a producer waiting on that lock can tell a
  // holder that died from a slow one.
  // -EAGAIN: the senders file was removed meanwhile (create() starts again).
  int take_sender_slot();
  int lock_free_slot(int fd);
  // The last fabric of the key leaves no directory behind (mailboxes of live processes keep it).
  void remove_dir_if_unused();
  bool sender_alive(uint64_t lock_word) const;
  // The mailbox's producer lock: 0, -ENOBUFS (a live holder kept it past full_timeout_ms) or
  // -ECONNRESET (the mailbox closed meanwhile).
  int lock_mailbox(Mailbox* mb);
  int lock_mailbox_slow(Mailbox* mb);
  void unlock_mailbox(Mailbox* mb);
  // Wakes the mailbox's receive thread if it sleeps and no other sender has woken it since.
  void wake_sleeping_consumer(Mailbox* mb);
  // Consumes the ring of `l` (caller holds l->consuming) into `out`, or to its sink when null;
  // returns packets delivered.
  int drain(Local* l, int budget, std::vector<Packet>* out);
  // One fragment record's bytes into *pkt: 1 when that completes a packet, 0 when more fragments
  // are needed, -EBADMSG (counted as malformed).
  int take_fragment(Local* l, const RecordHeader& r, const uint8_t* data, Packet* pkt);
  void receive_loop(Local* l);

  // Senders mark themselves in flight on a per-thread stripe while they hold a Peer found
  // without peers_mu_; a retired peer is unmapped only once every stripe was seen empty after it
  // left the table and the hints (a grace period), never by a sender that waits for it.
  static constexpr int kTxStripes = 16;
  static constexpr int kTxHints = 16;
  struct alignas(64) TxStripe {
    std::atomic<uint32_t> in_flight{0};
  };
  // The calling thread in flight on its stripe for the guard's lifetime (shm_layout.h).
  class InFlight;
  // The hint slot of dst.
  std::atomic<Peer*>& tx_hint(const Gid& dst);
  // Takes p out of the table and the hints; it is freed after a grace period. Caller holds
  // peers_mu_ exclusively.
  void retire_peer_locked(std::map<Gid, std::unique_ptr<Peer>>::iterator it);
  // Frees retired peers when no sender can still hold one; the caller is not in flight.
  void reclaim_peers();
  // The local of `gid`: the hint's (rx_hint_), else from the table, which the hint then names
  // (null when not attached). Inline (shm_layout.h): the engine asks several times a message.
  inline Local* local_of(const Gid& gid);
  Local* local_from_table(const Gid& gid);
  // f(the open peer dst, or null), with the peer kept mapped meanwhile (as a send keeps it).
  template <typename F>
  auto with_open_peer(const Gid& dst, F f) -> decltype(f(static_cast<const Peer*>(nullptr)));

  ShmFabricOptions opt_;
  std::string dir_;
  uint64_t sender_id_ = 0;  // this fabric instance in fragment headers
  int senders_fd_ = -1;     // the senders file; its description holds our slot's lock
  uint64_t lock_word_ = 0;  // slot + 1 in the top 16 bits, random bits below; never 0
  std::atomic<uint64_t> next_msg_{1};
  std::atomic<uint16_t> next_peer_gen_{1};  // Peer::gen, never 0
  // Held while a packet is handed to a local device, so that none is handed one after its
  // detach returned.
  mutable std::mutex locals_mu_;
  std::map<Gid, std::unique_ptr<Local>> locals_;  // guarded by locals_mu_
  bool left_ = false;  // leave() ran; guarded by locals_mu_
  // Detached locals, kept (their mailboxes unmapped) until the fabric goes, so that a poller
  // holding a stale rx_hint_ finds a live object whose `consuming` is taken for good.
  std::vector<std::unique_ptr<Local>> retired_;  // guarded by locals_mu_
  // The local polled last: a device polling its own mailbox every pass finds it without the
  // lock and the table.
  std::atomic<Local*> rx_hint_{nullptr};
  // One bit per local GID (a hash), set while it is attached: most sends go to other processes,
  // and a clear bit sends them there without the lock and the table.
  std::atomic<uint64_t> local_bits_{0};
  mutable std::shared_mutex peers_mu_;
  std::map<Gid, std::unique_ptr<Peer>> peers_;  // guarded by peers_mu_
  std::vector<std::unique_ptr<Peer>> retired_peers_;  // guarded by peers_mu_
  std::atomic<size_t> retired_count_{0};  // retired_peers_.size(), read without the lock
  // The peer a send to a GID of this slot found last: a sender that keeps talking to the same
  // peers finds it with one load and a GID compare.
  std::atomic<Peer*> tx_hints_[kTxHints] = {};
  TxStripe tx_stripes_[kTxStripes];
  mutable std::atomic<uint64_t> st_[14] = {};
};

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_SHM_FABRIC_H_
