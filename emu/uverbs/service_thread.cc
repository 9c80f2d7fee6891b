// The service thread: drives the emulated NIC while traffic flows, fills the 16-byte CQE mirrors
// and turns the emulator's CQ event fds into completion-channel records.
#include <time.h>

#include <algorithm>
#include <chrono>

#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {
namespace {

int service_pass(State& s) {
  // libefa never calls into the NIC: it only writes doorbells. Driving the engine from here
  // while traffic flows keeps doorbells noticed at once instead of after the engine thread's
  // idle sleep (the device parks its own thread meanwhile).
  int work = 0;
  if (backend::Device* d = s.driven.load(std::memory_order_acquire)) {
    int n = d->progress(256);
    if (n > 0) work += n;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  for (CqObj* c : s.served) {
    // Events are taken before the CQEs are mirrored, so a waiter woken by one finds its CQE.
    uint64_t events = take_cq_events(c);
    if (c->ring16 != nullptr) work += mirror_cqes(c);
    if (events != 0 && c->channel >= 0) {
      forward_cq_events_locked(s, c, events);
      work += static_cast<int>(events);
    }
  }
  return work;
}

// Spins (yielding the core) for a while after the last work, then sleeps with a doubling period,
// so a busy device sees microsecond latency and an idle one costs a few wakeups per second.
void service_main() {
  State& s = st();
  using clock = std::chrono::steady_clock;
  auto last_work = clock::now();
  long sleep_ns = 20000;
  while (!s.stop.load(std::memory_order_acquire)) {
    if (service_pass(s) > 0) {
      last_work = clock::now();
      sleep_ns = 20000;
      continue;
    }
    if (clock::now() - last_work < std::chrono::microseconds(500)) {
      std::this_thread::yield();
      continue;
    }
    struct timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, 4000000L);
  }
}

}  // namespace

void ensure_service_locked(State& s) {
  if (s.service.joinable()) return;
  s.stop.store(false);
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
