// Answers by position (DeviceOptions::position_answers) between two devices on two shm fabric
// objects, so that every packet crosses a mailbox as between two processes: what ran as asked is
// answered by the responder's executed mark, everything else by a packet, and a device that
// turned them off, or whose requester stopped polling, gets packets only.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "emu/fabric.h"
#include "emu/net/shm_fabric.h"
#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

std::shared_ptr<net::ShmFabric> shm(const std::string& key) {
  net::ShmFabricOptions o;
  const char* t = std::getenv("TEST_TMPDIR");
  o.base_dir = t != nullptr ? t : "/tmp";
  o.key = key + std::to_string(getpid());
  std::shared_ptr<net::ShmFabric> f;
  EXPECT_EQ(net::ShmFabric::create(o, &f), 0);
  return f;
}

class PositionAnswers : public ::testing::Test {
 protected:
  void open(bool positions = true, bool engine_threads = false) {
    const std::string key = "positions" + std::to_string(++instance_);
    fa_ = shm(key);
    fb_ = shm(key);
    ASSERT_TRUE(fa_ && fb_);
    DeviceOptions oa = inline_options(fa_), ob = inline_options(fb_);
    oa.position_answers = ob.position_answers = positions;
    oa.engine_thread = ob.engine_thread = engine_threads;
    oa.response_timeout_us = ob.response_timeout_us = 200000;
    ASSERT_NO_FATAL_FAILURE(open_pair(&a, &b, oa, ob, &ah_));
  }
  void TearDown() override {
    a.dev.reset();
    b.dev.reset();
  }
  // Waits for A's next CQE: stepping both devices, or (engine threads) only reading the CQ.
  bool a_cqe(efa_io_rx_cdesc_ex* c, bool step = true) {
    if (step) return wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, c);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (a.cqr.poll(c)) return true;
      std::this_thread::yield();
    }
    return false;
  }
  // Posts a 64-byte SEND from A and returns its TX CQE status.
  int send(uint32_t qkey, bool step = true) {
    Wqe w = send_wqe(next_id_++, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), qkey);
    add_sge(&w, a.addr(0), 64, a.mr->lkey());
    a.sq.post(w);
    efa_io_rx_cdesc_ex c;
    if (!a_cqe(&c, step)) return -1;
    EXPECT_EQ(q_type(c), EFA_IO_SEND_QUEUE);
    return c.base.common.status;
  }
  int rdma(uint8_t op, size_t local_off, size_t remote_off, uint32_t len) {
    Wqe w = rdma_wqe(op, next_id_++, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey,
                     a.addr(local_off), a.mr->lkey(), b.addr(remote_off), b.mr->rkey(), len);
    a.sq.post(w);
    efa_io_rx_cdesc_ex c;
    if (!a_cqe(&c)) return -1;
    return c.base.common.status;
  }
  void post_receives(int n) {
    for (int i = 0; i < n; ++i) {
      b.rq.post(static_cast<uint16_t>(rx_id_), {{b.at(65536 + 64 * (rx_id_ % 256)), 64, b.mr->lkey()}});
      ++rx_id_;
    }
  }

  Node a, b;
  Ah* ah_ = nullptr;
  uint16_t next_id_ = 1;
  int rx_id_ = 0;
  std::shared_ptr<net::ShmFabric> fa_, fb_;
  static int instance_;
};
int PositionAnswers::instance_ = 0;

TEST_F(PositionAnswers, SendsAndWritesAreAnsweredByTheMark) {
  open();
  post_receives(8);
  for (int i = 0; i < 8; ++i) {
    std::memset(a.at(0), 10 + i, 64);
    ASSERT_EQ(send(b.qkey), EFA_IO_COMP_STATUS_OK) << i;
    efa_io_rx_cdesc_ex c;
    ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &c));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
    EXPECT_EQ(b.at(65536 + 64 * i)[63], 10 + i);
  }
  for (int i = 0; i < 4; ++i) {
    std::memset(a.at(4096), 20 + i, 4096);
    ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 4096, 8192, 4096), EFA_IO_COMP_STATUS_OK) << i;
    EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), 4096), 0);
  }
  // The first answer too: B's address handle to A opened A's mailbox, where A's wish is read,
  // when it was made. (A slow machine may see a timeout send a request again: its repeat is
  // answered by the mark too.)
  const Stats sa = a.dev->stats(), sb = b.dev->stats();
  EXPECT_EQ(sa.answered_by_position, 12u);
  EXPECT_EQ(sb.position_answers, 12u + sa.retransmits);
  EXPECT_EQ(sb.packets_tx, 0u);
  EXPECT_EQ(sa.packets_rx, 0u);
}

// A read's data, an RNR and an error travel as packets; each request is answered once, either way.
TEST_F(PositionAnswers, ReadsRnrsAndErrorsAreAnsweredByPacket) {
  open();
  std::memset(b.at(8192), 0x5a, 4096);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192, 4096), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), 4096), 0);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192, 4096), EFA_IO_COMP_STATUS_OK);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192, 0), EFA_IO_COMP_STATUS_OK);  // no data, still a packet
  EXPECT_EQ(a.dev->stats().answered_by_position, 0u);
  EXPECT_EQ(b.dev->stats().packets_tx, 3u);

  // No receive posted: RNR by packet, then the retry that finds one is answered by the mark.
  Wqe w = send_wqe(next_id_++, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey);
  add_sge(&w, a.addr(0), 64, a.mr->lkey());
  a.sq.post(w);
  for (int i = 0; i < 200 && b.dev->stats().rnr_naks == 0; ++i) {
    a.dev->step(64);
    b.dev->step(64);
  }
  ASSERT_GT(b.dev->stats().rnr_naks, 0u);
  post_receives(1);
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(a_cqe(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a.dev->stats().answered_by_position, 1u);

  ASSERT_EQ(send(b.qkey + 1), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);  // a wrong qkey
  EXPECT_EQ(a.dev->stats().answered_by_position, 1u);
  const Stats sa = a.dev->stats(), sb = b.dev->stats();
  EXPECT_EQ(sa.answered_by_position + sa.packets_rx, sb.position_answers + sb.packets_tx);
  EXPECT_EQ(sa.timeouts, 0u);
}

TEST_F(PositionAnswers, OffAnswersEveryRequestByPacket) {
  open(false);
  post_receives(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(send(b.qkey), EFA_IO_COMP_STATUS_OK) << i;
  EXPECT_EQ(a.dev->stats().answered_by_position, 0u);
  EXPECT_EQ(b.dev->stats().position_answers, 0u);
  EXPECT_EQ(b.dev->stats().packets_tx, 4u);
}

// A requester whose device nobody polls (its engine thread went to sleep) is answered by packet,
// which wakes it; one that polls again is answered by the mark again.
TEST_F(PositionAnswers, ARequesterThatStoppedPollingGetsPackets) {
  open();
  post_receives(3);
  ASSERT_EQ(send(b.qkey), EFA_IO_COMP_STATUS_OK);
  ASSERT_EQ(send(b.qkey), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a.dev->stats().answered_by_position, 2u);
  EXPECT_EQ(b.dev->stats().packets_tx, 0u);
  fa_->poll_rx_stop(a.dev->gid());  // what the engine thread says before it sleeps
  ASSERT_EQ(send(b.qkey), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a.dev->stats().answered_by_position, 2u);
  EXPECT_EQ(b.dev->stats().packets_tx, 1u);
}

// With engine threads that go to sleep between requests, every request completes soon, answered
// by the mark or by a packet (a slow machine may see a timeout send one again: its repeat is
// answered too).
TEST_F(PositionAnswers, SleepingEnginesAreWokenByTheirAnswers) {
  open(true, true);
  post_receives(6);
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(send(b.qkey, false), EFA_IO_COMP_STATUS_OK) << i;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << i;
    if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // engines idle
  }
  const Stats sa = a.dev->stats(), sb = b.dev->stats();
  EXPECT_GE(sa.answered_by_position + sa.packets_rx, 6u);
  EXPECT_EQ(sb.position_answers + sb.packets_tx, 6u + sa.retransmits);
  EXPECT_EQ(sa.timeouts, 0u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
