// Collective and AV-set calls on objects that do not offer them fail with
// -FI_ENOSYS, whether the provider leaves the table NULL, points it at the
// core's no-op table, or built it before a member existed.
#include "api/core/no_ops.h"

#include <rdma/fi_collective.h>
#include <rdma/fi_errno.h>

#include "gtest/gtest.h"

namespace xpufab::core {
namespace {

// Every collective wrapper of <rdma/fi_collective.h> on `ep`.
void expect_all_enosys(fid_ep* ep) {
  uint64_t in = 1, out = 0;
  EXPECT_EQ(fi_barrier(ep, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_barrier2(ep, 0, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_barrier2(ep, 0, 1, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_broadcast(ep, &in, 1, nullptr, 0, 0, FI_UINT64, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_alltoall(ep, &in, 1, nullptr, &out, nullptr, 0, FI_UINT64, 0, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_allreduce(ep, &in, 1, nullptr, &out, nullptr, 0, FI_UINT64, FI_SUM, 0, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_allgather(ep, &in, 1, nullptr, &out, nullptr, 0, FI_UINT64, 0, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_reduce_scatter(ep, &in, 1, nullptr, &out, nullptr, 0, FI_UINT64, FI_SUM, 0,
                              nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_reduce(ep, &in, 1, nullptr, &out, nullptr, 0, 0, FI_UINT64, FI_SUM, 0, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_scatter(ep, &in, 1, nullptr, &out, nullptr, 0, 0, FI_UINT64, 0, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_gather(ep, &in, 1, nullptr, &out, nullptr, 0, 0, FI_UINT64, 0, nullptr),
            -FI_ENOSYS);
}

TEST(NoOpsTest, CollectivesWithoutATable) {
  fid_ep ep{};
  expect_all_enosys(&ep);
}

TEST(NoOpsTest, CollectivesThroughTheNoOpTable) {
  fid_ep ep{};
  ep.collective = no_collective_ops();
  expect_all_enosys(&ep);
  fi_msg_collective msg{};
  EXPECT_EQ(ep.collective->msg(&ep, &msg, nullptr, nullptr, 0, 0), -FI_ENOSYS);
}

TEST(NoOpsTest, TableBuiltBeforeBarrier2) {
  // A provider table of 1.x size without barrier2: flags need the op.
  fi_ops_collective ops = *no_collective_ops();
  ops.size = offsetof(fi_ops_collective, barrier2);
  ops.barrier = [](fid_ep*, fi_addr_t, void*) -> ssize_t { return 0; };
  fid_ep ep{};
  ep.collective = &ops;
  EXPECT_EQ(fi_barrier2(&ep, 0, 0, nullptr), 0);  // no flags: plain barrier
  EXPECT_EQ(fi_barrier2(&ep, 0, 1, nullptr), -FI_ENOSYS);
}

TEST(NoOpsTest, AvSets) {
  fid_av_set a{}, b{};
  fi_addr_t addr = 0;
  for (fi_ops_av_set* ops : {static_cast<fi_ops_av_set*>(nullptr), no_av_set_ops()}) {
    a.ops = b.ops = ops;
    EXPECT_EQ(fi_av_set_union(&a, &b), -FI_ENOSYS);
    EXPECT_EQ(fi_av_set_intersect(&a, &b), -FI_ENOSYS);
    EXPECT_EQ(fi_av_set_diff(&a, &b), -FI_ENOSYS);
    EXPECT_EQ(fi_av_set_insert(&a, 1), -FI_ENOSYS);
    EXPECT_EQ(fi_av_set_remove(&a, 1), -FI_ENOSYS);
    EXPECT_EQ(fi_av_set_addr(&a, &addr), -FI_ENOSYS);
  }
  fid_av av{};
  fid_av_set* set = nullptr;
  fi_av_set_attr attr{};
  EXPECT_EQ(fi_av_set(&av, &attr, &set, nullptr), -FI_ENOSYS);
}

TEST(NoOpsTest, QueryCollectiveWithoutTheOp) {
  fid_domain dom{};
  fi_collective_attr attr{};
  EXPECT_EQ(fi_query_collective(&dom, FI_BARRIER, &attr, 0), -FI_ENOSYS);
}

}  // namespace
}  // namespace xpufab::core
