// The request-id table: ids come out of scratch that init never writes, every index is handed
// out once per round, a reused index carries a new generation, and a completion for an id that
// is not outstanding (never used, stale, or freed twice) is refused.
#include "device/efa_dp_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace {

class ReqsTest : public ::testing::Test {
 protected:
  void Init(uint32_t count, uint8_t fill) {
    scratch_.assign(efa_dp_reqs_scratch_size(count) / 8 + 1, 0);
    memset(scratch_.data(), fill, scratch_.size() * 8);
    ASSERT_EQ(efa_dp_reqs_init(&t_, count, scratch_.data(), efa_dp_reqs_scratch_size(count)), 0);
  }
  std::vector<uint64_t> scratch_;
  efa_dp_reqs t_{};
};

TEST_F(ReqsTest, InitWritesNothingPerIndex) {
  Init(1024, 0xab);
  const auto* bytes = reinterpret_cast<const uint8_t*>(scratch_.data());
  for (size_t i = 0; i < efa_dp_reqs_scratch_size(1024); ++i) ASSERT_EQ(bytes[i], 0xab) << i;
}

TEST_F(ReqsTest, EveryIndexOnceThenFull) {
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}, uint8_t{0x80}}) {
    Init(64, fill);
    std::set<uint32_t> idx;
    for (uint32_t i = 0; i < 64; ++i) {
      const int id = efa_dp_reqs_alloc(&t_, 1000 + i, i);
      ASSERT_GE(id, 0);
      EXPECT_TRUE(idx.insert(uint32_t(id) & 63u).second) << "index handed out twice";
    }
    EXPECT_EQ(efa_dp_reqs_alloc(&t_, 0, 0), -FI_EAGAIN);
  }
}

TEST_F(ReqsTest, ReturnsContextAndRefusesIdsNotOutstanding) {
  Init(16, 0xff);
  // Never-used indices are refused, whatever the scratch held.
  for (uint32_t id = 0; id < 0x10000; id += 7) EXPECT_EQ(efa_dp_reqs_free(&t_, id, nullptr, nullptr), -FI_EINVAL) << id;
  const int a = efa_dp_reqs_alloc(&t_, 0x1234, 3);
  ASSERT_GE(a, 0);
  EXPECT_EQ(efa_dp_reqs_free(&t_, uint32_t(a) ^ 0x100u, nullptr, nullptr), -FI_EINVAL);  // other generation
  uint64_t ctx = 0;
  uint32_t aux = 0;
  EXPECT_EQ(efa_dp_reqs_free(&t_, uint32_t(a), &ctx, &aux), 0);
  EXPECT_EQ(ctx, 0x1234u);
  EXPECT_EQ(aux, 3u);
  EXPECT_EQ(efa_dp_reqs_free(&t_, uint32_t(a), nullptr, nullptr), -FI_EINVAL);  // twice
  // The freed index comes back first, under a new generation; the old id stays refused.
  const int b = efa_dp_reqs_alloc(&t_, 0x5678, 1);
  ASSERT_GE(b, 0);
  EXPECT_EQ(uint32_t(b) & 15u, uint32_t(a) & 15u);
  EXPECT_NE(b, a);
  EXPECT_EQ(efa_dp_reqs_free(&t_, uint32_t(a), nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(efa_dp_reqs_free(&t_, uint32_t(b), &ctx, nullptr), 0);
  EXPECT_EQ(ctx, 0x5678u);
}

TEST_F(ReqsTest, ConcurrentAllocAndFreeNeverShareAnIndex) {
  Init(256, 0x5a);
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<uint32_t> owner(256, 0);  // written by whoever holds the index
  std::atomic<int> clashes{0};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int id = efa_dp_reqs_alloc(&t_, uint64_t(t), 0);
        if (id < 0) continue;
        auto* o = reinterpret_cast<std::atomic<uint32_t>*>(&owner[uint32_t(id) & 255u]);
        if (o->exchange(uint32_t(t) + 1) != 0) clashes++;
        o->store(0);
        uint64_t ctx = 99;
        if (efa_dp_reqs_free(&t_, uint32_t(id), &ctx, nullptr) != 0 || ctx != uint64_t(t)) clashes++;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(clashes.load(), 0);
  // All 256 indices are free again: 256 allocations succeed, the next does not.
  for (int i = 0; i < 256; ++i) ASSERT_GE(efa_dp_reqs_alloc(&t_, 0, 0), 0);
  EXPECT_EQ(efa_dp_reqs_alloc(&t_, 0, 0), -FI_EAGAIN);
}

}  // namespace
