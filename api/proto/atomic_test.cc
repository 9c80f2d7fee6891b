// atomic.h against a host reference: the validity table written out from
// libfabric's op/datatype rules, every supported op x datatype x kind on
// random values, the refusals, and threads racing FI_SUM / FI_CSWAP.
#include "api/proto/atomic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "api/proto/match_atomic_c11_check.h"

namespace {

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

const int kKinds[] = {PROTO_ATOMIC_PLAIN, PROTO_ATOMIC_FETCH, PROTO_ATOMIC_COMPARE};

// ---- The table, as libfabric defines it ---------------------------------------

enum Class { kInt, kReal, kComplex, kNone };

Class ClassOf(int dt) {
  switch (dt) {
    case FI_INT8: case FI_UINT8: case FI_INT16: case FI_UINT16: case FI_INT32: case FI_UINT32:
    case FI_INT64: case FI_UINT64: case FI_INT128: case FI_UINT128:
      return kInt;
    case FI_FLOAT: case FI_DOUBLE:
      return kReal;
    case FI_FLOAT_COMPLEX: case FI_DOUBLE_COMPLEX:
      return kComplex;
    default:
      return kNone;
  }
}

bool Expected(int kind, int op, int dt) {
  const Class c = ClassOf(dt);
  if (c == kNone) return false;
  bool in_kind = false;
  if (kind == PROTO_ATOMIC_PLAIN) in_kind = op <= FI_BXOR || op == FI_ATOMIC_WRITE;
  if (kind == PROTO_ATOMIC_FETCH) in_kind = op <= FI_ATOMIC_WRITE;
  if (kind == PROTO_ATOMIC_COMPARE) in_kind = op >= FI_CSWAP && op <= FI_MSWAP;
  if (!in_kind) return false;
  switch (op) {
    case FI_BOR: case FI_BAND: case FI_BXOR: case FI_MSWAP:
      return c == kInt;
    case FI_MIN: case FI_MAX: case FI_CSWAP_LE: case FI_CSWAP_LT: case FI_CSWAP_GE: case FI_CSWAP_GT:
      return c != kComplex;
    default:
      return true;
  }
}

const int kAllTypes[] = {FI_INT8,   FI_UINT8,    FI_INT16,         FI_UINT16,         FI_INT32,
                         FI_UINT32, FI_INT64,    FI_UINT64,        FI_FLOAT,          FI_DOUBLE,
                         FI_FLOAT_COMPLEX,       FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE,   FI_LONG_DOUBLE_COMPLEX,
                         FI_INT128, FI_UINT128,  FI_FLOAT16,       FI_BFLOAT16,       FI_FLOAT8_E4M3,
                         FI_FLOAT8_E5M2,         FI_VOID};

TEST(AtomicTable, EveryKindOpDatatype) {
  int supported = 0;
  for (int kind : kKinds) {
    for (int op = FI_MIN; op <= FI_DIFF; op++) {
      for (int dt : kAllTypes) {
        SCOPED_TRACE(::testing::Message() << "kind " << kind << " op " << op << " dt " << dt);
        const bool want = Expected(kind, op, dt);
        EXPECT_EQ(proto_atomic_supported(kind, op, dt) != 0, want);
        const int64_t n = proto_atomic_valid(kind, op, dt, 4096);
        if (want) {
          const size_t size = proto_atomic_datatype_size(dt);
          ASSERT_NE(size, 0u);
          EXPECT_EQ(n, static_cast<int64_t>(4096 / size / (kind == PROTO_ATOMIC_COMPARE ? 2 : 1)));
          supported++;
        } else {
          EXPECT_EQ(n, -FI_EOPNOTSUPP);
        }
      }
    }
  }
  // Per class, PLAIN + FETCH + COMPARE ops: integers 11 + 12 + 7, reals 8 + 9 + 6, complex 6 + 7 + 2.
  EXPECT_EQ(supported, 10 * (11 + 12 + 7) + 2 * (8 + 9 + 6) + 2 * (6 + 7 + 2));
  EXPECT_EQ(proto_atomic_valid(PROTO_ATOMIC_PLAIN, FI_NOOP, FI_INT32, 64), -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_valid(7, FI_SUM, FI_INT32, 64), -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_valid(PROTO_ATOMIC_PLAIN, -1, FI_INT32, 64), -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_valid(PROTO_ATOMIC_PLAIN, FI_SUM, -1, 64), -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_datatype_size(FI_UINT128), 16u);
  EXPECT_EQ(proto_atomic_datatype_size(FI_FLOAT_COMPLEX), 8u);
  EXPECT_EQ(proto_atomic_datatype_size(FI_LONG_DOUBLE), 0u);
}

// ---- Reference execution -------------------------------------------------------

bool Logic(int op, bool x, bool y) { return op == FI_LOR ? (x || y) : op == FI_LAND ? (x && y) : (x != y); }

// Integer element: returns whether the target is written, *r = its new value.
template <typename T, typename U>
bool RefInt(int op, T t, T a, T c, T* r) {
  *r = t;
  switch (op) {
    case FI_MIN: *r = std::min(t, a); return true;
    case FI_MAX: *r = std::max(t, a); return true;
    case FI_SUM: *r = static_cast<T>(static_cast<U>(t) + static_cast<U>(a)); return true;
    case FI_PROD: {
      // Schoolbook product modulo 2^bits, so the reference shares no code path with the header.
      U x = static_cast<U>(t), y = static_cast<U>(a), p = 0;
      for (unsigned b = 0; b < sizeof(U) * 8; b++)
        if ((y >> b) & 1) p = static_cast<U>(p + static_cast<U>(x << b));
      *r = static_cast<T>(p);
      return true;
    }
    case FI_LOR: case FI_LAND: case FI_LXOR: *r = Logic(op, t != 0, a != 0) ? 1 : 0; return true;
    case FI_BOR: *r = t | a; return true;
    case FI_BAND: *r = t & a; return true;
    case FI_BXOR: *r = t ^ a; return true;
    case FI_ATOMIC_READ: return false;
    case FI_ATOMIC_WRITE: *r = a; return true;
    case FI_CSWAP: if (c == t) *r = a; return c == t;
    case FI_CSWAP_NE: if (c != t) *r = a; return c != t;
    case FI_CSWAP_LE: if (c <= t) *r = a; return c <= t;
    case FI_CSWAP_LT: if (c < t) *r = a; return c < t;
    case FI_CSWAP_GE: if (c >= t) *r = a; return c >= t;
    case FI_CSWAP_GT: if (c > t) *r = a; return c > t;
    case FI_MSWAP: *r = static_cast<T>((a & c) | (t & ~c)); return true;
  }
  ADD_FAILURE() << "op " << op;
  return false;
}

template <typename T>
bool RefReal(int op, T t, T a, T c, T* r) {
  *r = t;
  switch (op) {
    case FI_MIN: *r = a < t ? a : t; return true;
    case FI_MAX: *r = a > t ? a : t; return true;
    case FI_SUM: *r = t + a; return true;
    case FI_PROD: *r = t * a; return true;
    case FI_LOR: case FI_LAND: case FI_LXOR: *r = Logic(op, t != 0, a != 0) ? 1 : 0; return true;
    case FI_ATOMIC_READ: return false;
    case FI_ATOMIC_WRITE: *r = a; return true;
    case FI_CSWAP: if (c == t) *r = a; return c == t;
    case FI_CSWAP_NE: if (c != t) *r = a; return c != t;
    case FI_CSWAP_LE: if (c <= t) *r = a; return c <= t;
    case FI_CSWAP_LT: if (c < t) *r = a; return c < t;
    case FI_CSWAP_GE: if (c >= t) *r = a; return c >= t;
    case FI_CSWAP_GT: if (c > t) *r = a; return c > t;
  }
  ADD_FAILURE() << "op " << op;
  return false;
}

template <typename T>
struct Cx {
  T re, im;
};

template <typename T>
bool RefComplex(int op, Cx<T> t, Cx<T> a, Cx<T> c, Cx<T>* r) {
  *r = t;
  const bool eq = c.re == t.re && c.im == t.im;
  switch (op) {
    case FI_SUM: *r = {t.re + a.re, t.im + a.im}; return true;
    case FI_PROD: *r = {t.re * a.re - t.im * a.im, t.re * a.im + t.im * a.re}; return true;
    case FI_LOR: case FI_LAND: case FI_LXOR:
      *r = {Logic(op, t.re != 0 || t.im != 0, a.re != 0 || a.im != 0) ? T(1) : T(0), T(0)};
      return true;
    case FI_ATOMIC_READ: return false;
    case FI_ATOMIC_WRITE: *r = a; return true;
    case FI_CSWAP: if (eq) *r = a; return eq;
    case FI_CSWAP_NE: if (!eq) *r = a; return !eq;
  }
  ADD_FAILURE() << "op " << op;
  return false;
}

// Few distinct values so compares succeed and fail; small numbers keep float arithmetic exact.
template <typename T>
T RandomInt(std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0: return static_cast<T>(rng() % 4);
    case 1: return static_cast<T>(-static_cast<T>(rng() % 3));
    case 2: return static_cast<T>(~static_cast<T>(0));
    default: {
      u128 v = (static_cast<u128>(rng()) << 64) | rng();
      return static_cast<T>(v);
    }
  }
}

template <typename T>
T RandomReal(std::mt19937_64& rng) {
  static const double kVals[] = {-3, -2, -1, -0.5, 0, 0.5, 1, 2, 3};
  return static_cast<T>(kVals[rng() % 9]);
}

constexpr size_t kCount = 7;

// Runs one (kind, op, dt) on kCount random elements and compares target and result with the reference.
template <typename E, typename Gen, typename Ref>
void CheckOne(int kind, int op, int dt, std::mt19937_64& rng, Gen gen, Ref ref) {
  // Room past the last element: a 1- or 2-byte element's whole 32-bit word is read (atomic.h).
  alignas(16) E target[kCount + 3], want[kCount];
  E operand[kCount], compare[kCount], result[kCount], want_result[kCount];
  for (size_t i = 0; i < kCount; i++) {
    target[i] = gen(rng);
    operand[i] = gen(rng);
    // Half the compares see the target's own value.
    compare[i] = rng() % 2 ? target[i] : gen(rng);
    std::memset(&result[i], 0xa5, sizeof(E));
    want_result[i] = target[i];
    E nv;
    want[i] = ref(op, target[i], operand[i], compare[i], &nv) ? nv : target[i];
  }
  const bool has_result = kind != PROTO_ATOMIC_PLAIN;
  ASSERT_EQ(proto_atomic_execute(kind, op, dt, target, operand, kind == PROTO_ATOMIC_COMPARE ? compare : nullptr,
                                 has_result ? result : nullptr, kCount),
            0);
  EXPECT_EQ(std::memcmp(target, want, sizeof(want)), 0);
  if (has_result) {
    EXPECT_EQ(std::memcmp(result, want_result, sizeof(result)), 0);
  }
}

template <typename E, typename Gen, typename Ref>
int CheckType(int dt, Gen gen, Ref ref) {
  std::mt19937_64 rng(static_cast<uint64_t>(dt) * 7919);
  int ran = 0;
  for (int kind : kKinds) {
    for (int op = FI_MIN; op <= FI_MSWAP; op++) {
      if (!proto_atomic_supported(kind, op, dt)) continue;
      SCOPED_TRACE(::testing::Message() << "kind " << kind << " op " << op << " dt " << dt);
      for (int round = 0; round < 40; round++) CheckOne<E>(kind, op, dt, rng, gen, ref);
      ran++;
    }
  }
  return ran;
}

template <typename T, typename U>
int CheckIntType(int dt) {
  return CheckType<T>(dt, RandomInt<T>, RefInt<T, U>);
}

template <typename T>
int CheckRealType(int dt) {
  return CheckType<T>(dt, RandomReal<T>, RefReal<T>);
}

template <typename T>
int CheckComplexType(int dt) {
  auto gen = [](std::mt19937_64& rng) { return Cx<T>{RandomReal<T>(rng), RandomReal<T>(rng)}; };
  return CheckType<Cx<T>>(dt, gen, RefComplex<T>);
}

TEST(AtomicExecute, EveryOpAndDatatypeMatchesTheReference) {
  int combos = 0;
  combos += CheckIntType<int8_t, uint8_t>(FI_INT8);
  combos += CheckIntType<uint8_t, uint8_t>(FI_UINT8);
  combos += CheckIntType<int16_t, uint16_t>(FI_INT16);
  combos += CheckIntType<uint16_t, uint16_t>(FI_UINT16);
  combos += CheckIntType<int32_t, uint32_t>(FI_INT32);
  combos += CheckIntType<uint32_t, uint32_t>(FI_UINT32);
  combos += CheckIntType<int64_t, uint64_t>(FI_INT64);
  combos += CheckIntType<uint64_t, uint64_t>(FI_UINT64);
  combos += CheckIntType<i128, u128>(FI_INT128);
  combos += CheckIntType<u128, u128>(FI_UINT128);
  combos += CheckRealType<float>(FI_FLOAT);
  combos += CheckRealType<double>(FI_DOUBLE);
  combos += CheckComplexType<float>(FI_FLOAT_COMPLEX);
  combos += CheckComplexType<double>(FI_DOUBLE_COMPLEX);
  EXPECT_EQ(combos, 10 * (11 + 12 + 7) + 2 * (8 + 9 + 6) + 2 * (6 + 7 + 2));
}

// Sub-word elements share a 32-bit word: writing one must leave its neighbours as they were.
TEST(AtomicExecute, SubWordElementsLeaveNeighboursAlone) {
  alignas(8) uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint8_t one = 0x10;
  for (int i = 0; i < 8; i++) {
    ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_BOR, FI_UINT8, &bytes[i], &one, nullptr, nullptr, 1), 0);
    for (int j = 0; j < 8; j++) EXPECT_EQ(bytes[j], (j + 1) | (j <= i ? 0x10 : 0)) << i << " " << j;
  }
  alignas(8) int16_t halves[4] = {-1, 2, -3, 4};
  const int16_t add = 1000;
  int16_t old = 0;
  ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_SUM, FI_INT16, &halves[3], &add, nullptr, &old, 1), 0);
  EXPECT_EQ(old, 4);
  EXPECT_EQ(halves[0], -1);
  EXPECT_EQ(halves[1], 2);
  EXPECT_EQ(halves[2], -3);
  EXPECT_EQ(halves[3], 1004);
}

TEST(AtomicExecute, RefusesBeforeTouchingMemory) {
  alignas(16) uint8_t mem[64];
  std::memset(mem, 0x5a, sizeof(mem));
  uint8_t operand[32] = {1}, compare[32] = {1}, result[32];
  auto untouched = [&] {
    for (uint8_t b : mem)
      if (b != 0x5a) return false;
    return true;
  };
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_LONG_DOUBLE, mem, operand, nullptr, nullptr, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_BOR, FI_DOUBLE, mem, operand, nullptr, nullptr, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_ATOMIC_READ, FI_INT32, mem, nullptr, nullptr, nullptr, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_CSWAP, FI_INT32, mem, operand, compare, nullptr, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_MSWAP, FI_INT32, mem, operand, compare, result, 1),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_COMPARE, FI_MIN, FI_DOUBLE_COMPLEX, mem, operand, compare, result, 1),
            -FI_EOPNOTSUPP);
  // Misaligned targets, missing buffers.
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT32, mem + 2, operand, nullptr, nullptr, 2),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT16, mem + 1, operand, nullptr, nullptr, 2),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT128, mem + 8, operand, nullptr, nullptr, 1),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT32, nullptr, operand, nullptr, nullptr, 1),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT32, mem, nullptr, nullptr, nullptr, 1),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT32, mem, operand, nullptr, nullptr, 1),
            -FI_EINVAL);
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT32, mem, operand, nullptr, result, 1),
            -FI_EINVAL);
  EXPECT_TRUE(untouched());
  // Zero elements is a valid no-op; FI_ATOMIC_READ needs no operand.
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT32, mem, operand, nullptr, nullptr, 0), 0);
  uint32_t got = 0;
  EXPECT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_ATOMIC_READ, FI_UINT32, mem, nullptr, nullptr, &got, 1), 0);
  EXPECT_EQ(got, 0x5a5a5a5au);
  EXPECT_TRUE(untouched());
}

// ---- Atomicity under concurrency ------------------------------------------------

constexpr int kThreads = 8;
constexpr int kIters = 4000;

template <typename F>
void RunThreads(F f) {
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) ts.emplace_back(f, t);
  for (auto& t : ts) t.join();
}

// Fetching adds: the total is exact and every fetched value is distinct.
template <typename T>
void FetchSumRace(int dt, T step) {
  alignas(16) T word[16 / sizeof(T)] = {};  // a whole word even for 16-bit T
  std::vector<std::vector<T>> seen(kThreads);
  RunThreads([&](int t) {
    seen[t].reserve(kIters);
    for (int i = 0; i < kIters; i++) {
      T old;
      ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_SUM, dt, word, &step, nullptr, &old, 1), 0);
      seen[t].push_back(old);
    }
  });
  const uint64_t n = static_cast<uint64_t>(kThreads) * kIters;
  EXPECT_TRUE(word[0] == static_cast<T>(step * static_cast<T>(n)));
  std::vector<T> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::vector<T> want;
  for (uint64_t i = 0; i < n; i++) want.push_back(static_cast<T>(step * static_cast<T>(i)));
  std::sort(all.begin(), all.end());
  std::sort(want.begin(), want.end());
  ASSERT_EQ(all.size(), want.size());
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(all[i] == want[i]) << "fetched value " << i;
}

TEST(AtomicConcurrency, FetchSumIsExactWithDistinctResults) {
  FetchSumRace<uint32_t>(FI_UINT32, 3);
  FetchSumRace<int64_t>(FI_INT64, -7);
  FetchSumRace<u128>(FI_UINT128, (static_cast<u128>(1) << 64) | 1);  // carries between the halves
  FetchSumRace<double>(FI_DOUBLE, 1.0);
}

// Threads on different 16-bit lanes of the same words must not lose each other's updates.
TEST(AtomicConcurrency, SubWordSumsOnSharedWords) {
  alignas(8) uint16_t lanes[4] = {0, 0, 0, 0};
  alignas(4) uint8_t bytes[4] = {0, 0, 0, 0};
  RunThreads([&](int t) {
    const uint16_t one16 = 1;
    const uint8_t one8 = 1;
    for (int i = 0; i < kIters; i++) {
      ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT16, &lanes[t % 4], &one16, nullptr,
                                     nullptr, 1),
                0);
      ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT8, &bytes[t % 4], &one8, nullptr, nullptr,
                                     1),
                0);
    }
  });
  for (int l = 0; l < 4; l++) {
    EXPECT_EQ(lanes[l], kThreads / 4 * kIters);
    EXPECT_EQ(bytes[l], static_cast<uint8_t>(kThreads / 4 * kIters));
  }
}

// Counting by CSWAP: each value is won exactly once, so wins add up to the final value.
template <typename T>
void CswapRace(int dt) {
  alignas(16) T word[16 / sizeof(T)] = {};  // a whole word even for 16-bit T
  std::atomic<uint64_t> wins{0};
  std::vector<std::vector<T>> won(kThreads);
  RunThreads([&](int t) {
    for (int i = 0; i < kIters / 4; i++) {
      T cur;
      ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_FETCH, FI_ATOMIC_READ, dt, word, nullptr, nullptr, &cur, 1), 0);
      const T next = static_cast<T>(cur + 1);
      T old;
      ASSERT_EQ(proto_atomic_execute(PROTO_ATOMIC_COMPARE, FI_CSWAP, dt, word, &next, &cur, &old, 1), 0);
      if (old == cur) {
        wins++;
        won[t].push_back(cur);
      }
    }
  });
  EXPECT_TRUE(word[0] == static_cast<T>(wins.load()));
  std::vector<T> all;
  for (auto& w : won) all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), wins.load());
  for (size_t i = 0; i < all.size(); i++) ASSERT_TRUE(all[i] == static_cast<T>(i)) << "won value " << i;
}

TEST(AtomicConcurrency, CswapHasExactlyOneWinnerPerValue) {
  CswapRace<uint16_t>(FI_UINT16);
  CswapRace<int32_t>(FI_INT32);
  CswapRace<uint64_t>(FI_UINT64);
  CswapRace<u128>(FI_UINT128);
}

TEST(AtomicC11, HeaderBuildsAsStrictC11) { EXPECT_EQ(proto_c11_check_atomic(), 0); }

}  // namespace
