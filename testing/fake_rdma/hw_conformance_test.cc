// The hardware backend ("hw": dlopen'd libibverbs + libefa) on the emulated EFA through the
// preload library: the conformance fixture instantiated with "hw", so the provider's data path
// runs on queues that Debian's rdma-core created and mapped, with efadv_query_qp_wqs and
// efadv_query_cq supplied by the preload library. Runs only under fake_rdma_run.sh.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "api/backend/backend.h"
#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

class HwOverShim : public DataPathFixture {
 protected:
  void SetUp() override {
    select_backend(GetParam());
    ASSERT_EQ(open(), 0);
  }
};

TEST_P(HwOverShim, BackendFindsTheEmulatedDevice) {
  std::unique_ptr<backend::Backend> b;
  ASSERT_EQ(backend::open_backend("hw", &b), 0);
  std::vector<backend::DeviceInfo> devs;
  ASSERT_EQ(b->enumerate(&devs), 0);
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "efa_0");
  std::unique_ptr<backend::Device> d;
  ASSERT_EQ(b->open_device(devs[0].name, &d), 0);
  backend::DeviceAttr a{};
  ASSERT_EQ(d->query(&a), 0);
  EXPECT_GT(a.max_sq_wr, 0u);
  EXPECT_TRUE(a.device_caps & backend::kCapRdmaRead);
}

TEST_P(HwOverShim, SendRecvWithData) {
  fid_cq* c = cq();
  fi_addr_t a0 = 0, a1 = 0;
  fid_ep* e0 = ep(c, &a0);
  fid_ep* e1 = ep(c, &a1);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);
  std::vector<uint8_t> src(256), dst(256, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  fid_mr* ms = reg(src.data(), src.size(), FI_SEND);
  fid_mr* md = reg(dst.data(), dst.size(), FI_RECV);
  ASSERT_NE(ms, nullptr);
  ASSERT_NE(md, nullptr);
  int rctx = 0, sctx = 0;
  ASSERT_EQ(fi_recv(e1, dst.data(), dst.size(), fi_mr_desc(md), a0, &rctx), 0);
  ASSERT_EQ(fi_senddata(e0, src.data(), src.size(), fi_mr_desc(ms), 0xabcd, a1, &sctx), 0);
  auto got = take(c, 2);
  ASSERT_EQ(got.size(), 2u);
  const fi_cq_data_entry* r = find(got, &rctx);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->len, src.size());
  EXPECT_EQ(r->data, 0xabcdu);
  EXPECT_NE(find(got, &sctx), nullptr);
  EXPECT_EQ(src, dst);
}

// Debian's libefa (v44) predates RDMA write (v47): efadv_query_device reports only RDMA read, so
// the provider offers read and refuses write, as it would on hardware with that library.
TEST_P(HwOverShim, RdmaReadVerifiedAndWriteRefusedByOldLibefa) {
  fid_cq* c = cq();
  fi_addr_t a0 = 0, a1 = 0;
  fid_ep* e0 = ep(c, &a0);
  fid_ep* e1 = ep(c, &a1);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);
  std::vector<uint8_t> remote(4096), back(4096, 0);
  for (size_t i = 0; i < remote.size(); ++i) remote[i] = static_cast<uint8_t>(i ^ 0x5a);
  fid_mr* mb = reg(back.data(), back.size(), FI_READ | FI_WRITE);
  fid_mr* mr = reg(remote.data(), remote.size(), FI_REMOTE_READ);
  ASSERT_NE(mb, nullptr);
  ASSERT_NE(mr, nullptr);
  uint64_t raddr = reinterpret_cast<uint64_t>(remote.data());
  int rctx = 0;
  ASSERT_EQ(fi_read(e0, back.data(), back.size(), fi_mr_desc(mb), a1, raddr, fi_mr_key(mr), &rctx),
            0);
  auto r = take(c, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_context, &rctx);
  EXPECT_EQ(back, remote);
  int wctx = 0;
  EXPECT_EQ(fi_write(e0, back.data(), back.size(), fi_mr_desc(mb), a1, raddr, fi_mr_key(mr), &wctx),
            -FI_EOPNOTSUPP);
}

TEST_P(HwOverShim, BadKeyReadGivesErrorCompletion) {
  fid_cq* c = cq();
  fi_addr_t a0 = 0, a1 = 0;
  fid_ep* e0 = ep(c, &a0);
  fid_ep* e1 = ep(c, &a1);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);
  std::vector<uint8_t> local(64, 0), remote(64, 3);
  fid_mr* ml = reg(local.data(), local.size(), FI_READ);
  fid_mr* mr = reg(remote.data(), remote.size(), FI_REMOTE_READ);
  ASSERT_NE(ml, nullptr);
  ASSERT_NE(mr, nullptr);
  int rctx = 0;
  ASSERT_EQ(fi_read(e0, local.data(), local.size(), fi_mr_desc(ml), a1,
                    reinterpret_cast<uint64_t>(remote.data()), fi_mr_key(mr) ^ 0x5555, &rctx),
            0);
  fi_cq_data_entry e{};
  EXPECT_EQ(wait_cq(c, &e), -FI_EAVAIL);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(c, &err, 0), 1);
  EXPECT_EQ(err.op_context, &rctx);
  EXPECT_NE(err.err, 0);
  EXPECT_EQ(local, std::vector<uint8_t>(64, 0));
}

// Under the preload library the hardware backend must find the emulated device; anywhere else
// this binary has no backend to run on.
TEST(HwOverShimSetup, HwBackendIsPresent) {
  const std::vector<const char*> present = present_backends();
  EXPECT_TRUE(std::any_of(present.begin(), present.end(),
                          [](const char* b) { return std::strcmp(b, "hw") == 0; }));
}

INSTANTIATE_TEST_SUITE_P(FakeRdma, HwOverShim, ::testing::ValuesIn(present_backends()));

}  // namespace
}  // namespace xpufab::testing
