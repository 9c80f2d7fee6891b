// The device data path (device/efa_sq.h, efa_rq.h, efa_cq.h) against the emulated NIC with its
// engine threads running: every op posted through efa_sq_post/efa_rq_post and completed through
// efa_cq_poll, and many threads posting to one SQ at once (run under TSan too). Without engine
// threads: an idle device's progress() runs no pass, and every kind of work still gets done.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

struct DpNode {
  Node n;
  efa_sq sq{};
  efa_rq rq{};
  std::vector<uint64_t> sq_scratch, rq_scratch;

  void open(std::shared_ptr<Fabric> fabric, uint32_t depth, uint32_t cq_entries,
            bool engine_thread = true) {
    DeviceOptions o;
    o.fabric = std::move(fabric);
    o.engine_thread = engine_thread;
    o.idle_sleep_max_us = 200;
    n.open(o);
    n.make_qp(0, depth, cq_entries, 1);
    bring_up(n.qp, n.qkey);
    efa_dp_wq_attr s = {n.sq.sq.buffer, n.sq.sq.entry_size, n.sq.sq.num_entries, n.sq.sq.doorbell,
                        n.sq.sq.max_batch};
    efa_dp_wq_attr r = {n.rq.rq.buffer, n.rq.rq.entry_size, n.rq.rq.num_entries, n.rq.rq.doorbell,
                        n.rq.rq.max_batch};
    sq_scratch.resize(efa_sq_scratch_size(s.num_entries) / 8 + 1);
    rq_scratch.resize(efa_rq_scratch_size(r.num_entries) / 8 + 1);
    ASSERT_EQ(efa_sq_init(&sq, &s, 2, sq_scratch.data(), sq_scratch.size() * 8), 0);
    ASSERT_EQ(efa_rq_init(&rq, &r, 1, rq_scratch.data(), rq_scratch.size() * 8), 0);
  }
  // Polls one CQE, returning the slot of its queue; waits up to ~5 s.
  bool poll(efa_dp_cqe* c) {
    for (int i = 0; i < 5000000; ++i) {
      if (efa_cq_poll(&n.cqr.cq, c) == 0) {
        uint64_t ctx;
        if (c->q_type == EFA_IO_SEND_QUEUE) {
          EXPECT_EQ(efa_sq_complete(&sq, c->req_id, &ctx), 0);
        } else if (!c->unsolicited) {
          EXPECT_EQ(efa_rq_complete(&rq, c->req_id, &ctx), 0);
        }
        efa_cq_update_db(&n.cqr.cq, 0);
        return true;
      }
      n.dev->progress(32);
    }
    return false;
  }
};

class DpPair : public ::testing::Test {
 protected:
  virtual bool engine_threads() const { return true; }
  void SetUp() override {
    auto fabric = std::make_shared<InProcFabric>();
    a_.open(fabric, 256, 1024, engine_threads());
    b_.open(fabric, 256, 1024, engine_threads());
    Gid gb = b_.n.dev->gid(), ga = a_.n.dev->gid();
    ASSERT_EQ(a_.n.dev->create_ah(a_.n.pd, gb.data(), &ab_), 0);
    ASSERT_EQ(b_.n.dev->create_ah(b_.n.pd, ga.data(), &ba_), 0);
  }
  efa_dp_wr wr(uint32_t op) {
    efa_dp_wr w;
    std::memset(&w, 0, sizeof(w));
    w.op = op;
    w.ah = ab_->ahn();
    w.dest_qpn = static_cast<uint16_t>(b_.n.qp->qpn());
    w.qkey = b_.n.qkey;
    return w;
  }
  DpNode a_, b_;
  backend::Ah* ab_ = nullptr;
  backend::Ah* ba_ = nullptr;
};

TEST_F(DpPair, EveryOpThroughTheDataPath) {
  efa_dp_sge rsge = {b_.n.addr(0), 256, b_.n.mr->lkey()};
  ASSERT_EQ(efa_rq_post(&b_.rq, &rsge, 1, 1), 0);
  ASSERT_EQ(efa_rq_post(&b_.rq, &rsge, 1, 2), 0);
  std::memcpy(a_.n.at(0), "payload", 7);
  efa_dp_wr s = wr(EFA_DP_OP_SEND);
  s.num_sge = 1;
  s.sge[0] = {a_.n.addr(0), 7, a_.n.mr->lkey()};
  s.flags = EFA_DP_WR_IMM;
  s.imm = 7;
  ASSERT_EQ(efa_sq_post(&a_.sq, &s), 0);
  efa_dp_cqe c;
  ASSERT_TRUE(b_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(c.byte_len, 7u);
  EXPECT_EQ(c.imm, 7u);
  EXPECT_EQ(std::memcmp(b_.n.at(0), "payload", 7), 0);
  ASSERT_TRUE(a_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);

  for (int i = 0; i < 512; ++i) b_.n.buf[4096 + i] = static_cast<uint8_t>(i);
  efa_dp_wr r = wr(EFA_DP_OP_RDMA_READ);
  r.num_sge = 1;
  r.sge[0] = {a_.n.addr(4096), 512, a_.n.mr->lkey()};
  r.remote_addr = b_.n.addr(4096);
  r.rkey = b_.n.mr->rkey();
  ASSERT_EQ(efa_sq_post(&a_.sq, &r), 0);
  ASSERT_TRUE(a_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a_.n.at(4096), b_.n.at(4096), 512), 0);

  efa_dp_wr w = wr(EFA_DP_OP_RDMA_WRITE);
  w.num_sge = 1;
  w.sge[0] = {a_.n.addr(0), 7, a_.n.mr->lkey()};
  w.remote_addr = b_.n.addr(9000);
  w.rkey = b_.n.mr->rkey();
  w.flags = EFA_DP_WR_IMM;
  w.imm = 9;
  ASSERT_EQ(efa_sq_post(&a_.sq, &w), 0);
  ASSERT_TRUE(b_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(c.op_type, EFA_IO_RDMA_WRITE);
  EXPECT_EQ(c.byte_len, 7u);
  EXPECT_EQ(c.imm, 9u);
  EXPECT_EQ(std::memcmp(b_.n.at(9000), "payload", 7), 0);
  ASSERT_TRUE(a_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);

  w.rkey ^= 0x20000;
  ASSERT_EQ(efa_sq_post(&a_.sq, &w), 0);
  ASSERT_TRUE(a_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
}

TEST_F(DpPair, ManyThreadsPostToOneSq) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 300;
  std::atomic<int> completed{0}, errors{0};
  std::atomic<bool> done{false};
  // One poller gives slots back; posters retry on -FI_EAGAIN (queue full).
  std::thread poller([&] {
    efa_dp_cqe c;
    while (completed.load() < kThreads * kPerThread) {
      if (efa_cq_poll(&a_.n.cqr.cq, &c) == 0) {
        uint64_t ctx;
        if (efa_sq_complete(&a_.sq, c.req_id, &ctx) != 0) errors++;
        if (c.status != EFA_IO_COMP_STATUS_OK) errors++;
        efa_cq_update_db(&a_.n.cqr.cq, 0);
        completed++;
      } else {
        std::this_thread::yield();
      }
    }
    done = true;
  });
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        efa_dp_wr w = wr(EFA_DP_OP_RDMA_WRITE);
        w.num_sge = 1;
        w.sge[0] = {a_.n.addr(static_cast<size_t>(t) * 64), 64, a_.n.mr->lkey()};
        w.remote_addr = b_.n.addr(static_cast<size_t>(t * kPerThread + i) * 64);
        w.rkey = b_.n.mr->rkey();
        int rc;
        while ((rc = efa_sq_post(&a_.sq, &w)) == -FI_EAGAIN) std::this_thread::yield();
        if (rc != 0) errors++;
      }
    });
  }
  for (auto& p : posters) p.join();
  poller.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(errors.load(), 0);
  Stats s = a_.n.dev->stats();
  EXPECT_EQ(s.wqes, static_cast<uint64_t>(kThreads * kPerThread));
  for (int k = 0; k < 6; ++k) EXPECT_EQ(s.diag[k], 0u) << diag_name(static_cast<DiagKind>(k));
}

// Only the callers' progress() calls move these devices.
class CallerDrivenPair : public DpPair {
 protected:
  bool engine_threads() const override { return false; }
  // Calls progress() until a pass vouched for the device's idleness.
  static void settle(EmuDevice* dev) {
    for (int i = 0; i < 1000 && dev->stats().idle_polls == 0; ++i) dev->progress(32);
    ASSERT_GT(dev->stats().idle_polls, 0u);
  }
};

TEST_F(CallerDrivenPair, AnIdleDevicesProgressRunsAPassAtMostEvery50Us) {
  settle(a_.n.dev.get());
  const Stats before = a_.n.dev->stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a_.n.dev->progress(32), 0);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const Stats after = a_.n.dev->stats();
  const uint64_t passes = after.steps - before.steps, idle = after.idle_polls - before.idle_polls;
  EXPECT_EQ(passes + idle, 100u);  // each call either ran a pass or found the device idle
  // A pass vouches for the next 50 us (DeviceMutex::quiet_until_ns): a pass to start, then one
  // per 50 us that the calls took (many under a sanitizer, none on an idle machine).
  EXPECT_LE(passes, 1 + static_cast<uint64_t>(ns) / 50000);
  EXPECT_GT(idle, 0u);
}

TEST_F(CallerDrivenPair, DoorbellsAndPacketsEndIdleness) {
  settle(a_.n.dev.get());
  settle(b_.n.dev.get());
  efa_dp_sge rsge = {b_.n.addr(0), 64, b_.n.mr->lkey()};
  ASSERT_EQ(efa_rq_post(&b_.rq, &rsge, 1, 1), 0);  // an RQ doorbell at B
  settle(b_.n.dev.get());                             // ... taken in before the packet comes
  efa_dp_wr s = wr(EFA_DP_OP_SEND);
  s.num_sge = 1;
  s.sge[0] = {a_.n.addr(0), 64, a_.n.mr->lkey()};
  ASSERT_EQ(efa_sq_post(&a_.sq, &s), 0);  // an SQ doorbell at A
  a_.n.dev->progress(32);                // sends: B's inbox now holds the packet
  efa_dp_cqe c;
  ASSERT_TRUE(b_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(c.byte_len, 64u);
  ASSERT_TRUE(a_.poll(&c));  // the answer in A's inbox
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_OK);
}

TEST_F(CallerDrivenPair, AControlCallEndsIdleness) {
  efa_dp_sge rsge = {b_.n.addr(0), 64, b_.n.mr->lkey()};
  ASSERT_EQ(efa_rq_post(&b_.rq, &rsge, 1, 1), 0);
  settle(b_.n.dev.get());
  backend::QpAttr e;
  e.state = backend::QpState::kErr;
  ASSERT_EQ(b_.n.qp->modify(e, backend::kQpAttrState), 0);  // flushes the posted receive
  efa_dp_cqe c;
  ASSERT_TRUE(b_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_FLUSHED);
}

TEST_F(CallerDrivenPair, ATimerFallsDueWhileIdle) {
  // A destination no device answers for: the send waits out the unreachable timeout.
  Gid nobody{};
  nobody[15] = 0x5a;
  backend::Ah* ah = nullptr;
  ASSERT_EQ(a_.n.dev->create_ah(a_.n.pd, nobody.data(), &ah), 0);
  efa_dp_wr s = wr(EFA_DP_OP_SEND);
  s.ah = ah->ahn();
  s.num_sge = 1;
  s.sge[0] = {a_.n.addr(0), 8, a_.n.mr->lkey()};
  ASSERT_EQ(efa_sq_post(&a_.sq, &s), 0);
  efa_dp_cqe c;
  ASSERT_TRUE(a_.poll(&c));
  EXPECT_EQ(c.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  EXPECT_GT(a_.n.dev->stats().idle_polls, 0u);  // it waited idle, not in passes
}

TEST(EngineThread, IdleDeviceSleeps) {
  DeviceOptions o;
  o.fabric = std::make_shared<InProcFabric>();
  o.idle_spin_us = 10;
  o.idle_sleep_max_us = 500;
  std::unique_ptr<EmuDevice> dev;
  ASSERT_EQ(create_device(o, &dev), 0);
  // On a loaded machine the engine thread may not run for a while: wait for its first sleep
  // (bounded), then count its passes over a window of its own.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dev->stats().idle_sleeps == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Stats before = dev->stats();
  ASSERT_GT(before.idle_sleeps, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const Stats after = dev->stats();
  EXPECT_GT(after.idle_sleeps, before.idle_sleeps);
  // Sleeping, not spinning: far fewer passes than 30 ms of spinning would make.
  EXPECT_LT(after.steps - before.steps, 20000u);
}

// A device whose engine thread parks while the test thread drives it.
std::unique_ptr<EmuDevice> parking_device(uint32_t park_max_us) {
  DeviceOptions o;
  o.fabric = std::make_shared<InProcFabric>();
  o.idle_spin_us = 50;
  o.park_us = 200;
  o.park_max_us = park_max_us;
  std::unique_ptr<EmuDevice> dev;
  EXPECT_EQ(create_device(o, &dev), 0);
  return dev;
}

// Drives the device without a pause until the engine thread's park has grown to `park_us`.
bool drive_until_park(EmuDevice* dev, uint64_t park_us) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (dev->stats().longest_park_us < park_us) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    for (int i = 0; i < 1000; ++i) dev->progress(16);
  }
  return true;
}

// A caller that drives in bursts with gaps far longer than park_us (as a caller preempted on a
// loaded machine does) keeps the engine thread parked: it neither takes over nor wakes more than
// once per park_max_us.
TEST(EngineThread, ACallerPreemptedForLongerThanAParkKeepsTheEngineParked) {
  constexpr uint32_t kParkMaxUs = 200000;
  std::unique_ptr<EmuDevice> dev = parking_device(kParkMaxUs);
  ASSERT_TRUE(drive_until_park(dev.get(), kParkMaxUs));
  const Stats before = dev->stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int burst = 0; burst < 60; ++burst) {
    const auto busy = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < busy) dev->progress(16);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const Stats after = dev->stats();
  EXPECT_EQ(after.takeovers, before.takeovers);
  EXPECT_EQ(after.idle_sleeps, before.idle_sleeps);
  // A park per park_max_us of the run, and the one under way at either end.
  EXPECT_LE(after.parks - before.parks, static_cast<uint64_t>(ms * 1000 / kParkMaxUs) + 2);
}

// A caller that stops without a word (no kick, no armed CQ) is taken over within two parks: the
// engine thread then drives, and sleeps once idle.
TEST(EngineThread, ACallerThatStopsSilentlyIsTakenOver) {
  std::unique_ptr<EmuDevice> dev = parking_device(20000);
  ASSERT_TRUE(drive_until_park(dev.get(), 20000));
  const Stats before = dev->stats();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dev->stats().idle_sleeps == before.idle_sleeps && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Stats after = dev->stats();
  EXPECT_GT(after.takeovers, before.takeovers);
  EXPECT_GT(after.idle_sleeps, before.idle_sleeps);
  EXPECT_EQ(after.park_kicks, 0u);
}

// A caller that calls far less than once per park_us does not keep the engine thread parked,
// however recent its latest call: the engine thread serves the device meanwhile.
TEST(EngineThread, ARareCallerDoesNotKeepTheEngineParked) {
  std::unique_ptr<EmuDevice> dev = parking_device(20000);
  ASSERT_TRUE(drive_until_park(dev.get(), 20000));
  const Stats before = dev->stats();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dev->stats().takeovers == before.takeovers && std::chrono::steady_clock::now() < give_up) {
    dev->progress(16);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(dev->stats().takeovers, before.takeovers);
}

// A kick ends the park at once, however long it was to last.
TEST(EngineThread, AKickEndsALongPark) {
  std::unique_ptr<EmuDevice> dev = parking_device(10000000);
  ASSERT_TRUE(drive_until_park(dev.get(), 100000));
  dev->kick();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dev->stats().park_kicks == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(dev->stats().park_kicks, 0u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
