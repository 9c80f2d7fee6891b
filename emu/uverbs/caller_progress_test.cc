// Debian's libibverbs + libefa on the emulated EFA with neither the engine thread nor the service
// thread (caller_progress_test.sh): a message sent to our own QP completes only because the
// preload library drives the NIC from inside the program's post and poll calls. The polls are
// bounded, so a NIC that nobody drives fails the test instead of hanging it.
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include "testing/support/verbs_util.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using xpufab::testing::ah_to_self;
using xpufab::testing::create_srd_qp;
using xpufab::testing::open_efa_device;
using xpufab::testing::qp_to_rts;

constexpr uint32_t kQkey = 0x2222;
constexpr int kMaxPolls = 200000;
constexpr uint64_t kSendId = 9, kRecvId = 7;
constexpr char kText[] = "driven by the caller";

// One SRD QP that sends to itself; `extended` picks the ibv_cq_ex / ibv_qp_ex entry points.
struct SelfLoop {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;
  ibv_qp* qp = nullptr;
  ibv_ah* ah = nullptr;
  alignas(64) uint8_t buf[8192] = {0};

  void open(bool extended) {
    ctx = open_efa_device();
    ASSERT_NE(ctx, nullptr) << "no device: is the preload library in place?";
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    if (extended) {
      ibv_cq_init_attr_ex ca{};
      ca.cqe = 64;
      ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
      cqx = ibv_create_cq_ex(ctx, &ca);
      ASSERT_NE(cqx, nullptr) << strerror(errno);
      cq = ibv_cq_ex_to_cq(cqx);
      ibv_qp_init_attr_ex qa{};
      qa.qp_type = IBV_QPT_DRIVER;
      qa.send_cq = cq;
      qa.recv_cq = cq;
      qa.cap.max_send_wr = 16;
      qa.cap.max_recv_wr = 16;
      qa.cap.max_send_sge = 1;
      qa.cap.max_recv_sge = 1;
      qa.pd = pd;
      qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
      efadv_qp_init_attr ea{};
      ea.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
      qp = efadv_create_qp_ex(ctx, &qa, &ea, sizeof(ea));
    } else {
      cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
      ASSERT_NE(cq, nullptr) << strerror(errno);
      qp = create_srd_qp(pd, cq, cq);
    }
    ASSERT_NE(qp, nullptr) << strerror(errno);
    ASSERT_EQ(qp_to_rts(qp, kQkey, 7), 0);
    ah = ah_to_self(ctx, pd);
    ASSERT_NE(ah, nullptr) << strerror(errno);
  }

  void post_recv() {
    ibv_sge s{reinterpret_cast<uint64_t>(buf + 4096), 4096, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvId;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }

  void close() {
    if (ah) {
      EXPECT_EQ(ibv_destroy_ah(ah), 0);
    }
    if (qp) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    if (cq) {
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
    }
    if (mr) {
      EXPECT_EQ(ibv_dereg_mr(mr), 0);
    }
    if (pd) {
      EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    }
    if (ctx) {
      EXPECT_EQ(ibv_close_device(ctx), 0);
    }
  }
};

struct Seen {
  bool send = false, recv = false;
  uint32_t recv_len = 0;
  int polls = 0;
  void take(uint64_t wr_id, int status, uint32_t len) {
    EXPECT_EQ(status, IBV_WC_SUCCESS) << ibv_wc_status_str(static_cast<ibv_wc_status>(status));
    if (wr_id == kSendId) send = true;
    if (wr_id == kRecvId) {
      recv = true;
      recv_len = len;
    }
  }
  bool done() const { return send && recv; }
};

TEST(CallerProgress, PollCqAndPostSendMoveTheNic) {
  SelfLoop v;
  ASSERT_NO_FATAL_FAILURE(v.open(false));
  ASSERT_NO_FATAL_FAILURE(v.post_recv());
  std::memcpy(v.buf, kText, sizeof(kText));
  ibv_sge s{reinterpret_cast<uint64_t>(v.buf), sizeof(kText), v.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kSendId;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = v.ah;
  wr.wr.ud.remote_qpn = v.qp->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(v.qp, &wr, &bad), 0);
  Seen seen;
  while (!seen.done() && seen.polls++ < kMaxPolls) {
    ibv_wc wc[4];
    int n = ibv_poll_cq(v.cq, 4, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) seen.take(wc[i].wr_id, wc[i].status, wc[i].byte_len);
  }
  EXPECT_TRUE(seen.send) << "no send completion after " << kMaxPolls << " polls";
  EXPECT_TRUE(seen.recv) << "no receive completion after " << kMaxPolls << " polls";
  EXPECT_EQ(seen.recv_len, sizeof(kText));
  EXPECT_STREQ(reinterpret_cast<char*>(v.buf + 4096), kText);
  // A poll with no room is answered by libefa as before, and moves nothing.
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(v.cq, 0, &wc), 0);
  v.close();
}

TEST(CallerProgress, StartPollAndWrCompleteMoveTheNic) {
  SelfLoop v;
  ASSERT_NO_FATAL_FAILURE(v.open(true));
  ASSERT_NO_FATAL_FAILURE(v.post_recv());
  std::memcpy(v.buf, kText, sizeof(kText));
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(v.qp);
  ASSERT_NE(qx, nullptr);
  ibv_wr_start(qx);
  qx->wr_id = kSendId;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qx);
  ibv_wr_set_ud_addr(qx, v.ah, v.qp->qp_num, kQkey);
  ibv_wr_set_sge(qx, v.mr->lkey, reinterpret_cast<uint64_t>(v.buf), sizeof(kText));
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  Seen seen;
  while (!seen.done() && seen.polls++ < kMaxPolls) {
    ibv_poll_cq_attr attr{};
    int rc = ibv_start_poll(v.cqx, &attr);
    if (rc == ENOENT) continue;
    ASSERT_EQ(rc, 0);
    do {
      seen.take(v.cqx->wr_id, v.cqx->status, ibv_wc_read_byte_len(v.cqx));
    } while (ibv_next_poll(v.cqx) == 0);
    ibv_end_poll(v.cqx);
  }
  EXPECT_TRUE(seen.send) << "no send completion after " << kMaxPolls << " polls";
  EXPECT_TRUE(seen.recv) << "no receive completion after " << kMaxPolls << " polls";
  EXPECT_EQ(seen.recv_len, sizeof(kText));
  EXPECT_STREQ(reinterpret_cast<char*>(v.buf + 4096), kText);
  v.close();
}

// A CQ armed through ibv_req_notify_cq raises its next event even when libefa's next consumer
// index update overwrites the arm in the doorbell before the NIC looks: the pattern of a program
// that arms and then drains the CQ before it blocks on the channel. The first arm carries the
// same command sequence number as the index updates, so only an exact arm can see it.
TEST(CallerProgress, AnArmOverwrittenByAPollStillRaisesTheEvent) {
  ibv_context* ctx = open_efa_device();
  ASSERT_NE(ctx, nullptr) << "no device: is the preload library in place?";
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  alignas(64) static uint8_t buf[8192];
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr) << strerror(errno);
  ibv_cq* scq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_cq* rcq = ibv_create_cq(ctx, 64, nullptr, ch, 0);
  ASSERT_NE(scq, nullptr);
  ASSERT_NE(rcq, nullptr);
  ibv_qp* qp = create_srd_qp(pd, scq, rcq);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  ASSERT_EQ(qp_to_rts(qp, kQkey, 7), 0);
  ibv_ah* ah = ah_to_self(ctx, pd);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  constexpr int kRounds = 3;
  for (int i = 0; i < kRounds + 2; ++i) {
    ibv_sge rs{reinterpret_cast<uint64_t>(buf + 4096), 4096, mr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = kRecvId;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &rw, &rbad), 0);
  }
  // Sends one message to the QP itself and drives the NIC (through send-CQ polls) until its
  // send completion came back, by which time its receive completion has been written.
  auto post_one = [&]() {
    ibv_sge s{reinterpret_cast<uint64_t>(buf), 64, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendId;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qp->qp_num;
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  };
  auto send_one = [&]() {
    ASSERT_NO_FATAL_FAILURE(post_one());
    ibv_wc wc{};
    int n = 0;
    for (int polls = 0; n == 0 && polls < kMaxPolls; ++polls) n = ibv_poll_cq(scq, 1, &wc);
    ASSERT_EQ(n, 1) << "no send completion";
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  };
  ASSERT_NO_FATAL_FAILURE(send_one());
  for (int round = 0; round < kRounds; ++round) {
    // A receive completion is waiting. Arm, then drain it: libefa writes the CQ doorbell again,
    // without the arm bit, and nothing has driven the NIC in between.
    ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
    ibv_wc wc{};
    ASSERT_EQ(ibv_poll_cq(rcq, 1, &wc), 1) << "round " << round;
    EXPECT_EQ(wc.wr_id, kRecvId);
    ASSERT_NO_FATAL_FAILURE(send_one());
    // The next receive completion fires the armed CQ. Empty send-CQ polls keep driving the NIC
    // (and so forward the event) while the channel is watched.
    pollfd p{ch->fd, POLLIN, 0};
    int ready = 0;
    for (int tries = 0; ready == 0 && tries < 200; ++tries) {
      ibv_wc none;
      ASSERT_EQ(ibv_poll_cq(scq, 1, &none), 0);
      ready = ::poll(&p, 1, 5);
    }
    ASSERT_EQ(ready, 1) << "round " << round << ": no event for the armed CQ";
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, rcq);
    ibv_ack_cq_events(rcq, 1);
  }
  // A reader blocked in ibv_get_cq_event is itself the only thread that can move the NIC here
  // (no engine or service thread in this run): it must drive it while it waits. A reader that
  // does not would wait forever, so the alarm's default action ends the test instead.
  ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
  ibv_wc wc{};
  ASSERT_EQ(ibv_poll_cq(rcq, 1, &wc), 1);
  ASSERT_NO_FATAL_FAILURE(post_one());
  alarm(30);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  alarm(0);
  EXPECT_EQ(ev_cq, rcq);
  ibv_ack_cq_events(rcq, 1);
  ASSERT_EQ(ibv_poll_cq(rcq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, kRecvId);
  int n = 0;
  for (int polls = 0; n == 0 && polls < kMaxPolls; ++polls) n = ibv_poll_cq(scq, 1, &wc);
  ASSERT_EQ(n, 1) << "no send completion";
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(rcq), 0);
  EXPECT_EQ(ibv_destroy_cq(scq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// A process-wide signal whose handler calls exit() (libinfinipath, which libfabric loads, installs
// such a SIGTERM handler) while the application spins on an empty CQ: the handler runs on the
// application thread, most likely in the middle of the pass that poll started, with the device
// locked. Every round is a child process; in every other one an exit handler also closes the
// device first, as libfabric's library destructor does. Neither the teardown commands nor
// the shim's own exit handler may wait for the locks the interrupted pass holds. A child that
// has not ended a few seconds after the signal has hung and is killed.
struct Spinner {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
};
Spinner g_spinner;

void exit_on_term(int) { exit(3); }

// Only the context is closed, as libfabric's destructor does: libefa's own destroy calls take the
// CQ's lock, which the interrupted poll may hold (that would hang on hardware too).
void close_spinner() {
  if (g_spinner.ctx != nullptr) ibv_close_device(g_spinner.ctx);
}

[[noreturn]] void spin_until_signalled(int ready_fd, bool teardown_at_exit) {
  signal(SIGTERM, exit_on_term);
  Spinner& v = g_spinner;
  v.ctx = open_efa_device();
  v.pd = v.ctx != nullptr ? ibv_alloc_pd(v.ctx) : nullptr;
  v.cq = v.pd != nullptr ? ibv_create_cq(v.ctx, 64, nullptr, nullptr, 0) : nullptr;
  v.qp = v.cq != nullptr ? create_srd_qp(v.pd, v.cq, v.cq) : nullptr;
  if (v.qp == nullptr || qp_to_rts(v.qp, kQkey, 7) != 0) _exit(2);
  if (teardown_at_exit) atexit(close_spinner);
  char one = 1;
  if (write(ready_fd, &one, 1) != 1) _exit(2);
  for (;;) {
    ibv_wc wc;
    if (ibv_poll_cq(v.cq, 1, &wc) != 0) _exit(2);
  }
}

TEST(CallerProgress, ExitFromASignalHandlerDuringAPollEndsTheProcess) {
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      spin_until_signalled(fds[1], round % 2 == 0);
    }
    close(fds[1]);
    char one = 0;
    ssize_t got = read(fds[0], &one, 1);
    close(fds[0]);
    ASSERT_EQ(got, 1) << "round " << round << ": the child could not set up its CQ";
    // Let it spin for a while (a different moment of its pass each round).
    usleep(static_cast<useconds_t>(2000 + 1500 * round));
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    int status = 0;
    pid_t done = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      usleep(2000);
    }
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "round " << round << ": the process hung in exit after SIGTERM";
    }
    ASSERT_EQ(done, pid);
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 3) << "round " << round;
  }
}

}  // namespace
