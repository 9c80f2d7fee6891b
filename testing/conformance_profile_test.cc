// Conformance per device generation and device mode: send/recv-only and read-only generations,
// FI_RX_CQ_DATA on a device without unsolicited write-recv, manual and automatic progress, and
// QP failures reaching the application.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "api/backend/backend.h"
#include "device/efa_io_defs.h"
#include "testing/conformance_emu_backend.h"
#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Waits (without calling the provider) until `pred` holds or `ms` pass.
template <class P>
bool eventually(P pred, int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

// Reads a byte the emulated NIC may be writing right now, as a NIC-written buffer is watched on
// hardware; the read is exempt from ThreadSanitizer because the NIC's copy is not a C++ access.
__attribute__((no_sanitize_thread, noinline)) bool byte_set(const uint8_t* p) {
  return *static_cast<const volatile uint8_t*>(p) != 0;
}

// Named emulated generations through FI_EFA_EMU_PROFILE on backend "emu".
class Generation : public DataPathFixture {
 protected:
  void use(const char* profile) {
    select_backend("emu");
    setenv("FI_EFA_EMU_PROFILE", profile, 1);
  }
  void TearDown() override {
    DataPathFixture::TearDown();
    unsetenv("FI_EFA_EMU_PROFILE");
  }
};

TEST_P(Generation, SendRecvOnlyOffersNoRmaAndRefusesIt) {
  use("gen1");
  // The hints ask for FI_RMA, which efa-direct lacks here (the protocol fabric "efa" emulates it
  // on every generation, so the hints name efa-direct).
  EXPECT_EQ(open([](fi_info* h) { h->fabric_attr->name = strdup("efa-direct"); }), -FI_ENODATA);
  ASSERT_EQ(open([](fi_info* h) { h->caps = FI_MSG; }), 0);
  EXPECT_EQ(info_->caps & (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE), 0u);
  EXPECT_EQ(info_->rx_attr->mode & FI_RX_CQ_DATA, 0u);
  fid_cq* c = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(c, &a);
  fid_ep* eb = ep(c, &b);
  std::vector<uint8_t> s(64, 7), r(64, 0);
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND | FI_WRITE | FI_READ);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ);
  const uint64_t ra = reinterpret_cast<uintptr_t>(r.data());
  EXPECT_EQ(fi_write(ea, s.data(), 8, fi_mr_desc(sm), b, ra, fi_mr_key(rm), nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_read(ea, s.data(), 8, fi_mr_desc(sm), b, ra, fi_mr_key(rm), nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_writedata(ea, s.data(), 8, fi_mr_desc(sm), 1, b, ra, fi_mr_key(rm), nullptr),
            -FI_EOPNOTSUPP);
  // Messages work.
  int rctx = 0;
  ASSERT_EQ(fi_recv(eb, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_senddata(ea, s.data(), s.size(), fi_mr_desc(sm), 9, b, nullptr), 0);
  auto got = take(c, 2);
  ASSERT_NE(find(got, &rctx), nullptr);
  EXPECT_EQ(find(got, &rctx)->data, 9u);
  EXPECT_EQ(r, s);
}

TEST_P(Generation, ReadOnlyGenerationReadsAndRefusesWrites) {
  use("gen2");
  ASSERT_EQ(open([](fi_info* h) { h->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ; }), 0);
  EXPECT_NE(info_->caps & FI_READ, 0u);
  EXPECT_EQ(info_->caps & (FI_WRITE | FI_REMOTE_WRITE), 0u);
  fid_cq* c = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(c, &a);
  ep(c, &b);
  std::vector<uint8_t> remote(128, 0x42), back(128, 0);
  fid_mr* rm = reg(remote.data(), remote.size(), FI_REMOTE_READ);
  fid_mr* bm = reg(back.data(), back.size(), FI_READ | FI_WRITE);
  const uint64_t ra = reinterpret_cast<uintptr_t>(remote.data());
  int ctx = 0;
  ASSERT_EQ(fi_read(ea, back.data(), back.size(), fi_mr_desc(bm), b, ra, fi_mr_key(rm), &ctx), 0);
  auto got = take(c, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].flags, FI_RMA | FI_READ);
  EXPECT_EQ(back, remote);
  EXPECT_EQ(fi_write(ea, back.data(), 8, fi_mr_desc(bm), b, ra, fi_mr_key(rm), nullptr), -FI_EOPNOTSUPP);
}

INSTANTIATE_TEST_SUITE_P(Emu, Generation, ::testing::Values("emu"));

// Devices made by backend "emu_test".
class Custom : public DataPathFixture {
 protected:
  void use(const emu::Profile& p, bool engine_thread) {
    set_emu_test_device(p, engine_thread);
    select_backend(kEmuTestBackend);
  }
  void TearDown() override {
    DataPathFixture::TearDown();
    set_emu_test_device(emu::default_profile(), true);
  }
  // Sender posts into an empty RQ (RNR, retried forever); the receive is posted afterwards. Who
  // drives the retry shows the progress mode.
  void rnr_then_receive(fid_cq* c, fid_ep* ea, fid_ep* eb, fi_addr_t b,
                        std::vector<uint8_t>* r, const std::vector<uint8_t>& s, bool automatic) {
    fid_mr* sm = reg(const_cast<uint8_t*>(s.data()), s.size(), FI_SEND);
    fid_mr* rm = reg(r->data(), r->size(), FI_RECV);
    ASSERT_EQ(fi_send(ea, s.data(), s.size(), fi_mr_desc(sm), b, nullptr), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(fi_recv(eb, r->data(), r->size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
    const std::vector<uint8_t> zero(r->size(), 0);
    auto arrived = [&] { return byte_set(&(*r)[r->size() - 1]); };
    if (automatic) {
      // Nobody calls in: the engine thread retries and delivers.
      EXPECT_TRUE(eventually(arrived, 5000));
    } else {
      // Nothing moves until the application drives progress.
      EXPECT_FALSE(eventually(arrived, 30));
      EXPECT_EQ(*r, zero);
    }
    fi_cq_data_entry e{};
    int seen = 0;
    for (int i = 0; i < 2; ++i) seen += wait_cq(c, &e, 5000) == 1;
    EXPECT_EQ(seen, 2);
    EXPECT_EQ(*r, s);
  }

  // RDMA read/write and write-with-immediate, but no unsolicited write-recv.
  static emu::Profile no_unsolicited() {
    emu::Profile p = *emu::find_profile("gen3");
    p.device_caps &= ~backend::kCapUnsolicitedWriteRecv;
    return p;
  }
};

TEST_P(Custom, RxCqDataModeWhenWritesNeedAReceive) {
  use(no_unsolicited(), true);
  // Mode 0 hints cannot take efa-direct's FI_RX_CQ_DATA (the protocol fabric, which needs no
  // mode, would take them: the hints name efa-direct).
  EXPECT_EQ(open([](fi_info* h) { h->fabric_attr->name = strdup("efa-direct"); }), -FI_ENODATA);
  ASSERT_EQ(open([](fi_info* h) { h->mode = FI_RX_CQ_DATA; }), 0);
  EXPECT_NE(info_->rx_attr->mode & FI_RX_CQ_DATA, 0u);
  EXPECT_NE(info_->mode & FI_RX_CQ_DATA, 0u);
  fid_cq* ca = cq();
  fid_cq* cb = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(ca, &a);
  fid_ep* eb = ep(cb, &b);
  std::vector<uint8_t> local(200, 0x33), remote(200, 0), rbuf(64, 0);
  fid_mr* lm = reg(local.data(), local.size(), FI_WRITE | FI_SEND);
  fid_mr* rm = reg(remote.data(), remote.size(), FI_REMOTE_WRITE);
  fid_mr* bm = reg(rbuf.data(), rbuf.size(), FI_RECV);
  const uint64_t ra = reinterpret_cast<uintptr_t>(remote.data());
  int rctx = 0, wctx = 0, w2 = 0;
  const ssize_t rx_room = fi_rx_size_left(eb);
  EXPECT_EQ(rx_room, static_cast<ssize_t>(info_->rx_attr->size));
  ASSERT_EQ(fi_recv(eb, rbuf.data(), rbuf.size(), fi_mr_desc(bm), FI_ADDR_UNSPEC, &rctx), 0);
  // A plain write leaves the posted receive alone.
  ASSERT_EQ(fi_write(ea, local.data(), 100, fi_mr_desc(lm), b, ra, fi_mr_key(rm), &w2), 0);
  EXPECT_EQ(take(ca, 1).size(), 1u);
  EXPECT_TRUE(stays_empty(cb, 20));
  // A write with data consumes it and completes it with the data.
  ASSERT_EQ(fi_writedata(ea, local.data(), local.size(), fi_mr_desc(lm), 0x77, b, ra, fi_mr_key(rm), &wctx), 0);
  auto tx = take(ca, 1);
  auto rx = take(cb, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(tx.at(0).op_context, &wctx);
  EXPECT_EQ(rx[0].op_context, &rctx);
  EXPECT_EQ(rx[0].flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx[0].data, 0x77u);
  EXPECT_EQ(rx[0].len, local.size());
  EXPECT_EQ(remote, local);
  EXPECT_EQ(rbuf, std::vector<uint8_t>(64, 0));  // the receive buffer holds no payload
  EXPECT_EQ(fi_rx_size_left(eb), rx_room);  // the receive was consumed
}

TEST_P(Custom, ManualProgressMovesOnlyWhenTheApplicationPolls) {
  use(emu::default_profile(), /*engine_thread=*/false);
  ASSERT_EQ(open([](fi_info* h) { h->domain_attr->data_progress = FI_PROGRESS_MANUAL; }), 0);
  fid_cq* c = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(c, &a);
  fid_ep* eb = ep(c, &b);
  std::vector<uint8_t> s(48, 0x5c), r(48, 0);
  rnr_then_receive(c, ea, eb, b, &r, s, false);
  // A sleeping read still completes: it drives progress between sleeps.
  fid_cq* wc = cq(FI_CQ_FORMAT_DATA, FI_WAIT_FD);
  fi_addr_t w = 0;
  fid_ep* ew = ep(wc, &w);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
  ASSERT_EQ(fi_recv(ew, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(ea, s.data(), s.size(), fi_mr_desc(sm), w, nullptr), 0);
  fi_cq_data_entry e{};
  EXPECT_EQ(fi_cq_sread(wc, &e, 1, nullptr, 5000), 1);
  EXPECT_EQ(take(c, 1).size(), 1u);
}

TEST_P(Custom, AutomaticProgressMovesWithoutTheApplication) {
  use(emu::default_profile(), /*engine_thread=*/true);
  ASSERT_EQ(open(), 0);
  EXPECT_EQ(info_->domain_attr->data_progress, FI_PROGRESS_AUTO);
  fid_cq* c = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(c, &a);
  fid_ep* eb = ep(c, &b);
  std::vector<uint8_t> s(48, 0x6d), r(48, 0);
  rnr_then_receive(c, ea, eb, b, &r, s, true);
}

TEST_P(Custom, FailedQpFlushesOutstandingReceives) {
  use(emu::default_profile(), true);
  ASSERT_EQ(open(), 0);
  fid_cq* c = cq();
  fi_addr_t b = 0;
  fid_ep* eb = ep(c, &b);  // the last QP created
  std::vector<uint8_t> r(64);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  int c1 = 0, c2 = 0;
  ASSERT_EQ(fi_recv(eb, r.data(), 32, fi_mr_desc(rm), FI_ADDR_UNSPEC, &c1), 0);
  ASSERT_EQ(fi_recv(eb, r.data() + 32, 32, fi_mr_desc(rm), FI_ADDR_UNSPEC, &c2), 0);
  ASSERT_EQ(fail_last_qp(EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR), 0);
  std::vector<void*> ctxs;
  for (int i = 0; i < 2; ++i) {
    fi_cq_data_entry e{};
    ASSERT_EQ(wait_cq(c, &e), -FI_EAVAIL);
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(c, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ECANCELED);
    EXPECT_EQ(err.prov_errno, EFA_IO_COMP_STATUS_FLUSHED);
    EXPECT_EQ(err.flags, FI_MSG | FI_RECV);
    ctxs.push_back(err.op_context);
  }
  EXPECT_TRUE((ctxs[0] == &c1 && ctxs[1] == &c2) || (ctxs[0] == &c2 && ctxs[1] == &c1));
  EXPECT_TRUE(stays_empty(c, 10));
  EXPECT_EQ(fi_cancel(&eb->fid, &c1), -FI_ENOENT);  // nothing left that could be cancelled
}

// Host-memory XPU context defaults (ops NULL) are enough for a failure report.
TEST_P(Custom, FailedXpuEndpointReportsOnItsHostCq) {
  use(emu::default_profile(), true);
  ASSERT_EQ(open([](fi_info* h) {
              h->caps |= FI_XPU;
              h->domain_attr->mr_mode |= FI_MR_XPU_DESC;
            }),
            0);
  fi_xpu_attr xa{};
  xa.iface = FI_HMEM_SYSTEM;
  fid_xpu_ctx* ctx = nullptr;
  ASSERT_EQ(fi_xpu_ctx(domain_, &xa, &ctx, nullptr), 0);
  closing_.push_back(&ctx->fid);
  fi_cq_attr xca{};
  xca.format = FI_CQ_FORMAT_DATA;
  xca.xpu_ctx = ctx;
  fid_cq* xcq = nullptr;
  ASSERT_EQ(fi_cq_open(domain_, &xca, &xcq, nullptr), 0);
  closing_.push_back(&xcq->fid);
  fid_cq* hcq = cq();
  fi_info* i = fi_dupinfo(info_);
  i->ep_attr->xpu_ctx = ctx;
  fid_ep* ep = nullptr;
  int ep_ctx = 0;
  ASSERT_EQ(fi_endpoint2(domain_, i, &ep, FI_XPU, &ep_ctx), 0);
  fi_freeinfo(i);
  closing_.push_back(&ep->fid);
  ASSERT_EQ(fi_ep_bind(ep, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &xcq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_ep_bind(ep, &hcq->fid, FI_TRANSMIT | FI_RECV), 0);  // for errors
  ASSERT_EQ(fi_enable(ep), 0);
  EXPECT_EQ(fi_close(&hcq->fid), -FI_EBUSY);
  fi_cq_data_entry e{};
  EXPECT_TRUE(stays_empty(hcq, 5));
  ASSERT_EQ(fail_last_qp(EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT), 0);
  ASSERT_EQ(wait_cq(hcq, &e), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(hcq, &err, 0), 1);
  EXPECT_EQ(err.op_context, &ep_ctx);
  EXPECT_EQ(err.err, FI_ECONNABORTED);
  EXPECT_EQ(err.prov_errno, EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT);
  EXPECT_TRUE(stays_empty(hcq, 5));
}

INSTANTIATE_TEST_SUITE_P(EmuTest, Custom, ::testing::Values(kEmuTestBackend));

}  // namespace
}  // namespace xpufab::testing
