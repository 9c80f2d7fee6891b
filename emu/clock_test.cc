#include "emu/clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace xpufab {
namespace emu {
namespace clock {
namespace {

// Several anchors' worth of readings, each bracketed by the kernel's clock.
TEST(Clock, StaysWithinSlackOfMonotonicAcrossAnchors) {
  uint64_t start = monotonic_ns();
  uint64_t prev = 0;
  uint64_t reads = 0;
  while (monotonic_ns() - start < 5 * kAnchorNs) {
    uint64_t a = monotonic_ns();
    uint64_t c = mono_ns();
    uint64_t b = monotonic_ns();
    ASSERT_GE(c + kSlackNs, a);
    ASSERT_LE(c, b + kSlackNs);
    ASSERT_GE(c, prev);
    prev = c;
    ++reads;
  }
  EXPECT_GT(reads, 100u);
}

// Threads that read it while re-anchors happen each see it never run backwards.
TEST(Clock, NeverRunsBackwardsOnAnyThread) {
  std::vector<std::thread> threads;
  std::vector<int> backwards(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([i, &backwards] {
      uint64_t start = monotonic_ns();
      uint64_t prev = mono_ns();
      while (monotonic_ns() - start < 3 * kAnchorNs) {
        uint64_t c = mono_ns();
        if (c < prev) ++backwards[i];
        prev = c;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int b : backwards) EXPECT_EQ(b, 0);
}

// Another thread's stamp counts as recent within the window, and also when it reads up to the
// readings' disagreement ahead of now (a thread stamping continuously is often ahead).
TEST(Clock, WithinToleratesAStampAheadByTheSlack) {
  const uint64_t now = 1000000000;
  EXPECT_TRUE(within(now, now, 200000));
  EXPECT_TRUE(within(now, now - 199999, 200000));
  EXPECT_FALSE(within(now, now - 200000, 200000));
  EXPECT_TRUE(within(now, now + 1, 200000));
  EXPECT_TRUE(within(now, now + 2 * kSlackNs, 200000));
  EXPECT_FALSE(within(now, now + 2 * kSlackNs + 1, 200000));
  // Stamps from another thread that keeps stamping: each is recent to a reader here.
  std::atomic<uint64_t> stamp{mono_ns()};
  std::atomic<bool> stop{false};
  std::thread stamper([&] {
    while (!stop.load(std::memory_order_relaxed)) stamp.store(mono_ns(), std::memory_order_release);
  });
  uint64_t lead = 0;
  for (int i = 0; i < 100000; ++i) {
    // The stamp first: it was taken before this reading, so only the clocks' disagreement can
    // put it ahead.
    const uint64_t then = stamp.load(std::memory_order_acquire);
    const uint64_t t = mono_ns();
    if (then > t) lead = std::max(lead, then - t);
    ASSERT_TRUE(within(t, then, 1000000000)) << i << ": ahead by " << then - t;
  }
  RecordProperty("largest_lead_ns", std::to_string(lead));
  stop.store(true);
  stamper.join();
}

// The kernel's view of the TSC (its cpuinfo flags for an invariant one) decides which clock this is:
// a regression to the kernel's clock would pass the tests above and lose what the TSC saves.
TEST(Clock, ReadsTheTscExactlyWhereItIsInvariant) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool invariant = false;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      invariant = line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
      break;
    }
  }
#if defined(__x86_64__)
  EXPECT_EQ(uses_tsc(), invariant);
#else
  (void)invariant;
  EXPECT_FALSE(uses_tsc());
#endif
}

}  // namespace
}  // namespace clock
}  // namespace emu
}  // namespace xpufab
