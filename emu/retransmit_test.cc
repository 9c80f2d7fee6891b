// Retransmission on every fabric: the timeout follows the measured round trip, backs
// off, fast retransmit recovers a request that later answers overtook, a duplicate of an
// executed request is answered again without running twice, and UNRESP_REMOTE comes only after
// the peer stayed silent for response_timeout x (max_retransmits + 1). A virtual clock (1 us per
// engine pass, one thread) makes every count exact. A requester without a fault plan on a
// lossless fabric retransmits too, so that a responder that loses packets costs time, not data,
// and a clean path costs no packet beyond one request and one answer per operation.
#include <gtest/gtest.h>

#include <memory>

#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

constexpr uint64_t kPassNs = 1000;

// Loses chosen packets: requests leaving the requester (by their index among requests sent),
// or responses arriving at it.
class LoseChosen : public FaultHooks {
 public:
  FaultDecision at(const FaultContext& ctx) override {
    FaultDecision d;
    if (ctx.point == FaultPoint::kPacketOut && !ctx.response) {
      uint64_t n = requests_out++;
      if (drop_all_requests || (n >= drop_from && n < drop_from + drop_count)) d.action = FaultAction::kDrop;
    } else if (ctx.point == FaultPoint::kPacketIn && ctx.response && responses_to_drop > 0) {
      --responses_to_drop;
      d.action = FaultAction::kDrop;
    }
    return d;
  }
  uint64_t requests_out = 0;
  uint64_t drop_from = ~uint64_t{0};
  uint64_t drop_count = 0;
  bool drop_all_requests = false;
  int responses_to_drop = 0;
};

class Retransmit : public ::testing::Test {
 protected:
  // faults_at: the device whose packets hooks_ loses (A, B or neither).
  enum class At { kRequester, kResponder, kNone };
  void open(uint32_t min_rto_us, uint32_t response_timeout_us, uint32_t max_retransmits,
            At faults_at = At::kRequester) {
    auto fabric = std::make_shared<InProcFabric>();
    fabric_ = fabric;
    DeviceOptions oa = inline_options(fabric), ob = inline_options(fabric);
    oa.step_clock_ns = ob.step_clock_ns = kPassNs;
    if (faults_at == At::kRequester) oa.faults = &hooks_;
    if (faults_at == At::kResponder) ob.faults = &responder_hooks_;
    oa.min_rto_us = min_rto_us;
    oa.initial_rto_us = min_rto_us;
    oa.response_timeout_us = response_timeout_us;
    oa.max_retransmits = max_retransmits;
    ASSERT_NO_FATAL_FAILURE(open_pair(&a_, &b_, oa, ob, &ab_));
  }
  Wqe write(uint16_t id) {
    return rdma_wqe(EFA_IO_RDMA_WRITE, id, ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey,
                    a_.addr(64 * id), a_.mr->lkey(), b_.addr(64 * id), b_.mr->rkey(), 64);
  }
  // Steps both devices until A has a CQE; counts the passes.
  bool next(efa_io_rx_cdesc_ex* c, uint64_t* passes, uint64_t limit = 2000000) {
    for (uint64_t i = 0; i < limit; ++i) {
      if (a_.cqr.poll(c)) return true;
      a_.dev->step(64);
      b_.dev->step(64);
      ++*passes;
    }
    return false;
  }
  // Takes up to n CQEs (each given at most 1000 passes), expecting each to be a success; returns
  // how many came.
  int completed_ok(int n, uint64_t* passes) {
    int ok = 0;
    efa_io_rx_cdesc_ex c;
    while (ok < n && next(&c, passes, 1000)) {
      EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
      ++ok;
    }
    return ok;
  }
  // Completes n writes one at a time, so that A has timed the path to B.
  void warm_up(int n) {
    for (int i = 0; i < n; ++i) {
      a_.sq.post(write(static_cast<uint16_t>(i)));
      efa_io_rx_cdesc_ex c;
      uint64_t p = 0;
      ASSERT_TRUE(next(&c, &p));
      ASSERT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
    }
  }
  LoseChosen hooks_;
  // At the responder: requests arrive there (kPacketIn, not a response), answers leave it.
  class LoseAtResponder : public FaultHooks {
   public:
    FaultDecision at(const FaultContext& ctx) override {
      FaultDecision d;
      if (ctx.point == FaultPoint::kPacketIn && !ctx.response && requests_to_drop > 0) {
        --requests_to_drop;
        d.action = FaultAction::kDrop;
      } else if (ctx.point == FaultPoint::kPacketOut && ctx.response && answers_to_drop > 0) {
        --answers_to_drop;
        d.action = FaultAction::kDrop;
      }
      return d;
    }
    int requests_to_drop = 0;
    int answers_to_drop = 0;
  } responder_hooks_;
  Node a_, b_;
  Ah* ab_ = nullptr;
  std::shared_ptr<Fabric> fabric_;
};

TEST_F(Retransmit, TimeoutFollowsTheMeasuredRoundTrip) {
  // Before this change the timeout was response_timeout_us (here 200 ms = 200,000 passes).
  open(50, 200000, 3);
  warm_up(20);
  hooks_.drop_from = hooks_.requests_out;
  hooks_.drop_count = 1;
  a_.sq.post(write(30));
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  ASSERT_TRUE(next(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a_.dev->stats().retransmits, 1u);
  // A round trip here is a few passes, so the floor (50 us) is the timeout.
  EXPECT_GE(passes, 50u);
  EXPECT_LE(passes, 100u);
}

TEST_F(Retransmit, TimeoutBacksOffAndUnrespComesOnlyAfterTheSilenceLimit) {
  // Silence limit: 2 ms x (3 + 1) = 8 ms = 8,000 passes. Timeouts 50, 100, ... 1600, 2000 us.
  open(50, 2000, 3);
  warm_up(4);
  hooks_.drop_all_requests = true;
  a_.sq.post(write(9));
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  ASSERT_TRUE(next(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
  EXPECT_GE(passes, 7990u);
  EXPECT_LE(passes, 8010u);
  // 50+100+...+1600 = 3150 us, then 2000 us each: 8 retransmissions fit into 8 ms. The count of
  // retransmissions no longer decides when to give up.
  EXPECT_EQ(a_.dev->stats().retransmits, 8u);
  EXPECT_EQ(a_.dev->stats().timeouts, 1u);
}

TEST_F(Retransmit, OneTimerPerPathRetransmitsEveryLostRequestAtItsOwnTimeout) {
  // The path to B has one timer for all its requests in flight. The last four of eight lost
  // requests see no later answers (no fast retransmit): each comes back at its timeout (50 us).
  open(50, 200000, 3);
  warm_up(20);
  hooks_.drop_from = hooks_.requests_out + 4;
  hooks_.drop_count = 4;
  for (uint16_t id = 30; id < 38; ++id) a_.sq.post(write(id));
  uint64_t passes = 0;
  EXPECT_EQ(completed_ok(8, &passes), 8);
  EXPECT_EQ(a_.dev->stats().retransmits, 4u);
  EXPECT_GE(passes, 50u);
  EXPECT_LE(passes, 100u);
  // Two lost requests sent 30 passes apart: the timer that fired for the first is armed again
  // for the second's later timeout.
  hooks_.drop_from = hooks_.requests_out;
  hooks_.drop_count = 1;
  a_.sq.post(write(40));
  for (int i = 0; i < 30; ++i) {
    a_.dev->step(64);
    b_.dev->step(64);
  }
  hooks_.drop_from = hooks_.requests_out;
  a_.sq.post(write(41));
  passes = 30;
  efa_io_rx_cdesc_ex c;
  for (int done = 0; done < 2; ++done) {
    ASSERT_TRUE(next(&c, &passes, 1000));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
    EXPECT_EQ(c.base.common.req_id, 40 + done);
  }
  EXPECT_EQ(a_.dev->stats().retransmits, 6u);
  EXPECT_GE(passes, 80u);
  EXPECT_LE(passes, 150u);
}

TEST_F(Retransmit, FastRetransmitRecoversARequestOvertakenByLaterAnswers) {
  // A 100 ms floor: only fast retransmit can bring the lost request back within a few passes.
  open(100000, 200000, 3);
  warm_up(2);
  hooks_.drop_from = hooks_.requests_out;
  hooks_.drop_count = 1;
  for (uint16_t id = 10; id < 18; ++id) a_.sq.post(write(id));
  uint64_t passes = 0;
  EXPECT_EQ(completed_ok(8, &passes), 8);
  EXPECT_LT(passes, 100u);
  EXPECT_EQ(a_.dev->stats().retransmits, 1u);
}

TEST_F(Retransmit, DuplicateOfAnExecutedRequestIsAnsweredAgain) {
  open(50, 200000, 3);
  warm_up(2);
  // One receive only: a SEND that ran twice would need a second one (and meet RNR).
  b_.rq.post(5, {{b_.at(0), 64, b_.mr->lkey()}});
  hooks_.responses_to_drop = 1;
  Wqe s = send_wqe(40, ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  add_sge(&s, a_.addr(0), 64, a_.mr->lkey());
  a_.sq.post(s);
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  ASSERT_TRUE(next(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a_.dev->stats().retransmits, 1u);
  EXPECT_EQ(b_.dev->stats().rnr_naks, 0u);
  efa_io_rx_cdesc_ex r;
  ASSERT_TRUE(b_.cqr.poll(&r));
  EXPECT_EQ(r.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_FALSE(b_.cqr.poll(&r));
  EXPECT_EQ(b_.dev->qp_stats()[0].rx_cqes, 1u);
}

TEST_F(Retransmit, RequesterWithoutAPlanRecoversWhatTheResponderLoses) {
  // Before, a requester on a lossless fabric with no plan of its own never sent again: the
  // dropped request waited out the whole silence limit and failed with UNRESP_REMOTE.
  open(10, 200000, 3, At::kResponder);
  warm_up(4);
  responder_hooks_.requests_to_drop = 1;
  a_.sq.post(write(20));
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  ASSERT_TRUE(next(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a_.dev->stats().retransmits, 1u);
  // The floor of a device that expects no loss is initial_rto_us (1 ms), far below 200 ms.
  EXPECT_LE(passes, 5000u);
  // A lost answer to a SEND: the repeat is answered from memory, the receive is used once.
  b_.rq.post(5, {{b_.at(0), 64, b_.mr->lkey()}});
  responder_hooks_.answers_to_drop = 1;
  Wqe s = send_wqe(41, ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  add_sge(&s, a_.addr(0), 64, a_.mr->lkey());
  a_.sq.post(s);
  ASSERT_TRUE(next(&c, &passes));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a_.dev->stats().retransmits, 2u);
  EXPECT_EQ(b_.dev->stats().rnr_naks, 0u);
  efa_io_rx_cdesc_ex r;
  ASSERT_TRUE(b_.cqr.poll(&r));
  EXPECT_FALSE(b_.cqr.poll(&r));
}

TEST_F(Retransmit, ACleanPathSendsEachRequestOnce) {
  open(10, 200000, 3, At::kNone);
  for (uint16_t id = 0; id < 64; ++id) a_.sq.post(write(id));
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(next(&c, &passes));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  }
  EXPECT_EQ(a_.dev->stats().retransmits, 0u);
  EXPECT_EQ(a_.dev->stats().packets_tx, 64u);
  EXPECT_EQ(b_.dev->stats().packets_tx, 64u);
}

TEST_F(Retransmit, AReopenedRequesterIsNotTakenForItsPredecessor) {
  // A device reopened under the same GID numbers its requests as its predecessor did; the
  // responder, which remembers what it executed, must still run them.
  open(10, 200000, 3, At::kNone);
  b_.rq.post(1, {{b_.at(0), 64, b_.mr->lkey()}});
  b_.rq.post(2, {{b_.at(64), 64, b_.mr->lkey()}});
  Wqe s = send_wqe(40, ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  add_sge(&s, a_.addr(0), 64, a_.mr->lkey());
  a_.sq.post(s);
  efa_io_rx_cdesc_ex c;
  uint64_t passes = 0;
  ASSERT_TRUE(next(&c, &passes));
  ASSERT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  const Gid ga = a_.dev->gid();
  a_.dev.reset();
  Node a2;
  DeviceOptions o = inline_options(fabric_);
  o.step_clock_ns = kPassNs;
  o.has_gid = true;
  o.gid = ga;
  a2.open(o);
  a2.make_qp();
  bring_up(a2.qp, a2.qkey);
  Gid gb = b_.dev->gid();
  Ah* ah = nullptr;
  ASSERT_EQ(a2.dev->create_ah(a2.pd, gb.data(), &ah), 0);
  Wqe s2 = send_wqe(41, ah->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  add_sge(&s2, a2.addr(0), 64, a2.mr->lkey());
  a2.sq.post(s2);
  bool done = false;
  for (int i = 0; i < 100000 && !done; ++i) {
    done = a2.cqr.poll(&c);
    a2.dev->step(64);
    b_.dev->step(64);
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex r;
  ASSERT_TRUE(b_.cqr.poll(&r));
  ASSERT_TRUE(b_.cqr.poll(&r)) << "the second SEND was answered from memory, not received";
  EXPECT_EQ(b_.dev->qp_stats()[0].rx_cqes, 2u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
