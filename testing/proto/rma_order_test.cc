// The order the protocol core keeps between writes and atomics to one peer (FI_ORDER_WAW): a
// write waits only for the earlier writes it may overlap, so RDMA writes to disjoint ranges are
// issued at once and in flight together, while one that overlaps an earlier write, or names
// another key, waits until that one landed; packet writes and atomics wait behind an
// overlapping RDMA write and not behind a disjoint one. What lands is what posting order gives.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "testing/proto/harness.h"

namespace xpufab::proto_test {
namespace {

constexpr size_t kPiece = 64 << 10;
constexpr size_t kTarget = 8 * kPiece;

struct RmaOrder : ::testing::Test {
  Stack stack;
  Node a{&stack}, b{&stack};
  uint32_t a_to_b = 0;
  std::vector<uint8_t> src = std::vector<uint8_t>(kTarget), target = std::vector<uint8_t>(kTarget);
  uint32_t src_lkey = 0, src_rkey = 0, t_lkey = 0, t_key = 0, t_key2 = 0;
  uint64_t ctx = 1;

  void SetUp() override {
    ASSERT_EQ(stack.open(), 0);
    proto_config cfg{};
    proto_config_default(&cfg);
    cfg.max_peers = 2;
    cfg.credits = 32;
    ASSERT_EQ(a.open(cfg), 0);
    ASSERT_EQ(b.open(cfg), 0);
    // The default profile, the newest generation, has RDMA write.
    ASSERT_TRUE(a.ep()->dev.caps & PROTO_DEV_RDMA_WRITE);
    uint32_t unused = 0;
    ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
    ASSERT_EQ(b.add_peer(a.address(), &unused), 0);
    ASSERT_EQ(a.reg(src.data(), src.size(), &src_lkey, &src_rkey), 0);
    ASSERT_EQ(b.reg(target.data(), target.size(), &t_lkey, &t_key), 0);
    // A second registration of the same bytes: addresses under two keys are not compared.
    uint32_t unused_lkey = 0;
    ASSERT_EQ(b.reg(target.data(), target.size(), &unused_lkey, &t_key2), 0);
    for (uint32_t k : {t_key, t_key2})
      ASSERT_EQ(proto_mr_add(b.ep(), reinterpret_cast<uint64_t>(target.data()), target.size(), k,
                             FI_REMOTE_READ | FI_REMOTE_WRITE),
                0);
  }

  uint64_t at(size_t off) const { return reinterpret_cast<uint64_t>(target.data()) + off; }
  uint64_t rdma_writes() { return a.ep()->stats.rdma_writes; }
  uint64_t rma_packets() { return a.ep()->stats.rma_packets; }

  // Writes src[off, off + len) (filled with `seed`) to the target at `toff` under `key`.
  uint64_t write(size_t off, size_t len, size_t toff, uint32_t key, uint32_t seed) {
    fill(src.data() + off, len, seed);
    proto_buf bb{src.data() + off, len, src_lkey, src_rkey};
    const uint64_t c = ctx++;
    EXPECT_EQ(proto_rma(a.ep(), a_to_b, 1, &bb, 1, at(toff), key, 0, 0, c), 0);
    return c;
  }

  // Progresses both until the writer completed `n` operations, all successfully.
  void complete(size_t n) {
    ASSERT_TRUE(pump({&a, &b}, [&] { return a.comps().size() >= n; }));
    for (const proto_comp& c : a.comps()) EXPECT_EQ(c.err, 0) << "context " << c.op_context;
    a.comps().clear();
  }
};

TEST_F(RmaOrder, DisjointRdmaWritesAreIssuedTogether) {
  const uint64_t before = rdma_writes();
  for (uint32_t w = 0; w < 4; ++w) write(w * kPiece, kPiece, w * kPiece, t_key, 10 + w);
  // No progress in between: none of them landed, and none waited for another.
  EXPECT_EQ(rdma_writes() - before, 4u);
  complete(4);
  for (uint32_t w = 0; w < 4; ++w) EXPECT_TRUE(has_pattern(target.data() + w * kPiece, kPiece, 10 + w));
}

TEST_F(RmaOrder, AnOverlappingRdmaWriteWaitsAndLandsLast) {
  const uint64_t before = rdma_writes();
  write(0, kPiece, 0, t_key, 21);
  write(kPiece, kPiece, kPiece / 2, t_key, 22);  // overlaps the first one's second half
  write(2 * kPiece, kPiece, 4 * kPiece, t_key, 23);  // overlaps neither: goes at once
  EXPECT_EQ(rdma_writes() - before, 2u);
  complete(3);
  EXPECT_EQ(rdma_writes() - before, 3u);
  std::vector<uint8_t> want(kTarget);
  fill(want.data(), kPiece, 21);
  fill(want.data() + kPiece / 2, kPiece, 22);
  EXPECT_EQ(memcmp(target.data(), want.data(), kPiece + kPiece / 2), 0);
  EXPECT_TRUE(has_pattern(target.data() + 4 * kPiece, kPiece, 23));
}

TEST_F(RmaOrder, WritesUnderAnotherKeyWaitWhateverTheirRange) {
  const uint64_t before = rdma_writes();
  write(0, kPiece, 0, t_key, 31);
  write(kPiece, kPiece, 4 * kPiece, t_key2, 32);
  EXPECT_EQ(rdma_writes() - before, 1u);
  complete(2);
  EXPECT_EQ(rdma_writes() - before, 2u);
  EXPECT_TRUE(has_pattern(target.data(), kPiece, 31));
  EXPECT_TRUE(has_pattern(target.data() + 4 * kPiece, kPiece, 32));
}

TEST_F(RmaOrder, PacketWritesAndAtomicsWaitOnlyBehindAnOverlappingRdmaWrite) {
  write(0, kPiece, 0, t_key, 41);
  // A one-packet write into the RDMA write's range is queued behind it; one elsewhere is sent.
  const uint64_t packets = rma_packets();
  uint64_t inside = 0x1111, outside = 0x2222;
  proto_buf in{&inside, 8, 0, 0}, out{&outside, 8, 0, 0};
  ASSERT_EQ(proto_rma(a.ep(), a_to_b, 1, &in, 1, at(64), t_key, 0, 0, ctx++), 0);
  EXPECT_EQ(rma_packets() - packets, 0u);
  ASSERT_EQ(proto_rma(a.ep(), a_to_b, 1, &out, 1, at(5 * kPiece), t_key, 0, 0, ctx++), 0);
  EXPECT_EQ(rma_packets() - packets, 1u);
  // An atomic into the range would overtake the write: refused for now; elsewhere it goes.
  uint64_t add = 5;
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT64, &add, nullptr, 1,
                         at(128), t_key, nullptr, 0, ctx),
            -FI_EAGAIN);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT64, &add, nullptr, 1,
                         at(6 * kPiece), t_key, nullptr, 0, ctx++),
            0);
  complete(4);
  EXPECT_EQ(rma_packets() - packets, 2u);
  uint64_t v = 0;
  memcpy(&v, target.data() + 64, 8);
  EXPECT_EQ(v, inside);  // landed after the RDMA write it overlaps
  memcpy(&v, target.data() + 5 * kPiece, 8);
  EXPECT_EQ(v, outside);
  memcpy(&v, target.data() + 6 * kPiece, 8);
  EXPECT_EQ(v, add);
  // Now that nothing is in flight the atomic into the range goes, after the write.
  std::vector<uint8_t> before(target.begin() + 128, target.begin() + 136);
  uint64_t was = 0;
  memcpy(&was, before.data(), 8);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT64, &add, nullptr, 1,
                         at(128), t_key, nullptr, 0, ctx++),
            0);
  complete(1);
  memcpy(&v, target.data() + 128, 8);
  EXPECT_EQ(v, was + add);
}

}  // namespace
}  // namespace xpufab::proto_test
