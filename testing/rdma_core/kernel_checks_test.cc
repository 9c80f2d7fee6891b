// Debian's unmodified libibverbs + libefa on the emulated EFA (under the preload library, see
// rdma_core_env.sh): the checks the kernel's uverbs core makes before the EFA driver, each
// answered with the kernel's errno, and send queues of the smallest depth a program may ask
// for. Expectations follow the capabilities the device reports, so one binary runs on every
// generation.
#include <fcntl.h>
#include <poll.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "testing/support/verbs_util.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using xpufab::testing::ah_to_self;
using xpufab::testing::open_efa_device;
using xpufab::testing::qp_to_rts;

constexpr uint32_t kQkey = 0x11111111;

class Device : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_efa_device();
    ASSERT_NE(ctx_, nullptr) << "no efa_0: run under the preload library";
    ASSERT_EQ(efadv_query_device(ctx_, &caps_, sizeof(caps_)), 0);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    buf_.assign(2 * 4096, 0);
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }

  // errno of a registration that must fail (0 if it succeeded, and the MR is released).
  int reg_errno(void* addr, size_t len, uint64_t iova, int access) {
    errno = 0;
    ibv_mr* mr = ibv_reg_mr_iova(pd_, addr, len, iova, access);
    if (mr == nullptr) return errno;
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    return 0;
  }
  int reg_errno(int access) {
    return reg_errno(buf_.data(), buf_.size(), reinterpret_cast<uint64_t>(buf_.data()), access);
  }

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  efadv_device_attr caps_{};
  std::vector<uint8_t> buf_;
};

TEST_F(Device, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  // The core refuses these on every generation, before the driver looks at what it supports.
  EXPECT_EQ(reg_errno(IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_EQ(reg_errno(IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
  EXPECT_EQ(reg_errno(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), EINVAL);
}

TEST_F(Device, UnknownAccessBitsAreEinvalAndMissingFeaturesEopnotsupp) {
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | (1 << 30)), EINVAL);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | (1 << 12)), EINVAL);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND), EOPNOTSUPP);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | (1 << 8)), EOPNOTSUPP);  // FLUSH_GLOBAL
  // Atomics and memory windows pass the core but not the EFA driver.
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC), EOPNOTSUPP);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND), EOPNOTSUPP);
  // An optional bit (relaxed ordering) is one the device may ignore.
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING), 0);
}

// The generations as documented (reference/efa-queues.md): RDMA read from gen2, write from gen3.
// Debian's libefa predates the write capability bit, so the test names the generation instead.
TEST_F(Device, RemoteAccessFollowsTheGenerationsCapabilities) {
  const char* env = std::getenv("FI_EFA_EMU_PROFILE");
  ASSERT_NE(env, nullptr) << "run once per generation (FI_EFA_EMU_PROFILE)";
  const std::string gen = env;
  const bool read = gen != "gen1";
  const bool write = gen == "gen3" || gen == "gen4";
  EXPECT_EQ(read, (caps_.device_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ) != 0);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE), 0);
  EXPECT_EQ(reg_errno(IBV_ACCESS_REMOTE_READ), read ? 0 : EOPNOTSUPP);
  EXPECT_EQ(reg_errno(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), write ? 0 : EOPNOTSUPP);
}

// libfabric's RDM endpoint asks for an RNR retry count on RTS exactly when the device reports the
// capability; a device must then take it (gen2 on), and one that refuses it must not report it.
TEST_F(Device, RnrRetryCapabilityMatchesWhatModifyQpTakes) {
  const char* env = std::getenv("FI_EFA_EMU_PROFILE");
  ASSERT_NE(env, nullptr) << "run once per generation (FI_EFA_EMU_PROFILE)";
  const bool rnr = std::string(env) != "gen1";
  EXPECT_EQ(rnr, (caps_.device_caps & EFADV_DEVICE_ATTR_CAPS_RNR_RETRY) != 0);
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = xpufab::testing::create_srd_qp(pd_, cq, cq);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  EXPECT_EQ(qp_to_rts(qp, kQkey, 7), rnr ? 0 : EOPNOTSUPP);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Device, StartAndIovaMustShareAPageOffset) {
  uint8_t* p = buf_.data();
  uint64_t va = reinterpret_cast<uint64_t>(p);
  EXPECT_EQ(reg_errno(p, 4096, va + 8, IBV_ACCESS_LOCAL_WRITE), EINVAL);
  EXPECT_EQ(reg_errno(p, 4096, (va & 4095) + 0x100000, IBV_ACCESS_LOCAL_WRITE), 0);
}

TEST_F(Device, UnmappedMemoryIsEfault) {
  void* m = mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  uint8_t* p = static_cast<uint8_t*>(m);
  // A hole in the middle page: neither range across it pins, the pages either side do.
  ASSERT_EQ(munmap(p + 4096, 4096), 0);
  auto reg = [this](uint8_t* at, size_t len) {
    return reg_errno(at, len, reinterpret_cast<uint64_t>(at), IBV_ACCESS_LOCAL_WRITE);
  };
  EXPECT_EQ(reg(p, 4096), 0);
  EXPECT_EQ(reg(p + 2 * 4096, 4096), 0);
  EXPECT_EQ(reg(p, 3 * 4096), EFAULT);
  EXPECT_EQ(reg(p + 100, 2 * 4096), EFAULT);
  munmap(p, 4096);
  munmap(p + 2 * 4096, 4096);
}

TEST_F(Device, AddressHandles) {
  // Without a global route the kernel creates the AH for the all-zero GID.
  ibv_ah_attr aa{};
  aa.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  aa.is_global = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &aa.grh.dgid), 0);
  aa.port_num = 2;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd_, &aa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  aa.port_num = 1;
  aa.grh.sgid_index = 1;  // the port's table has one entry
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd_, &aa), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ibv_devices prints the GUID libibverbs reads from sysfs, ibv_devinfo the one QUERY_DEVICE
// returns: on one device they are the same number, the interface identifier of its GID.
TEST_F(Device, SysfsNodeGuidIsTheQueriedOne) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_NE(a.node_guid, 0u);
  EXPECT_EQ(ibv_get_device_guid(ctx_->device), a.node_guid);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  uint64_t iid = 0;
  std::memcpy(&iid, gid.raw + 8, sizeof(iid));
  EXPECT_EQ(iid, a.node_guid);
}

TEST_F(Device, CompletionQueueChecks) {
  const int max_cqe = [this] {
    ibv_device_attr a{};
    return ibv_query_device(ctx_, &a) == 0 ? a.max_cqe : 0;
  }();
  ASSERT_GT(max_cqe, 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, nullptr, 1), nullptr);  // one completion vector
  EXPECT_EQ(errno, EINVAL);
  // A completion channel that is not one: a closed fd, then an open file of another kind.
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  const int real_fd = ch->fd;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ch->fd = fds[0];
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, ch, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  close(fds[0]);
  close(fds[1]);
  ch->fd = fds[0];
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, ch, 0), nullptr);
  EXPECT_EQ(errno, EBADF);
  ch->fd = real_fd;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, ch, 0);
  ASSERT_NE(cq, nullptr) << strerror(errno);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

// Destroy commands through the raw ABI: a handle that names nothing is ENOENT, one that names
// an object of another type EINVAL (uverbs handles share one table per context).
TEST(RawAbi, DestroyWithAWrongHandle) {
  int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  auto cmd = [fd](uint32_t command, const void* core, size_t core_len, size_t out) -> int {
    uint8_t b[128] = {0};
    ib_uverbs_cmd_hdr h{command, static_cast<uint16_t>((8 + core_len) / 4),
                        static_cast<uint16_t>(out / 4)};
    std::memcpy(b, &h, 8);
    std::memcpy(b + 8, core, core_len);
    return write(fd, b, 8 + core_len) < 0 ? errno : 0;
  };
  uint8_t ctx_resp[32] = {0};
  // ib_uverbs_get_context (the response pointer) and the driver's efa_ibv_alloc_ucontext_cmd.
  uint8_t gc[sizeof(ib_uverbs_get_context) + sizeof(efa_ibv_alloc_ucontext_cmd)] = {0};
  uint64_t resp_ptr = reinterpret_cast<uint64_t>(ctx_resp);
  std::memcpy(gc, &resp_ptr, sizeof(resp_ptr));
  efa_ibv_alloc_ucontext_cmd drv{};
  drv.comp_mask = EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH | EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR;
  std::memcpy(gc + sizeof(ib_uverbs_get_context), &drv, sizeof(drv));
  ASSERT_EQ(cmd(IB_USER_VERBS_CMD_GET_CONTEXT, gc, sizeof(gc), 32), 0);
  uint8_t pd_resp[8] = {0};
  uint64_t ap = reinterpret_cast<uint64_t>(pd_resp);  // ib_uverbs_alloc_pd.response
  ASSERT_EQ(cmd(IB_USER_VERBS_CMD_ALLOC_PD, &ap, sizeof(ap), 8), 0);
  uint32_t pd;
  std::memcpy(&pd, pd_resp, 4);
  ib_uverbs_dereg_mr dm{pd};
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEREG_MR, &dm, sizeof(dm), 0), EINVAL);
  ib_uverbs_destroy_ah da{pd};
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DESTROY_AH, &da, sizeof(da), 0), EINVAL);
  uint8_t cq_resp[8];
  ib_uverbs_destroy_cq dc{reinterpret_cast<uint64_t>(cq_resp), pd, 0};
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DESTROY_CQ, &dc, sizeof(dc), 8), EINVAL);
  ib_uverbs_dealloc_pd dp{pd + 100};
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEALLOC_PD, &dp, sizeof(dp), 0), ENOENT);
  dm.mr_handle = pd + 100;
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEREG_MR, &dm, sizeof(dm), 0), ENOENT);
  dp.pd_handle = pd;
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEALLOC_PD, &dp, sizeof(dp), 0), 0);
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEALLOC_PD, &dp, sizeof(dp), 0), ENOENT);
  close(fd);
}

// An SRD QP asking for one send WR, through the ibv_wr_* API and ibv_post_send, sending to
// itself more times than the ring has entries. libefa derives the doorbell batch from the
// device's minimum SQ depth; a device reporting 1 makes that batch 0 and this test crash.
class DepthOne : public Device {
 protected:
  void SetUp() override {
    Device::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr_, nullptr);
    cq_ = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    ibv_qp_init_attr_ex qa{};
    qa.send_cq = cq_;
    qa.recv_cq = cq_;
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_DRIVER;
    qa.pd = pd_;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
    efadv_qp_init_attr ea{};
    ea.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
    qp_ = efadv_create_qp_ex(ctx_, &qa, &ea, sizeof(ea));
    ASSERT_NE(qp_, nullptr) << strerror(errno);
    EXPECT_GE(qa.cap.max_send_wr, 1u);
    ASSERT_EQ(qp_to_rts(qp_, kQkey, -1), 0);
    ah_ = ah_to_self(ctx_, pd_);
    ASSERT_NE(ah_, nullptr) << strerror(errno);
  }
  void TearDown() override {
    if (ah_ != nullptr) {
      EXPECT_EQ(ibv_destroy_ah(ah_), 0);
    }
    if (qp_ != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp_), 0);
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq_), 0);
    }
    if (mr_ != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    Device::TearDown();
  }

  void post_recv(uint64_t id) {
    ibv_sge s{reinterpret_cast<uint64_t>(buf_.data() + 4096), 4096, mr_->lkey};
    ibv_recv_wr w{};
    w.wr_id = id;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp_, &w, &bad), 0);
  }

  // Waits for the send and the receive of message `id`.
  void expect_both(uint64_t id, uint32_t len) {
    bool sent = false, received = false;
    for (int spin = 0; !(sent && received) && spin < 2000000; ++spin) {
      ibv_wc wc[2];
      int n = ibv_poll_cq(cq_, 2, wc);
      ASSERT_GE(n, 0);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[i].status);
        ASSERT_EQ(wc[i].wr_id, id);
        if (wc[i].opcode == IBV_WC_RECV) {
          EXPECT_EQ(wc[i].byte_len, len);
          received = true;
        } else {
          sent = true;
        }
      }
      if (n == 0) usleep(5);
    }
    EXPECT_TRUE(sent) << "send " << id;
    EXPECT_TRUE(received) << "receive " << id;
  }

  ibv_mr* mr_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_ah* ah_ = nullptr;
};

TEST_F(DepthOne, SendsThroughTheWrApi) {
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(qp_);
  ASSERT_NE(qx, nullptr);
  for (uint64_t id = 1; id <= 8; ++id) {
    ASSERT_NO_FATAL_FAILURE(post_recv(id));
    std::snprintf(reinterpret_cast<char*>(buf_.data()), 64, "message %u", static_cast<unsigned>(id));
    uint32_t len = static_cast<uint32_t>(std::strlen(reinterpret_cast<char*>(buf_.data())) + 1);
    ibv_wr_start(qx);
    qx->wr_id = id;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx);
    ibv_wr_set_ud_addr(qx, ah_, qp_->qp_num, kQkey);
    ibv_wr_set_sge(qx, mr_->lkey, reinterpret_cast<uint64_t>(buf_.data()), len);
    ASSERT_EQ(ibv_wr_complete(qx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_both(id, len));
    EXPECT_STREQ(reinterpret_cast<char*>(buf_.data() + 4096), reinterpret_cast<char*>(buf_.data()));
  }
}

TEST_F(DepthOne, SendsThroughPostSend) {
  for (uint64_t id = 1; id <= 8; ++id) {
    ASSERT_NO_FATAL_FAILURE(post_recv(id));
    ibv_sge s{reinterpret_cast<uint64_t>(buf_.data()), 100, mr_->lkey};
    ibv_send_wr w{};
    w.wr_id = id;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.ud.ah = ah_;
    w.wr.ud.remote_qpn = qp_->qp_num;
    w.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp_, &w, &bad), 0);
    ASSERT_NO_FATAL_FAILURE(expect_both(id, 100));
  }
}

// Two contexts of the process, each with a UD QP whose CQ reports through a completion channel,
// in the pattern rdma-core's tests use: wait for an event, re-arm, poll. Closing the first context
// while the second still has the device's doorbell page mapped must leave that page alone, and
// the re-arm must not be lost to the consumer-index update the poll writes right after it.
struct UdSide {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  ibv_ah* ah = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0);

  void open() {
    ctx = open_efa_device();
    ASSERT_NE(ctx, nullptr) << "no efa_0: run under the preload library";
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ch = ibv_create_comp_channel(ctx);
    ASSERT_NE(ch, nullptr);
    cq = ibv_create_cq(ctx, 64, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.cap.max_send_wr = 16;
    qa.cap.max_recv_wr = 16;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_UD;
    qa.sq_sig_all = 1;
    qp = ibv_create_qp(pd, &qa);
    ASSERT_NE(qp, nullptr) << strerror(errno);
    ASSERT_EQ(qp_to_rts(qp, kQkey, -1), 0);
    ah = ah_to_self(ctx, pd);
    ASSERT_NE(ah, nullptr) << strerror(errno);
  }
  void close() {
    if (ah != nullptr) {
      EXPECT_EQ(ibv_destroy_ah(ah), 0);
    }
    if (qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    if (cq != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
    }
    if (ch != nullptr) {
      EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
    }
    if (mr != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr), 0);
    }
    if (pd != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    }
    if (ctx != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx), 0);
    }
    *this = UdSide{};
  }
  void post_recv() {
    ibv_sge sg{reinterpret_cast<uint64_t>(buf.data() + 4096), 4096, mr->lkey};
    ibv_recv_wr w{};
    w.sg_list = &sg;
    w.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &w, &bad), 0);
  }
  void send_to(const UdSide& peer) {
    ibv_sge sg{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
    ibv_send_wr w{};
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.wr.ud.ah = ah;
    w.wr.ud.remote_qpn = peer.qp->qp_num;
    w.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
  }
  // One completion, through an event: the channel fd is polled first so a lost event fails the
  // test instead of blocking it.
  void wait_completion(ibv_wc_opcode op) {
    pollfd p{ch->fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1) << "no completion event";
    ibv_cq* got = nullptr;
    void* cq_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &got, &cq_ctx), 0);
    ASSERT_EQ(got, cq);
    ibv_ack_cq_events(cq, 1);
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ibv_wc wc{};
    int n = 0;
    for (int spin = 0; n == 0 && spin < 1000000; ++spin) n = ibv_poll_cq(cq, 1, &wc);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, op);
  }
};

TEST(UdTwoContexts, EventsEveryMessageAndCloseInAnyOrder) {
  UdSide a, b;
  ASSERT_NO_FATAL_FAILURE(a.open());
  ASSERT_NO_FATAL_FAILURE(b.open());
  for (int i = 0; i < 20; ++i) {
    ASSERT_NO_FATAL_FAILURE(b.post_recv());
    ASSERT_NO_FATAL_FAILURE(a.send_to(b));
    ASSERT_NO_FATAL_FAILURE(a.wait_completion(IBV_WC_SEND));
    ASSERT_NO_FATAL_FAILURE(b.wait_completion(IBV_WC_RECV));
  }
  a.close();
  // b's traffic after a's context is gone: its doorbells must still be the device's.
  ASSERT_NO_FATAL_FAILURE(a.open());
  ASSERT_NO_FATAL_FAILURE(a.post_recv());
  ASSERT_NO_FATAL_FAILURE(b.send_to(a));
  ASSERT_NO_FATAL_FAILURE(b.wait_completion(IBV_WC_SEND));
  ASSERT_NO_FATAL_FAILURE(a.wait_completion(IBV_WC_RECV));
  a.close();
  b.close();
}

}  // namespace
