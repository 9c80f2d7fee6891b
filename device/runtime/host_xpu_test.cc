// Tests of the host XPU runtime and the host scope primitives.
#include "device/runtime/host_xpu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "device/runtime/host_xpu_testing.h"
#include "device/runtime/xpu_scope.h"
#include "device/runtime/xpu_scope_c11_check.h"
#include "device/xpu_prims.h"
#include "rdma/fi_errno.h"
#include "rdma/fi_xpu.h"

namespace xpufab::runtime {
namespace {

static_assert(XPU_SCOPE_WORK_ITEM == FI_XPU_WORK_ITEM);
static_assert(XPU_SCOPE_SUBGROUP == FI_XPU_SUBGROUP);
static_assert(XPU_SCOPE_WORK_GROUP == FI_XPU_WORK_GROUP);
static_assert(XPU_SCOPE_DEVICE == FI_XPU_DEVICE);

LaunchConfig config(uint32_t grid, uint32_t wg, uint32_t sg) {
  LaunchConfig c;
  c.grid = grid;
  c.workgroup_size = wg;
  c.subgroup_size = sg;
  return c;
}

TEST(HostXpu, IdsMatchTheLaunchShape) {
  constexpr uint32_t kGrid = 3, kWg = 12, kSg = 4;
  std::vector<WorkItem> seen(kGrid * kWg);
  std::vector<WorkItem> via_scope(kGrid * kWg);
  ASSERT_EQ(launch(config(kGrid, kWg, kSg),
                   [&](const WorkItem& it) {
                     seen[it.global_id] = it;
                     EXPECT_EQ(current_work_item(), xpu_host_current());
                     WorkItem& v = via_scope[it.global_id];
                     v.global_id = xpu_device_rank();
                     v.global_size = xpu_device_size();
                     v.workgroup_id = xpu_workgroup_id();
                     v.num_workgroups = xpu_num_workgroups();
                     v.local_id = xpu_workgroup_rank();
                     v.workgroup_size = xpu_workgroup_size();
                     v.subgroup_id = xpu_subgroup_id();
                     v.num_subgroups = xpu_num_subgroups();
                     v.lane = xpu_lane_id();
                     v.subgroup_size = xpu_subgroup_size();
                     v.cooperative = static_cast<uint32_t>(xpu_scope_supported(XPU_SCOPE_DEVICE));
                   }),
            0);
  for (uint32_t g = 0; g < kGrid * kWg; ++g) {
    for (const WorkItem* w : {&seen[g], &via_scope[g]}) {
      EXPECT_EQ(w->global_id, g);
      EXPECT_EQ(w->global_size, kGrid * kWg);
      EXPECT_EQ(w->workgroup_id, g / kWg);
      EXPECT_EQ(w->num_workgroups, kGrid);
      EXPECT_EQ(w->local_id, g % kWg);
      EXPECT_EQ(w->workgroup_size, kWg);
      EXPECT_EQ(w->subgroup_id, (g % kWg) / kSg);
      EXPECT_EQ(w->num_subgroups, kWg / kSg);
      EXPECT_EQ(w->lane, g % kSg);
      EXPECT_EQ(w->subgroup_size, kSg);
      EXPECT_EQ(w->cooperative, 1u);
    }
  }
}

// Each round: every member counts itself in, waits, and must then see the
// whole group counted; plain (non-atomic) slots written before the barrier
// are read by the neighbour after it, which TSan checks for ordering.
void barrier_rounds(int scope, uint32_t grid, uint32_t wg, uint32_t sg, int rounds) {
  const uint32_t total = grid * wg;
  const uint32_t group = scope == XPU_SCOPE_SUBGROUP ? sg : scope == XPU_SCOPE_WORK_GROUP ? wg : total;
  const uint32_t groups = total / group;
  std::unique_ptr<std::atomic<uint32_t>[]> counts(new std::atomic<uint32_t>[groups * rounds]());
  std::vector<uint64_t> slots(total);
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(config(grid, wg, sg),
                   [&](const WorkItem& it) {
                     const uint32_t rank = xpu_scope_rank(scope);
                     const uint32_t base = it.global_id - rank;
                     const uint32_t gidx = it.global_id / group;
                     for (int r = 0; r < rounds; ++r) {
                       slots[it.global_id] = (uint64_t{it.global_id} << 16) | r;
                       counts[gidx * rounds + r].fetch_add(1, std::memory_order_relaxed);
                       if (xpu_scope_barrier(scope) != 0) failures++;
                       if (counts[gidx * rounds + r].load(std::memory_order_relaxed) != group) failures++;
                       const uint32_t peer = base + (rank + 1) % group;
                       if (slots[peer] != ((uint64_t{peer} << 16) | r)) failures++;
                       // Nobody overwrites a slot until its reader is done.
                       xpu_scope_barrier(scope);
                     }
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
}

TEST(HostXpu, SubgroupBarrierWaitsForAllLanes) { barrier_rounds(XPU_SCOPE_SUBGROUP, 2, 16, 8, 20); }
TEST(HostXpu, WorkgroupBarrierWaitsForAllWorkItems) { barrier_rounds(XPU_SCOPE_WORK_GROUP, 3, 16, 4, 20); }
TEST(HostXpu, DeviceBarrierWaitsForTheWholeGrid) { barrier_rounds(XPU_SCOPE_DEVICE, 4, 8, 4, 20); }
// With one work-group the device is a scope of one thread, as a work-group is.
TEST(HostXpu, DeviceBarrierOfOneWorkGroup) { barrier_rounds(XPU_SCOPE_DEVICE, 1, 32, 8, 20); }

TEST(HostXpu, BroadcastAtEachScope) {
  constexpr uint32_t kGrid = 3, kWg = 16, kSg = 8, kRounds = 10;
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(config(kGrid, kWg, kSg),
                   [&](const WorkItem& it) {
                     for (uint32_t r = 0; r < kRounds; ++r) {
                       // 64-bit values so a truncating path shows.
                       const uint64_t mine = (uint64_t{r} << 40) | it.global_id;
                       const uint32_t src = r * 3 + 1;  // wraps modulo each scope size
                       const uint64_t sg = xpu_subgroup_broadcast_u64(mine, src);
                       const uint64_t wg = xpu_workgroup_broadcast_u64(mine, src);
                       const uint64_t dev = xpu_device_broadcast_u64(mine, src);
                       const uint32_t sg32 = xpu_subgroup_broadcast_u32(it.global_id + r, src);
                       const uint32_t wg32 = xpu_workgroup_broadcast_u32(it.global_id + r, src);
                       const uint32_t dev32 = xpu_device_broadcast_u32(it.global_id + r, src);
                       const uint32_t sg_src = it.global_id - it.lane + src % kSg;
                       const uint32_t wg_src = it.global_id - it.local_id + src % kWg;
                       const uint32_t dev_src = src % (kGrid * kWg);
                       if (sg != ((uint64_t{r} << 40) | sg_src) || sg32 != sg_src + r) failures++;
                       if (wg != ((uint64_t{r} << 40) | wg_src) || wg32 != wg_src + r) failures++;
                       if (dev != ((uint64_t{r} << 40) | dev_src) || dev32 != dev_src + r) failures++;
                       if (xpu_scope_broadcast_u64(XPU_SCOPE_WORK_ITEM, mine, src) != mine) failures++;
                     }
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
}

TEST(HostXpu, GenericScopeFunctionsFromC) {
  constexpr uint32_t kGrid = 2, kWg = 8, kSg = 4;
  std::vector<xpu_c11_record> recs(kGrid * kWg);
  xpu_host_launch_attr attr = {kGrid, kWg, kSg, 0};
  ASSERT_EQ(xpu_host_launch(&attr, xpu_scope_c11_kernel, recs.data()), 0);
  for (uint32_t g = 0; g < kGrid * kWg; ++g) {
    const xpu_c11_record& r = recs[g];
    const uint32_t ranks[4] = {0, g % kSg, g % kWg, g};
    const uint32_t sizes[4] = {1, kSg, kWg, kGrid * kWg};
    const uint32_t src[4] = {g, g - g % kSg + 1, g - g % kWg + 1, 1};
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(r.rank[s], ranks[s]) << g << " scope " << s;
      EXPECT_EQ(r.size[s], sizes[s]) << g << " scope " << s;
      EXPECT_EQ(r.leader[s], ranks[s] == 0 ? 1 : 0) << g << " scope " << s;
      EXPECT_EQ(r.supported[s], 1);
      EXPECT_EQ(r.barrier_rc[s], 0);
      EXPECT_EQ(r.bcast[s], 100u * s + src[s]) << g << " scope " << s;
    }
    EXPECT_EQ(r.supported[4], 0);
    EXPECT_EQ(r.barrier_rc[4], -1);
  }
}

void noop_kernel(void*) {}

void expect_plain_thread() {
  EXPECT_EQ(current_work_item(), nullptr);
  const xpu_host_item* it = xpu_host_current();
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->global_size, 1u);
  EXPECT_EQ(it->cooperative, 1u);
  EXPECT_EQ(xpu_lane_id(), 0u);
  EXPECT_EQ(xpu_subgroup_size(), 1u);
  EXPECT_EQ(xpu_workgroup_rank(), 0u);
  EXPECT_EQ(xpu_workgroup_size(), 1u);
  EXPECT_EQ(xpu_num_workgroups(), 1u);
  EXPECT_EQ(xpu_device_rank(), 0u);
  EXPECT_EQ(xpu_device_size(), 1u);
  for (int s = XPU_SCOPE_WORK_ITEM; s <= XPU_SCOPE_DEVICE; ++s) {
    EXPECT_EQ(xpu_scope_supported(s), 1) << s;
    EXPECT_EQ(xpu_scope_barrier(s), 0) << s;  // returns at once: a group of one
    EXPECT_TRUE(xpu_scope_is_leader(s)) << s;
    EXPECT_EQ(xpu_scope_broadcast_u64(s, 0x123456789abcull, 7), 0x123456789abcull) << s;
  }
  EXPECT_EQ(xpu_scope_supported(-1), 0);
  EXPECT_EQ(xpu_scope_supported(4), 0);
  xpu_subgroup_barrier();
  xpu_workgroup_barrier();
  xpu_device_barrier();
}

TEST(HostXpu, PlainThreadIsAWorkGroupOfOne) {
  expect_plain_thread();
  std::thread t(expect_plain_thread);
  t.join();
}

TEST(HostXpu, InvalidLaunchesAreRejectedAndRunNothing) {
  std::atomic<int> ran{0};
  auto kernel = [&](const WorkItem&) { ran++; };
  EXPECT_EQ(launch(config(0, 32, 32), kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(1, 0, 32), kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(1, 32, 0), kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(1, 48, 32), kernel), -FI_EINVAL);  // 32 does not divide 48
  EXPECT_EQ(launch(config(1, 8, 32), kernel), -FI_EINVAL);   // default subgroup > work-group
  EXPECT_EQ(launch(config(1, 128, 128), kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(1, 2048, 32), kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(5, 1024, 32), kernel), -FI_E2BIG);
  EXPECT_EQ(launch(config(kMaxWorkItems + 1, 1, 1), kernel), -FI_E2BIG);
  EXPECT_EQ(launch(config(0x80000000u, 1024, 32), kernel), -FI_E2BIG);  // product overflows 32 bits
  LaunchConfig bad_stack = config(1, 1, 1);
  bad_stack.stack_size = 4096;
  EXPECT_EQ(launch(bad_stack, kernel), -FI_EINVAL);
  bad_stack.stack_size = size_t{1} << 30;
  EXPECT_EQ(launch(bad_stack, kernel), -FI_EINVAL);
  EXPECT_EQ(launch(config(1, 1, 1), Kernel()), -FI_EINVAL);

  xpu_host_launch_attr attr = {1, 1, 1, 0};
  EXPECT_EQ(xpu_host_launch(nullptr, noop_kernel, nullptr), -FI_EINVAL);
  EXPECT_EQ(xpu_host_launch(&attr, nullptr, nullptr), -FI_EINVAL);
  attr.flags = 1u << 5;
  EXPECT_EQ(xpu_host_launch(&attr, noop_kernel, nullptr), -FI_EINVAL);
  attr = {1, 8, 0, 0};  // 0 selects 32, which does not divide 8
  EXPECT_EQ(xpu_host_launch(&attr, noop_kernel, nullptr), -FI_EINVAL);
  EXPECT_EQ(ran.load(), 0);

  EXPECT_EQ(validate_launch(config(4, 1024, 64)), 0);
  EXPECT_EQ(validate_launch(config(kMaxWorkItems, 1, 1)), 0);
}

// Threads that did start wait at the gate and are sent home: the kernel
// runs nowhere, so a device barrier in it cannot hang on missing members.
TEST(HostXpu, ThreadStartFailureCancelsTheLaunch) {
  std::atomic<int> ran{0};
  auto kernel = [&](const WorkItem&) {
    ran++;
    xpu_device_barrier();
  };
  for (int fail_after : {0, 1, 37}) {
    fail_thread_start_after_for_testing(fail_after);
    EXPECT_EQ(launch(config(4, 16, 8), kernel), -FI_EAGAIN) << fail_after;
  }
  fail_thread_start_after_for_testing(-1);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(launch(config(4, 16, 8), kernel), 0);
  EXPECT_EQ(ran.load(), 64);
}

TEST(HostXpu, ZeroSubgroupSizeSelectsTheDefault) {
  std::atomic<uint32_t> sg{0};
  xpu_host_launch_attr attr = {1, 64, 0, 0};
  ASSERT_EQ(
      xpu_host_launch(
          &attr, [](void* a) { static_cast<std::atomic<uint32_t>*>(a)->store(xpu_subgroup_size()); }, &sg),
      0);
  EXPECT_EQ(sg.load(), kDefaultSubgroupSize);
}

// Work-group i waits for a flag that only work-group i+1 sets, after it has
// itself been released: the chain ends only if all work-groups truly run at
// once, whatever order the OS starts them in.
TEST(HostXpu, SpinWaitOnAnotherWorkGroupTerminates) {
  constexpr uint32_t kGrid = 16;
  std::vector<std::atomic<int>> flags(kGrid + 1);
  flags[kGrid].store(1);
  ASSERT_EQ(launch(config(kGrid, 2, 1),
                   [&](const WorkItem& it) {
                     if (it.local_id == 0) {
                       while (flags[it.workgroup_id + 1].load(std::memory_order_acquire) == 0) {
                         std::this_thread::yield();
                       }
                     }
                     xpu_workgroup_barrier();
                     if (it.local_id == 1) flags[it.workgroup_id].store(1, std::memory_order_release);
                   }),
            0);
  for (auto& f : flags) EXPECT_EQ(f.load(), 1);
}

// A work-group's work-items are fibers of one thread, a thread per work-group.
TEST(HostXpu, EachWorkGroupRunsOnAThreadOfItsOwn) {
  constexpr uint32_t kGrid = 4, kWg = 32;
  std::vector<std::thread::id> ids(kGrid * kWg);
  ASSERT_EQ(launch(config(kGrid, kWg, 8),
                   [&](const WorkItem& it) {
                     ids[it.global_id] = std::this_thread::get_id();
                     xpu_workgroup_barrier();
                     // Still the same thread after a switch.
                     if (ids[it.global_id] != std::this_thread::get_id()) ids[it.global_id] = {};
                   }),
            0);
  std::set<std::thread::id> groups;
  for (uint32_t g = 0; g < kGrid; ++g) {
    for (uint32_t l = 0; l < kWg; ++l) EXPECT_EQ(ids[g * kWg + l], ids[g * kWg]) << g << " " << l;
    groups.insert(ids[g * kWg]);
  }
  EXPECT_EQ(groups.size(), kGrid);
}

// Work-item 0 waits for a flag the last work-item of its group sets: xpu_relax() lets the
// setter, a fiber of the same thread, run.
TEST(HostXpu, SpinWithRelaxOnTheSameWorkGroupTerminates) {
  constexpr uint32_t kWg = 64;
  uint32_t flag = 0;
  std::atomic<int> order_ok{0};
  ASSERT_EQ(launch(config(1, kWg, 32),
                   [&](const WorkItem& it) {
                     if (it.local_id == 0) {
                       while (xpu_load_acquire_u32(&flag) == 0) xpu_relax();
                       order_ok++;
                     } else if (it.local_id == kWg - 1) {
                       xpu_store_release_u32(&flag, 1);
                     }
                   }),
            0);
  EXPECT_EQ(order_ok.load(), 1);
}

// Launches back to back reuse stacks and threads; a deep frame on a small stack still runs.
TEST(HostXpu, RepeatedLaunchesWithSmallStacks) {
  LaunchConfig c = config(3, 16, 4);
  c.stack_size = 64 << 10;
  for (int round = 0; round < 50; ++round) {
    std::atomic<uint32_t> sum{0};
    ASSERT_EQ(launch(c,
                     [&](const WorkItem& it) {
                       volatile uint8_t frame[16 << 10];
                       frame[0] = static_cast<uint8_t>(it.global_id);
                       frame[sizeof(frame) - 1] = 1;
                       const uint64_t v = xpu_device_broadcast_u64(it.global_id + frame[0], 5);
                       sum.fetch_add(static_cast<uint32_t>(v) + frame[sizeof(frame) - 1]);
                     }),
              0);
    EXPECT_EQ(sum.load(), 48u * (10 + 1));
  }
}

TEST(HostXpu, NonCooperativeLaunchRefusesDeviceScope) {
  LaunchConfig c = config(2, 4, 2);
  c.cooperative = false;
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(c,
                   [&](const WorkItem& it) {
                     if (it.cooperative != 0) failures++;
                     if (xpu_scope_supported(XPU_SCOPE_DEVICE) != 0) failures++;
                     if (xpu_scope_supported(XPU_SCOPE_WORK_GROUP) != 1) failures++;
                     if (xpu_scope_barrier(XPU_SCOPE_DEVICE) != -1) failures++;
                     if (xpu_scope_broadcast_u64(XPU_SCOPE_DEVICE, it.global_id, 0) != it.global_id)
                       failures++;
                     if (xpu_device_broadcast_u32(it.global_id, 0) != it.global_id) failures++;
                     xpu_device_barrier();  // synchronizes nothing, must not hang
                     if (xpu_workgroup_broadcast_u32(it.global_id, 0) != it.global_id - it.local_id)
                       failures++;
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
}

// Odd work-items return at once; the rest still pass their barriers, since
// a returned work-item leaves its scopes.
TEST(HostXpu, ReturnedWorkItemsLeaveTheirBarriers) {
  std::atomic<int> passed{0};
  ASSERT_EQ(launch(config(2, 8, 4),
                   [&](const WorkItem& it) {
                     if (it.global_id % 2 == 1) return;
                     for (int r = 0; r < 3; ++r) {
                       xpu_subgroup_barrier();
                       xpu_workgroup_barrier();
                       xpu_device_barrier();
                     }
                     passed++;
                   }),
            0);
  EXPECT_EQ(passed.load(), 8);
}

// Item 1 of each subgroup, work-group and the device broadcasts; every
// member must get exactly its value. Returns the number of members that did
// not.
int broadcast_from_item_one(const LaunchConfig& c) {
  std::atomic<int> failures{0};
  const int rc = launch(c, [&](const WorkItem& it) {
    const uint64_t mine = 1000 + it.global_id;
    if (xpu_subgroup_broadcast_u64(mine, 1) != 1000 + it.global_id - it.lane + 1) failures++;
    if (xpu_workgroup_broadcast_u64(mine, 1) != 1000 + it.global_id - it.local_id + 1) failures++;
    if (xpu_device_broadcast_u64(mine, 1) != 1001) failures++;
  });
  return rc == 0 ? failures.load() : -1;
}

// A thread's launches of one shape reuse the first one's fibers, stacks and
// barriers: whatever a launch did (members leaving early, a kernel throwing),
// the next starts with every member in every scope.
TEST(HostXpu, ReusedLaunchStartsWithEveryMember) {
  for (const LaunchConfig& c : {config(1, 32, 8), config(3, 16, 4)}) {
    ASSERT_EQ(broadcast_from_item_one(c), 0);
    const uint64_t built = launches_built_for_testing();
    for (int round = 0; round < 4; ++round) {
      // Odd work-items leave at once; the others keep meeting without them.
      ASSERT_EQ(launch(c,
                       [](const WorkItem& it) {
                         if (it.global_id % 2 == 1) return;
                         for (int r = 0; r < 3; ++r) {
                           xpu_subgroup_barrier();
                           xpu_workgroup_barrier();
                           xpu_device_barrier();
                         }
                       }),
                0);
      // Item 1, which left the last launch first, is a member again.
      ASSERT_EQ(broadcast_from_item_one(c), 0) << round;
      EXPECT_EQ(launch(c,
                       [](const WorkItem& it) {
                         if (it.global_id == 0) throw std::runtime_error("kernel fault");
                         xpu_workgroup_barrier();
                       }),
                -FI_EOTHER);
      ASSERT_EQ(broadcast_from_item_one(c), 0) << round;
    }
    EXPECT_EQ(launches_built_for_testing(), built) << "launches of one shape were built again";
  }
  // Another shape is built for itself.
  const uint64_t built = launches_built_for_testing();
  ASSERT_EQ(broadcast_from_item_one(config(1, 16, 8)), 0);
  EXPECT_EQ(launches_built_for_testing(), built + 1);
}

// Launches nested in the work-items of a reused launch build their own (the
// outer one is running) and still see whole scopes.
TEST(HostXpu, NestedLaunchesInAReusedLaunch) {
  std::atomic<int> failures{0};
  for (int round = 0; round < 5; ++round) {
    ASSERT_EQ(launch(config(1, 4, 2),
                     [&](const WorkItem&) {
                       if (broadcast_from_item_one(config(1, 8, 4)) != 0) failures++;
                       xpu_workgroup_barrier();
                     }),
              0);
  }
  EXPECT_EQ(failures.load(), 0);
}

size_t thread_count() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Work-groups after the first run on pool threads kept between launches: a
// long series of launches of several shapes leaves no more threads behind
// than one launch of the widest needs.
TEST(HostXpu, ManyLaunchesLeaveNoThreadsBehind) {
  ASSERT_EQ(launch(config(8, 4, 2), [](const WorkItem&) { xpu_device_barrier(); }), 0);
  const size_t after_first = thread_count();
  std::atomic<int> failures{0};
  for (int round = 0; round < 32; ++round) {
    const uint32_t grid = 1 + round % 8;
    if (launch(config(grid, 4, 2), [](const WorkItem&) { xpu_device_barrier(); }) != 0) failures++;
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(thread_count(), after_first);
}

// Device scope across work-groups: a work-group that returns at once leaves
// it whole, members that return later leave their own work-group's share,
// and a broadcast whose source has returned gives 0 to everyone.
TEST(HostXpu, DeviceScopeWhenWorkItemsAndWorkGroupsLeave) {
  constexpr uint32_t kGrid = 3, kWg = 4;
  std::atomic<int> failures{0};
  std::atomic<int> finished{0};
  ASSERT_EQ(launch(config(kGrid, kWg, 2),
                   [&](const WorkItem& it) {
                     if (it.workgroup_id == 1) return;
                     for (int r = 0; r < 5; ++r) {
                       if (xpu_device_broadcast_u64(1000 + it.global_id, 1) != 1001) failures++;
                       if (xpu_device_broadcast_u64(1000 + it.global_id, kWg + 1) != 0) failures++;
                       // The last of each work-group leaves after the first round.
                       if (r == 0 && it.local_id == kWg - 1) return;
                       xpu_device_barrier();
                     }
                     finished++;
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(finished.load(), 2 * (kWg - 1));
}

TEST(HostXpu, BroadcastFromAReturnedSourceIsZero) {
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(config(1, 4, 4),
                   [&](const WorkItem& it) {
                     if (it.local_id == 2) return;
                     if (xpu_workgroup_broadcast_u64(77, 2) != 0) failures++;
                     if (xpu_workgroup_broadcast_u64(it.local_id + 10, 3) != 13) failures++;
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
}

TEST(HostXpu, ThrowingKernelIsReportedAndOthersFinish) {
  std::atomic<int> finished{0};
  EXPECT_EQ(launch(config(1, 4, 4),
                   [&](const WorkItem& it) {
                     if (it.local_id == 0) throw std::runtime_error("kernel fault");
                     xpu_workgroup_barrier();
                     finished++;
                   }),
            -FI_EOTHER);
  EXPECT_EQ(finished.load(), 3);
}

TEST(HostXpu, NestedLaunchIsASeparateLaunch) {
  std::atomic<uint32_t> inner_items{0};
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(config(2, 1, 1),
                   [&](const WorkItem& outer) {
                     int rc = launch(config(1, 4, 2), [&](const WorkItem& inner) {
                       inner_items++;
                       if (xpu_workgroup_size() != 4 || inner.global_size != 4) failures++;
                     });
                     if (rc != 0) failures++;
                     // The launching work-item keeps its own ids.
                     if (xpu_device_rank() != outer.global_id || xpu_device_size() != 2) failures++;
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(inner_items.load(), 8u);
}

// ThreadSanitizer makes each thread start cost milliseconds; there the
// largest launch is checked by validate_launch above and a quarter of it runs.
#if defined(__SANITIZE_THREAD__)
constexpr uint32_t kBigLaunch = kMaxWorkItems / 4;
#else
constexpr uint32_t kBigLaunch = kMaxWorkItems;
#endif

TEST(HostXpu, LargestLaunchRuns) {
  std::atomic<uint32_t> ran{0};
  LaunchConfig c = config(kBigLaunch / 256, 256, 32);
  c.stack_size = 64 << 10;
  ASSERT_EQ(launch(c, [&](const WorkItem&) { ran.fetch_add(1, std::memory_order_relaxed); }), 0);
  EXPECT_EQ(ran.load(), kBigLaunch);
}

// 8 work-groups x 64 work-items; every round broadcasts at subgroup and
// work-group scope and accumulates into a work-group total that a grid
// barrier then publishes to everyone.
TEST(HostXpu, StressBarrierAndBroadcastRounds) {
  constexpr uint32_t kGrid = 8, kWg = 64, kSg = 32, kRounds = 24;
  std::vector<uint64_t> wg_sum(kGrid);
  std::atomic<int> failures{0};
  ASSERT_EQ(launch(config(kGrid, kWg, kSg),
                   [&](const WorkItem& it) {
                     for (uint32_t r = 0; r < kRounds; ++r) {
                       const uint64_t v = (uint64_t{r} << 32) | it.global_id;
                       const uint64_t sg = xpu_subgroup_broadcast_u64(v, r);
                       if (sg != ((uint64_t{r} << 32) | (it.global_id - it.lane + r % kSg))) failures++;
                       const uint64_t wg = xpu_workgroup_broadcast_u64(v, r);
                       if (wg != ((uint64_t{r} << 32) | (it.global_id - it.local_id + r % kWg))) failures++;
                       if (it.local_id == 0)
                         wg_sum[it.workgroup_id] = wg;  // plain store, ordered by barriers
                       if (r % 8 == 7) {
                         xpu_device_barrier();
                         uint64_t total = 0;
                         for (uint64_t s : wg_sum) total += s;
                         uint64_t want = 0;
                         for (uint32_t g = 0; g < kGrid; ++g)
                           want += (uint64_t{r} << 32) | (g * kWg + r % kWg);
                         if (total != want) failures++;
                         xpu_device_barrier();
                       }
                     }
                   }),
            0);
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace xpufab::runtime
