// fi_getinfo matching rules, exercised through a registered TestProvider.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include <string>
#include <vector>

#include "api/core/log.h"
#include "api/core/test_provider.h"
#include "gtest/gtest.h"

namespace xpufab::core::testing {
namespace {

constexpr uint32_t kV27 = FI_VERSION(2, 7);
constexpr uint64_t kCapBits = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_SEND | FI_RECV |
                              FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// Stores an arbitrary int in an enum field, as a C caller can.
template <typename E>
void set_raw(E* field, int v) {
  static_assert(sizeof(E) == sizeof(int), "int-sized enum");
  memcpy(field, &v, sizeof(v));
}
constexpr int kFullMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                            FI_MR_PROV_KEY | FI_MR_HMEM | FI_MR_XPU_DESC;

class GetinfoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FI_PROVIDER");
    fi_info* offers = default_offer("tfab", "tdom0");
    offers->next = default_offer("tfab", "tdom1");
    prov_ = new TestProvider("tprov", FI_VERSION(3, 1), offers);
    reg_ = new ScopedProvider(prov_);
    ASSERT_EQ(reg_->status(), 0);
    hints_ = fi_allocinfo();
    hints_->fabric_attr->prov_name = strdup("tprov");
    hints_->mode = FI_CONTEXT;
    hints_->domain_attr->mr_mode = kFullMrMode;
  }
  void TearDown() override {
    fi_freeinfo(hints_);
    fi_freeinfo(info_);
    delete reg_;
    delete prov_;
  }
  int get(uint32_t version = kV27, uint64_t flags = 0, const char* node = nullptr,
          const char* service = nullptr) {
    fi_freeinfo(info_);
    info_ = nullptr;
    return fi_getinfo(version, node, service, flags, hints_, &info_);
  }
  void replace_prov(const char* name) {
    free(hints_->fabric_attr->prov_name);
    hints_->fabric_attr->prov_name = strdup(name);
  }
  int count() const {
    int n = 0;
    for (fi_info* i = info_; i; i = i->next) n++;
    return n;
  }

  TestProvider* prov_ = nullptr;
  ScopedProvider* reg_ = nullptr;
  fi_info* hints_ = nullptr;
  fi_info* info_ = nullptr;
};

TEST_F(GetinfoTest, NullHintsReturnEveryOfferWithoutXpu) {
  ASSERT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, nullptr, &info_), 0);
  int ours = 0;
  for (fi_info* i = info_; i; i = i->next) {
    EXPECT_EQ(i->caps & FI_XPU, 0u);
    EXPECT_EQ(i->tx_attr->caps & FI_XPU, 0u);
    EXPECT_EQ(i->domain_attr->caps & FI_XPU, 0u);
    EXPECT_EQ(i->domain_attr->max_xpu_ctx_cnt, 0u);
    EXPECT_EQ(i->domain_attr->mr_mode & FI_MR_XPU_DESC, 0);
    if (strcmp(i->fabric_attr->prov_name, "tprov") == 0) {
      ours++;
      EXPECT_EQ(i->fabric_attr->prov_version, FI_VERSION(3, 1));
      EXPECT_EQ(i->fabric_attr->api_version, kV27);
      EXPECT_EQ(i->mode, FI_CONTEXT);
      EXPECT_TRUE(i->caps & FI_RMA);
    }
  }
  EXPECT_EQ(ours, 2);
}

TEST_F(GetinfoTest, XpuReturnedOnlyWhenRequested) {
  hints_->caps = FI_MSG | FI_XPU;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(count(), 2);
  EXPECT_TRUE(info_->caps & FI_XPU);
  EXPECT_TRUE(info_->tx_attr->caps & FI_XPU);
  EXPECT_TRUE(info_->domain_attr->caps & FI_XPU);
  EXPECT_EQ(info_->domain_attr->max_xpu_ctx_cnt, 1u);
  EXPECT_TRUE(info_->domain_attr->mr_mode & FI_MR_XPU_DESC);

  hints_->caps = FI_MSG;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->caps & FI_XPU, 0u);
  EXPECT_EQ(info_->rx_attr->caps & FI_XPU, 0u);
  EXPECT_EQ(info_->domain_attr->max_xpu_ctx_cnt, 0u);
  EXPECT_EQ(info_->domain_attr->mr_mode & FI_MR_XPU_DESC, 0);
}

TEST_F(GetinfoTest, XpuNeedsApi27) {
  hints_->caps = FI_MSG | FI_XPU;
  EXPECT_EQ(get(FI_VERSION(2, 6)), -FI_ENODATA);
  hints_->caps = FI_MSG;
  EXPECT_EQ(get(FI_VERSION(2, 6)), 0);
}

TEST_F(GetinfoTest, XpuNeedsXpuDescWhenProviderRequiresIt) {
  hints_->caps = FI_MSG | FI_XPU;
  hints_->domain_attr->mr_mode = kFullMrMode & ~FI_MR_XPU_DESC;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->caps = FI_MSG;
  EXPECT_EQ(get(), 0);
}

TEST_F(GetinfoTest, Versions) {
  EXPECT_EQ(get(FI_VERSION(2, 8)), -FI_ENOSYS);
  EXPECT_EQ(get(FI_VERSION(3, 0)), -FI_ENOSYS);
  EXPECT_EQ(get(FI_VERSION(0, 9)), -FI_ENOSYS);
  EXPECT_EQ(get(FI_VERSION(1, 17)), 0);
  EXPECT_EQ(info_->fabric_attr->api_version, FI_VERSION(1, 17));
  EXPECT_EQ(get(FI_VERSION(2, 0)), 0);
  EXPECT_EQ(fi_version(), FI_VERSION(2, 7));
}

TEST_F(GetinfoTest, BadArguments) {
  EXPECT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, hints_, nullptr), -FI_EINVAL);
  EXPECT_EQ(get(kV27, 1ULL << 3), -FI_EBADFLAGS);
  EXPECT_EQ(get(kV27, FI_SOURCE), -FI_EINVAL);
  hints_->caps = FI_MSG | (1ULL << 7);
  EXPECT_EQ(get(), -FI_EBADFLAGS);
  hints_->caps = FI_MSG;
  hints_->tx_attr->op_flags = 1ULL << 23;
  EXPECT_EQ(get(), -FI_EBADFLAGS);
  hints_->tx_attr->op_flags = 0;
  set_raw(&hints_->ep_attr->type, 42);
  EXPECT_EQ(get(), -FI_EINVAL);
  hints_->ep_attr->type = FI_EP_RDM;
  set_raw(&hints_->domain_attr->threading, 77);
  EXPECT_EQ(get(), -FI_EINVAL);
  hints_->domain_attr->threading = FI_THREAD_UNSPEC;
  hints_->src_addrlen = 4;  // length without an address
  EXPECT_EQ(get(), -FI_EINVAL);
  hints_->src_addrlen = 0;
  hints_->ep_attr->auth_key_size = 8;  // size without a key
  EXPECT_EQ(get(), -FI_EINVAL);
  hints_->ep_attr->auth_key_size = 0;
  EXPECT_EQ(get(), 0);
}

TEST_F(GetinfoTest, NodeServiceAndSourceReachProvider) {
  ASSERT_EQ(get(kV27, FI_SOURCE, "10.0.0.1", "4711"), 0);
  EXPECT_EQ(prov_->last_node, "10.0.0.1");
  EXPECT_EQ(prov_->last_service, "4711");
  EXPECT_EQ(prov_->last_flags, FI_SOURCE);
  ASSERT_EQ(get(kV27, FI_SOURCE, nullptr, "4711"), 0);
  ASSERT_EQ(get(kV27, FI_NUMERICHOST, "peer", nullptr), 0);
  EXPECT_EQ(prov_->last_flags, FI_NUMERICHOST);
}

TEST_F(GetinfoTest, PrimaryCapsOnlyIfRequestedSecondaryMayBeAdded) {
  hints_->caps = FI_MSG;
  ASSERT_EQ(get(), 0);
  EXPECT_TRUE(info_->caps & FI_MSG);
  EXPECT_EQ(info_->caps & (FI_RMA | FI_TAGGED | FI_ATOMIC | FI_HMEM), 0u);
  EXPECT_EQ(info_->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE),
            FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE);
  EXPECT_EQ(info_->tx_attr->caps & (FI_RMA | FI_READ | FI_WRITE), 0u);
  EXPECT_TRUE(info_->tx_attr->caps & FI_SEND);
  EXPECT_TRUE(info_->rx_attr->caps & FI_RECV);
  EXPECT_EQ(info_->rx_attr->caps & (FI_REMOTE_READ | FI_TAGGED), 0u);

  hints_->caps = FI_COLLECTIVE;  // not offered
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->caps = FI_MULTI_RECV;  // secondary, not offered
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->caps = FI_RMA | FI_REMOTE_READ;  // modifier subset
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->caps & (FI_RMA | FI_REMOTE_READ | FI_MSG), FI_RMA | FI_REMOTE_READ);
}

TEST_F(GetinfoTest, TxRxCapsMustFitInfoCaps) {
  hints_->caps = FI_MSG;
  hints_->tx_attr->caps = FI_RMA;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->tx_attr->caps = FI_MSG | FI_SEND;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->tx_attr->caps & (FI_MSG | FI_SEND | FI_RMA), FI_MSG | FI_SEND);
  hints_->rx_attr->caps = FI_TAGGED;
  EXPECT_EQ(get(), -FI_ENODATA);
}

TEST_F(GetinfoTest, ModeBitsTheApplicationLacks) {
  hints_->mode = 0;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->mode = FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->mode, FI_CONTEXT);
  hints_->tx_attr->mode = FI_CONTEXT2;  // tx mode overrides info mode
  EXPECT_EQ(get(), -FI_ENODATA);
}

TEST_F(GetinfoTest, EndpointType) {
  hints_->ep_attr->type = FI_EP_MSG;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->ep_attr->type = FI_EP_DGRAM;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->ep_attr->type = FI_EP_RDM;
  EXPECT_EQ(get(), 0);
  hints_->ep_attr->type = FI_EP_UNSPEC;
  EXPECT_EQ(get(), 0);
  hints_->ep_attr->protocol = FI_PROTO_SHM;
  EXPECT_EQ(get(), -FI_ENODATA);
}

TEST_F(GetinfoTest, MrModeRequiredBits) {
  hints_->caps = FI_MSG | FI_RMA;
  hints_->domain_attr->mr_mode = 0;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_HMEM | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
  EXPECT_EQ(get(), -FI_ENODATA);  // lacks FI_MR_PROV_KEY for an RMA target
  hints_->domain_attr->mr_mode |= FI_MR_PROV_KEY;
  ASSERT_EQ(get(), 0);
  // FI_MR_HMEM is required of FI_HMEM users only.
  EXPECT_EQ(info_->domain_attr->mr_mode,
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
  hints_->caps |= FI_HMEM;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_HMEM | FI_MR_VIRT_ADDR |
                                             FI_MR_ALLOCATED | FI_MR_PROV_KEY);
  hints_->domain_attr->mr_mode &= ~FI_MR_HMEM;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->caps &= ~FI_HMEM;
  // Not an RMA target: the RMA-target bits are not required.
  hints_->caps = FI_MSG;
  hints_->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_HMEM | FI_MR_ALLOCATED;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY), 0);
  // FI_LOCAL_MR in mode stands in for FI_MR_LOCAL.
  hints_->domain_attr->mr_mode = FI_MR_HMEM | FI_MR_ALLOCATED;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->mode |= FI_LOCAL_MR;
  EXPECT_EQ(get(), 0);
}

TEST_F(GetinfoTest, MrModeBasicAndScalable) {
  hints_->domain_attr->mr_mode = FI_MR_BASIC;
  EXPECT_EQ(get(), -FI_ENODATA);  // offer does not declare FI_MR_BASIC
  hints_->domain_attr->mr_mode = FI_MR_BASIC | FI_MR_LOCAL;  // BASIC is exclusive
  EXPECT_EQ(get(), -FI_ENODATA);

  fi_info* o = default_offer("bfab", "bdom");
  o->domain_attr->mr_mode = FI_MR_BASIC | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  TestProvider basic("basicprov", 1, o);
  ScopedProvider reg(&basic);
  replace_prov("basicprov");
  hints_->domain_attr->mr_mode = FI_MR_BASIC;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->domain_attr->mr_mode, FI_MR_BASIC);
  hints_->domain_attr->mr_mode = FI_MR_SCALABLE;
  EXPECT_EQ(get(), -FI_ENODATA);
  // API 1.4: mr_mode is the old enum; UNSPEC accepts BASIC providers.
  hints_->domain_attr->mr_mode = FI_MR_UNSPEC;
  ASSERT_EQ(get(FI_VERSION(1, 4)), 0);
  EXPECT_EQ(info_->domain_attr->mr_mode, FI_MR_BASIC);
  replace_prov("tprov");
  EXPECT_EQ(get(FI_VERSION(1, 4)), -FI_ENODATA);
}

TEST_F(GetinfoTest, Names) {
  free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("TPROV");  // case-insensitive
  EXPECT_EQ(get(), 0);
  free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("nosuch");
  EXPECT_EQ(get(), -FI_ENODATA);
  free(hints_->fabric_attr->prov_name);
  hints_->fabric_attr->prov_name = strdup("tprov");
  hints_->domain_attr->name = strdup("tdom1");
  ASSERT_EQ(get(), 0);
  ASSERT_EQ(count(), 1);
  EXPECT_STREQ(info_->domain_attr->name, "tdom1");
  hints_->fabric_attr->name = strdup("tfab");
  EXPECT_EQ(get(), 0);
  free(hints_->fabric_attr->name);
  hints_->fabric_attr->name = strdup("other");
  EXPECT_EQ(get(), -FI_ENODATA);
}

TEST_F(GetinfoTest, AddrFormat) {
  hints_->addr_format = FI_SOCKADDR_IN;
  EXPECT_EQ(get(), -FI_ENODATA);
  hints_->addr_format = FI_ADDR_EFA;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->addr_format, FI_ADDR_EFA);
  EXPECT_EQ(info_->src_addrlen, 16u);
}

TEST_F(GetinfoTest, AttributeLimits) {
  struct Case {
    const char* what;
    void (*set)(fi_info*);
  };
  const Case cases[] = {
      {"tx size", [](fi_info* h) { h->tx_attr->size = 2048; }},
      {"inject", [](fi_info* h) { h->tx_attr->inject_size = 33; }},
      {"tx iov", [](fi_info* h) { h->tx_attr->iov_limit = 3; }},
      {"rma iov", [](fi_info* h) { h->tx_attr->rma_iov_limit = 2; }},
      {"msg_order", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_RAW; }},
      {"tx op_flags", [](fi_info* h) { h->tx_attr->op_flags = FI_INJECT; }},
      {"rx size", [](fi_info* h) { h->rx_attr->size = 4097; }},
      {"rx iov", [](fi_info* h) { h->rx_attr->iov_limit = 5; }},
      {"max_msg_size", [](fi_info* h) { h->ep_attr->max_msg_size = (1u << 30) + 1; }},
      {"ep tx_ctx_cnt", [](fi_info* h) { h->ep_attr->tx_ctx_cnt = 2; }},
      {"shared ctx", [](fi_info* h) { h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT; }},
      {"cq_cnt", [](fi_info* h) { h->domain_attr->cq_cnt = 65; }},
      {"ep_cnt", [](fi_info* h) { h->domain_attr->ep_cnt = 129; }},
      {"mr_key_size", [](fi_info* h) { h->domain_attr->mr_key_size = 8; }},
      {"cq_data_size", [](fi_info* h) { h->domain_attr->cq_data_size = 8; }},
      {"cntr_cnt", [](fi_info* h) { h->domain_attr->cntr_cnt = 33; }},
      {"mr_iov_limit", [](fi_info* h) { h->domain_attr->mr_iov_limit = 2; }},
      {"max_xpu_ctx_cnt", [](fi_info* h) { h->domain_attr->max_xpu_ctx_cnt = 2; }},
      {"data_progress", [](fi_info* h) { h->domain_attr->data_progress = FI_PROGRESS_AUTO; }},
      {"domain caps", [](fi_info* h) { h->domain_attr->caps = FI_SHARED_AV; }},
  };
  for (const Case& c : cases) {
    fi_freeinfo(hints_);
    hints_ = fi_allocinfo();
    hints_->fabric_attr->prov_name = strdup("tprov");
    hints_->mode = FI_CONTEXT;
    hints_->domain_attr->mr_mode = kFullMrMode;
    ASSERT_EQ(get(), 0) << c.what;
    c.set(hints_);
    EXPECT_EQ(get(), -FI_ENODATA) << c.what;
  }
}

TEST_F(GetinfoTest, RequestedDomainModelsAreReturned) {
  hints_->domain_attr->threading = FI_THREAD_DOMAIN;
  hints_->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints_->domain_attr->av_type = FI_AV_TABLE;
  hints_->tx_attr->size = 512;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->domain_attr->threading, FI_THREAD_DOMAIN);
  EXPECT_EQ(info_->domain_attr->data_progress, FI_PROGRESS_MANUAL);
  EXPECT_EQ(info_->domain_attr->av_type, FI_AV_TABLE);
  EXPECT_EQ(info_->tx_attr->size, 1024u);  // the provider's limit, not the request
}

TEST_F(GetinfoTest, AuthKeyFromHintsIsCopied) {
  uint8_t key[4] = {1, 2, 3, 4};
  hints_->ep_attr->auth_key = static_cast<uint8_t*>(malloc(4));
  memcpy(hints_->ep_attr->auth_key, key, 4);
  hints_->ep_attr->auth_key_size = 4;
  ASSERT_EQ(get(), 0);
  ASSERT_EQ(info_->ep_attr->auth_key_size, 4u);
  EXPECT_NE(info_->ep_attr->auth_key, hints_->ep_attr->auth_key);
  EXPECT_EQ(memcmp(info_->ep_attr->auth_key, key, 4), 0);
}

TEST_F(GetinfoTest, ProviderFailuresAndOldProvidersAreSkipped) {
  prov_->fail_with = -FI_EIO;
  EXPECT_EQ(get(), -FI_ENODATA);
  prov_->fail_with = 0;
  TestProvider old("oldprov", 1, default_offer("ofab", "odom"), FI_VERSION(1, 9));
  ScopedProvider reg(&old);
  replace_prov("oldprov");
  EXPECT_EQ(get(kV27), -FI_ENODATA);
  EXPECT_EQ(old.getinfo_calls, 0);
  EXPECT_EQ(get(FI_VERSION(1, 9)), 0);
}

TEST_F(GetinfoTest, ProvAttrOnly) {
  ASSERT_EQ(get(kV27, FI_PROV_ATTR_ONLY), 0);
  EXPECT_EQ(prov_->getinfo_calls, 0);
  ASSERT_EQ(count(), 1);
  EXPECT_STREQ(info_->fabric_attr->prov_name, "tprov");
  EXPECT_EQ(info_->fabric_attr->prov_version, FI_VERSION(3, 1));
  EXPECT_EQ(info_->caps, 0u);
}

TEST_F(GetinfoTest, FabricOpensThroughProvider) {
  ASSERT_EQ(get(), 0);
  fid_fabric* fab = nullptr;
  ASSERT_EQ(fi_fabric(info_->fabric_attr, &fab, this), 0);
  EXPECT_EQ(fab->fid.fclass, static_cast<size_t>(FI_CLASS_FABRIC));
  EXPECT_EQ(fab->fid.context, this);
  EXPECT_EQ(fab->api_version, kV27);
  EXPECT_EQ(prov_->open_fabrics.load(), 1);
  EXPECT_EQ(fi_close(&fab->fid), 0);
  EXPECT_EQ(prov_->open_fabrics.load(), 0);
  ASSERT_EQ(fi_fabric2(info_, &fab, 0, nullptr), 0);
  EXPECT_EQ(fi_close(&fab->fid), 0);

  EXPECT_EQ(fi_fabric(nullptr, &fab, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_fabric(info_->fabric_attr, nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_fabric2(nullptr, &fab, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_fabric2(info_, &fab, 1, nullptr), -FI_EBADFLAGS);
  fi_fabric_attr attr = *info_->fabric_attr;
  attr.prov_name = const_cast<char*>("nosuch");
  EXPECT_EQ(fi_fabric(&attr, &fab, nullptr), -FI_ENODEV);
  attr.prov_name = info_->fabric_attr->prov_name;
  attr.name = const_cast<char*>("nofabric");
  EXPECT_EQ(fi_fabric(&attr, &fab, nullptr), -FI_ENODATA);
  attr.name = nullptr;
  EXPECT_EQ(fi_fabric(&attr, &fab, nullptr), -FI_EINVAL);
}

TEST_F(GetinfoTest, NegativeMrModeMeansAnyMode) {
  // What applications pass to accept every mode bit the provider may ask for.
  hints_->caps = FI_MSG | FI_RMA;
  hints_->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(count(), 2);
  EXPECT_EQ(info_->domain_attr->mr_mode,
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
  hints_->caps = FI_MSG | FI_XPU;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_XPU_DESC);
  // Under API 1.4 mr_mode is the old enum: an arbitrary value matches nothing.
  EXPECT_EQ(get(FI_VERSION(1, 4)), -FI_ENODATA);
}

TEST_F(GetinfoTest, ModifiersRefineTheirOwnClassOnly) {
  hints_->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->caps & (kCapBits), FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_WRITE |
                                          FI_REMOTE_WRITE);
  EXPECT_EQ(info_->tx_attr->caps & kCapBits, FI_MSG | FI_RMA | FI_SEND | FI_WRITE);
  EXPECT_EQ(info_->rx_attr->caps & kCapBits, FI_MSG | FI_RMA | FI_RECV | FI_REMOTE_WRITE);

  hints_->caps = FI_MSG | FI_SEND | FI_RMA;  // send-only messages, every RMA direction
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->caps & kCapBits, FI_MSG | FI_SEND | FI_RMA | FI_READ | FI_WRITE |
                                        FI_REMOTE_READ | FI_REMOTE_WRITE);
  EXPECT_EQ(info_->rx_attr->caps & kCapBits, FI_MSG | FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE);

  // tx caps from the hints get their class's directions from the offer's tx.
  hints_->caps = FI_MSG | FI_RMA | FI_READ;
  hints_->tx_attr->caps = FI_MSG | FI_RMA | FI_READ;
  ASSERT_EQ(get(), 0);
  EXPECT_EQ(info_->tx_attr->caps & kCapBits, FI_MSG | FI_SEND | FI_RMA | FI_READ);
  EXPECT_EQ(info_->rx_attr->caps & kCapBits, FI_MSG | FI_RECV | FI_RMA);
}

// Every mr_mode combination of the eight bits an application may set, with and without the
// FI_LOCAL_MR mode bit: an accepted offer returns only bits the application allowed, and the
// ones the provider requires.
TEST_F(GetinfoTest, ReturnedMrModeIsWithinWhatTheApplicationAllowed) {
  const int bits[] = {FI_MR_LOCAL,    FI_MR_RAW,      FI_MR_VIRT_ADDR,  FI_MR_ALLOCATED,
                      FI_MR_PROV_KEY, FI_MR_ENDPOINT, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT};
  const int required = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints_->caps = FI_MSG | FI_RMA;
  int accepted = 0;
  for (uint64_t local_mr : {uint64_t{0}, uint64_t{FI_LOCAL_MR}}) {
    for (int combo = 0; combo < 256; combo++) {
      int mode = 0;
      for (int b = 0; b < 8; b++)
        if (combo & (1 << b)) mode |= bits[b];
      hints_->mode = FI_CONTEXT | local_mr;
      hints_->domain_attr->mr_mode = mode;
      int rc = get(FI_VERSION(1, 18));
      const int effective = mode | (local_mr ? FI_MR_LOCAL : 0);
      if ((effective & required) != required) {
        EXPECT_EQ(rc, -FI_ENODATA) << std::hex << mode;
        continue;
      }
      ASSERT_EQ(rc, 0) << std::hex << mode;
      accepted++;
      for (fi_info* i = info_; i; i = i->next) {
        EXPECT_EQ(i->domain_attr->mr_mode & ~mode, 0) << std::hex << mode << " " << local_mr;
        EXPECT_EQ(i->domain_attr->mr_mode | (i->mode & FI_LOCAL_MR ? FI_MR_LOCAL : 0),
                  required)
            << std::hex << mode;
        EXPECT_EQ((i->mode & FI_LOCAL_MR) != 0, local_mr && !(mode & FI_MR_LOCAL));
      }
    }
  }
  EXPECT_EQ(accepted, 16 + 32);
}

TEST_F(GetinfoTest, EachRejectedAttributeIsLoggedAtInfo) {
  std::vector<std::string> lines;
  setenv("FI_LOG_LEVEL", "info", 1);
  log_reload_env();
  log_set_sink([&](const std::string& l) { lines.push_back(l); });
  hints_->caps = FI_MSG | FI_RMA;
  hints_->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;  // lacks VIRT_ADDR, PROV_KEY
  hints_->tx_attr->size = 4096;
  hints_->ep_attr->type = FI_EP_MSG;
  int rc = get();
  log_set_sink(nullptr);
  unsetenv("FI_LOG_LEVEL");
  log_reload_env();
  EXPECT_EQ(rc, -FI_ENODATA);
  auto has = [&](const char* dom, const char* what) {
    int n = 0;
    for (const std::string& l : lines)
      if (l.find(std::string("offer tfab/") + dom + " rejected: ") != std::string::npos &&
          l.find(what) != std::string::npos)
        n++;
    return n;
  };
  for (const char* dom : {"tdom0", "tdom1"}) {
    EXPECT_EQ(has(dom, "endpoint type"), 1) << dom;
    EXPECT_EQ(has(dom, "tx size 4096 above 1024"), 1) << dom;
    EXPECT_EQ(has(dom, "mr_mode lacks FI_MR_VIRT_ADDR|FI_MR_PROV_KEY"), 1) << dom;
    EXPECT_EQ(has(dom, "rejected"), 3) << dom;
  }
}

}  // namespace
}  // namespace xpufab::core::testing
