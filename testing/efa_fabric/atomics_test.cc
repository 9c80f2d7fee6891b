// Atomics on the protocol fabric between processes, through the public API, over shared memory,
// UDP, and shared memory with loss and reordering: every op x datatype the validity queries
// admit against the tests' host reference (atomic_ref.h), the queries themselves, concurrent
// FI_SUM from several processes on one word, a compare-and-swap race, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "testing/efa_fabric/atomic_ref.h"
#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/group_util.h"

namespace xpufab::efa_fabric {
namespace {

constexpr size_t kBuf = 1u << 20;
constexpr size_t kSlot = 64;  // one combination's target bytes: kElems elements of up to 16 B
constexpr size_t kElems = 4;
// The EFA completion status of an access the target's keys or bounds refuse.
constexpr int kEfaRemoteBadAddress = 7;

struct Combo {
  AtomicKind kind;
  int op, dt;
};

// Every combination the reference admits, in one order all processes agree on.
std::vector<Combo> valid_combos() {
  std::vector<Combo> v;
  for (AtomicKind k : {AtomicKind::kWrite, AtomicKind::kFetch, AtomicKind::kCompare})
    for (int op = 0; op <= kLastOp; ++op)
      for (int dt = 0; dt <= kLastDatatype; ++dt)
        if (expected_valid(k, op, dt)) v.push_back({k, op, dt});
  return v;
}

// Element i of the target's initial values, the operands and the compare values of combination
// c: small integers, exact in every datatype; every other compare value equals the target so
// that the conditional swaps go both ways.
int64_t initial_value(size_t c, size_t i) { return static_cast<int64_t>((c + i) % 5 + 2); }
int64_t operand_value(size_t c, size_t i) { return static_cast<int64_t>((c * 3 + i) % 7 + 1); }
int64_t compare_value(size_t c, size_t i) {
  return i % 2 ? initial_value(c, i) : initial_value(c, i) + static_cast<int64_t>(i % 3) - 1;
}

class Atomics : public ::testing::TestWithParam<Wire> {
 protected:
  template <typename Fn>
  void group(int size, Fn fn) {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::vector<int> st = run_group(size, 180, [&](Member& m) {
      Node n(kBuf);
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p);
      m.barrier();
      m.set_idle(nullptr);
    });
    ASSERT_EQ(st.size(), static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) EXPECT_EQ(st[static_cast<size_t>(r)], 0) << "rank " << r;
  }
};

TEST_P(Atomics, ValidityQueriesAnswerTheTable) {
  group(1, [](Member&, Node& n, Peers&) {
    for (AtomicKind k : {AtomicKind::kWrite, AtomicKind::kFetch, AtomicKind::kCompare}) {
      const uint64_t qflags = k == AtomicKind::kFetch     ? FI_FETCH_ATOMIC
                              : k == AtomicKind::kCompare ? FI_COMPARE_ATOMIC
                                                          : 0;
      for (int op = 0; op <= kLastOp; ++op) {
        for (int dt = 0; dt <= kLastDatatype; ++dt) {
          const auto d = static_cast<fi_datatype>(dt);
          const auto o = static_cast<fi_op>(op);
          size_t count = 0;
          const int rc = k == AtomicKind::kWrite   ? fi_atomicvalid(n.ep(), d, o, &count)
                         : k == AtomicKind::kFetch ? fi_fetch_atomicvalid(n.ep(), d, o, &count)
                                                   : fi_compare_atomicvalid(n.ep(), d, o, &count);
          fi_atomic_attr attr{};
          const int qrc = fi_query_atomic(n.domain(), d, o, &attr, qflags);
          if (expected_valid(k, op, dt)) {
            if (rc != 0 || qrc != 0)
              fprintf(stderr, "kind %d op %d datatype %d: valid %d query %d\n",
                      static_cast<int>(k), op, dt, rc, qrc);
            GROUP_CHECK(rc == 0 && count >= kElems);
            GROUP_CHECK(qrc == 0 && attr.size == datatype_size(dt) && attr.count >= kElems);
          } else {
            if (rc != -FI_EOPNOTSUPP || qrc != -FI_EOPNOTSUPP)
              fprintf(stderr, "kind %d op %d datatype %d: valid %d query %d, expected %d\n",
                      static_cast<int>(k), op, dt, rc, qrc, -FI_EOPNOTSUPP);
            GROUP_CHECK(rc == -FI_EOPNOTSUPP && qrc == -FI_EOPNOTSUPP);
          }
        }
      }
    }
  });
}

TEST_P(Atomics, EveryOpAndDatatypeAgainstTheReference) {
  group(2, [](Member& m, Node& n, Peers& p) {
    const std::vector<Combo> combos = valid_combos();
    GROUP_CHECK(combos.size() * kSlot <= kBuf / 2);
    const size_t operands = kBuf / 2, compares = operands + kBuf / 8, results = compares + kBuf / 8;
    if (m.rank() == 0) {
      for (size_t c = 0; c < combos.size(); ++c)
        for (size_t i = 0; i < kElems; ++i)
          set_element(combos[c].dt, n.at(c * kSlot + i * datatype_size(combos[c].dt)),
                      initial_value(c, i));
      m.barrier();
      m.barrier();
      // The target's memory after every combination ran once, against the reference.
      for (size_t c = 0; c < combos.size(); ++c) {
        const Combo& cb = combos[c];
        const size_t sz = datatype_size(cb.dt);
        for (size_t i = 0; i < kElems; ++i) {
          uint8_t want[16] = {}, op[16] = {}, cmp[16] = {};
          set_element(cb.dt, want, initial_value(c, i));
          set_element(cb.dt, op, operand_value(c, i));
          set_element(cb.dt, cmp, compare_value(c, i));
          apply_atomic(cb.op, cb.dt, want, op, cb.kind == AtomicKind::kCompare ? cmp : nullptr);
          if (memcmp(want, n.at(c * kSlot + i * sz), sz) != 0) {
            fprintf(stderr, "kind %d op %d datatype %d element %zu differs from the reference\n",
                    static_cast<int>(cb.kind), cb.op, cb.dt, i);
            GROUP_CHECK(false);
          }
        }
      }
      return;
    }
    const Remote& t = p.remote[0];
    m.barrier();
    for (size_t c = 0; c < combos.size(); ++c) {
      const Combo& cb = combos[c];
      const size_t sz = datatype_size(cb.dt);
      const auto d = static_cast<fi_datatype>(cb.dt);
      const auto o = static_cast<fi_op>(cb.op);
      for (size_t i = 0; i < kElems; ++i) {
        set_element(cb.dt, n.at(operands + c * kSlot + i * sz), operand_value(c, i));
        set_element(cb.dt, n.at(compares + c * kSlot + i * sz), compare_value(c, i));
      }
      uint8_t* res = n.at(results + c * kSlot);
      memset(res, 0xee, kSlot);
      const uint64_t addr = t.addr + c * kSlot;
      ssize_t rc;
      switch (cb.kind) {
        case AtomicKind::kWrite:
          rc = fi_atomic(n.ep(), n.at(operands + c * kSlot), kElems, n.desc(), p.addr[0], addr,
                         t.key, d, o, nullptr);
          break;
        case AtomicKind::kFetch:
          rc = fi_fetch_atomic(n.ep(), n.at(operands + c * kSlot), kElems, n.desc(), res,
                               n.desc(), p.addr[0], addr, t.key, d, o, nullptr);
          break;
        default:
          rc = fi_compare_atomic(n.ep(), n.at(operands + c * kSlot), kElems, n.desc(),
                                 n.at(compares + c * kSlot), n.desc(), res, n.desc(), p.addr[0],
                                 addr, t.key, d, o, nullptr);
          break;
      }
      GROUP_CHECK(rc == 0);
      const fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.flags & FI_ATOMIC);
      if (cb.kind == AtomicKind::kWrite) continue;
      // Fetching kinds return what the target held before.
      for (size_t i = 0; i < kElems; ++i) {
        uint8_t old[16] = {};
        set_element(cb.dt, old, initial_value(c, i));
        if (memcmp(old, res + i * sz, sz) != 0) {
          fprintf(stderr, "kind %d op %d datatype %d element %zu: fetched value differs\n",
                  static_cast<int>(cb.kind), cb.op, cb.dt, i);
          GROUP_CHECK(false);
        }
      }
    }
    m.barrier();
  });
}

TEST_P(Atomics, ConcurrentSumFromSeveralProcesses) {
  constexpr int kProcs = 4;
  constexpr int kAdds = 40;
  group(kProcs, [](Member& m, Node& n, Peers& p) {
    uint64_t* word = reinterpret_cast<uint64_t*>(n.at(0));
    *word = 0;
    m.barrier();
    std::vector<uint64_t> fetched;
    if (m.rank() != 0) {
      const uint64_t one = 1;
      uint64_t* old = reinterpret_cast<uint64_t*>(n.at(4096));
      for (int i = 0; i < kAdds; ++i) {
        memcpy(n.at(64), &one, 8);
        GROUP_CHECK(fi_fetch_atomic(n.ep(), n.at(64), 1, n.desc(), old, n.desc(), p.addr[0],
                                    p.remote[0].addr, p.remote[0].key, FI_UINT64, FI_SUM,
                                    nullptr) == 0);
        n.expect();
        fetched.push_back(*old);
      }
    }
    // Rank 0 keeps progressing its endpoint (the target executes the requests) until every
    // initiator is done: reading its CQ is what runs them.
    if (m.rank() == 0) {
      while (*reinterpret_cast<volatile uint64_t*>(word) < uint64_t{kAdds} * (kProcs - 1))
        fi_cq_read(n.cq(), nullptr, 0);
    }
    std::vector<uint64_t> all = gather_u64(m, fetched);
    std::sort(all.begin(), all.end());
    GROUP_CHECK(all.size() == static_cast<size_t>(kAdds) * (kProcs - 1));
    for (size_t i = 0; i < all.size(); ++i) GROUP_CHECK(all[i] == i);  // distinct, none lost
    if (m.rank() == 0) GROUP_CHECK(*word == all.size());
  });
}

TEST_P(Atomics, CompareAndSwapRaceHasOneWinner) {
  constexpr int kProcs = 4;
  constexpr int kRounds = 10;
  group(kProcs, [](Member& m, Node& n, Peers& p) {
    uint64_t* word = reinterpret_cast<uint64_t*>(n.at(0));
    for (int round = 0; round < kRounds; ++round) {
      *word = 0;
      m.barrier();
      uint64_t got = ~uint64_t{0};
      if (m.rank() != 0) {
        const uint64_t zero = 0, mine = static_cast<uint64_t>(m.rank());
        memcpy(n.at(64), &mine, 8);
        memcpy(n.at(128), &zero, 8);
        GROUP_CHECK(fi_compare_atomic(n.ep(), n.at(64), 1, n.desc(), n.at(128), n.desc(),
                                      n.at(192), n.desc(), p.addr[0], p.remote[0].addr,
                                      p.remote[0].key, FI_UINT64, FI_CSWAP, nullptr) == 0);
        n.expect();
        memcpy(&got, n.at(192), 8);
      } else {
        // Progress the target until some initiator has won.
        while (*reinterpret_cast<volatile uint64_t*>(word) == 0) fi_cq_read(n.cq(), nullptr, 0);
      }
      std::vector<uint64_t> all = gather_u64(m, {got});
      int winners = 0;
      uint64_t winner = 0;
      for (int r = 1; r < kProcs; ++r) {
        const uint64_t v = all[static_cast<size_t>(r)];
        if (v == 0) {
          winners++;
          winner = static_cast<uint64_t>(r);
        } else {
          GROUP_CHECK(v >= 1 && v < kProcs);  // a loser saw the winner's value
        }
      }
      GROUP_CHECK(winners == 1);
      for (int r = 1; r < kProcs; ++r)
        if (all[static_cast<size_t>(r)] != 0) GROUP_CHECK(all[static_cast<size_t>(r)] == winner);
      if (m.rank() == 0) GROUP_CHECK(*word == winner);
      m.barrier();
    }
  });
}

TEST_P(Atomics, BadInputIsRefusedOrReportedWithTheEfaStatus) {
  group(2, [](Member& m, Node& n, Peers& p) {
    if (m.rank() == 1) {
      const Remote& t = p.remote[0];
      uint64_t v = 1;
      memcpy(n.at(64), &v, 8);
      // Unknown ops and datatypes, and ops of another kind, fail before anything is sent.
      GROUP_CHECK(fi_atomic(n.ep(), n.at(64), 1, n.desc(), p.addr[0], t.addr, t.key, FI_UINT64,
                            static_cast<fi_op>(FI_MSWAP + 40), nullptr) == -FI_EOPNOTSUPP);
      GROUP_CHECK(fi_atomic(n.ep(), n.at(64), 1, n.desc(), p.addr[0], t.addr, t.key,
                            FI_LONG_DOUBLE_COMPLEX, FI_SUM, nullptr) == -FI_EOPNOTSUPP);
      GROUP_CHECK(fi_atomic(n.ep(), n.at(64), 1, n.desc(), p.addr[0], t.addr, t.key, FI_UINT64,
                            FI_CSWAP, nullptr) == -FI_EOPNOTSUPP);
      GROUP_CHECK(fi_fetch_atomic(n.ep(), n.at(64), 1, n.desc(), n.at(128), n.desc(), p.addr[0],
                                  t.addr, t.key, FI_FLOAT, FI_BOR, nullptr) == -FI_EOPNOTSUPP);
      GROUP_CHECK(fi_compare_atomic(n.ep(), n.at(64), 1, n.desc(), n.at(128), n.desc(),
                                    n.at(192), n.desc(), p.addr[0], t.addr, t.key, FI_UINT64,
                                    FI_SUM, nullptr) == -FI_EOPNOTSUPP);
      n.expect_nothing(100);
      // A key the target does not have, and an address outside the region: error completions
      // with the status EFA gives a refused remote access.
      int ctx[2];
      GROUP_CHECK(fi_atomic(n.ep(), n.at(64), 1, n.desc(), p.addr[0], t.addr, t.key + 977,
                            FI_UINT64, FI_SUM, &ctx[0]) == 0);
      fi_cq_err_entry err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[0] && err.err != 0);
      GROUP_CHECK(err.prov_errno == kEfaRemoteBadAddress);
      GROUP_CHECK(fi_fetch_atomic(n.ep(), n.at(64), 1, n.desc(), n.at(128), n.desc(), p.addr[0],
                                  t.addr + kBuf, t.key, FI_UINT64, FI_SUM, &ctx[1]) == 0);
      err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[1] && err.prov_errno == kEfaRemoteBadAddress);
      m.barrier();
    } else {
      uint64_t* word = reinterpret_cast<uint64_t*>(n.at(0));
      *word = 5;
      // The target progresses until the initiator is through.
      m.barrier();
      GROUP_CHECK(*word == 5);
    }
  });
}

// FI_ORDER_ATOMIC_WAW / RAW: atomic writes of one word posted back to back land in order, and
// a fetch posted after them reads the last one, whatever order SRD delivers them in.
TEST_P(Atomics, AtomicsOnOneWordExecuteInPostingOrder) {
  group(2, [](Member& m, Node& n, Peers& p) {
    const uint64_t need = FI_ORDER_ATOMIC_WAW | FI_ORDER_ATOMIC_RAW;
    GROUP_CHECK((n.info()->tx_attr->msg_order & need) == need);
    constexpr uint64_t kWrites = 40;
    if (m.rank() == 1) {
      const Remote& t = p.remote[0];
      uint64_t* vals = reinterpret_cast<uint64_t*>(n.at(4096));
      for (uint64_t i = 0; i < kWrites; ++i) vals[i] = 1000 + i;
      for (uint64_t i = 0; i < kWrites; ++i)
        GROUP_CHECK(post_retrying(n, [&] {
                      return fi_atomic(n.ep(), &vals[i], 1, n.desc(), p.addr[0], t.addr, t.key,
                                       FI_UINT64, FI_ATOMIC_WRITE, nullptr);
                    }) == 0);
      uint64_t* got = reinterpret_cast<uint64_t*>(n.at(0));
      *got = 0;
      int ctx;
      GROUP_CHECK(post_retrying(n, [&] {
                    return fi_fetch_atomic(n.ep(), nullptr, 1, nullptr, got, n.desc(), p.addr[0],
                                           t.addr, t.key, FI_UINT64, FI_ATOMIC_READ, &ctx);
                  }) == 0);
      for (uint64_t i = 0; i <= kWrites; ++i) (void)n.expect();
      GROUP_CHECK(*got == 1000 + kWrites - 1);
      m.barrier();
    } else {
      *reinterpret_cast<uint64_t*>(n.at(0)) = 0;
      m.barrier();
      GROUP_CHECK(*reinterpret_cast<uint64_t*>(n.at(0)) == 1000 + kWrites - 1);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Wire, Atomics,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
