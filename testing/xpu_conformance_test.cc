// FI_XPU host API conformance: contexts, XPU CQs/counters/EPs, exports and their error codes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "testing/conformance_fixture.h"
#include "testing/conformance_util.h"
#include "xpufab/efa_xpu/handles.h"

namespace xpufab::testing {
namespace {

// Host-memory callbacks that count what the provider allocates, imports and releases.
std::atomic<int> g_allocs{0}, g_frees{0}, g_imports{0}, g_unimports{0}, g_dmabuf_allocs{0};
std::atomic<int> g_fail_import_at{-1};

int t_alloc(uint64_t, uint64_t size, uint64_t align, uint64_t flags, void** addr, int* fd,
            uint64_t* off) {
  void* p = nullptr;
  if (posix_memalign(&p, align < 64 ? 64 : align, size)) return -FI_ENOMEM;
  *addr = p;
  if (flags & FI_XPU_ALLOC_DMABUF) {
    g_dmabuf_allocs++;
    if (fd) *fd = -1;
    if (off) *off = 0;
  }
  g_allocs++;
  return 0;
}
int t_import(uint64_t, void* host, uint64_t, uint64_t, void** dev) {
  int n = g_imports.fetch_add(1);
  if (n == g_fail_import_at.load()) {
    g_imports--;
    return -FI_ENOMEM;
  }
  *dev = host;
  return 0;
}
int t_unimport(uint64_t, void*) {
  g_unimports++;
  return 0;
}
void t_free(uint64_t, void* p) {
  g_frees++;
  free(p);
}

class XpuConformance : public OpenDomain<::testing::TestWithParam<const char*>> {
 protected:
  void SetUp() override {
    select_backend(GetParam());
    g_allocs = g_frees = g_imports = g_unimports = g_dmabuf_allocs = 0;
    g_fail_import_at = -1;
    ASSERT_EQ(open_domain(true), 0);
    ops_.size = sizeof(ops_);
    ops_.alloc = t_alloc;
    ops_.import = t_import;
    ops_.unimport = t_unimport;
    ops_.free = t_free;
    fi_xpu_attr xa{};
    xa.iface = FI_HMEM_SYSTEM;
    xa.ops = reinterpret_cast<fi_xpu_ops*>(&ops_);
    ASSERT_EQ(fi_xpu_ctx(domain_, &xa, &ctx_, nullptr), 0);
    fi_xpu_ctx_attr qa{};
    ASSERT_EQ(fi_xpu_ctx_query(ctx_, &qa), 0);
    caps_ = qa.caps;
  }

  // SetUp or a test may stop half-way: close only what exists.
  void TearDown() override {
    close_domain(ctx_ ? &ctx_->fid : nullptr);
    // Nothing leaked through the callbacks.
    EXPECT_EQ(g_allocs.load(), g_frees.load());
    EXPECT_EQ(g_imports.load(), g_unimports.load());
  }

  // A device without XPU CQs (no external-memory CQ rings, e.g. rdma-core older than v59) says so
  // in fi_xpu_ctx_query; it must then refuse an XPU CQ with -FI_EOPNOTSUPP and release what the
  // attempt allocated. Returns true when the caps offer XPU CQs and EPs.
  bool xpu_cqs_offered() {
    if (caps_ & FI_XPU_CAP_CQ) {
      EXPECT_TRUE(caps_ & FI_XPU_CAP_EP);
      return true;
    }
    EXPECT_FALSE(caps_ & FI_XPU_CAP_EP);  // an XPU EP needs an XPU CQ
    for (bool with_flag : {true, false}) {
      fi_cq_attr ca{};
      ca.format = FI_CQ_FORMAT_DATA;
      ca.flags = with_flag ? FI_XPU : 0;
      ca.xpu_ctx = ctx_;
      fid_cq* cq = nullptr;
      EXPECT_EQ(fi_cq_open(domain_, &ca, &cq, nullptr), -FI_EOPNOTSUPP);
      EXPECT_EQ(cq, nullptr);
    }
    EXPECT_EQ(g_allocs.load(), g_frees.load());
    return false;
  }

  fid_cq* xpu_cq(bool with_flag) {
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_DATA;
    ca.flags = with_flag ? FI_XPU : 0;
    ca.xpu_ctx = ctx_;
    fid_cq* cq = nullptr;
    EXPECT_EQ(fi_cq_open(domain_, &ca, &cq, nullptr), 0);
    return cq;
  }

  fid_ep* xpu_ep(fid_cq* cq, fid_cntr* cntr) {
    fi_info* i = fi_dupinfo(info_);
    i->ep_attr->xpu_ctx = ctx_;
    fid_ep* ep = nullptr;
    EXPECT_EQ(fi_endpoint2(domain_, i, &ep, FI_XPU, nullptr), 0);
    EXPECT_EQ(fi_endpoint(domain_, i, &ep_bad_, nullptr), -FI_EINVAL);  // xpu_ctx without FI_XPU
    fi_freeinfo(i);
    EXPECT_EQ(fi_ep_bind(ep, &av_->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    if (cntr) {
      EXPECT_EQ(fi_ep_bind(ep, &cntr->fid, FI_SEND | FI_RECV), 0);
    }
    return ep;
  }

  fid_xpu_ctx* ctx_ = nullptr;
  uint64_t caps_ = 0;  // fi_xpu_ctx_query of ctx_
  fid_ep* ep_bad_ = nullptr;
  fi_xpu_ops_unimport ops_{};
};

TEST_P(XpuConformance, CtxQueryAndArgErrors) {
  fi_xpu_ctx_attr qa{};
  ASSERT_EQ(fi_xpu_ctx_query(ctx_, &qa), 0);
  EXPECT_EQ(qa.caps, caps_);
  EXPECT_EQ(qa.av_addr_size, sizeof(efa_xpu_peer));
  EXPECT_EQ(qa.mr_desc_size, sizeof(efa_xpu_desc));
  EXPECT_EQ(fi_xpu_ctx_query(ctx_, nullptr), -FI_EINVAL);
  fid_xpu_ctx* c2 = nullptr;
  EXPECT_EQ(fi_xpu_ctx(domain_, nullptr, &c2, nullptr), -FI_EINVAL);
  fi_xpu_attr xa{};  // default host ops; a second context in the same domain
  ASSERT_EQ(fi_xpu_ctx(domain_, &xa, &c2, nullptr), 0);
  fi_xpu_ops bad{};
  bad.size = 3;
  xa.ops = &bad;
  fid_xpu_ctx* c3 = nullptr;
  EXPECT_EQ(fi_xpu_ctx(domain_, &xa, &c3, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_close(&c2->fid), 0);
}

TEST_P(XpuConformance, CqAndCntrBothFormsExportAndRefuseHostReads) {
  if (!xpu_cqs_offered()) {
    GTEST_SKIP() << "XPU CQs (FI_XPU_CAP_CQ) not offered by " << backend_label();
  }
  fid_cq* cq1 = xpu_cq(true);
  fid_cq* cq2 = xpu_cq(false);  // the fi_xpu(3) EXAMPLE form
  closing_ = {&cq1->fid, &cq2->fid};
  EXPECT_EQ(fi_close(&ctx_->fid), -FI_EBUSY);
  EXPECT_GE(g_dmabuf_allocs.load(), 2);  // the rings the NIC writes
  fid_xpu_cq h{};
  EXPECT_EQ(fi_cq_export_xpu(cq1, 0, nullptr), -FI_EINVAL);
  ASSERT_EQ(fi_cq_export_xpu(cq1, 0, &h), 0);
  EXPECT_EQ(h.fid.fclass, static_cast<uint32_t>(FI_CLASS_CQ));
  EXPECT_EQ(h.fid.prov_id, static_cast<uint32_t>(FI_XPU_PROV_EFA));
  auto* st = reinterpret_cast<efa_xpu_cq*>(h.fid.prov_ctx);
  EXPECT_EQ(st->version, EFA_XPU_VERSION);
  EXPECT_EQ(st->format, static_cast<uint32_t>(FI_CQ_FORMAT_DATA));
  fi_cq_data_entry e;
  EXPECT_EQ(fi_cq_read(cq1, &e, 1), -FI_EOPNOTSUPP);
  fi_cq_err_entry ee{};
  EXPECT_EQ(fi_cq_readerr(cq1, &ee, 0), -FI_EOPNOTSUPP);
  fi_cq_attr bad{};
  bad.flags = FI_XPU;  // FI_XPU without a context
  fid_cq* x = nullptr;
  EXPECT_EQ(fi_cq_open(domain_, &bad, &x, nullptr), -FI_EINVAL);

  fi_cntr_attr ca{};
  ca.events = FI_CNTR_EVENTS_COMP;
  ca.flags = FI_XPU;
  ca.xpu_ctx = ctx_;
  fid_cntr* c = nullptr;
  int rc = fi_cntr_open(domain_, &ca, &c, nullptr);
  if (!(caps_ & FI_XPU_CAP_CNTR)) {
    EXPECT_EQ(rc, -FI_EOPNOTSUPP);  // no completion counters on this device
    EXPECT_EQ(c, nullptr);
    GTEST_SKIP() << "XPU counters (FI_XPU_CAP_CNTR) not offered by " << backend_label();
  }
  ASSERT_EQ(rc, 0);
  closing_.push_back(&c->fid);
  fid_xpu_cntr hc{};
  ASSERT_EQ(fi_cntr_export_xpu(c, 0, &hc), 0);
  EXPECT_EQ(hc.fid.fclass, static_cast<uint32_t>(FI_CLASS_CNTR));
  auto* cs = reinterpret_cast<efa_xpu_cntr*>(hc.fid.prov_ctx);
  ASSERT_NE(cs->value, nullptr);
  EXPECT_EQ(*cs->value, 0u);
  EXPECT_EQ(fi_cntr_wait(c, 1, 0), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_cntr_add(c, 1), -FI_EOPNOTSUPP);
}

TEST_P(XpuConformance, EndpointExportAndErrors) {
  if (!xpu_cqs_offered()) {
    GTEST_SKIP() << "XPU CQs (FI_XPU_CAP_CQ) not offered by " << backend_label();
  }
  fid_cq* cq = xpu_cq(true);
  fi_info* i = fi_dupinfo(info_);
  fid_ep* bad = nullptr;
  EXPECT_EQ(fi_endpoint2(domain_, i, &bad, FI_XPU, nullptr), -FI_EINVAL);  // no xpu_ctx
  fi_freeinfo(i);
  fid_ep* ep = xpu_ep(cq, nullptr);
  closing_ = {&cq->fid, &ep->fid};
  fid_xpu_ep h{};
  EXPECT_EQ(fi_ep_export_xpu(ep, 0, &h), -FI_EINVAL);  // not enabled
  ASSERT_EQ(fi_enable(ep), 0);
  ASSERT_EQ(fi_ep_export_xpu(ep, 0, &h), 0);
  EXPECT_EQ(h.fid.fclass, static_cast<uint32_t>(FI_CLASS_EP));
  EXPECT_EQ(h.fid.prov_id, static_cast<uint32_t>(FI_XPU_PROV_EFA));
  auto* st = reinterpret_cast<efa_xpu_ep*>(h.fid.prov_ctx);
  EXPECT_EQ(st->version, EFA_XPU_VERSION);
  EXPECT_EQ(st->size, sizeof(efa_xpu_ep));
  EXPECT_NE(st->sq.ring.buf, nullptr);
  EXPECT_NE(st->rq.ring.db, nullptr);
  EXPECT_NE(st->tx_cq, nullptr);
  EXPECT_EQ(st->tx_cq->num_eps, 1u);
  EXPECT_EQ(g_imports.load() >= 5, true);  // SQ, SQ doorbell, RQ, RQ doorbell, state
  EXPECT_EQ(fi_close(&cq->fid), -FI_EBUSY);
  int x = 0;
  EXPECT_EQ(fi_send(ep, &x, sizeof(x), nullptr, 0, nullptr), -FI_EOPNOTSUPP);

  // Raw address and MR descriptor for device code.
  char name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&ep->fid, name, &len), 0);
  fi_addr_t a;
  ASSERT_EQ(fi_av_insert(av_, name, 1, &a, 0, nullptr), 1);
  efa_xpu_peer peer{};
  size_t plen = 2;
  EXPECT_EQ(fi_av_lookup2(av_, a, &peer, &plen, FI_XPU, ctx_), -FI_ETOOSMALL);
  EXPECT_EQ(plen, sizeof(peer));
  ASSERT_EQ(fi_av_lookup2(av_, a, &peer, &plen, FI_XPU, ctx_), 0);
  EXPECT_EQ(peer.remote_qpn, st->qpn);
  EXPECT_EQ(peer.remote_qkey, st->qkey);
  EXPECT_EQ(fi_av_lookup2(av_, a + 100, &peer, &plen, FI_XPU, ctx_), -FI_EINVAL);
  std::vector<uint8_t> buf(64);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, buf.data(), buf.size(), FI_SEND, 0, 0, 0, &mr, nullptr), 0);
  closing_.push_back(&mr->fid);
  efa_xpu_desc d{};
  size_t dlen = 0;
  EXPECT_EQ(fi_mr_get_xpu_desc(mr, &d, &dlen, FI_XPU, ctx_), -FI_ETOOSMALL);
  EXPECT_EQ(dlen, sizeof(d));
  EXPECT_EQ(fi_mr_get_xpu_desc(mr, &d, &dlen, FI_XPU, ctx_), 0);
}

TEST_P(XpuConformance, ExportFailureReleasesEverything) {
  if (!xpu_cqs_offered()) {
    GTEST_SKIP() << "XPU CQs (FI_XPU_CAP_CQ) not offered by " << backend_label();
  }
  fid_cq* cq = xpu_cq(true);
  fid_ep* ep = xpu_ep(cq, nullptr);
  closing_ = {&cq->fid, &ep->fid};
  ASSERT_EQ(fi_enable(ep), 0);
  g_fail_import_at = g_imports.load() + 2;  // the RQ ring import fails
  fid_xpu_ep h{};
  EXPECT_EQ(fi_ep_export_xpu(ep, 0, &h), -FI_ENOMEM);
  EXPECT_EQ(g_imports.load(), g_unimports.load());
  g_fail_import_at = -1;
  ASSERT_EQ(fi_ep_export_xpu(ep, 0, &h), 0);
  fid_xpu_cq hc{};
  ASSERT_EQ(fi_cq_export_xpu(cq, 0, &hc), 0);
  auto* cst = reinterpret_cast<efa_xpu_cq*>(hc.fid.prov_ctx);
  EXPECT_EQ(cst->num_eps, 1u);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(cst->num_eps, 0u);  // the CQ no longer names the closed EP
  closing_ = {&cq->fid};
}

TEST_P(XpuConformance, HostCqMayCarryXpuEpErrorsButNotDataCq) {
  if (!xpu_cqs_offered()) {
    GTEST_SKIP() << "XPU CQs (FI_XPU_CAP_CQ) not offered by " << backend_label();
  }
  fid_cq* xcq = xpu_cq(true);
  fi_cq_attr ca{};
  fid_cq* hcq = nullptr;
  ASSERT_EQ(fi_cq_open(domain_, &ca, &hcq, nullptr), 0);
  fid_ep* ep = xpu_ep(xcq, nullptr);
  closing_ = {&xcq->fid, &hcq->fid, &ep->fid};
  EXPECT_EQ(fi_ep_bind(ep, &hcq->fid, FI_TRANSMIT), 0);
  // A host EP cannot use an XPU CQ.
  fid_ep* hep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &hep, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(hep, &xcq->fid, FI_TRANSMIT), -FI_EINVAL);
  EXPECT_EQ(fi_close(&hep->fid), 0);
  ASSERT_EQ(fi_enable(ep), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, XpuConformance, ::testing::ValuesIn(present_backends()));

}  // namespace
}  // namespace xpufab::testing
