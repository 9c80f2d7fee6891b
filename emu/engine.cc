// The engine: one bounded pass (step_locked) over arrived packets, delayed CQEs, doorbells, SQs
// and timers; the callers that drive it (step, progress) and the optional engine thread. Also the
// arrival side of the fault hooks (drop, duplicate, corrupt, hold, delay) and fault decisions.
#include <pthread.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "emu/device_impl.h"
#include "base/spin.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;
using ::xpufab::base::cpu_relax;

namespace {

uint64_t next_rand(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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

constexpr uint64_t kDeepIdleNs = 1000000000;  // idle this long: sleeps may grow 4x longer
constexpr uint64_t kQuietMaxNs = 50000;        // the longest a pass vouches for an idle device

}  // namespace

FaultDecision DeviceImpl::ask(FaultContext ctx, uint64_t arg) {
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

int DeviceImpl::step(int budget) {
  int n;
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    n = step_locked(budget);
  }
  notify_pending();
  return n;
}

void DeviceImpl::notify_pending() {
  std::vector<EmuCq*> cqs;
  EventHandler* h;
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    if (overrun_notify_.empty()) return;
    cqs.swap(overrun_notify_);
    h = handler_;
  }
  if (h == nullptr) return;
  for (EmuCq* cq : cqs) h->cq_overrun(cq);
}

void DeviceImpl::note_caller(uint64_t now) {
  // Released, and acquired by every pass: what the caller wrote before this call happens before
  // whatever a later pass does, on any thread, as when every call took the lock. An application
  // fills a buffer, then lets a peer read it through a channel of its own; the engine thread may
  // serve that read, and ThreadSanitizer cannot follow the channel into the other process.
  last_caller_ns_.store(now, std::memory_order_release);
  // Not a locked add: concurrent callers may lose a count, which only undercounts a rate that
  // a driving caller exceeds many times over (engine_loop).
  caller_calls_.store(caller_calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

int DeviceImpl::progress(int budget) {
  const uint64_t now = now_ns();
  note_caller(now);
  if (idle_at(now)) {
    // As caller_calls_: a lost count only undercounts.
    stats_.v[kIdlePolls].store(stats_.v[kIdlePolls].load(std::memory_order_relaxed) + 1,
                               std::memory_order_relaxed);
    return 0;
  }
  if (!mu_.try_lock()) return 0;  // someone else is driving right now
  int n = step_locked(budget, now);
  bool notify = !overrun_notify_.empty();
  mu_.unlock();
  if (notify) notify_pending();
  return n;
}

// A post's own work goes out at once: the packets that wait in the mailbox, the other queues'
// doorbells and the timers are left to the next progress call, which the poster makes anyway to
// learn of the completion. Fault plans, traces and a stepped clock see whole passes only.
int DeviceImpl::ring_sq(backend::Qp* q, int budget) {
  if (opt_.faults != nullptr || trace_ || opt_.step_clock_ns != 0 || q == nullptr) return progress(budget);
  const uint64_t now = now_ns();
  note_caller(now);
  if (!mu_.try_lock()) return 0;  // whoever drives right now takes the doorbell in
  int n = ring_sq_locked(static_cast<EmuQp*>(q), budget, now);
  bool notify = !overrun_notify_.empty();
  mu_.unlock();
  if (notify) notify_pending();
  return n;
}

int DeviceImpl::ring_sq_locked(EmuQp* qp, int budget, uint64_t now) {
  if (budget <= 0) budget = 64;
  begin_pass(now);
  int work = 0;
  if (qp->sq_db != nullptr) {
    const uint32_t v = load_db(qp->sq_db);
    if (v != db_.shadow(qp->sq_db_index)) on_doorbell(qp->sq_db_index, v, &work);
  }
  if (qp->sq_pending) {
    work += process_sq(qp, budget);
    if (qp->sq_fetch == qp->sq_db_seen) {
      qp->sq_pending = false;
      sq_pending_.erase(std::find(sq_pending_.begin(), sq_pending_.end(), qp));
    }
  }
  end_pass();
  return work;
}

void DeviceImpl::begin_pass(uint64_t now) {
  (void)last_caller_ns_.load(std::memory_order_acquire);  // see note_caller()
  ++pass_;
  answers_in_pass_ = 0;
  step_now_ = now;
  bump(kSteps);
  in_pass_ = true;
}

// What a pass sent leaves together: its coalesced answers, then its batch of sends.
void DeviceImpl::end_pass() {
  if (answers_pending_) flush_answers();
  in_pass_ = false;
  if (tx_batch_open_) {
    tx_batch_open_ = false;
    fabric_->batch_end();
  }
  mark_quiet();
}

bool DeviceImpl::idle_at(uint64_t now) {
  // What a waiting poller most often finds first: a packet (delivered, or on the wire).
  return now < mu_.quiet_until_ns.load(std::memory_order_acquire) &&
         inbox_size_.load(std::memory_order_acquire) == 0 && fabric_->rx_quiet(gid_, now) &&
         db_.unchanged();
}

void DeviceImpl::mark_quiet() {
  // Faults and a stepped clock make each pass count.
  if (opt_.faults != nullptr || opt_.step_clock_ns != 0 || !attached_) return;
  // What a pass leaves for the next one, whether or not it did work: packets and WQEs beyond its
  // budget, packets and CQEs held back. Everything else arrives where idle_at() looks.
  // Transmissions that may be answered by position: the mark that answers them moves where
  // idle_at() does not look.
  if (!work_pkts_.empty() || !held_.empty() || !delayed_pkts_.empty() || !cq_delayed_.empty() ||
      !sq_pending_.empty() || !position_paths_.empty()) {
    return;
  }
  // Bounded, so that an idle device still runs a pass now and then.
  const uint64_t until = std::min(timers_.earliest(), step_now_ + kQuietMaxNs);
  mu_.quiet_until_ns.store(until, std::memory_order_relaxed);
}

int DeviceImpl::step_locked(int budget, uint64_t now) {
  if (budget <= 0) budget = 64;
  begin_pass(opt_.step_clock_ns != 0 ? step_now_ + opt_.step_clock_ns : now != 0 ? now : now_ns());
  int work = 0;
  if (positions_ && attached_) {
    if (!position_wish_) {
      // Someone drives this device again: its passes see a moved mark at once.
      position_wish_ = true;
      fabric_->set_position_answers(gid_, true);
    }
    if (!position_paths_.empty()) read_executed_marks();
  }
  // Drain the wire on this thread: a fabric with a mailbox then needs no receive-thread hand-off
  // while the engine is driven, and what it reads comes here in one batch, not through the inbox.
  if (attached_) {
    fabric_->poll_rx_batch(gid_, budget, opt_.step_clock_ns != 0 ? 0 : step_now_, &work_pkts_);
  }
  if (!work_pkts_.empty() || inbox_size_.load(std::memory_order_acquire) != 0 || !held_.empty() ||
      !delayed_pkts_.empty()) {
    receive_packets(&work);
  }
  if (!position_paths_.empty()) take_position_answers(&work);
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
  end_pass();
  // After the answer packets the pass sent: the executed mark that vouches for the requests it
  // ran moves past them (answers by position). Only a pass that polls moves it.
  if (positions_ && attached_) fabric_->executed_polled(gid_);
  return work;
}

void DeviceImpl::process_packet(Packet& p, int* work) {
  if (p.type == PacketType::kAnswers) return handle_answers(p, work);
  bump(kPacketsRx);
  bump(kBytesRx, p.payload.size());
  bool resp = p.type == PacketType::kResponse;
  EmuQp* qp = qp_by_num(p.dst_qpn);
  if (qp != nullptr) {
    qp->qs.packets_rx++;
    qp->qs.bytes_rx += p.payload.size();
  }
  if (trace_) {
    tr(TraceKind::kPacketRx, p.dst_qpn, 0, p.op, resp ? 1 : 0, p.status,
       static_cast<uint32_t>(p.payload.size()), p.token);
  }
  ++*work;
  if (p.type == PacketType::kDatagram) {
    receive_datagram(p);
  } else if (resp) {
    handle_response(p);
  } else {
    handle_request(p, qp);
  }
}

void DeviceImpl::receive_packets(int* work) {
  // work_pkts_ holds what this pass polled off the wire; the inbox what was delivered meanwhile.
  if (inbox_size_.load(std::memory_order_acquire) != 0) {
    std::lock_guard<InboxLock> lock(inbox_mu_);
    if (work_pkts_.empty()) {
      work_pkts_.swap(inbox_);
    } else {
      for (Packet& p : inbox_) work_pkts_.push_back(std::move(p));
      inbox_.clear();
    }
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
      bool resp = p.type == PacketType::kResponse || p.type == PacketType::kAnswers;
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

void DeviceImpl::kick() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
    // The engine thread takes over now, whoever drove last: a kick comes from a thread that
    // stops driving (it arms a CQ to block) or from something nobody else will drive.
    kicked_ns_ = now_ns();
  }
  wake_cv_.notify_one();
}

// The first idle sleep after work. Host callers drive the device, and deliveries, kicks and
// armed CQs wake a sleeping engine, so only timers wait for a timed wakeup: the sleeps start at
// their cap. Device code that polls an external-memory CQ rings doorbells without a word: there
// sleeps start at 1 us (and the thread spins after work first, engine_loop).
uint32_t DeviceImpl::first_sleep_us() const {
  return ext_cqs_.load(std::memory_order_relaxed) != 0 ? 1u : std::max(opt_.idle_sleep_max_us, 1u);
}

void DeviceImpl::engine_loop() {
  // Named for top(1), perf and the benches that account its CPU apart from the caller's.
  pthread_setname_np(pthread_self(), "efa-engine");
  uint64_t idle_since = now_ns();
  uint32_t sleep_us = first_sleep_us();
  uint32_t spins = 0;
  // How long the next park lasts: park_us after the engine thread ran, doubling up to
  // park_max_us while the callers keep driving. A park that times out is renewed (and doubled)
  // while callers called at least once per park_us on average during it, however long ago the
  // latest call was: on a loaded machine a caller is often preempted for longer than park_us,
  // and taking over then only adds a third busy thread. A caller that calls rarely does not
  // drive (the engine thread serves the wire meanwhile), nor does one that is not calling when
  // a park ends while packets wait for it. So a long caller-driven run wakes this thread once
  // per park_max_us; a caller that stops without a word is taken over from within two parks,
  // one that blocks (arms a CQ) or hands over (kick) at once.
  const uint32_t park_max_us = std::max(opt_.park_max_us, opt_.park_us);
  uint32_t park_us = opt_.park_us;
  bool timed_out = false;   // the last park ended by its timeout
  uint64_t calls_needed = 0, calls_at_park = 0;
  bool active = true;  // worked since the last idle sleep
  while (!stop_.load(std::memory_order_relaxed)) {
    // The caller's stamp before the clock: read after it, a stamp of a caller that keeps
    // calling is often newer than the clock reading.
    uint64_t last = last_caller_ns_.load(std::memory_order_acquire);
    const uint64_t calls = caller_calls_.load(std::memory_order_relaxed);
    uint64_t t = now_ns();
    const bool recent = clock::within(t, last, uint64_t{opt_.park_us} * 1000);
    // Packets wait for a caller that is not calling now (preempted, on a loaded machine): this
    // thread serves them rather than leave the peer waiting for the caller's next time slice.
    const bool gap_with_work = timed_out && !recent &&
                               (inbox_size_.load(std::memory_order_acquire) != 0 || (attached_ && fabric_->rx_pending(gid_)));
    const bool renew = timed_out && calls - calls_at_park >= calls_needed && !gap_with_work;
    if (timed_out && !renew) park_us = opt_.park_us;  // the callers fell behind: start short
    bool parked = false;
    if (renew || recent) {
      // A caller is driving: stay off the CPU, unless a kick since that call handed over.
      std::unique_lock<std::mutex> lock(wake_mu_);
      if (!wake_ && last > kicked_ns_) {
        parked = true;
        note_longest(kLongestParkUs, park_us);
        count_engine(kParks);
        calls_at_park = calls;
        calls_needed = std::max<uint64_t>(1, park_us / std::max(opt_.park_us, 1u));
        const bool kicked = wake_cv_.wait_for(lock, std::chrono::microseconds(park_us),
                                              [this] { return wake_ || stop_; });
        if (kicked) count_engine(kParkKicks);
        timed_out = !kicked;
        // Device code polling an external-memory CQ does not call in: its next doorbell is
        // noticed only once this park ends, so the park does not grow while such a CQ lives.
        const bool device_polled = ext_cqs_.load(std::memory_order_relaxed) != 0;
        park_us = kicked || device_polled ? opt_.park_us : std::min(park_us * 2, park_max_us);
      }
      wake_ = false;
    }
    if (parked) {
      idle_since = now_ns();
      active = true;  // the caller polled the wire meanwhile
      continue;
    }
    // The callers stopped (or fell behind) during the last park: this thread drives now.
    if (timed_out) count_engine(kTakeovers);
    timed_out = false;
    park_us = opt_.park_us;
    int n = 0;
    bool expecting = true;  // requests of this device await answers (unknown: as if they did)
    if (mu_.try_lock()) {
      n = step_locked(256);
      expecting = op_slots_.size() != op_free_.size();
      bool notify = !overrun_notify_.empty();
      mu_.unlock();
      if (notify) notify_pending();
    }
    if (n > 0) {
      idle_since = t;
      sleep_us = first_sleep_us();
      active = true;
      continue;
    }
    // While requests of this device await answers (traffic flows), or where device code polls
    // an external-memory CQ, spin for a while after the last work, offering the CPU to other
    // runnable threads (the peer device, the application) every few passes, then sleep: the
    // spin keeps serving the wire, and keeps peers answering by position, through the gaps of
    // a burst. A device with nothing in flight sleeps at once. On a machine with fewer cores
    // than busy threads, a helper that runs (or wakes every few hundred microseconds) on the
    // core an application thread left costs that thread far more than the helper's own time:
    // the kernel places a woken application thread behind a busy one when the other core is
    // taken at that moment, and pulls it over to a core that went idle only when that core's
    // recent idle stretches were longer than the migration cost (0.5 ms). Debian's fi_pingpong,
    // whose thread its TCP sync wakes between sizes, waited a whole tick (4 ms at HZ=250)
    // behind its peer's poller in about one size of six while a spin after every takeover and
    // short first sleeps kept that core busy.
    const bool may_spin = expecting || ext_cqs_.load(std::memory_order_relaxed) != 0;
    if (may_spin && t - idle_since < uint64_t{opt_.idle_spin_us} * 1000) {
      if ((++spins & 15) == 0) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      continue;
    }
    if (active) {
      // Nobody polls this device's wire while it sleeps: the fabric's receive thread takes
      // over now rather than when its own park ends, and answers come as packets, which wake
      // it, rather than by position.
      active = false;
      if (attached_) {
        fabric_->poll_rx_stop(gid_);  // which withdraws the wish for answers by position too
        bool moved = false;
        if (positions_) {
          std::lock_guard<DeviceMutex> lock(mu_);
          position_wish_ = false;  // the next pass asks again
          // A responder that read the wish before it went answers by position still: a mark
          // that moved by now is taken by driving on (the wish is withdrawn with a seq_cst
          // store, and each mark is read after a seq_cst step of the peer look-up). One that
          // moves later, from a pass that read the wish in between, waits for this thread's
          // next wakeup.
          moved = executed_marks_moved();
        }
        if (moved) {
          active = true;
          idle_since = now_ns();
          continue;
        }
      }
    }
    bool woken;
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      note_longest(kLongestSleepUs, sleep_us);
      woken = wake_cv_.wait_for(lock, std::chrono::microseconds(sleep_us), [this] {
        return wake_ || stop_ || inbox_size_.load(std::memory_order_seq_cst) != 0;
      });
      sleeping_.store(false, std::memory_order_relaxed);
      wake_ = false;
    }
    // The next pass, whoever runs it, compares every doorbell (scan_doorbells). Not under the
    // device's lock: a caller that drives meanwhile holds it through most of its time, and one
    // that had to wake this thread at its unlock would pay a futex call on its message's path.
    count_engine(kIdleSleeps);
    full_scan_due_.store(true, std::memory_order_relaxed);
    if (woken) {
      idle_since = now_ns();
      sleep_us = first_sleep_us();
    } else {
      // A device idle for a second sleeps up to four times longer: it costs a wakeup (a few
      // tens of microseconds of a virtual machine's core) per sleep, and what is driven from
      // the host wakes it anyway (callers, arming, deliveries); only a device kernel's first
      // doorbell after the lull waits for the longer sleep, so a device with a live
      // external-memory CQ (one that device code polls) keeps the shorter bound.
      uint32_t cap = std::max(opt_.idle_sleep_max_us, 1u);
      if (ext_cqs_.load(std::memory_order_relaxed) == 0 && now_ns() - idle_since >= kDeepIdleNs) cap = cap > UINT32_MAX / 4 ? UINT32_MAX : cap * 4;
      sleep_us = std::min(sleep_us * 2, cap);
    }
  }
}

}  // namespace emu
}  // namespace xpufab
