// A peer whose engine has not run since a request was sent (a process starved of CPU) is waited
// for beyond the silence limit, up to kStarvedSilences of them, rather than reported
// unresponsive; one whose engine runs but never answers fails at the usual limit.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "emu/net/shm_fabric.h"
#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

class StarvedPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    net::ShmFabricOptions o;
    const char* t = std::getenv("TEST_TMPDIR");
    o.base_dir = t != nullptr ? t : "/tmp";
    o.key = "starved" + std::to_string(getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(net::ShmFabric::create(o, &fa_), 0);
    ASSERT_EQ(net::ShmFabric::create(o, &fb_), 0);
    // Silence limit: 2 ms x (3 + 1).
    ASSERT_NO_FATAL_FAILURE(open_pair(&a, &b, inline_options(fa_), inline_options(fb_), &ah_));
    b.dev->step(64);
  }
  void TearDown() override {
    a.dev.reset();
    b.dev.reset();
  }
  void post_write() {
    std::memset(a.at(0), 0x5a, 4096);
    a.sq.post(rdma_wqe(EFA_IO_RDMA_WRITE, 1, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey,
                       a.addr(0), a.mr->lkey(), b.addr(8192), b.mr->rkey(), 4096));
  }
  // Steps A alone for `ms`; true if a CQE came.
  bool step_a(int ms, efa_io_rx_cdesc_ex* c) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      if (a.cqr.poll(c)) return true;
      a.dev->step(64);
    }
    return a.cqr.poll(c);
  }
  Node a, b;
  Ah* ah_ = nullptr;
  std::shared_ptr<net::ShmFabric> fa_, fb_;
};

TEST_F(StarvedPeer, IsWaitedForAndAnswersLate) {
  post_write();
  efa_io_rx_cdesc_ex c;
  EXPECT_FALSE(step_a(40, &c));  // five silence limits: B's engine has not run
  // A's timer found the request unread by B and waited. Stepped on until it has, however long the
  // scheduler kept this thread from running during the 40 ms.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool cqe = false;
  while (a.dev->stats().stalled_waits + a.dev->stats().unserved_waits == 0 &&
         std::chrono::steady_clock::now() < limit && !(cqe = a.cqr.poll(&c)))
    a.dev->step(64);
  EXPECT_FALSE(cqe);
  EXPECT_GT(a.dev->stats().stalled_waits + a.dev->stats().unserved_waits, 0u);
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(b.at(8192)[4095], 0x5a);
}

TEST_F(StarvedPeer, IsGivenUpOnAfterTheLongerLimit) {
  post_write();
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(step_a(2000, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);  // never answered
  EXPECT_GT(a.dev->stats().stalled_waits + a.dev->stats().unserved_waits, 0u);
  EXPECT_EQ(a.dev->stats().timeouts, 1u);
}

// While B has not read the request, A knows it is not lost: it waits rather than sends copies
// that would only lengthen B's backlog. Once B runs, one copy is served and answered.
TEST_F(StarvedPeer, AnUnreadRequestIsNotSentAgain) {
  post_write();
  efa_io_rx_cdesc_ex c;
  EXPECT_FALSE(step_a(40, &c));  // many retransmission timeouts (initial RTO 1 ms)
  const Stats s = a.dev->stats();
  EXPECT_EQ(s.retransmits, 0u);
  EXPECT_GT(s.unserved_waits, 0u);
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(b.at(8192)[4095], 0x5a);
  EXPECT_EQ(b.dev->stats().packets_rx, 1u);  // one request reached B
}

// A request B read and dropped (a fault at its arrival) is lost: A sends it again as before.
TEST_F(StarvedPeer, ARequestReadAndLostIsSentAgain) {
  struct DropFirstArrival : FaultHooks {
    bool dropped = false;
    FaultDecision at(const FaultContext& c) override {
      FaultDecision d;
      if (c.point == FaultPoint::kPacketIn && !dropped) {
        dropped = true;
        d.action = FaultAction::kDrop;
      }
      return d;
    }
  } hooks;
  b.dev.reset();
  DeviceOptions ob = inline_options(fb_);
  ob.faults = &hooks;
  b.open(ob);
  b.make_qp();
  bring_up(b.qp, b.qkey);
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ah_), 0);
  Ah* back = nullptr;
  ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &back), 0);
  post_write();
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(b.at(8192)[4095], 0x5a);
  EXPECT_GE(a.dev->stats().retransmits, 1u);
  EXPECT_EQ(b.dev->stats().dropped_packets, 1u);
}

// B's engine runs but its responder drops every request: that is unresponsive, not starved.
TEST_F(StarvedPeer, ARunningPeerThatNeverAnswersFailsAtTheUsualLimit) {
  b.dev.reset();
  DeviceOptions ob = inline_options(fb_);
  ob.fault_plan = "drop=100%";
  b.open(ob);
  b.make_qp();
  bring_up(b.qp, b.qkey);
  Gid gb = b.dev->gid();
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ah_), 0);
  post_write();
  efa_io_rx_cdesc_ex c;
  bool got = false;
  auto t0 = std::chrono::steady_clock::now();
  while (!got && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)) {
    got = a.cqr.poll(&c);
    a.dev->step(64);
    b.dev->step(64);
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  // Failed at the silence limit itself, not after the longer one, over which a stalled peer is
  // waited for at every retransmission timeout (tens of waits). One or two waits may come first:
  // a preemption between A's last copy and B's next pass lets the limit pass before a pass of
  // B's that began after the copy is on record, and B's next passes put one there.
  EXPECT_LE(a.dev->stats().stalled_waits, 2u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
