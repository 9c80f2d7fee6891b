// The service thread: drives the emulated NIC while traffic flows and no verbs caller does
// (a program that polls raw CQ memory, or one blocked on a completion channel), fills the 16-byte
// CQE mirrors and turns the emulator's CQ event fds into completion-channel records. Callers of
// the wrapped verbs ops run the same pass themselves (caller_progress.cc).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "emu/uverbs/caller_progress.h"
#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {

int service_pass(State& s, bool wait_lock) {
  // libefa never calls into the NIC: it only writes doorbells. Driving the engine from here
  // keeps doorbells noticed at once instead of after the engine thread's idle sleep (the device
  // parks its own thread meanwhile).
  //
  // The service thread takes the server lock before it drives, so that its pass follows the
  // callers' latest locked calls. libefa's mmap of the doorbell page returns through
  // ThreadSanitizer's interceptor, which counts it as the caller writing the whole page; a pass
  // that peeked at the doorbells without being ordered after that caller's next locked call
  // would be reported as racing with it.
  std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
  if (wait_lock) lock.lock();
  int work = 0;
  if (backend::Device* d = s.driven.load(std::memory_order_acquire)) {
    int n = d->progress(256);
    if (n > 0) work += n;
  }
  (wait_lock ? s.counters.service_passes : s.counters.caller_passes)
      .fetch_add(1, std::memory_order_relaxed);
  if (!wait_lock && !lock.try_lock()) {
    s.counters.caller_lock_busy.fetch_add(1, std::memory_order_relaxed);
    return work;
  }
  for (CqObj* c : s.served) {
    // Events are taken before the CQEs are mirrored, so a waiter woken by one finds its CQE.
    uint64_t events = take_cq_events(c);
    if (c->ring16 != nullptr) {
      int n = mirror_cqes(c);
      if (n > 0) s.counters.mirrored.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      work += n;
    }
    if (events != 0 && c->channel >= 0) {
      forward_cq_events_locked(s, c, events);
      work += static_cast<int>(events);
    }
  }
  return work;
}

namespace {

// While verbs callers keep driving (their pass counter moved within kCallerWindow) they do this
// thread's work: it only looks every kParkSleep whether they stopped (a program that moves on to
// raw-memory polling or a blocking channel read waits at most about that long for service).
constexpr std::chrono::microseconds kCallerWindow(1000);
constexpr long kParkSleepNs = 250000;
// Otherwise it spins (yielding the core) for a while after the last work, then sleeps with a
// doubling period, so a busy device sees microsecond latency and an idle one costs a few
// wakeups per second.
constexpr std::chrono::microseconds kSpinAfterWork(500);
constexpr long kFirstSleepNs = 20000;
constexpr long kMaxSleepNs = 4000000;

void service_main() {
  State& s = st();
  using clock = std::chrono::steady_clock;
  auto last_work = clock::now();
  auto last_drive = clock::time_point{};
  uint64_t drives_seen = caller_drives();
  long sleep_ns = kFirstSleepNs;
  while (!s.stop.load(std::memory_order_acquire)) {
    auto now = clock::now();
    uint64_t drives = caller_drives();
    if (drives != drives_seen) {
      drives_seen = drives;
      last_drive = now;
    }
    if (now - last_drive < kCallerWindow) {
      s.counters.service_sleeps.fetch_add(1, std::memory_order_relaxed);
      struct timespec ts{0, kParkSleepNs};
      nanosleep(&ts, nullptr);
      // When the callers stop, service resumes at full attention.
      last_work = clock::now();
      sleep_ns = kFirstSleepNs;
      continue;
    }
    if (service_pass(s, true) > 0) {
      last_work = clock::now();
      sleep_ns = kFirstSleepNs;
      continue;
    }
    if (clock::now() - last_work < kSpinAfterWork) {
      std::this_thread::yield();
      continue;
    }
    s.counters.service_sleeps.fetch_add(1, std::memory_order_relaxed);
    struct timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, kMaxSleepNs);
  }
}

// FI_EFA_EMU_SERVICE_THREAD=0: no service thread; only the wrapped verbs calls move the NIC
// (with FI_EFA_EMU_ENGINE_THREAD=0, a program that polls raw memory then never progresses).
bool service_thread_wanted() {
  const char* v = std::getenv("FI_EFA_EMU_SERVICE_THREAD");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

void ensure_service_locked(State& s) {
  if (s.service.joinable() || !service_thread_wanted()) return;
  s.stop.store(false);
  SignalsBlocked blocked;
  s.service = std::thread(service_main);
}

void serve_locked(State& s, CqObj* c) {
  s.served.push_back(c);
  ensure_service_locked(s);
}

void unserve_locked(State& s, CqObj* c) {
  s.served.erase(std::remove(s.served.begin(), s.served.end(), c), s.served.end());
}

}  // namespace uverbs
}  // namespace xpufab
