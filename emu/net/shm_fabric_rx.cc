// The shared-memory fabric's receive side: draining a device's mailbox, the receive thread that
// serves it while nobody polls, and the poll entry points the engine drives.
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "emu/net/rx_park.h"
#include "emu/net/shm_layout.h"

namespace xpufab {
namespace emu {
namespace net {

using namespace shm_internal;

int ShmFabric::take_fragment(Local* lp, const RecordHeader& r, const uint8_t* data, Packet* pkt) {
  int rc;
  if (r.off == 0 && r.len == r.total) {
    // The whole message in one fragment (every small packet): nothing to reassemble.
    rc = decode_message(data, r.len, pkt) == 0 ? 1 : -EBADMSG;
  } else {
    rc = lp->reasm.add(r.sender, r.msg_id, r.total, r.off, data, r.len, pkt);
  }
  if (rc < 0) {
    st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
    lp->no_position.store(true, std::memory_order_relaxed);
  }
  if (rc == 1) {
    pkt->position_seen = true;
    bump(lp->pkt_rx, 1);
    bump(lp->bytes_rx, pkt->payload.size());
  }
  return rc;
}

int ShmFabric::drain(Local* lp, int budget, std::vector<Packet>* out) {
  Mailbox* box = lp->mb;
  uint8_t* ring = reinterpret_cast<uint8_t*>(box) + kRingOffset;
  const uint64_t cap = lp->capacity;
  uint64_t h = box->head.load(std::memory_order_relaxed);
  uint64_t t = box->tail.load(std::memory_order_acquire);
  int delivered = 0;
  while (h != t && delivered < budget) {
    uint64_t pos = h & (cap - 1);
    RecordHeader r;
    std::memcpy(&r, ring + pos, 8);  // len and kind; a skip may sit in the last 8 bytes
    if (r.kind == kSkip) {
      h += cap - pos;
      continue;
    }
    if (pos + sizeof(r) > cap) {
      st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
      lp->no_position.store(true, std::memory_order_relaxed);
      h = t;
      break;
    }
    std::memcpy(&r, ring + pos, sizeof(r));
    size_t rs = record_size(r.len);
    if (r.kind != kFragment || pos + rs > cap || rs > t - h) {
      // A producer wrote garbage; nothing after it can be trusted.
      st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
      lp->no_position.store(true, std::memory_order_relaxed);
      h = t;
      break;
    }
    bump(lp->frag_rx, 1);
    const uint8_t* data = ring + pos + sizeof(r);
    h += rs;
    if (out != nullptr) {
      // Decoded in its place in the batch: no packet built elsewhere and moved in.
      out->emplace_back();
      if (take_fragment(lp, r, data, &out->back()) == 1) {
        ++delivered;
      } else {
        out->pop_back();
      }
      box->head.store(h, std::memory_order_release);
    } else {
      Packet pkt;
      int rc = take_fragment(lp, r, data, &pkt);
      // Release the space before delivering, so that a producer waiting on a full ring goes on.
      box->head.store(h, std::memory_order_release);
      if (rc == 1) {
        lp->sink->deliver(std::move(pkt));
        ++delivered;
      }
    }
    if (h == t) t = box->tail.load(std::memory_order_acquire);
  }
  box->head.store(h, std::memory_order_release);
  return delivered;
}

void ShmFabric::receive_loop(Local* lp) {
  pthread_setname_np(pthread_self(), "shm-rx");  // as the engine thread's name: for accounting
  Mailbox* box = lp->mb;
  uint64_t last_work = now_ns();
  // Parks while the device polls the mailbox itself (rx_park.h). A poller that stops for a
  // while says so (poll_rx_stop), which ends the park; where the device's engine thread always
  // does (poll_rx_handed_over), parks grow to kHandedOverParkMaxNs, a safety net rather than a
  // poll.
  constexpr uint64_t kHandedOverParkMaxNs = 256 * 1000 * 1000;
  const uint64_t own_max_ns = uint64_t{opt_.park_max_us} * 1000;
  RxPark park(uint64_t{opt_.park_us} * 1000, own_max_ns);
  while (!lp->stop.load(std::memory_order_relaxed)) {
    // The poll stamp before the clock (clock::within).
    const uint64_t polled = lp->last_poll_ns.load(std::memory_order_acquire);
    const bool waiting = box->head.load(std::memory_order_relaxed) != box->tail.load(std::memory_order_acquire);
    // Set once, soon after the thread starts (poll_rx_handed_over), never cleared.
    const bool handed_over = lp->handed_over.load(std::memory_order_relaxed);
    park.set_first(handed_over ? own_max_ns : 0);
    const uint64_t wait = park.next(now_ns(), polled, waiting);
    if (wait != 0) {
      // Someone drives the device and drains the ring itself: stay off the CPU until it stops.
      // Senders do not wake a parked thread (it is not `sleeping`); detach and poll_rx_stop do.
      uint32_t seq = box->wake_seq.load(std::memory_order_relaxed);
      bump(lp->rx_parks, 1);
      timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
      const bool woken = futex(&box->wake_seq, FUTEX_WAIT, seq, &ts) == 0 ||
                         box->wake_seq.load(std::memory_order_relaxed) != seq;
      if (woken) bump(lp->rx_park_stops, 1);
      park.ended(woken, lp->handed_over.load(std::memory_order_relaxed) ? kHandedOverParkMaxNs : own_max_ns);
      // A caller that stops polling hands over to a spinning thread (below: where no engine
      // thread takes over).
      last_work = now_ns();
      continue;
    }
    int n = 0;
    bool empty = box->head.load(std::memory_order_relaxed) == box->tail.load(std::memory_order_acquire);
    if (!empty && !lp->consuming.exchange(true, std::memory_order_acquire)) {
      n = drain(lp, 1 << 30, nullptr);
      lp->consuming.store(false, std::memory_order_release);
      bump(lp->rx_thread_packets, static_cast<uint64_t>(n));
    }
    if (n > 0 || !empty) {
      last_work = now_ns();
      if (n == 0) sched_yield();  // a poller holds the ring
      continue;
    }
    // Spin a while after traffic before sleeping, unless the device's engine thread takes the
    // wire over from callers that stop: it polls the wire then, and this thread, which senders
    // wake from its sleep, would only keep a core busy that the application's threads need
    // (DeviceImpl::engine_loop says why that costs milliseconds).
    if (!handed_over && now_ns() - last_work < uint64_t{opt_.spin_us} * 1000) {
      sched_yield();
      continue;
    }
    uint32_t seq = box->wake_seq.load(std::memory_order_seq_cst);
    box->sleeping.store(1, std::memory_order_seq_cst);
    bump(lp->rx_sleep_tries, 1);
    // Producers that publish with release stores see `sleeping` or have their tail seen here
    // once their threads are fenced (ShmFences). Should that fail, a short sleep bounds the
    // wait for a record this load missed.
    const bool fenced = !lp->fences || fence_registered_processes() == 0;
    if (lp->fences && fenced) bump(lp->rx_fences, 1);
    uint64_t h = box->head.load(std::memory_order_relaxed);
    if (box->tail.load(std::memory_order_seq_cst) == h && !lp->stop.load()) {
      bump(lp->rx_sleeps, 1);
      timespec ts{0, (fenced ? 100 : 1) * 1000 * 1000};
      futex(&box->wake_seq, FUTEX_WAIT, seq, &ts);
    }
    box->sleeping.store(0, std::memory_order_relaxed);
  }
}

int ShmFabric::poll_rx(const Gid& gid, int budget) { return poll_rx_batch(gid, budget, 0, nullptr); }

void ShmFabric::poll_rx_stop(const Gid& gid) {
  std::lock_guard<std::mutex> lock(locals_mu_);
  auto it = locals_.find(gid);
  if (it == locals_.end()) return;
  Local* lp = it->second.get();
  lp->last_poll_ns.store(0, std::memory_order_relaxed);
  // Nobody will see a moved executed mark soon: answers come as packets, which wake this end.
  // seq_cst: the withdrawal comes before whatever marks the caller reads next.
  lp->mb->position_answers.store(0, std::memory_order_seq_cst);
  lp->mb->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&lp->mb->wake_seq, FUTEX_WAKE, 1, nullptr);
}

void ShmFabric::poll_rx_handed_over(const Gid& gid) {
  std::lock_guard<std::mutex> lock(locals_mu_);
  auto it = locals_.find(gid);
  if (it != locals_.end()) it->second->handed_over.store(true, std::memory_order_relaxed);
}

int ShmFabric::poll_rx_batch(const Gid& gid, int budget, uint64_t now, std::vector<Packet>* out) {
  Local* lp = local_of(gid);
  if (lp == nullptr) return 0;
  if (now == 0) now = now_ns();
  lp->last_poll_ns.store(now, std::memory_order_relaxed);
  // The receive thread is draining, or the local was detached (detach keeps `consuming`, and the
  // object stays in retired_): nothing to do here.
  if (lp->consuming.exchange(true, std::memory_order_acquire)) return 0;
  Mailbox* box = lp->mb;
  // A pass starts: the previous one, and everything it read, is done. Publishing this pass's
  // own start would vouch for packets it drains and then, preempted, sits on unanswered.
  if (lp->pass_ns != 0) box->polled_ns.store(lp->pass_ns, std::memory_order_relaxed);
  lp->pass_ns = now;
  int n = 0;
  if (box->head.load(std::memory_order_relaxed) != box->tail.load(std::memory_order_acquire)) {
    n = drain(lp, budget > 0 ? budget : 64, out);
  }
  // Whatever the receive thread drained before this poll went to the sink under `consuming`,
  // so it waits in the device's inbox for this very pass.
  lp->handed.store(box->head.load(std::memory_order_relaxed), std::memory_order_relaxed);
  lp->consuming.store(false, std::memory_order_release);
  return n;
}

// The mailbox of the last device that polled (rx_hint_): a look at its head and tail. Another
// device's, or a pass's liveness mark (polled_ns, which only a draining poll moves), is left to
// poll_rx_batch.
bool ShmFabric::rx_quiet(const Gid& gid, uint64_t now) {
  Local* lp = rx_hint_.load(std::memory_order_acquire);
  if (lp == nullptr || !same_gid(lp->gid, gid)) return false;
  lp->last_poll_ns.store(now, std::memory_order_relaxed);
  const Mailbox* box = lp->mb;
  return box->head.load(std::memory_order_relaxed) == box->tail.load(std::memory_order_acquire);
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab
