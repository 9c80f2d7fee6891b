// Atomics executed at the target endpoint through the protocol core: every op x datatype the
// table offers gives the target memory and fetched values that executing the same request
// locally gives; fetch-add from two requesters is exact with distinct fetched values; a CSWAP
// race has one winner; bad keys, ranges and access give the EFA status an RDMA access gets;
// unknown ops and datatypes are refused before anything is sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "testing/proto/harness.h"

namespace xpufab::proto_test {
namespace {

constexpr uint32_t kKey = 0x5151;

struct Amo : ::testing::Test {
  Stack stack;
  Node a{&stack}, b{&stack}, c{&stack};
  uint32_t a_to_b = 0, c_to_b = 0;
  alignas(16) uint8_t target[256] = {};
  proto_config cfg{};

  void SetUp() override {
    ASSERT_EQ(stack.open(), 0);
    proto_config_default(&cfg);
    cfg.max_peers = 4;
    cfg.credits = 32;
    ASSERT_EQ(a.open(cfg), 0);
    ASSERT_EQ(b.open(cfg), 0);
    ASSERT_EQ(c.open(cfg), 0);
    uint32_t unused = 0;
    ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
    ASSERT_EQ(c.add_peer(b.address(), &c_to_b), 0);
    ASSERT_EQ(b.add_peer(a.address(), &unused), 0);
    ASSERT_EQ(b.add_peer(c.address(), &unused), 0);
    ASSERT_EQ(proto_mr_add(b.ep(), reinterpret_cast<uint64_t>(target), sizeof(target), kKey,
                           FI_REMOTE_READ | FI_REMOTE_WRITE),
              0);
  }
  uint64_t at(size_t off) const { return reinterpret_cast<uint64_t>(target) + off; }

  proto_comp take(Node& n, uint64_t ctx) {
    proto_comp out{};
    EXPECT_TRUE(pump({&a, &b, &c}, [&] {
      for (size_t i = 0; i < n.comps().size(); ++i) {
        if (n.comps()[i].op_context != ctx) continue;
        out = n.comps()[i];
        n.comps().erase(n.comps().begin() + static_cast<long>(i));
        return true;
      }
      return false;
    })) << "no completion " << ctx;
    return out;
  }
};

TEST_F(Amo, EveryOpAndDatatypeMatchesLocalExecution) {
  const int kinds[] = {PROTO_ATOMIC_PLAIN, PROTO_ATOMIC_FETCH, PROTO_ATOMIC_COMPARE};
  std::vector<int> types;
  for (int t = FI_INT8; t < FI_DATATYPE_LAST; ++t) types.push_back(t);
  types.push_back(FI_INT128);
  types.push_back(FI_UINT128);
  int checked = 0;
  uint64_t ctx = 1;
  for (int kind : kinds) {
    for (int op = FI_MIN; op < FI_ATOMIC_OP_LAST; ++op) {
      for (int dt : types) {
        if (!proto_atomic_supported(kind, op, dt)) continue;
        const size_t size = proto_atomic_datatype_size(dt), count = 4, bytes = size * count;
        std::vector<uint8_t> operand(bytes), compare(bytes), fetched(bytes, 0xee), ref_fetched(bytes, 0xee);
        fill(operand.data(), bytes, static_cast<uint32_t>(op * 31 + dt));
        fill(compare.data(), bytes, static_cast<uint32_t>(op * 17 + dt + 5));
        // Half the compare values equal the target, so compare ops both succeed and fail.
        fill(target, bytes, static_cast<uint32_t>(dt + 3));
        std::memcpy(compare.data(), target, bytes / 2);
        alignas(16) uint8_t ref[256];
        std::memcpy(ref, target, sizeof(ref));
        ASSERT_EQ(proto_atomic_execute(kind, op, dt, ref, op == FI_ATOMIC_READ ? nullptr : operand.data(),
                                       compare.data(), kind == PROTO_ATOMIC_PLAIN ? nullptr : ref_fetched.data(), count),
                  0);
        ASSERT_EQ(proto_atomic(a.ep(), a_to_b, kind, op, dt, op == FI_ATOMIC_READ ? nullptr : operand.data(),
                               compare.data(), count, at(0), kKey, fetched.data(), 0, ctx),
                  0)
            << kind << " " << op << " " << dt;
        proto_comp r = take(a, ctx++);
        ASSERT_EQ(r.err, 0) << kind << " " << op << " " << dt;
        EXPECT_EQ(r.flags, FI_ATOMIC | (kind == PROTO_ATOMIC_PLAIN ? FI_WRITE : FI_READ));
        EXPECT_EQ(std::memcmp(target, ref, bytes), 0) << kind << " " << op << " " << dt;
        if (kind != PROTO_ATOMIC_PLAIN) {
          EXPECT_EQ(std::memcmp(fetched.data(), ref_fetched.data(), bytes), 0) << kind << " " << op << " " << dt;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200);
}

TEST_F(Amo, FetchAddFromTwoRequestersIsExactAndFetchesDistinctValues) {
  const int n = 300;
  std::vector<uint64_t> got_a(n), got_c(n);
  const uint64_t one = 1;
  std::memset(target, 0, 8);
  int sa = 0, sc = 0;
  ASSERT_TRUE(pump({&a, &b, &c}, [&] {
    if (sa < n && proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &one, nullptr, 1, at(0), kKey,
                               &got_a[sa], 0, 1000 + sa) == 0)
      ++sa;
    if (sc < n && proto_atomic(c.ep(), c_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &one, nullptr, 1, at(0), kKey,
                               &got_c[sc], 0, 1000 + sc) == 0)
      ++sc;
    return a.comps().size() == static_cast<size_t>(n) && c.comps().size() == static_cast<size_t>(n);
  }));
  uint64_t total = 0;
  std::memcpy(&total, target, 8);
  EXPECT_EQ(total, 2u * n);
  std::set<uint64_t> seen(got_a.begin(), got_a.end());
  seen.insert(got_c.begin(), got_c.end());
  EXPECT_EQ(seen.size(), 2u * n);
  EXPECT_EQ(*seen.rbegin(), 2u * n - 1);
  for (auto& x : a.comps()) EXPECT_EQ(x.err, 0);
  // Each requester's fetched values grow: its requests ran in its order.
  EXPECT_TRUE(std::is_sorted(got_a.begin(), got_a.end()));
  EXPECT_TRUE(std::is_sorted(got_c.begin(), got_c.end()));
}

TEST_F(Amo, CompareSwapRaceHasOneWinner) {
  std::memset(target, 0, 8);
  const uint64_t zero = 0, id_a = 0xa, id_c = 0xc;
  uint64_t old_a = 99, old_c = 99;
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT64, &id_a, &zero, 1, at(0), kKey,
                         &old_a, 0, 1),
            0);
  ASSERT_EQ(proto_atomic(c.ep(), c_to_b, PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT64, &id_c, &zero, 1, at(0), kKey,
                         &old_c, 0, 2),
            0);
  EXPECT_EQ(take(a, 1).err, 0);
  EXPECT_EQ(take(c, 2).err, 0);
  uint64_t now = 0;
  std::memcpy(&now, target, 8);
  EXPECT_EQ((old_a == 0) + (old_c == 0), 1);
  EXPECT_EQ(now, old_a == 0 ? id_a : id_c);
  EXPECT_EQ(old_a == 0 ? old_c : old_a, now);
}

TEST_F(Amo, BadKeyRangeOrAccessGetsTheRemoteBadAddressStatus) {
  const uint64_t v = 5;
  uint64_t out = 0;
  std::memset(target, 0, sizeof(target));
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT64, &v, nullptr, 1, at(0), kKey + 1,
                         nullptr, 0, 1),
            0);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &v, nullptr, 1, at(sizeof(target)),
                         kKey, &out, 0, 2),
            0);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT32, &v, nullptr, 1, at(2), kKey, nullptr,
                         0, 3),
            0);  // misaligned
  for (uint64_t ctx : {1, 2, 3}) {
    proto_comp e = take(a, ctx);
    EXPECT_EQ(e.err, FI_EINVAL) << ctx;
    EXPECT_EQ(e.prov_errno, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS) << ctx;
  }
  // A read-only region refuses writes and allows reads.
  alignas(8) static uint8_t ro[64];
  std::memset(ro, 7, sizeof(ro));
  ASSERT_EQ(proto_mr_add(b.ep(), reinterpret_cast<uint64_t>(ro), sizeof(ro), kKey + 9, FI_REMOTE_READ), 0);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_ATOMIC_WRITE, FI_UINT64, &v, nullptr, 1,
                         reinterpret_cast<uint64_t>(ro), kKey + 9, nullptr, 0, 4),
            0);
  EXPECT_EQ(take(a, 4).prov_errno, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  ASSERT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_ATOMIC_READ, FI_UINT64, nullptr, nullptr, 1,
                         reinterpret_cast<uint64_t>(ro), kKey + 9, &out, 0, 5),
            0);
  EXPECT_EQ(take(a, 5).err, 0);
  EXPECT_EQ(out, 0x0707070707070707ull);
  uint64_t zero = 0;
  EXPECT_EQ(std::memcmp(target, &zero, 8), 0);
}

TEST_F(Amo, UnknownOpsAndDatatypesAreRefusedBeforeAnythingIsSent) {
  const uint64_t v = 1;
  uint64_t out = 0;
  const uint64_t sent = a.ep()->stats.tx_packets;
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_ATOMIC_OP_LAST + 40, FI_UINT64, &v, nullptr, 1, at(0),
                         kKey, nullptr, 0, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_SUM, FI_LONG_DOUBLE, &v, nullptr, 1, at(0), kKey,
                         nullptr, 0, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_PLAIN, FI_CSWAP, FI_UINT64, &v, nullptr, 1, at(0), kKey,
                         nullptr, 0, 1),
            -FI_EOPNOTSUPP);  // a compare op is not a plain atomic
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &v, nullptr, 1, at(0), kKey, nullptr,
                         0, 1),
            -FI_EINVAL);  // no result buffer
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &v, nullptr, 0, at(0), kKey, &out, 0,
                         1),
            -FI_EINVAL);
  const int64_t max = proto_atomic_max_count(a.ep(), PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64);
  ASSERT_GT(max, 0);
  std::vector<uint64_t> many(static_cast<size_t>(max) + 1), res(many.size());
  EXPECT_EQ(proto_atomic(a.ep(), a_to_b, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, many.data(), nullptr, many.size(),
                         at(0), kKey, res.data(), 0, 1),
            -FI_EMSGSIZE);
  EXPECT_EQ(a.ep()->stats.tx_packets, sent);
}

}  // namespace
}  // namespace xpufab::proto_test
