// The emulator's steady clock: CLOCK_MONOTONIC nanoseconds, read from the TSC where that is safe.
//
// On this project's virtual machines a clock_gettime costs 30-80 ns and the engine reads the
// clock on every pass, so an idle poll loop spent a quarter of its time there. With an invariant
// TSC (cpuid 0x80000007 EDX bit 8) the clock is the TSC scaled by a factor measured against
// CLOCK_MONOTONIC, re-anchored every kAnchorNs so that it stays within kSlackNs of it; it never
// runs backwards (a lead found at a re-anchor is slewed out over the next interval, not stepped
// back). Without an invariant TSC, or off x86-64, it is CLOCK_MONOTONIC itself.
//
// Values from two processes on one host agree within 2 * kSlackNs: code that orders one
// process's time against another's (the shm fabric's "a pass began after this send") pads the
// comparison by that much in the direction that waits longer.
#ifndef XPUFAB_EMU_CLOCK_H_
#define XPUFAB_EMU_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace xpufab {
namespace emu {
namespace clock {

constexpr uint64_t kAnchorNs = 2000000;  // re-anchor at least this often (2 ms)
constexpr uint64_t kSlackNs = 1000;       // most a reading may differ from CLOCK_MONOTONIC

// CLOCK_MONOTONIC read through the kernel.
uint64_t monotonic_ns();

// Whether `then`, another thread's or process's reading, lies within `window_ns` before `now`.
// Readings disagree by up to 2 * kSlackNs, and a stamp loaded just before `now` was read may
// still be a little newer than it (the clock read does not wait for the load), so one that far
// after `now` counts as now. Load the stamp first: loaded after the clock read, the stamp of a
// thread that keeps stamping is usually newer, and that thread would never look recent.
inline bool within(uint64_t now, uint64_t then, uint64_t window_ns) {
  return then > now ? then - now <= 2 * kSlackNs : now - then < window_ns;
}

// True when mono_ns() reads the TSC.
bool uses_tsc();

namespace detail {

// One anchor: ns = base_ns + ((tsc - base_tsc) * mult) >> 32, valid until tsc passes end_tsc.
// Guarded by a sequence count (odd while a re-anchor writes it).
struct Anchor {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint64_t> base_tsc{0};
  std::atomic<uint64_t> base_ns{0};
  std::atomic<uint64_t> mult{0};
  std::atomic<uint64_t> end_tsc{0};  // 0: no TSC; read CLOCK_MONOTONIC
};

extern Anchor g_anchor;
uint64_t slow_now();  // re-anchors when due and reads the clock the slow way

inline uint64_t read_tsc() {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

}  // namespace detail

inline uint64_t mono_ns() {
  using detail::g_anchor;
  uint32_t s = g_anchor.seq.load(std::memory_order_acquire);
  uint64_t end = g_anchor.end_tsc.load(std::memory_order_acquire);
  uint64_t bt = g_anchor.base_tsc.load(std::memory_order_acquire);
  uint64_t bn = g_anchor.base_ns.load(std::memory_order_acquire);
  uint64_t m = g_anchor.mult.load(std::memory_order_acquire);
  if ((s & 1) != 0 || g_anchor.seq.load(std::memory_order_relaxed) != s) return detail::slow_now();
  uint64_t t = detail::read_tsc();
  if (t >= end || t < bt) return detail::slow_now();
  return bn + static_cast<uint64_t>((static_cast<unsigned __int128>(t - bt) * m) >> 32);
}

}  // namespace clock
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_CLOCK_H_
