// One-copy RDMA (DeviceOptions::one_copy): large WRITE and READ payloads copied straight between
// the two ends' memories over the shm fabric, the wire fallback when the kernel refuses the copy
// (forced with ShmFabricOptions::peer_copy_errno), at-most-once under loss, and PeerMemory's
// cross-process reads and identity check.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "emu/fabric.h"
#include "emu/net/shm_fabric.h"
#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

constexpr uint32_t kLen = 256u << 10;

std::shared_ptr<net::ShmFabric> shm(const std::string& key, int copy_errno, bool peer_memory = true) {
  net::ShmFabricOptions o;
  const char* t = std::getenv("TEST_TMPDIR");
  o.base_dir = t != nullptr ? t : "/tmp";
  o.key = key + std::to_string(getpid());
  o.peer_copy_errno = copy_errno;
  o.peer_memory = peer_memory;
  std::shared_ptr<net::ShmFabric> f;
  EXPECT_EQ(net::ShmFabric::create(o, &f), 0);
  return f;
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
}

// Two devices on two fabric objects of one shm directory: every packet crosses a mailbox, as
// between two processes.
class OneCopy : public ::testing::Test {
 protected:
  void open(int copy_errno, const std::string& plan = "", bool one_copy = true) {
    const std::string key = "onecopy" + std::to_string(++instance_);
    fa_ = shm(key, copy_errno);
    fb_ = shm(key, copy_errno);
    ASSERT_TRUE(fa_ && fb_);
    DeviceOptions oa = inline_options(fa_), ob = inline_options(fb_);
    oa.fault_plan = ob.fault_plan = plan;
    oa.one_copy = ob.one_copy = one_copy;
    oa.response_timeout_us = ob.response_timeout_us = 200000;
    ASSERT_NO_FATAL_FAILURE(open_pair(&a, &b, oa, ob, &ah_));
  }
  void TearDown() override {
    a.dev.reset();
    b.dev.reset();
  }
  // Posts one RDMA op of kLen from A and returns its TX CQE status.
  int rdma(uint8_t op, size_t local_off, size_t remote_off, bool imm = false) {
    Wqe w = rdma_wqe(op, next_id_++, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey,
                     a.addr(local_off), a.mr->lkey(), b.addr(remote_off), b.mr->rkey(), kLen);
    if (imm) set_imm(&w, 0xabc);
    a.sq.post(w);
    efa_io_rx_cdesc_ex c;
    if (!wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c)) return -1;
    EXPECT_EQ(q_type(c), EFA_IO_SEND_QUEUE);
    return c.base.common.status;
  }
  uint64_t wire_bytes() const { return fa_->stats().bytes_tx + fb_->stats().bytes_tx; }
  void reads_count_once(int copy_errno);

  Node a, b;
  Ah* ah_ = nullptr;
  uint16_t next_id_ = 1;
  std::shared_ptr<net::ShmFabric> fa_, fb_;
  static int instance_;
};
int OneCopy::instance_ = 0;

TEST_F(OneCopy, WriteLandsWithoutCrossingTheWire) {
  open(0);
  fill(a.at(0), kLen, 3);
  ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0);
  EXPECT_EQ(b.dev->stats().one_copy_bytes, kLen);
  EXPECT_EQ(b.dev->stats().one_copy_refused, 0u);
  EXPECT_LT(wire_bytes(), 4096u);  // the request and its answer only
}

TEST_F(OneCopy, ReadCopiesOutOfTheResponder) {
  open(0);
  fill(b.at(8192), kLen, 11);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), kLen), 0);
  EXPECT_EQ(a.dev->stats().one_copy_bytes, kLen);
  EXPECT_LT(wire_bytes(), 4096u);
}

TEST_F(OneCopy, RefusedCopiesFallBackToTheWireOnce) {
  open(EPERM);
  fill(a.at(0), kLen, 5);
  ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0);
  // Once, or once per transmission of the request that reached B before the refusal came back.
  const uint64_t refused = b.dev->stats().one_copy_refused;
  EXPECT_GE(refused, 1u);
  EXPECT_LE(refused, 1 + a.dev->stats().retransmits);
  EXPECT_GE(wire_bytes(), uint64_t{kLen});
  // The path remembers: the next transfers go by value at once, no refusal in between.
  fill(a.at(0), kLen, 9);
  ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0);
  fill(b.at(8192), kLen, 13);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), kLen), 0);
  EXPECT_EQ(a.dev->stats().one_copy_refused + b.dev->stats().one_copy_refused, refused);
  EXPECT_EQ(a.dev->stats().one_copy_bytes + b.dev->stats().one_copy_bytes, 0u);
}

TEST_F(OneCopy, RefusedReadIsAskedAgainByValue) {
  open(ESRCH);
  fill(b.at(8192), kLen, 17);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), kLen), 0);
  EXPECT_GE(a.dev->stats().one_copy_refused, 1u);
  EXPECT_LE(a.dev->stats().one_copy_refused, 1 + a.dev->stats().retransmits);
}

// A read answered by reference, refused by the kernel and asked again by value is one read of
// the target's memory: its remote-read counter moves once, as it does for a read that copies.
void OneCopy::reads_count_once(int copy_errno) {
  open(copy_errno);
  uint64_t reads = 0;
  backend::CompCntr* cntr = nullptr;
  ASSERT_EQ(b.dev->create_comp_cntr({&reads, nullptr}, &cntr), 0);
  ASSERT_EQ(b.qp->attach_comp_cntr(cntr, backend::kCntrRemoteRdmaRead), 0);
  fill(b.at(8192), kLen, 19);
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), kLen), 0);
  EXPECT_EQ(a.dev->stats().one_copy_refused, copy_errno != 0 ? 1u : 0u);
  EXPECT_EQ(__atomic_load_n(&reads, __ATOMIC_ACQUIRE), 1u);
  // The next read on that path goes by value at once (or by reference again), and counts once.
  ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(__atomic_load_n(&reads, __ATOMIC_ACQUIRE), 2u);
  ASSERT_EQ(b.qp->detach_comp_cntr(cntr), 0);
  ASSERT_EQ(b.dev->destroy_comp_cntr(cntr), 0);
}

TEST_F(OneCopy, ReadCountsOnceAtTheTarget) { reads_count_once(0); }
TEST_F(OneCopy, RefusedReadCountsOnceAtTheTarget) { reads_count_once(EPERM); }

// A read whose answers are lost is asked again and again; the target counts it once.
TEST_F(OneCopy, RetransmittedReadCountsOnceAtTheTarget) {
  open(0, "seed=3;drop=30%");
  uint64_t reads = 0;
  backend::CompCntr* cntr = nullptr;
  ASSERT_EQ(b.dev->create_comp_cntr({&reads, nullptr}, &cntr), 0);
  ASSERT_EQ(b.qp->attach_comp_cntr(cntr, backend::kCntrRemoteRdmaRead), 0);
  for (int i = 0; i < 8; ++i) {
    fill(b.at(8192), kLen, static_cast<uint8_t>(50 + i));
    ASSERT_EQ(rdma(EFA_IO_RDMA_READ, 4096, 8192), EFA_IO_COMP_STATUS_OK) << i;
    EXPECT_EQ(std::memcmp(a.at(4096), b.at(8192), kLen), 0) << i;
  }
  EXPECT_GT(a.dev->stats().retransmits, 0u);  // the plan did make it ask again
  EXPECT_EQ(__atomic_load_n(&reads, __ATOMIC_ACQUIRE), 8u);
  ASSERT_EQ(b.qp->detach_comp_cntr(cntr), 0);
  ASSERT_EQ(b.dev->destroy_comp_cntr(cntr), 0);
}

// The write with immediate whose copy was refused takes its receive WQE once: when the copy
// finally lands by value.
TEST_F(OneCopy, RefusedWriteWithImmediateConsumesOneReceive) {
  open(EPERM);
  b.rq.post(7, {{b.at(0), 64, b.mr->lkey()}});
  b.rq.post(8, {{b.at(64), 64, b.mr->lkey()}});
  fill(a.at(0), kLen, 21);
  ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096, true), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0);
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &c));
  EXPECT_EQ(q_type(c), EFA_IO_RECV_QUEUE);
  EXPECT_EQ(c.base.common.req_id, 7);
  EXPECT_EQ(c.base.imm, 0xabcu);
  EXPECT_FALSE(wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &c));  // exactly one
}

// Under loss and duplication, each write by reference lands and completes once.
TEST_F(OneCopy, LossyPathStaysAtMostOnce) {
  open(0, "seed=5;drop=20%;dup=20%");
  for (int i = 0; i < 8; ++i) b.rq.post(static_cast<uint16_t>(i), {{b.at(64 * i), 64, b.mr->lkey()}});
  for (int i = 0; i < 8; ++i) {
    fill(a.at(0), kLen, static_cast<uint8_t>(30 + i));
    ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096, true), EFA_IO_COMP_STATUS_OK) << i;
    EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0) << i;
  }
  int rx = 0;
  efa_io_rx_cdesc_ex c;
  while (wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &c)) {
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
    ++rx;
  }
  EXPECT_EQ(rx, 8);
  EXPECT_GT(b.dev->stats().one_copy_bytes, 0u);
}

TEST_F(OneCopy, OffSendsTheBytes) {
  open(0, "", false);
  fill(a.at(0), kLen, 41);
  ASSERT_EQ(rdma(EFA_IO_RDMA_WRITE, 0, 4096), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a.at(0), b.at(4096), kLen), 0);
  EXPECT_EQ(b.dev->stats().one_copy_bytes, 0u);
  EXPECT_GE(wire_bytes(), uint64_t{kLen});
}

// A bad remote key is refused before any byte is copied, as over the wire.
TEST_F(OneCopy, BadKeyLandsNothing) {
  open(0);
  fill(a.at(0), kLen, 43);
  std::memset(b.at(4096), 0, kLen);
  Wqe w = rdma_wqe(EFA_IO_RDMA_WRITE, 99, ah_->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey,
                   a.addr(0), a.mr->lkey(), b.addr(4096), b.mr->rkey() + 0x10000, kLen);
  a.sq.post(w);
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  EXPECT_EQ(b.at(4096)[0], 0);
  EXPECT_EQ(b.dev->stats().one_copy_bytes, 0u);
}

// PeerMemory reads another process's memory, and refuses a PID whose identity does not match.
TEST(PeerMemory, ReadsAnotherProcessAndChecksItsIdentity) {
  static uint8_t data[1 << 16];
  fill(data, sizeof(data), 77);
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    PeerRef me = PeerMemory::self();
    ssize_t n = write(to_parent[1], &me, sizeof(me));
    char c;
    n = read(to_child[0], &c, 1);  // wait for the parent's reads
    (void)n;
    _exit(0);
  }
  PeerRef child{};
  ASSERT_EQ(read(to_parent[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  EXPECT_EQ(child.pid, static_cast<uint32_t>(pid));
  EXPECT_NE(child.id, PeerMemory::self().id);  // drawn again after fork()
  std::vector<uint8_t> got(sizeof(data));
  const uint64_t addr = reinterpret_cast<uint64_t>(data);
  int rc = PeerMemory::read(child, addr, got.data(), got.size());
  if (rc == -EPERM) {
    // Only a kernel that forbids it (Yama ptrace_scope >= 1: no ptracer relation between the
    // two) may refuse; the device then falls back to the wire (tests above).
    FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    ASSERT_NE(f, nullptr) << "EPERM without Yama";
    EXPECT_EQ(std::fscanf(f, "%d", &scope), 1);
    std::fclose(f);
    EXPECT_GE(scope, 1);
  } else {
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(std::memcmp(got.data(), data, sizeof(data)), 0);
    EXPECT_EQ(PeerMemory::read(child, 8, got.data(), 16), -EFAULT);  // not mapped there
  }
  PeerRef wrong = child;
  wrong.id ^= 1;
  EXPECT_NE(PeerMemory::read(wrong, addr, got.data(), 16), 0);  // identity differs: refused
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  close(to_parent[0]);
  close(to_parent[1]);
  close(to_child[0]);
  close(to_child[1]);
  // The process is gone: its PID is no longer read from.
  EXPECT_NE(PeerMemory::read(child, addr, got.data(), 16), 0);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
