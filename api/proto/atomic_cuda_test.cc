// atomic.h on a GPU (sm_90) against the same header on the host: every op x
// datatype x kind from one GPU thread gives the host's bytes, and thousands of
// GPU threads racing FI_SUM / FI_CSWAP on shared words (sub-word lanes and
// 16-byte words included) stay exact. Needs a GPU (tag "gpu"); fails, rather
// than skips, without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "api/proto/atomic.h"
#include "api/proto/atomic_cuda_kernels.h"

namespace {

template <typename T>
T* host_mapped(size_t n) {
  return static_cast<T*>(proto_atomic_cuda_host_alloc(n * sizeof(T)));
}

TEST(AtomicCuda, EveryOpAndDatatypeMatchesTheHost) {
  ASSERT_GT(proto_atomic_cuda_device_count(), 0) << "this test needs a CUDA GPU";
  constexpr size_t kCount = 5, kMax = 16 * kCount;
  uint8_t* gpu_t = host_mapped<uint8_t>(kMax);
  uint8_t* gpu_r = host_mapped<uint8_t>(kMax);
  uint8_t* operand = host_mapped<uint8_t>(kMax);
  uint8_t* compare = host_mapped<uint8_t>(kMax);
  int* rc = host_mapped<int>(1);
  ASSERT_TRUE(gpu_t && gpu_r && operand && compare && rc);
  alignas(16) uint8_t host_t[kMax], host_r[kMax];
  std::mt19937 rng(7);
  int combos = 0;
  for (int kind = PROTO_ATOMIC_PLAIN; kind <= PROTO_ATOMIC_COMPARE; kind++) {
    for (int op = FI_MIN; op <= FI_MSWAP; op++) {
      for (int dt = FI_INT8; dt <= FI_UINT128; dt++) {
        if (!proto_atomic_supported(kind, op, dt)) continue;
        SCOPED_TRACE(::testing::Message() << "kind " << kind << " op " << op << " dt " << dt);
        const size_t bytes = proto_atomic_datatype_size(dt) * kCount;
        // Small values (exact in floating point); half the compares equal the target.
        for (size_t i = 0; i < bytes; i++) {
          host_t[i] = gpu_t[i] = static_cast<uint8_t>(rng() % 3);
          operand[i] = static_cast<uint8_t>(rng() % 3);
          compare[i] = rng() % 2 ? host_t[i] : static_cast<uint8_t>(rng() % 3);
        }
        const bool fp = dt == FI_FLOAT || dt == FI_DOUBLE || dt == FI_FLOAT_COMPLEX || dt == FI_DOUBLE_COMPLEX;
        if (fp) {
          // Byte noise would make NaNs and denormals; use small integers as values.
          for (size_t i = 0; i < bytes; i += (dt == FI_FLOAT || dt == FI_FLOAT_COMPLEX) ? 4 : 8) {
            auto put = [&](uint8_t* p, int v) {
              if (dt == FI_FLOAT || dt == FI_FLOAT_COMPLEX) {
                const float f = static_cast<float>(v);
                std::memcpy(p + i, &f, 4);
              } else {
                const double d = v;
                std::memcpy(p + i, &d, 8);
              }
            };
            const int t = static_cast<int>(rng() % 5) - 2;
            put(host_t, t);
            put(gpu_t, t);
            put(operand, static_cast<int>(rng() % 5) - 2);
            put(compare, rng() % 2 ? t : static_cast<int>(rng() % 5) - 2);
          }
        }
        std::memset(host_r, 0, bytes);
        std::memset(gpu_r, 0, bytes);
        const bool has_r = kind != PROTO_ATOMIC_PLAIN;
        const void* cmp = kind == PROTO_ATOMIC_COMPARE ? compare : nullptr;
        ASSERT_EQ(proto_atomic_execute(kind, op, dt, host_t, operand, cmp, has_r ? host_r : nullptr, kCount), 0);
        ASSERT_EQ(proto_atomic_cuda_execute(kind, op, dt, gpu_t, operand, cmp, has_r ? gpu_r : nullptr, kCount, rc), 0);
        ASSERT_EQ(*rc, 0);
        EXPECT_EQ(std::memcmp(host_t, gpu_t, bytes), 0);
        EXPECT_EQ(std::memcmp(host_r, gpu_r, bytes), 0);
        combos++;
      }
    }
  }
  EXPECT_EQ(combos, 10 * (11 + 12 + 7) + 2 * (8 + 9 + 6) + 2 * (6 + 7 + 2));
  for (void* p : {static_cast<void*>(gpu_t), static_cast<void*>(gpu_r), static_cast<void*>(operand),
                  static_cast<void*>(compare), static_cast<void*>(rc)})
    proto_atomic_cuda_host_free(p);
}

// n threads add to `lanes` neighbouring elements; each lane's total is exact and the fetched
// values of each lane are distinct multiples of the step.
template <typename T>
void FetchSumRace(int dt, uint32_t lanes, uint32_t n) {
  SCOPED_TRACE(::testing::Message() << "dt " << dt << " lanes " << lanes);
  T* target = host_mapped<T>(16);
  T* operand = host_mapped<T>(n);
  T* result = host_mapped<T>(n);
  int* rc = host_mapped<int>(n);
  ASSERT_TRUE(target && operand && result && rc);
  std::memset(static_cast<void*>(target), 0, 16 * sizeof(T));
  for (uint32_t i = 0; i < n; i++) operand[i] = static_cast<T>(1);
  ASSERT_EQ(proto_atomic_cuda_race(PROTO_ATOMIC_FETCH, FI_SUM, dt, sizeof(T), lanes, n, target, operand, nullptr,
                                   result, rc),
            0);
  for (uint32_t i = 0; i < n; i++) ASSERT_EQ(rc[i], 0) << i;
  for (uint32_t l = 0; l < lanes; l++) {
    EXPECT_TRUE(target[l] == static_cast<T>(n / lanes)) << "lane " << l;
    std::vector<T> got;
    for (uint32_t i = l; i < n; i += lanes) got.push_back(result[i]);
    std::sort(got.begin(), got.end());
    for (size_t k = 0; k < got.size(); k++) ASSERT_TRUE(got[k] == static_cast<T>(k)) << "lane " << l << " " << k;
  }
  for (void* p : {static_cast<void*>(target), static_cast<void*>(operand), static_cast<void*>(result),
                  static_cast<void*>(rc)})
    proto_atomic_cuda_host_free(p);
}

TEST(AtomicCuda, FetchSumRacesAreExact) {
  ASSERT_GT(proto_atomic_cuda_device_count(), 0) << "this test needs a CUDA GPU";
  __extension__ typedef unsigned __int128 u128;
  FetchSumRace<uint64_t>(FI_UINT64, 1, 8192);
  FetchSumRace<uint32_t>(FI_UINT32, 2, 8192);
  FetchSumRace<uint16_t>(FI_UINT16, 4, 8192);  // lanes share 32-bit words
  FetchSumRace<uint8_t>(FI_UINT8, 4, 1020);    // stays below 256 per lane
  FetchSumRace<u128>(FI_UINT128, 1, 4096);
}

// Every thread tries CSWAP 0 -> its id + 1 on one 16-byte word: exactly one sees 0.
TEST(AtomicCuda, Cswap128HasOneWinner) {
  ASSERT_GT(proto_atomic_cuda_device_count(), 0) << "this test needs a CUDA GPU";
  __extension__ typedef unsigned __int128 u128;
  constexpr uint32_t n = 4096;
  u128* target = host_mapped<u128>(1);
  u128* operand = host_mapped<u128>(n);
  u128* compare = host_mapped<u128>(n);
  u128* result = host_mapped<u128>(n);
  int* rc = host_mapped<int>(n);
  ASSERT_TRUE(target && operand && compare && result && rc);
  *target = 0;
  for (uint32_t i = 0; i < n; i++) {
    operand[i] = (static_cast<u128>(i + 1) << 64) | (i + 1);
    compare[i] = 0;
  }
  ASSERT_EQ(proto_atomic_cuda_race(PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT128, 16, 1, n, target, operand, compare,
                                   result, rc),
            0);
  uint32_t winners = 0, winner = 0;
  for (uint32_t i = 0; i < n; i++) {
    ASSERT_EQ(rc[i], 0);
    if (result[i] == 0) {
      winners++;
      winner = i;
    }
  }
  EXPECT_EQ(winners, 1u);
  EXPECT_TRUE(*target == operand[winner]);
  for (void* p : {static_cast<void*>(target), static_cast<void*>(operand), static_cast<void*>(compare),
                  static_cast<void*>(result), static_cast<void*>(rc)})
    proto_atomic_cuda_host_free(p);
}

}  // namespace
