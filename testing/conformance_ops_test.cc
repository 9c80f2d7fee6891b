// Conformance of the host data path: every send/recv/RMA call form, inject, remote CQ data,
// FI_MORE, selective completion, and the sleeping waits (fi_cq_sread, fi_cntr_wait).
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13);
  return v;
}

class DataPath : public DataPathFixture {
 protected:
  void SetUp() override {
    select_backend(GetParam());
    ASSERT_EQ(open(), 0);
    ca_ = cq();
    cb_ = cq();
    a_ep_ = ep(ca_, &a_);
    b_ep_ = ep(cb_, &b_);
  }
  fid_cq *ca_ = nullptr, *cb_ = nullptr;
  fid_ep *a_ep_ = nullptr, *b_ep_ = nullptr;
  fi_addr_t a_ = 0, b_ = 0;
};

TEST_P(DataPath, SendvToRecvvAcrossTwoSges) {
  auto s1 = pattern(100, 1), s2 = pattern(60, 2);
  std::vector<uint8_t> r1(40, 0), r2(200, 0);
  fid_mr* m1 = reg(s1.data(), s1.size(), FI_SEND);
  fid_mr* m2 = reg(s2.data(), s2.size(), FI_SEND);
  fid_mr* n1 = reg(r1.data(), r1.size(), FI_RECV);
  fid_mr* n2 = reg(r2.data(), r2.size(), FI_RECV);
  iovec riov[2] = {{r1.data(), r1.size()}, {r2.data(), r2.size()}};
  void* rdesc[2] = {fi_mr_desc(n1), fi_mr_desc(n2)};
  int rctx = 0, sctx = 0;
  ASSERT_EQ(fi_recvv(b_ep_, riov, rdesc, 2, FI_ADDR_UNSPEC, &rctx), 0);
  iovec siov[2] = {{s1.data(), s1.size()}, {s2.data(), s2.size()}};
  void* sdesc[2] = {fi_mr_desc(m1), fi_mr_desc(m2)};
  ASSERT_EQ(fi_sendv(a_ep_, siov, sdesc, 2, b_, &sctx), 0);
  auto tx = take(ca_, 1);
  auto rx = take(cb_, 1);
  ASSERT_EQ(tx.size(), 1u);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(tx[0].op_context, &sctx);
  EXPECT_EQ(tx[0].flags, FI_MSG | FI_SEND);
  EXPECT_EQ(rx[0].op_context, &rctx);
  EXPECT_EQ(rx[0].flags, FI_MSG | FI_RECV);
  EXPECT_EQ(rx[0].len, 160u);
  std::vector<uint8_t> sent(s1), got(r1);
  sent.insert(sent.end(), s2.begin(), s2.end());
  got.insert(got.end(), r2.begin(), r2.begin() + 120);
  EXPECT_EQ(got, sent);
  // More SGEs than the device takes.
  iovec three[3] = {siov[0], siov[1], siov[0]};
  void* d3[3] = {sdesc[0], sdesc[1], sdesc[0]};
  EXPECT_EQ(fi_sendv(a_ep_, three, d3, 3, b_, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(b_ep_, three, d3, 3, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(b_ep_, riov, rdesc, 0, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
}

TEST_P(DataPath, SendmsgRecvmsgCarryDataAndFlags) {
  auto s = pattern(512, 3);
  std::vector<uint8_t> r(512, 0);
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  iovec riov{r.data(), r.size()};
  void* rdesc = fi_mr_desc(rm);
  int rctx = 0, sctx = 0;
  fi_msg rmsg{&riov, &rdesc, 1, FI_ADDR_UNSPEC, &rctx, 0};
  ASSERT_EQ(fi_recvmsg(b_ep_, &rmsg, 0), 0);
  iovec siov{s.data(), s.size()};
  void* sdesc = fi_mr_desc(sm);
  fi_msg smsg{&siov, &sdesc, 1, b_, &sctx, 0x12345678};
  ASSERT_EQ(fi_sendmsg(a_ep_, &smsg, FI_REMOTE_CQ_DATA), 0);
  auto tx = take(ca_, 1);
  auto rx = take(cb_, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(tx.at(0).op_context, &sctx);
  EXPECT_EQ(rx[0].op_context, &rctx);
  EXPECT_EQ(rx[0].flags, FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx[0].data, 0x12345678u);
  EXPECT_EQ(rx[0].buf, r.data());
  EXPECT_EQ(r, s);
  EXPECT_EQ(fi_sendmsg(a_ep_, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_recvmsg(b_ep_, nullptr, 0), -FI_EINVAL);
}

TEST_P(DataPath, InjectAndInjectdataNeedNoBufferAfterReturn) {
  std::vector<uint8_t> r(64, 0), r2(64, 0);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  fid_mr* rm2 = reg(r2.data(), r2.size(), FI_RECV);
  int c1 = 0, c2 = 0;
  ASSERT_EQ(fi_recv(b_ep_, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &c1), 0);
  ASSERT_EQ(fi_recv(b_ep_, r2.data(), r2.size(), fi_mr_desc(rm2), FI_ADDR_UNSPEC, &c2), 0);
  size_t inject_size = info_->tx_attr->inject_size;
  ASSERT_GE(inject_size, 16u);
  auto s = pattern(16, 9);
  auto sent = s;
  ASSERT_EQ(fi_inject(a_ep_, s.data(), s.size(), b_), 0);
  std::fill(s.begin(), s.end(), 0xee);  // the buffer is the caller's again at once
  ASSERT_EQ(fi_injectdata(a_ep_, sent.data(), 8, 0xbeef, b_), 0);
  auto rx = take(cb_, 2);
  ASSERT_EQ(rx.size(), 2u);
  const fi_cq_data_entry* plain = nullptr;
  const fi_cq_data_entry* with_data = nullptr;
  for (const auto& e : rx) (e.flags & FI_REMOTE_CQ_DATA ? with_data : plain) = &e;
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(with_data, nullptr);
  EXPECT_EQ(plain->len, 16u);
  EXPECT_EQ(with_data->len, 8u);
  EXPECT_EQ(with_data->data, 0xbeefu);
  auto& pbuf = plain->op_context == &c1 ? r : r2;
  auto& dbuf = plain->op_context == &c1 ? r2 : r;
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), pbuf.begin()));
  EXPECT_TRUE(std::equal(sent.begin(), sent.begin() + 8, dbuf.begin()));
  // Injects generate no transmit completion.
  EXPECT_TRUE(stays_empty(ca_, 20));
  std::vector<uint8_t> big(inject_size + 1, 1);
  EXPECT_EQ(fi_inject(a_ep_, big.data(), big.size(), b_), -FI_EMSGSIZE);
  EXPECT_EQ(fi_injectdata(a_ep_, big.data(), big.size(), 1, b_), -FI_EMSGSIZE);
}

TEST_P(DataPath, RmaCallFormsVerified) {
  // Every EFA generation this provider offers FI_RMA on has RDMA read; RDMA write is optional
  // (rdma-core v44, emulated gen2) and then refused.
  ASSERT_NE(info_->caps & FI_RMA, 0u);
  ASSERT_TRUE(offers_rma(info_, FI_READ));
  const bool can_write = offers_rma(info_, FI_WRITE);
  auto local = pattern(3000, 4);
  std::vector<uint8_t> remote(4096, 0), back(3000, 0);
  fid_mr* lm = reg(local.data(), local.size(), can_write ? FI_WRITE : FI_SEND);
  fid_mr* rm = reg(remote.data(), remote.size(),
                   can_write ? FI_REMOTE_WRITE | FI_REMOTE_READ : FI_REMOTE_READ);
  fid_mr* bm = reg(back.data(), back.size(), FI_READ);
  const uint64_t raddr = reinterpret_cast<uintptr_t>(remote.data());
  const uint64_t key = fi_mr_key(rm);
  int w1 = 0, w2 = 0, r1 = 0, r2 = 0;
  // writev: the first 1000 bytes at offset 0.
  iovec v{local.data(), 1000};
  void* d = fi_mr_desc(lm);
  // writemsg: the rest at offset 1000.
  iovec v2{local.data() + 1000, 2000};
  fi_rma_iov rv{raddr + 1000, 2000, key};
  fi_msg_rma wm{&v2, &d, 1, b_, &rv, 1, &w2, 0};
  std::vector<fi_cq_data_entry> tx;
  if (can_write) {
    ASSERT_EQ(fi_writev(a_ep_, &v, &d, 1, b_, raddr, key, &w1), 0);
    ASSERT_EQ(fi_writemsg(a_ep_, &wm, 0), 0);
    tx = take(ca_, 2);
    ASSERT_EQ(tx.size(), 2u);
    ASSERT_NE(find(tx, &w1), nullptr);
    ASSERT_NE(find(tx, &w2), nullptr);
    EXPECT_EQ(find(tx, &w2)->flags, FI_RMA | FI_WRITE);
  } else {
    EXPECT_EQ(fi_writev(a_ep_, &v, &d, 1, b_, raddr, key, &w1), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_writemsg(a_ep_, &wm, 0), -FI_EOPNOTSUPP);
    EXPECT_TRUE(stays_empty(ca_, 20));
    EXPECT_EQ(remote, std::vector<uint8_t>(4096, 0));
    std::copy(local.begin(), local.end(), remote.begin());  // what the reads below fetch
  }
  EXPECT_TRUE(std::equal(local.begin(), local.end(), remote.begin()));
  // readv + readmsg read it back in two halves.
  iovec b1{back.data(), 1500}, b2{back.data() + 1500, 1500};
  void* bd = fi_mr_desc(bm);
  ASSERT_EQ(fi_readv(a_ep_, &b1, &bd, 1, b_, raddr, key, &r1), 0);
  fi_rma_iov rr{raddr + 1500, 1500, key};
  fi_msg_rma rmsg{&b2, &bd, 1, b_, &rr, 1, &r2, 0};
  ASSERT_EQ(fi_readmsg(a_ep_, &rmsg, 0), 0);
  tx = take(ca_, 2);
  ASSERT_EQ(tx.size(), 2u);
  ASSERT_NE(find(tx, &r2), nullptr);
  EXPECT_EQ(find(tx, &r2)->flags, FI_RMA | FI_READ);
  EXPECT_EQ(back, local);
  // An RMA takes one local SGE and one remote iov (rma_iov_limit 1).
  fi_rma_iov rv2[2] = {rv, rv};
  fi_msg_rma bad{&v, &d, 1, b_, rv2, 2, nullptr, 0};
  EXPECT_EQ(fi_readmsg(a_ep_, &bad, 0), -FI_EINVAL);
  EXPECT_EQ(fi_readmsg(a_ep_, nullptr, 0), -FI_EINVAL);
  if (!can_write) {
    GTEST_SKIP() << "RDMA write (FI_RMA write) not offered by " << backend_label() << ": write argument checks not run";
  }
  iovec two[2] = {v, v2};
  void* d2[2] = {d, d};
  EXPECT_EQ(fi_writev(a_ep_, two, d2, 2, b_, raddr, key, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_writemsg(a_ep_, &bad, 0), -FI_EINVAL);
  EXPECT_EQ(fi_writemsg(a_ep_, nullptr, 0), -FI_EINVAL);
  // No RMA inject on efa-direct (inject_size for RMA is 0).
  EXPECT_EQ(fi_inject_write(a_ep_, local.data(), 8, b_, raddr, key), -FI_ENOSYS);
}

TEST_P(DataPath, WritedataDeliversRemoteCqData) {
  ASSERT_NE(info_->caps & FI_RMA, 0u);
  auto local = pattern(256, 5);
  std::vector<uint8_t> remote(256, 0);
  if (!offers_rma(info_, FI_WRITE)) {
    // No RDMA write offered: both forms are refused and nothing reaches either side.
    fid_mr* lm = reg(local.data(), local.size(), FI_SEND);
    fid_mr* rm = reg(remote.data(), remote.size(), FI_REMOTE_READ);
    int wctx = 0;
    EXPECT_EQ(fi_writedata(a_ep_, local.data(), local.size(), fi_mr_desc(lm), 0xcafe, b_,
                           reinterpret_cast<uintptr_t>(remote.data()), fi_mr_key(rm), &wctx),
              -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_write(a_ep_, local.data(), 16, fi_mr_desc(lm), b_,
                       reinterpret_cast<uintptr_t>(remote.data()), fi_mr_key(rm), &wctx),
              -FI_EOPNOTSUPP);
    EXPECT_TRUE(stays_empty(ca_, 20));
    EXPECT_TRUE(stays_empty(cb_, 1));
    EXPECT_EQ(remote, std::vector<uint8_t>(256, 0));
    GTEST_SKIP() << "RDMA write (FI_RMA write) not offered by " << backend_label() << ": writedata delivery not run";
  }
  fid_mr* lm = reg(local.data(), local.size(), FI_WRITE);
  fid_mr* rm = reg(remote.data(), remote.size(), FI_REMOTE_WRITE);
  const bool consumes_rx = info_->rx_attr->mode & FI_RX_CQ_DATA;
  std::vector<uint8_t> spare(64);
  fid_mr* sm = reg(spare.data(), spare.size(), FI_RECV);
  int rctx = 0, wctx = 0;
  if (consumes_rx) {
    ASSERT_EQ(fi_recv(b_ep_, spare.data(), spare.size(), fi_mr_desc(sm), FI_ADDR_UNSPEC, &rctx), 0);
  }
  ASSERT_EQ(fi_writedata(a_ep_, local.data(), local.size(), fi_mr_desc(lm), 0xcafe, b_,
                         reinterpret_cast<uintptr_t>(remote.data()), fi_mr_key(rm), &wctx), 0);
  auto tx = take(ca_, 1);
  auto rx = take(cb_, 1);
  ASSERT_EQ(tx.size(), 1u);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(tx[0].op_context, &wctx);
  EXPECT_EQ(tx[0].flags, FI_RMA | FI_WRITE);
  EXPECT_EQ(rx[0].flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx[0].data, 0xcafeu);
  EXPECT_EQ(rx[0].len, local.size());
  EXPECT_EQ(rx[0].op_context, consumes_rx ? &rctx : nullptr);
  EXPECT_EQ(remote, local);
  // A write without data is silent at the target.
  ASSERT_EQ(fi_write(a_ep_, local.data(), 16, fi_mr_desc(lm), b_,
                     reinterpret_cast<uintptr_t>(remote.data()), fi_mr_key(rm), &wctx), 0);
  EXPECT_EQ(take(ca_, 1).size(), 1u);
  EXPECT_TRUE(stays_empty(cb_, 20));
  // Reads carry no remote CQ data.
  fi_msg_rma rmsg{};
  iovec v{local.data(), 8};
  void* d = fi_mr_desc(lm);
  fi_rma_iov rv{reinterpret_cast<uintptr_t>(remote.data()), 8, fi_mr_key(rm)};
  rmsg = fi_msg_rma{&v, &d, 1, b_, &rv, 1, nullptr, 1};
  EXPECT_EQ(fi_readmsg(a_ep_, &rmsg, FI_REMOTE_CQ_DATA), -FI_EINVAL);
}

TEST_P(DataPath, MoreDefersTheDoorbellUntilAPostWithoutIt) {
  auto s = pattern(32, 6);
  std::vector<std::vector<uint8_t>> r(3, std::vector<uint8_t>(32, 0));
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
  int rc_[3], sc[3];
  for (int i = 0; i < 3; ++i) {
    fid_mr* m = reg(r[i].data(), 32, FI_RECV);
    ASSERT_EQ(fi_recv(b_ep_, r[i].data(), 32, fi_mr_desc(m), FI_ADDR_UNSPEC, &rc_[i]), 0);
  }
  iovec v{s.data(), s.size()};
  void* d = fi_mr_desc(sm);
  for (int i = 0; i < 2; ++i) {
    fi_msg m{&v, &d, 1, b_, &sc[i], 0};
    ASSERT_EQ(fi_sendmsg(a_ep_, &m, FI_MORE), 0);
  }
  // Written to the queue but not announced: the NIC does not see them.
  EXPECT_TRUE(stays_empty(ca_, 30));
  EXPECT_TRUE(stays_empty(cb_, 1));
  for (auto& b : r) EXPECT_EQ(b, std::vector<uint8_t>(32, 0));
  fi_msg last{&v, &d, 1, b_, &sc[2], 0};
  ASSERT_EQ(fi_sendmsg(a_ep_, &last, 0), 0);
  auto tx = take(ca_, 3);
  auto rx = take(cb_, 3);
  ASSERT_EQ(tx.size(), 3u);
  ASSERT_EQ(rx.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(find(tx, &sc[i]), nullptr);
    EXPECT_NE(find(rx, &rc_[i]), nullptr);
    EXPECT_EQ(r[i], s);
  }
  ASSERT_NE(info_->caps & FI_RMA, 0u);
  // The same for RDMA writes, where the device offers them.
  const bool can_write = offers_rma(info_, FI_WRITE);
  std::vector<uint8_t> remote(32, 0);
  fid_mr* rm = reg(remote.data(), remote.size(), can_write ? FI_REMOTE_WRITE : FI_REMOTE_READ);
  fid_mr* lm = reg(s.data(), s.size(), can_write ? FI_WRITE : FI_SEND);
  void* ld = fi_mr_desc(lm);
  fi_rma_iov rv{reinterpret_cast<uintptr_t>(remote.data()), 32, fi_mr_key(rm)};
  int w1 = 0, w2 = 0;
  fi_msg_rma wm{&v, &ld, 1, b_, &rv, 1, &w1, 0};
  if (!can_write) {
    EXPECT_EQ(fi_writemsg(a_ep_, &wm, FI_MORE), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_writemsg(a_ep_, &wm, 0), -FI_EOPNOTSUPP);
    EXPECT_TRUE(stays_empty(ca_, 20));
    EXPECT_EQ(remote, std::vector<uint8_t>(32, 0));
    GTEST_SKIP() << "RDMA write (FI_RMA write) not offered by " << backend_label() << ": FI_MORE on writes not run";
  }
  ASSERT_EQ(fi_writemsg(a_ep_, &wm, FI_MORE), 0);
  EXPECT_TRUE(stays_empty(ca_, 30));
  EXPECT_EQ(remote, std::vector<uint8_t>(32, 0));
  wm.context = &w2;
  ASSERT_EQ(fi_writemsg(a_ep_, &wm, 0), 0);
  tx = take(ca_, 2);
  EXPECT_NE(find(tx, &w1), nullptr);
  EXPECT_NE(find(tx, &w2), nullptr);
  EXPECT_EQ(remote, s);
}

TEST_P(DataPath, SelectiveCompletionReportsOnlyFiCompletion) {
  fid_cq* sel = cq();
  fi_addr_t c_addr = 0;
  fid_ep* c_ep = ep(sel, &c_addr, FI_SELECTIVE_COMPLETION);
  auto s = pattern(48, 7);
  std::vector<uint8_t> r1(48, 0), r2(48, 0);
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
  fid_mr* m1 = reg(r1.data(), 48, FI_RECV);
  fid_mr* m2 = reg(r2.data(), 48, FI_RECV);
  int rq1 = 0, rq2 = 0, s1 = 0, s2 = 0, s3 = 0;
  // Receives on the selective EP: one without FI_COMPLETION, one with.
  iovec v1{r1.data(), 48}, v2{r2.data(), 48};
  void* d1 = fi_mr_desc(m1);
  void* d2 = fi_mr_desc(m2);
  fi_msg rm1{&v1, &d1, 1, FI_ADDR_UNSPEC, &rq1, 0}, rm2{&v2, &d2, 1, FI_ADDR_UNSPEC, &rq2, 0};
  ASSERT_EQ(fi_recvmsg(c_ep, &rm1, 0), 0);
  ASSERT_EQ(fi_send(a_ep_, s.data(), s.size(), fi_mr_desc(sm), c_addr, &s1), 0);
  EXPECT_EQ(take(ca_, 1).size(), 1u);
  EXPECT_TRUE(stays_empty(sel, 20));
  EXPECT_EQ(r1, s);  // delivered, not reported
  ASSERT_EQ(fi_recvmsg(c_ep, &rm2, FI_COMPLETION), 0);
  ASSERT_EQ(fi_send(a_ep_, s.data(), s.size(), fi_mr_desc(sm), c_addr, &s2), 0);
  EXPECT_EQ(take(ca_, 1).size(), 1u);
  auto rx = take(sel, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].op_context, &rq2);
  // Sends from the selective EP: fi_send (no FI_COMPLETION in op_flags) is silent, sendmsg with
  // FI_COMPLETION is reported.
  std::vector<uint8_t> rb(48, 0);
  fid_mr* rbm = reg(rb.data(), 48, FI_RECV);
  ASSERT_EQ(fi_recv(b_ep_, rb.data(), 48, fi_mr_desc(rbm), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_recv(b_ep_, rb.data(), 48, fi_mr_desc(rbm), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(c_ep, s.data(), s.size(), fi_mr_desc(sm), b_, &s2), 0);
  iovec sv{s.data(), 48};
  void* sd = fi_mr_desc(sm);
  fi_msg smsg{&sv, &sd, 1, b_, &s3, 0};
  ASSERT_EQ(fi_sendmsg(c_ep, &smsg, FI_COMPLETION), 0);
  EXPECT_EQ(take(cb_, 2).size(), 2u);
  auto tx = take(sel, 1);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].op_context, &s3);
  EXPECT_TRUE(stays_empty(sel, 20));
}

TEST_P(DataPath, SreadSleepsUntilACompletionAndHonoursTimeouts) {
  fid_cq* wcq = cq(FI_CQ_FORMAT_DATA, FI_WAIT_FD);
  fi_addr_t w_addr = 0;
  fid_ep* w_ep = ep(wcq, &w_addr);
  fi_cq_data_entry e{};
  for (int timeout : {0, 25}) {
    auto t0 = Clock::now();
    EXPECT_EQ(fi_cq_sread(wcq, &e, 1, nullptr, timeout), -FI_EAGAIN);
    EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(timeout));
  }
  std::vector<uint8_t> r(32, 0), s = pattern(32, 8);
  fid_mr* rm = reg(r.data(), 32, FI_RECV);
  fid_mr* sm = reg(s.data(), 32, FI_SEND);
  int rctx = 0;
  ASSERT_EQ(fi_recv(w_ep, r.data(), 32, fi_mr_desc(rm), FI_ADDR_UNSPEC, &rctx), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fi_send(a_ep_, s.data(), 32, fi_mr_desc(sm), w_addr, nullptr), 0);
  });
  ASSERT_EQ(fi_cq_sread(wcq, &e, 1, nullptr, 5000), 1);
  sender.join();
  EXPECT_EQ(e.op_context, &rctx);
  EXPECT_EQ(r, s);
  // fi_cq_signal wakes a reader blocked without a timeout.
  std::thread signaller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fi_cq_signal(wcq), 0);
  });
  EXPECT_EQ(fi_cq_sread(wcq, &e, 1, nullptr, -1), -FI_ECANCELED);
  signaller.join();
  EXPECT_EQ(fi_cq_sread(wcq, nullptr, 1, nullptr, 0), -FI_EINVAL);
  int cond = 1;
  EXPECT_EQ(fi_cq_sread(wcq, &e, 1, &cond, 0), -FI_EINVAL);
  EXPECT_EQ(take(ca_, 1).size(), 1u);
}

TEST_P(DataPath, TrywaitThenPollTheWaitFd) {
  fid_cq* wcq = cq(FI_CQ_FORMAT_DATA, FI_WAIT_FD);
  fi_addr_t w_addr = 0;
  fid_ep* w_ep = ep(wcq, &w_addr);
  int fd = -1;
  ASSERT_EQ(fi_control(&wcq->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  fid* fids[1] = {&wcq->fid};
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 10), 0);  // nothing happened
  std::vector<uint8_t> r(32, 0), s = pattern(32, 2);
  fid_mr* rm = reg(r.data(), 32, FI_RECV);
  fid_mr* sm = reg(s.data(), 32, FI_SEND);
  ASSERT_EQ(fi_recv(w_ep, r.data(), 32, fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  ASSERT_EQ(fi_send(a_ep_, s.data(), 32, fi_mr_desc(sm), w_addr, nullptr), 0);
  p.revents = 0;
  EXPECT_EQ(poll(&p, 1, 5000), 1);  // the engine wrote the CQE and signalled
  fi_cq_data_entry e{};
  EXPECT_EQ(wait_cq(wcq, &e), 1);
  EXPECT_EQ(r, s);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  // CQs without an FD wait object cannot be waited on.
  fids[0] = &ca_->fid;
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), -FI_EINVAL);
  EXPECT_EQ(take(ca_, 1).size(), 1u);
}

TEST_P(DataPath, CntrWaitSleepsAndTimesOut) {
  for (fi_wait_obj w : {FI_WAIT_UNSPEC, FI_WAIT_FD}) {
    fi_cntr_attr ca{};
    ca.events = FI_CNTR_EVENTS_COMP;
    ca.wait_obj = w;
    fid_cntr* c = nullptr;
    ASSERT_EQ(fi_cntr_open(domain_, &ca, &c, nullptr), 0);
    auto t0 = Clock::now();
    EXPECT_EQ(fi_cntr_wait(c, 1, 25), -FI_ETIMEDOUT);
    EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(25));
    std::thread adder([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(fi_cntr_add(c, 2), 0);
    });
    EXPECT_EQ(fi_cntr_wait(c, 2, 5000), 0);
    adder.join();
    std::thread err([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(fi_cntr_adderr(c, 1), 0);
    });
    EXPECT_EQ(fi_cntr_wait(c, 100, -1), -FI_EAVAIL);
    err.join();
    EXPECT_EQ(fi_close(&c->fid), 0);
  }
}

TEST_P(DataPath, CntrWaitSeesCompletionsOfBoundEndpoint) {
  fi_cntr_attr ca{};
  ca.events = FI_CNTR_EVENTS_COMP;
  ca.wait_obj = FI_WAIT_FD;
  fid_cntr* rc = nullptr;
  ASSERT_EQ(fi_cntr_open(domain_, &ca, &rc, nullptr), 0);
  closing_.push_back(&rc->fid);
  fid_cq* c = cq();
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  closing_.push_back(&e->fid);
  ASSERT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(e, &c->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_ep_bind(e, &rc->fid, FI_RECV), 0);
  ASSERT_EQ(fi_enable(e), 0);
  char name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&e->fid, name, &len), 0);
  fi_addr_t addr;
  ASSERT_EQ(fi_av_insert(av_, name, 1, &addr, 0, nullptr), 1);
  std::vector<uint8_t> r(16), s = pattern(16, 1);
  fid_mr* rm = reg(r.data(), 16, FI_RECV);
  ASSERT_EQ(fi_recv(e, r.data(), 16, fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    EXPECT_EQ(fi_inject(a_ep_, s.data(), s.size(), addr), 0);
  });
  EXPECT_EQ(fi_cntr_wait(rc, 1, 5000), 0);
  sender.join();
  EXPECT_EQ(fi_cntr_read(rc), 1u);
  EXPECT_EQ(r, s);
  EXPECT_EQ(take(c, 1).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, DataPath, ::testing::ValuesIn(present_backends()));

}  // namespace
}  // namespace xpufab::testing
