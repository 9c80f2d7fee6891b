// A peer that has not read its mailbox (a process starved of CPU) is waited for beyond the
// silence limit, up to kStarvedSilences of them, rather than reported unresponsive.
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
    // B's receive thread stays parked for seconds after B's engine polled once: what is sent
    // to B then waits in its mailbox, as in a process that does not get the CPU.
    o.park_us = 30 * 1000 * 1000;
    ASSERT_EQ(net::ShmFabric::create(o, &fb_), 0);
    DeviceOptions oa = inline_options(fa_), ob = inline_options(fb_);
    a.open(oa);  // silence limit: 2 ms x (3 + 1)
    b.open(ob);
    a.make_qp();
    b.make_qp();
    bring_up(a.qp, a.qkey);
    bring_up(b.qp, b.qkey);
    Gid gb = b.dev->gid(), ga = a.dev->gid();
    ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ah_), 0);
    Ah* back = nullptr;
    ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &back), 0);
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
  EXPECT_FALSE(step_a(40, &c));  // five silence limits: B has not read its mailbox
  EXPECT_TRUE(fa_->peer_backlogged(b.dev->gid()));  // what A sent is still unread
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(b.at(8192)[4095], 0x5a);
}

TEST_F(StarvedPeer, IsGivenUpOnAfterTheLongerLimit) {
  post_write();
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(step_a(2000, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);  // never answered
  EXPECT_GE(a.dev->stats().timeouts, 1u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
