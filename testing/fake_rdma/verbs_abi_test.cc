// Debian's libibverbs + libefa (v44) driving the emulated EFA through the preload library, and the
// uverbs ABI edge cases answered the way the kernel answers them. Runs only under the preload
// (fake_rdma_env.sh); without it the device list is empty and the test fails.
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "testing/support/verbs_util.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hw/efadv_compat.h"

namespace {

using xpufab::testing::ah_to_self;
using xpufab::testing::create_srd_qp;
using xpufab::testing::open_efa_device;
using xpufab::testing::qp_to_rts;

constexpr uint32_t kQkey = 0x11111111;

// ---- raw write() ABI ----

class RawAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd_, 0) << strerror(errno);
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }

  // write() of a legacy command; returns 0 or errno.
  int cmd(uint32_t command, const void* core, size_t core_len, size_t out_bytes) {
    uint8_t buf[256] = {0};
    ib_uverbs_cmd_hdr h{command, static_cast<uint16_t>((8 + core_len) / 4),
                        static_cast<uint16_t>(out_bytes / 4)};
    std::memcpy(buf, &h, 8);
    std::memcpy(buf + 8, core, core_len);
    ssize_t n = write(fd_, buf, 8 + core_len);
    if (n < 0) return errno;
    return n == static_cast<ssize_t>(8 + core_len) ? 0 : EIO;
  }

  // A core request followed by its driver part.
  template <class Core, class Drv>
  int cmd2(uint32_t command, const Core& core, const Drv& drv, size_t out_bytes) {
    uint8_t req[sizeof(Core) + sizeof(Drv)];
    std::memcpy(req, &core, sizeof(Core));
    std::memcpy(req + sizeof(Core), &drv, sizeof(Drv));
    return cmd(command, req, sizeof(req), out_bytes);
  }

  int get_context(uint32_t caps = EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH |
                                  EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR) {
    ib_uverbs_get_context core{};
    core.response = reinterpret_cast<uint64_t>(ctx_resp_);
    efa_ibv_alloc_ucontext_cmd drv{};
    drv.comp_mask = caps;
    return cmd2(IB_USER_VERBS_CMD_GET_CONTEXT, core, drv, 32);
  }

  int fd_ = -1;
  uint8_t ctx_resp_[32] = {0};
};

TEST_F(RawAbi, CommandsBeforeGetContextAreRejected) {
  uint8_t resp[176];
  ib_uverbs_query_device q{};
  q.response = reinterpret_cast<uint64_t>(resp);
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_QUERY_DEVICE, &q, sizeof(q), sizeof(resp)), EINVAL);
  ASSERT_EQ(get_context(), 0);
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_QUERY_DEVICE, &q, sizeof(q), sizeof(resp)), 0);
  uint32_t vendor;
  std::memcpy(&vendor, resp + 40, 4);
  EXPECT_EQ(vendor, 0x1d0fu);
  // A second context on the same fd is refused.
  EXPECT_EQ(get_context(), EINVAL);
}

TEST_F(RawAbi, GetContextWithoutTheRequiredCapsIsRefused) {
  EXPECT_EQ(get_context(0), EOPNOTSUPP);
}

TEST_F(RawAbi, UnknownAndMalformedCommands) {
  ASSERT_EQ(get_context(), 0);
  uint64_t dummy[4] = {0};
  // Verbs the EFA driver does not implement: CREATE_SRQ (29), ATTACH_MCAST (22), an unused number.
  EXPECT_EQ(cmd(29, dummy, sizeof(dummy), 0), EOPNOTSUPP);
  EXPECT_EQ(cmd(22, dummy, sizeof(dummy), 0), EOPNOTSUPP);
  EXPECT_EQ(cmd(200, dummy, sizeof(dummy), 0), EOPNOTSUPP);
  // Bits outside the command mask.
  EXPECT_EQ(cmd(0x100 | IB_USER_VERBS_CMD_ALLOC_PD, dummy, 8, 12), EINVAL);
  // in_words that do not match the byte count.
  uint8_t buf[32] = {0};
  ib_uverbs_cmd_hdr h{IB_USER_VERBS_CMD_ALLOC_PD, 10, 3};
  std::memcpy(buf, &h, 8);
  errno = 0;
  EXPECT_EQ(write(fd_, buf, 16), -1);
  EXPECT_EQ(errno, EINVAL);
  // Shorter than a header.
  errno = 0;
  EXPECT_EQ(write(fd_, buf, 4), -1);
  EXPECT_EQ(errno, EINVAL);
  // A core request shorter than the verb's struct.
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_REG_MR, dummy, 8, 12), EINVAL);
  // A response pointer that is not mapped.
  ib_uverbs_alloc_pd pd{};
  pd.response = 8;
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_ALLOC_PD, &pd, sizeof(pd), 12), EFAULT);
  // A response buffer too small for the verb.
  uint8_t resp[16];
  pd.response = reinterpret_cast<uint64_t>(resp);
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_ALLOC_PD, &pd, sizeof(pd), 0), ENOSPC);
  // Handles that do not exist.
  ib_uverbs_dealloc_pd dpd{};
  dpd.pd_handle = 12345;
  EXPECT_EQ(cmd(IB_USER_VERBS_CMD_DEALLOC_PD, &dpd, sizeof(dpd), 0), ENOENT);  // as the kernel
  // An extended command the device does not offer.
  uint8_t ex[24] = {0};
  ib_uverbs_cmd_hdr eh{IB_USER_VERBS_CMD_FLAG_EXTENDED | 5, 0, 0};
  std::memcpy(ex, &eh, 8);
  errno = 0;
  EXPECT_EQ(write(fd_, ex, sizeof(ex)), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // ioctl is not served at all, which is what makes libibverbs use write().
  errno = 0;
  EXPECT_EQ(ioctl(fd_, 0xc0181b01, buf), -1);
  EXPECT_EQ(errno, ENOTTY);
  // read() on the command fd.
  errno = 0;
  EXPECT_EQ(read(fd_, buf, 8), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(RawAbi, BadCreateCqAndMmapRequests) {
  ASSERT_EQ(get_context(), 0);
  uint8_t resp[64] = {0};
  ib_uverbs_create_cq core{};
  efa_ibv_create_cq drv{};
  core.response = reinterpret_cast<uint64_t>(resp);
  core.cqe = 64;
  core.comp_channel = -1;
  drv.num_sub_cqs = 1;
  drv.cq_entry_size = 24;  // neither 16 nor 32
  EXPECT_EQ(cmd2(IB_USER_VERBS_CMD_CREATE_CQ, core, drv, 48), EINVAL);
  drv.cq_entry_size = 32;
  drv.comp_mask = 1;
  EXPECT_EQ(cmd2(IB_USER_VERBS_CMD_CREATE_CQ, core, drv, 48), EINVAL);
  drv.comp_mask = 0;
  core.comp_channel = 999;  // not an open fd: the kernel's fd lookup gives EBADF
  EXPECT_EQ(cmd2(IB_USER_VERBS_CMD_CREATE_CQ, core, drv, 48), EBADF);
  core.comp_channel = -1;
  ASSERT_EQ(cmd2(IB_USER_VERBS_CMD_CREATE_CQ, core, drv, 48), 0);
  efa_ibv_create_cq_resp cr;
  std::memcpy(&cr, resp + 8, sizeof(cr));
  // The exact size maps; any other size, a private mapping or an unknown key does not.
  void* p = mmap(nullptr, cr.q_mmap_size, PROT_READ, MAP_SHARED, fd_, cr.q_mmap_key);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(munmap(p, cr.q_mmap_size), 0);
  EXPECT_EQ(mmap(nullptr, cr.q_mmap_size + 4096, PROT_READ, MAP_SHARED, fd_, cr.q_mmap_key),
            MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mmap(nullptr, cr.q_mmap_size, PROT_READ, MAP_PRIVATE, fd_, cr.q_mmap_key), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd_, 0x7777000), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  // Destroying reports zero events; the key is gone afterwards.
  uint32_t handle;
  std::memcpy(&handle, resp, 4);
  uint8_t dresp[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ib_uverbs_destroy_cq d{reinterpret_cast<uint64_t>(dresp), handle, 0};
  ASSERT_EQ(cmd(IB_USER_VERBS_CMD_DESTROY_CQ, &d, sizeof(d), 8), 0);
  EXPECT_EQ(std::memcmp(dresp, "\0\0\0\0\0\0\0\0", 8), 0);
  EXPECT_EQ(mmap(nullptr, cr.q_mmap_size, PROT_READ, MAP_SHARED, fd_, cr.q_mmap_key), MAP_FAILED);
}

// ---- libibverbs + libefa ----

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_ah* ah = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t buf[8192] = {0};

  void open_all() {
    ctx = open_efa_device();
    ASSERT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ch = ibv_create_comp_channel(ctx);
    ASSERT_NE(ch, nullptr);
    cq = ibv_create_cq(ctx, 64, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr) << strerror(errno);
    qp = create_srd_qp(pd, cq, cq);
    ASSERT_NE(qp, nullptr) << strerror(errno);
    ASSERT_EQ(qp_to_rts(qp, kQkey, 7), 0);
    ah = ah_to_self(ctx, pd);
    ASSERT_NE(ah, nullptr) << strerror(errno);
  }

  void close_all() {
    if (ah) {
      EXPECT_EQ(ibv_destroy_ah(ah), 0);
    }
    if (qp) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    if (cq) {
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
    }
    if (ch) {
      EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
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

TEST(Verbs, DeviceQueriesMatchTheEmulatedNic) {
  ibv_context* ctx = open_efa_device();
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  EXPECT_EQ(da.vendor_id, 0x1d0fu);
  EXPECT_EQ(da.phys_port_cnt, 1);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  efadv_device_attr ea{};
  ASSERT_EQ(efadv_query_device(ctx, &ea, sizeof(ea)), 0);
  EXPECT_GT(ea.max_sq_wr, 0u);
  EXPECT_TRUE(ea.device_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_NE(gid.raw[15] | gid.raw[12] | gid.raw[11], 0);  // the live GID, not the placeholder
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(Verbs, SendToSelfWithCompletionEventAndCleanDestroy) {
  Verbs v;
  ASSERT_NO_FATAL_FAILURE(v.open_all());
  // Receive first, then arm, then send to our own QP through the AH.
  ibv_sge rs{reinterpret_cast<uint64_t>(v.buf + 4096), 4096, v.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 7;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(v.qp, &rwr, &bad_r), 0);
  ASSERT_EQ(ibv_req_notify_cq(v.cq, 0), 0);
  std::memcpy(v.buf, "hello over the emulated nic", 28);
  ibv_sge ss{reinterpret_cast<uint64_t>(v.buf), 28, v.mr->lkey};
  ibv_send_wr swr{};
  swr.wr_id = 9;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.ud.ah = v.ah;
  swr.wr.ud.remote_qpn = v.qp->qp_num;
  swr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(ibv_post_send(v.qp, &swr, &bad_s), 0);

  pollfd pfd{v.ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1) << "no completion event";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(v.ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, v.cq);
  ibv_ack_cq_events(v.cq, 1);

  int got = 0;
  bool saw_send = false, saw_recv = false;
  for (int spin = 0; got < 2 && spin < 2000000; ++spin) {
    ibv_wc wc[4];
    int n = ibv_poll_cq(v.cq, 4, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i, ++got) {
      EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[i].status);
      if (wc[i].wr_id == 9) saw_send = true;
      if (wc[i].wr_id == 7) {
        saw_recv = true;
        EXPECT_EQ(wc[i].byte_len, 28u);
      }
    }
    if (n == 0) usleep(10);
  }
  EXPECT_TRUE(saw_send);
  EXPECT_TRUE(saw_recv);
  EXPECT_STREQ(reinterpret_cast<char*>(v.buf + 4096), "hello over the emulated nic");

  // The v59 queries the preload library adds to the old libefa.
  auto qwqs = reinterpret_cast<efadv_compat_query_qp_wqs_fn>(dlsym(RTLD_DEFAULT, "efadv_query_qp_wqs"));
  auto qcq = reinterpret_cast<efadv_compat_query_cq_fn>(dlsym(RTLD_DEFAULT, "efadv_query_cq"));
  ASSERT_NE(qwqs, nullptr);
  ASSERT_NE(qcq, nullptr);
  efadv_compat_wq_attr sq{}, rq{};
  ASSERT_EQ(qwqs(v.qp, &sq, &rq, sizeof(sq)), 0);
  EXPECT_EQ(sq.entry_size, 64u);
  EXPECT_GE(sq.num_entries, 16u);
  EXPECT_NE(sq.doorbell, nullptr);
  EXPECT_GE(sq.max_batch, 1u);
  EXPECT_EQ(rq.entry_size, 16u);
  EXPECT_NE(rq.doorbell, nullptr);
  EXPECT_EQ(qwqs(v.qp, &sq, &rq, 8), EINVAL);
  efadv_compat_cq_attr ca{};
  ASSERT_EQ(qcq(v.cq, &ca, sizeof(ca)), 0);
  EXPECT_EQ(ca.entry_size, 32u);
  EXPECT_EQ(ca.num_entries, 64u);
  EXPECT_NE(ca.buffer, nullptr);

  v.close_all();  // ibv_destroy_cq returns: the event counts matched
}

TEST(Verbs, DestroyWithUnreadEventDoesNotBlock) {
  Verbs v;
  ASSERT_NO_FATAL_FAILURE(v.open_all());
  ibv_sge rs{reinterpret_cast<uint64_t>(v.buf + 4096), 4096, v.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(v.qp, &rwr, &bad_r), 0);
  ASSERT_EQ(ibv_req_notify_cq(v.cq, 0), 0);
  ibv_sge ss{reinterpret_cast<uint64_t>(v.buf), 8, v.mr->lkey};
  ibv_send_wr swr{};
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.ud.ah = v.ah;
  swr.wr.ud.remote_qpn = v.qp->qp_num;
  swr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(ibv_post_send(v.qp, &swr, &bad_s), 0);
  pollfd pfd{v.ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1);
  // The event stays queued and unread: the kernel drops it with the CQ and reports 0 events.
  v.close_all();
}

TEST(Verbs, ForkedChildOpensItsOwnDevice) {
  Verbs v;
  ASSERT_NO_FATAL_FAILURE(v.open_all());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ibv_context* c = open_efa_device();
    ibv_pd* pd = c ? ibv_alloc_pd(c) : nullptr;
    int ok = pd != nullptr && ibv_dealloc_pd(pd) == 0 && ibv_close_device(c) == 0;
    exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The parent's objects are untouched.
  ibv_pd* pd2 = ibv_alloc_pd(v.ctx);
  EXPECT_NE(pd2, nullptr);
  if (pd2) {
    EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  }
  v.close_all();
}

// Counts the fabric's mailbox files (FI_EFA_EMU_SHM_DIR, set by the test environment).
int mailboxes() {
  const char* dir = std::getenv("FI_EFA_EMU_SHM_DIR");
  if (dir == nullptr) return -1;
  std::string cmd = std::string("find '") + dir + "' -type f 2>/dev/null | wc -l";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  int n = -1;
  if (fscanf(f, "%d", &n) != 1) n = -1;
  pclose(f);
  return n;
}

// A child that creates objects and then exits (normally, or killed) without destroying them.
void child_with_live_objects(bool kill_self) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Verbs v;
    v.open_all();
    if (::testing::Test::HasFailure()) _exit(2);
    if (kill_self) raise(SIGKILL);
    exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (kill_self) {
    EXPECT_TRUE(WIFSIGNALED(status));
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

TEST(Verbs, ExitWithLiveObjectsLeavesNoStaleState) {
  if (std::getenv("FI_EFA_EMU_SHM_DIR") == nullptr) GTEST_FAIL() << "needs the shm fabric";
  // Our own device (opened by earlier tests or now) owns one mailbox for the whole process.
  ibv_context* ctx = open_efa_device();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  int base = mailboxes();
  ASSERT_GE(base, 1);
  child_with_live_objects(false);
  EXPECT_EQ(mailboxes(), base);
  // A killed process leaves its mailbox behind; the next process that joins the fabric (a
  // fresh program, Debian's ibv_devinfo) sweeps it.
  child_with_live_objects(true);
  EXPECT_EQ(mailboxes(), base + 1);
  ASSERT_EQ(system("ibv_devinfo >/dev/null 2>&1"), 0);
  EXPECT_EQ(mailboxes(), base);
  child_with_live_objects(false);
  EXPECT_EQ(mailboxes(), base);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
