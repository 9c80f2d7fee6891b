#include "emu/clock.h"

#include <time.h>

#include <algorithm>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace xpufab {
namespace emu {
namespace clock {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace detail {

Anchor g_anchor;

namespace {

constexpr uint64_t kCalibrateNs = 200000;  // the first factor's baseline

std::mutex g_mu;
bool g_tried = false;
bool g_tsc = false;
uint64_t g_first_tsc = 0;  // the first anchor: the factor is measured over the whole run since
uint64_t g_first_ns = 0;

bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

// A (tsc, CLOCK_MONOTONIC) pair taken close together: the TSC halfway across the tightest of a
// few brackets around the kernel's read.
void sample(uint64_t* tsc, uint64_t* ns) {
  uint64_t best = ~0ull;
  *tsc = read_tsc();
  *ns = monotonic_ns();
  for (int i = 0; i < 5; ++i) {
    uint64_t a = read_tsc();
    uint64_t n = monotonic_ns();
    uint64_t b = read_tsc();
    if (b >= a && b - a < best) {
      best = b - a;
      *tsc = a + (b - a) / 2;
      *ns = n;
    }
  }
}

uint64_t factor(uint64_t dtsc, uint64_t dns) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(dns) << 32) / dtsc);
}

void publish(uint64_t tsc, uint64_t ns, uint64_t mult, uint64_t ref_mult) {
  uint32_t s = g_anchor.seq.load(std::memory_order_relaxed);
  g_anchor.seq.store(s + 1, std::memory_order_relaxed);
  // Release stores: a reader that sees any of them sees the odd count before them too.
  g_anchor.base_tsc.store(tsc, std::memory_order_release);
  g_anchor.base_ns.store(ns, std::memory_order_release);
  g_anchor.mult.store(mult, std::memory_order_release);
  uint64_t span = static_cast<uint64_t>((static_cast<unsigned __int128>(kAnchorNs) << 32) / ref_mult);
  g_anchor.end_tsc.store(tsc + span, std::memory_order_release);
  g_anchor.seq.store(s + 2, std::memory_order_release);
}

// Under g_mu: the first anchor, or the next one once the current one ran out.
void anchor_locked() {
  if (!g_tried) {
    g_tried = true;
    g_tsc = invariant_tsc();
    if (!g_tsc) return;
    sample(&g_first_tsc, &g_first_ns);
    uint64_t t = g_first_tsc, n = g_first_ns;
    while (n - g_first_ns < kCalibrateNs) sample(&t, &n);
    if (t <= g_first_tsc) {
      g_tsc = false;
      return;
    }
    uint64_t m = factor(t - g_first_tsc, n - g_first_ns);
    publish(t, n, m, m);
    return;
  }
  if (!g_tsc) return;
  uint64_t t = 0, n = 0;
  sample(&t, &n);
  uint64_t bt = g_anchor.base_tsc.load(std::memory_order_acquire);
  if (t < g_anchor.end_tsc.load(std::memory_order_relaxed) && t >= bt) return;  // done meanwhile
  if (t <= g_first_tsc || t < bt) {
    g_tsc = false;  // the TSC went backwards: it is not one clock here
    g_anchor.end_tsc.store(0, std::memory_order_release);
    return;
  }
  uint64_t ref = factor(t - g_first_tsc, n - g_first_ns);
  uint64_t old = g_anchor.base_ns.load(std::memory_order_relaxed) +
                 static_cast<uint64_t>((static_cast<unsigned __int128>(t - bt) *
                                        g_anchor.mult.load(std::memory_order_relaxed)) >> 32);
  if (old <= n) {
    publish(t, n, ref, ref);  // behind or exact: step forward
    return;
  }
  // Ahead: keep counting from where readers are, slower, so the lead is gone by the next anchor.
  uint64_t lead = std::min(old - n, kAnchorNs / 2);
  uint64_t slowed = static_cast<uint64_t>(static_cast<unsigned __int128>(ref) * (kAnchorNs - lead) / kAnchorNs);
  publish(t, old, slowed, ref);
}

}  // namespace

uint64_t slow_now() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      anchor_locked();
      if (!g_tsc) return monotonic_ns();
    }
    uint32_t s = g_anchor.seq.load(std::memory_order_acquire);
    uint64_t end = g_anchor.end_tsc.load(std::memory_order_acquire);
    uint64_t bt = g_anchor.base_tsc.load(std::memory_order_acquire);
    uint64_t bn = g_anchor.base_ns.load(std::memory_order_acquire);
    uint64_t m = g_anchor.mult.load(std::memory_order_acquire);
      if ((s & 1) != 0 || g_anchor.seq.load(std::memory_order_relaxed) != s) continue;
    uint64_t t = read_tsc();
    if (t >= end || t < bt) continue;
    return bn + static_cast<uint64_t>((static_cast<unsigned __int128>(t - bt) * m) >> 32);
  }
}

}  // namespace detail

bool uses_tsc() {
  detail::slow_now();
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_tsc;
}

}  // namespace clock
}  // namespace emu
}  // namespace xpufab
