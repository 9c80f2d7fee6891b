// Costs of the host XPU: a launch (fibers readied on one thread per
// work-group) and the scope collectives, where each waiting work-item hands
// its thread to the next.
//
// The *Count variants run a fixed number of iterations, for instruction
// counts: the difference between the 300- and the 100-iteration run under
// `valgrind --tool=callgrind`, divided by 200, is the cost of one iteration
// (one launch, or one launch of 100 collective rounds).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "device/runtime/host_xpu.h"
#include "device/runtime/xpu_scope.h"

namespace xpufab::runtime {
namespace {

LaunchConfig shape(int64_t grid, int64_t wg) {
  LaunchConfig c;
  c.grid = static_cast<uint32_t>(grid);
  c.workgroup_size = static_cast<uint32_t>(wg);
  c.subgroup_size = wg < 32 ? static_cast<uint32_t>(wg) : 32;
  return c;
}

// Args: grid, work-group size.
void BM_EmptyLaunch(benchmark::State& state) {
  const LaunchConfig c = shape(state.range(0), state.range(1));
  for (auto _ : state) {
    if (launch(c, [](const WorkItem&) {}) != 0) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * c.grid * c.workgroup_size);
}
BENCHMARK(BM_EmptyLaunch)->Args({1, 1})->Args({1, 64})->Args({8, 64})->UseRealTime();
BENCHMARK(BM_EmptyLaunch)->Name("BM_EmptyLaunchCount")->Args({1, 32})->Iterations(100);
BENCHMARK(BM_EmptyLaunch)->Name("BM_EmptyLaunchCount")->Args({1, 32})->Iterations(300);

// Args: grid, work-group size, scope. Items are collectives completed.
void BM_CollectiveRounds(benchmark::State& state) {
  constexpr int kRounds = 100;
  const LaunchConfig c = shape(state.range(0), state.range(1));
  const int scope = static_cast<int>(state.range(2));
  for (auto _ : state) {
    int rc = launch(c, [scope](const WorkItem& it) {
      uint64_t v = it.global_id;
      for (int r = 0; r < kRounds; ++r) v = xpu_scope_broadcast_u64(scope, v + r, 0);
      benchmark::DoNotOptimize(v);
    });
    if (rc != 0) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * kRounds);
}
BENCHMARK(BM_CollectiveRounds)
    ->Args({1, 32, XPU_SCOPE_SUBGROUP})
    ->Args({1, 64, XPU_SCOPE_WORK_GROUP})
    ->Args({8, 64, XPU_SCOPE_WORK_GROUP})
    ->Args({8, 64, XPU_SCOPE_DEVICE})
    ->UseRealTime();
BENCHMARK(BM_CollectiveRounds)->Name("BM_CollectiveRoundsCount")->Args({1, 32, XPU_SCOPE_WORK_GROUP})->Iterations(100);
BENCHMARK(BM_CollectiveRounds)->Name("BM_CollectiveRoundsCount")->Args({1, 32, XPU_SCOPE_WORK_GROUP})->Iterations(300);

}  // namespace
}  // namespace xpufab::runtime
