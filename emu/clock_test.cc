#include "emu/clock.h"

#include <gtest/gtest.h>

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
