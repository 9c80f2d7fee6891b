#include "emu/fabric.h"

#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <random>
#include <thread>

namespace xpufab {
namespace emu {
namespace {

// Threads spread over the stripes so that two engine threads rarely share a counter's line.
int my_stripe(int stripes) {
  static std::atomic<uint32_t> next{0};
  thread_local int stripe = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % stripes);
  return stripe;
}

}  // namespace

InProcFabric::InProcFabric() : table_(new Table()) {}

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
  if (cur->count(gid)) return -EEXIST;
  Table* next = new Table(*cur);
  next->emplace(gid, sink);
  publish(next);
  return 0;
}

void InProcFabric::detach(const Gid& gid) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const Table* cur = table_.load(std::memory_order_relaxed);
  if (!cur->count(gid)) return;
  Table* next = new Table(*cur);
  next->erase(gid);
  publish(next);
}

int InProcFabric::send(const Gid& dst, Packet&& pkt) {
  Stripe& s = stripes_[my_stripe(kStripes)];
  s.in_flight.fetch_add(1, std::memory_order_seq_cst);
  const Table* t = table_.load(std::memory_order_seq_cst);
  auto it = t->find(dst);
  int rc = -EHOSTUNREACH;
  if (it != t->end()) {
    it->second->deliver(std::move(pkt));
    rc = 0;
  }
  s.in_flight.fetch_sub(1, std::memory_order_release);
  return rc;
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
