// The fault-injection suite on two emulated devices in one process (step() from the test thread,
// engine threads off). Multi-process runs of the same plans go through FI_EFA_EMU_FAULTS.
#include "testing/faults/fault_suite.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "emu/faults/plan.h"
#include "emu/options_env.h"
#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace {

using faults_suite::Result;
using faults_suite::Workload;
using namespace ::xpufab::emu::testing;

// The 10^5 messages (about 2 s unoptimized; fault_soak runs other sizes and plans).
constexpr uint64_t kOps = 100000;

TEST(FaultSuite, MixedOpsSurviveLossDuplicationReorderingCorruption) {
  Workload w;
  w.plan_a = w.plan_b = "seed=7;drop=0.1;dup=0.05;reorder=0.2;window=8;corrupt=0.02";
  w.ops = kOps;
  Result r = faults_suite::run_workload(w);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.completed, kOps);
  // The plan really did its work, on both sides.
  for (const Stats* s : {&r.a, &r.b}) {
    EXPECT_GT(s->dropped_packets, 0u);
    EXPECT_GT(s->duplicates, 0u);
    EXPECT_GT(s->reordered, 0u);
    EXPECT_GT(s->corrupt_dropped, 0u);
  }
  EXPECT_GT(r.a.retransmits, 0u);
  EXPECT_EQ(r.a.error_cqes + r.b.error_cqes, 0u);
  // Per-QP counters add up to the device's.
  ASSERT_EQ(r.qa.size(), 1u);
  EXPECT_EQ(r.qa[0].wqes, kOps);
  EXPECT_EQ(r.qa[0].tx_cqes, kOps);
  EXPECT_EQ(r.qa[0].retransmits, r.a.retransmits);
  EXPECT_EQ(r.qb[0].rx_cqes, kOps / 2);
  EXPECT_EQ(r.qa[0].outstanding, 0u);
}

TEST(FaultSuite, SameSeedSameTraceDifferentSeedDifferentTrace) {
  Workload w;
  w.plan_a = w.plan_b = "seed=3;drop=0.1;dup=0.1;reorder=0.2;corrupt=0.05;cq_delay_us=3;cq_delay_p=0.1";
  w.ops = 600;
  w.step_clock_ns = 1000;  // virtual clock: timers fire at the same pass every run
  w.trace = true;
  Result r1 = faults_suite::run_workload(w);
  Result r2 = faults_suite::run_workload(w);
  ASSERT_EQ(r1.error, "");
  ASSERT_EQ(r2.error, "");
  EXPECT_NE(r1.trace_a.find("fault pkt_in drop"), std::string::npos);
  EXPECT_NE(r1.trace_a.find("retransmit"), std::string::npos);
  EXPECT_TRUE(r1.trace_a == r2.trace_a) << "traces of device A differ between identical runs";
  EXPECT_TRUE(r1.trace_b == r2.trace_b) << "traces of device B differ between identical runs";
  w.plan_a = w.plan_b = "seed=4;drop=0.1;dup=0.1;reorder=0.2;corrupt=0.05;cq_delay_us=3;cq_delay_p=0.1";
  Result r3 = faults_suite::run_workload(w);
  ASSERT_EQ(r3.error, "");
  EXPECT_FALSE(r1.trace_a == r3.trace_a);
}

TEST(FaultSuite, DelayAndJitterOnlyCostLatency) {
  Workload w;
  w.plan_a = w.plan_b = "seed=5;delay_us=20;jitter_us=30;delay_p=0.5";
  w.ops = 2000;
  w.step_clock_ns = 1000;
  Result r = faults_suite::run_workload(w);
  ASSERT_EQ(r.error, "");
  EXPECT_GT(r.a.delayed_packets + r.b.delayed_packets, 0u);
  // The retransmission timeout and the fast-retransmit age learn the delays from the answers;
  // what goes out again before they have (a round trip is ~2 us here, a delayed one up to
  // ~100 us) is a spurious copy, answered and executed once. How many depends on the fault
  // stream, which differs per process (it mixes in the PID): 15-25% of the ops.
  EXPECT_LT(r.a.retransmits, w.ops * 3 / 10);
}

// Two devices with one QP each, built from the emulator's test helpers.
class FaultPair : public ::testing::Test {
 protected:
  void open(const std::string& plan_a, uint64_t step_clock_ns = 0, const std::string& plan_b = "") {
    fabric_ = std::make_shared<InProcFabric>();
    DeviceOptions o = inline_options(fabric_);
    o.fault_plan = plan_a;
    o.step_clock_ns = step_clock_ns;
    o.has_gid = true;
    o.gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e, 1};
    a_.open(o);
    a_.make_qp();
    o.fault_plan = plan_b;
    o.gid[15] = 2;
    b_.open(o);
    b_.make_qp();
    bring_up(a_.qp, a_.qkey);
    bring_up(b_.qp, b_.qkey);
    Gid bg = b_.dev->gid();
    ASSERT_EQ(a_.dev->create_ah(a_.pd, bg.data(), &ah_), 0);
    Gid ag = a_.dev->gid();
    ASSERT_EQ(b_.dev->create_ah(b_.pd, ag.data(), &back_), 0);
  }
  Wqe write(uint16_t id, uint32_t len = 64) {
    return rdma_wqe(EFA_IO_RDMA_WRITE, id, ah_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey,
                    a_.addr(0), a_.mr->lkey(), b_.addr(4096), b_.mr->rkey(), len);
  }
  // Steps both devices until A's CQ yields; counts the passes.
  bool wait(efa_io_rx_cdesc_ex* c, uint64_t* passes = nullptr) {
    for (uint64_t n = 0; n < 2000000; ++n) {
      if (a_.cqr.poll(c)) {
        if (passes != nullptr) *passes = n;
        return true;
      }
      a_.dev->step(64);
      b_.dev->step(64);
    }
    return false;
  }
  std::shared_ptr<InProcFabric> fabric_;
  Node a_, b_;
  Ah* ah_ = nullptr;
  Ah* back_ = nullptr;
};

TEST_F(FaultPair, TargetedFailureReachesTheCqWithItsStatus) {
  open("fail=op:write,qp:1,size:>=64,nth:2,status:BAD_LKEY;fail=op:send,every:1,status:UNRESP_REMOTE");
  ASSERT_EQ(a_.qp->qpn(), 1u);
  efa_io_rx_cdesc_ex c;
  const uint8_t expect[] = {EFA_IO_COMP_STATUS_OK, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY,
                            EFA_IO_COMP_STATUS_OK};
  for (uint16_t i = 0; i < 3; ++i) {
    a_.sq.post(write(i));
    ASSERT_TRUE(wait(&c));
    EXPECT_EQ(c.base.common.req_id, i);
    EXPECT_EQ(c.base.common.status, expect[i]) << "write " << i;
  }
  // Small writes do not match size:>=64.
  a_.sq.post(write(3, 16));
  ASSERT_TRUE(wait(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  Wqe s = send_wqe(4, ah_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  add_sge(&s, a_.addr(0), 8, a_.mr->lkey());
  a_.sq.post(s);
  ASSERT_TRUE(wait(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
  EXPECT_EQ(a_.dev->stats().faults_injected, 2u);
  EXPECT_EQ(a_.dev->qp_stats()[0].error_cqes, 2u);
}

TEST_F(FaultPair, KilledPeerFailsOutstandingOpsWithUnresponsiveRemote) {
  // Virtual clock: 1 us per pass; B dies 5 ms in. Timeout: 2 ms x (3 retransmits + 1).
  open("kill_peer=fe80::e02@5", 1000);
  efa_io_rx_cdesc_ex c;
  a_.sq.post(write(0));
  uint64_t passes = 0;
  ASSERT_TRUE(wait(&c, &passes));
  ASSERT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  for (int i = 0; i < 6000; ++i) a_.dev->step(64), b_.dev->step(64);  // past 5 ms
  for (uint16_t i = 1; i <= 8; ++i) a_.sq.post(write(i));
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(wait(&c, &passes));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
    EXPECT_LE(passes, 8000u + 100u);  // within (max_retransmits + 1) x response timeout
  }
  EXPECT_EQ(a_.dev->stats().timeouts, 8u);
}

TEST_F(FaultPair, PeerDeadFromTheStartIsUnreachable) {
  open("kill_peer=fe80::e02@0", 1000);
  efa_io_rx_cdesc_ex c;
  a_.sq.post(write(0));
  ASSERT_TRUE(wait(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
}

TEST_F(FaultPair, PartitionHealsAndRetransmissionCarriesOn) {
  // Cut between 0 and 3 ms; the op's retransmissions (every 2 ms) get through after it heals.
  open("partition=fe80::e01,fe80::e02@0-3", 1000);
  efa_io_rx_cdesc_ex c;
  a_.sq.post(write(0));
  ASSERT_TRUE(wait(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_GT(a_.dev->stats().retransmits, 0u);
}

TEST_F(FaultPair, StalledDoorbellIsLatencyNotError) {
  open("stall_us=300", 1000);
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  a_.sq.post(write(0));
  ASSERT_TRUE(wait(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_GE(passes, 300u);
  EXPECT_EQ(a_.dev->stats().stalls, 1u);
  EXPECT_EQ(a_.dev->stats().error_cqes, 0u);
}

TEST_F(FaultPair, DelayedCqeIsLatencyNotError) {
  open("cq_delay_us=200", 1000);
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  a_.sq.post(write(0));
  a_.sq.post(write(1));
  ASSERT_TRUE(wait(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(c.base.common.req_id, 0);
  EXPECT_GE(passes, 200u);
  ASSERT_TRUE(wait(&c));
  EXPECT_EQ(c.base.common.req_id, 1);  // the CQ stays in order
  EXPECT_GE(a_.dev->stats().delayed_cqes, 1u);
}

TEST(FaultPlanInstall, BadPlanFailsDeviceCreation) {
  DeviceOptions o;
  o.fabric = std::make_shared<InProcFabric>();
  o.engine_thread = false;
  o.log = log_to_stderr;
  std::unique_ptr<EmuDevice> dev;
  o.fault_plan = "drop=0.1;colour=blue";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(create_device(o, &dev), -EINVAL);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("colour"), std::string::npos) << log;
  o.fault_plan.clear();
  setenv("FI_EFA_EMU_FAULTS", "drop=2", 1);
  std::string err;
  EXPECT_EQ(device_options_from_env(&o, &err), -EINVAL);
  EXPECT_NE(err.find("FI_EFA_EMU_FAULTS"), std::string::npos) << err;
  EXPECT_NE(err.find("drop=2"), std::string::npos) << err;
  setenv("FI_EFA_EMU_FAULTS", "seed=1;drop=0.5", 1);
  ASSERT_EQ(device_options_from_env(&o, &err), 0) << err;
  EXPECT_EQ(create_device(o, &dev), 0);
  unsetenv("FI_EFA_EMU_FAULTS");
}

TEST(StrictMode, DoorbellBeforeWqeNamesQpAndSlot) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto body = [] {
    auto fabric = std::make_shared<InProcFabric>();
    DeviceOptions o = inline_options(fabric);
    o.strict = true;
    Node n;
    n.open(o);
    n.make_qp();
    bring_up(n.qp, n.qkey);
    n.sq.pc = 1;
    n.sq.ring();  // the doorbell covers slot 0, which holds no WQE yet
    n.dev->step(64);
  };
  EXPECT_DEATH(body(), "xpufab emu fatal: .*unwritten WQE.* on QP 1 slot 0");
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
