// Runs the scope kernel on a real GPU (tagged gpu) and checks every id and
// collective against the warp/block/grid mapping of xpu_scope_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "device/runtime/xpu_scope_cuda_kernels.h"

namespace xpufab::runtime {
namespace {

// 80 threads per block: two full warps and one of 16 lanes.
constexpr uint32_t kBlocks = 3;
constexpr uint32_t kThreads = 80;

void check_ids(const std::vector<CudaScopeRecord>& recs) {
  ASSERT_EQ(recs.size(), size_t{kBlocks} * kThreads);
  for (uint32_t g = 0; g < recs.size(); ++g) {
    const CudaScopeRecord& r = recs[g];
    const uint32_t local = g % kThreads;
    const uint32_t warp_base = local & ~31u;
    const uint32_t lanes = std::min(32u, kThreads - warp_base);
    EXPECT_EQ(r.dev_rank, g);
    EXPECT_EQ(r.dev_size, kBlocks * kThreads);
    EXPECT_EQ(r.wg_id, g / kThreads);
    EXPECT_EQ(r.num_wg, kBlocks);
    EXPECT_EQ(r.wg_rank, local);
    EXPECT_EQ(r.wg_size, kThreads);
    EXPECT_EQ(r.lane, local % 32);
    EXPECT_EQ(r.subgroup_id, local / 32);
    EXPECT_EQ(r.num_subgroups, 3u);
    EXPECT_EQ(r.subgroup_size, lanes);
    const uint32_t sg_src = g - local + warp_base + (1 % lanes);
    EXPECT_EQ(r.sg_bcast, kSubgroupTag + sg_src) << g;
    EXPECT_EQ(r.sg_bcast32, sg_src) << g;
    EXPECT_EQ(r.wg_bcast, kWorkgroupTag + (g - local + 3)) << g;
  }
}

TEST(XpuScopeCuda, CooperativeLaunchHasEveryScope) {
  std::vector<CudaScopeRecord> recs;
  ASSERT_EQ(run_cuda_scope_kernel(kBlocks, kThreads, true, &recs), "");
  check_ids(recs);
  for (const CudaScopeRecord& r : recs) {
    EXPECT_EQ(r.device_supported, 1);
    EXPECT_EQ(r.device_barrier_rc, 0);
    EXPECT_EQ(r.arrived_after_barrier, kBlocks * kThreads);
    EXPECT_EQ(r.dev_bcast, kDeviceTag + 5);
  }
}

TEST(XpuScopeCuda, PlainLaunchRefusesDeviceScope) {
  std::vector<CudaScopeRecord> recs;
  ASSERT_EQ(run_cuda_scope_kernel(kBlocks, kThreads, false, &recs), "");
  check_ids(recs);
  for (const CudaScopeRecord& r : recs) {
    EXPECT_EQ(r.device_supported, 0);
    EXPECT_EQ(r.device_barrier_rc, -1);
    EXPECT_EQ(r.dev_bcast, kDeviceTag + r.dev_rank);
  }
}

}  // namespace
}  // namespace xpufab::runtime
