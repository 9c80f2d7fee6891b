// The protocol fabric "efa" beside efa-direct, through fi_getinfo as applications call it: which
// hints select which fabric, what the offer states, and the domain objects it allows.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "testing/efa_fabric/node.h"

namespace xpufab::efa_fabric {
namespace {

constexpr uint32_t kV27 = FI_VERSION(2, 7);
constexpr int kMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class Offers : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FI_EFA_BACKEND", "emu", 1);
    setenv("FI_EFA_EMU_FABRIC", "inproc", 1);
  }
  void TearDown() override { fi_freeinfo(got_); }

  fi_info* hints(uint64_t caps) {
    fi_info* h = fi_allocinfo();
    h->caps = caps;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = kMrMode | ((caps & FI_XPU) ? FI_MR_XPU_DESC : 0);
    h->fabric_attr->prov_name = strdup("efa");
    return h;
  }
  int get(fi_info* h) {
    fi_freeinfo(got_);
    got_ = nullptr;
    const int rc = fi_getinfo(kV27, nullptr, nullptr, 0, h, &got_);
    fi_freeinfo(h);
    return rc;
  }
  static bool is_protocol(const fi_info* i) {
    return strcmp(i->fabric_attr->name, "efa") == 0 && i->ep_attr->type == FI_EP_RDM &&
           ends_with(i->domain_attr->name, "-rdm");
  }

  fi_info* got_ = nullptr;
};

TEST_F(Offers, TaggedOrAtomicHintsSelectTheProtocolFabric) {
  for (uint64_t caps : {uint64_t{FI_TAGGED}, uint64_t{FI_ATOMIC}, uint64_t{FI_MSG | FI_TAGGED},
                        uint64_t{FI_MSG | FI_TAGGED | FI_ATOMIC | FI_DIRECTED_RECV}}) {
    ASSERT_EQ(get(hints(caps)), 0) << caps;
    for (fi_info* i = got_; i; i = i->next) {
      EXPECT_TRUE(is_protocol(i)) << i->fabric_attr->name << " " << i->domain_attr->name;
      EXPECT_EQ(i->caps & caps, caps);
    }
  }
}

// FI_MULTI_RECV is the protocol fabric's alone (its core fills one buffer with several
// messages); efa-direct's receives are the NIC's, one message each.
TEST_F(Offers, MultiRecvHintsSelectTheProtocolFabric) {
  for (uint64_t caps : {uint64_t{FI_MSG | FI_MULTI_RECV}, uint64_t{FI_MSG | FI_RECV | FI_MULTI_RECV}}) {
    ASSERT_EQ(get(hints(caps)), 0) << caps;
    for (fi_info* i = got_; i; i = i->next) {
      EXPECT_TRUE(is_protocol(i)) << i->fabric_attr->name << " " << i->domain_attr->name;
      EXPECT_TRUE(i->caps & FI_MULTI_RECV);
      EXPECT_TRUE(i->rx_attr->caps & FI_MULTI_RECV);
      EXPECT_FALSE(i->tx_attr->caps & FI_MULTI_RECV);
    }
  }
  fi_info* h = hints(FI_MSG);
  h->rx_attr->caps = FI_MSG | FI_RECV | FI_MULTI_RECV;
  ASSERT_EQ(get(h), 0);
  for (fi_info* i = got_; i; i = i->next) EXPECT_TRUE(is_protocol(i)) << i->fabric_attr->name;
  // Without the hint both fabrics are offered, and efa-direct's offer lacks it.
  ASSERT_EQ(get(hints(FI_MSG)), 0);
  bool direct = false;
  for (fi_info* i = got_; i; i = i->next) {
    if (is_protocol(i)) continue;
    direct = true;
    EXPECT_FALSE(i->caps & FI_MULTI_RECV) << i->fabric_attr->name;
    EXPECT_FALSE(i->rx_attr->caps & FI_MULTI_RECV) << i->fabric_attr->name;
  }
  EXPECT_TRUE(direct);
}

// FI_TAGGED_MULTI_RECV likewise: a tagged buffer several messages fill is the core's.
TEST_F(Offers, TaggedMultiRecvHintsSelectTheProtocolFabric) {
  ASSERT_EQ(get(hints(FI_TAGGED | FI_TAGGED_MULTI_RECV)), 0);
  for (fi_info* i = got_; i; i = i->next) {
    EXPECT_TRUE(is_protocol(i)) << i->fabric_attr->name << " " << i->domain_attr->name;
    EXPECT_TRUE(i->caps & FI_TAGGED_MULTI_RECV);
    EXPECT_TRUE(i->rx_attr->caps & FI_TAGGED_MULTI_RECV);
    EXPECT_FALSE(i->tx_attr->caps & FI_TAGGED_MULTI_RECV);
  }
  ASSERT_EQ(get(hints(FI_MSG)), 0);
  for (fi_info* i = got_; i; i = i->next) {
    if (!is_protocol(i)) {
      EXPECT_FALSE(i->caps & FI_TAGGED_MULTI_RECV) << i->fabric_attr->name;
    }
  }
}

TEST_F(Offers, TheOfferStatesWhatTheProtocolGives) {
  ASSERT_EQ(get(hints(FI_MSG | FI_TAGGED | FI_ATOMIC)), 0);
  const fi_info* i = got_;
  EXPECT_EQ(i->ep_attr->protocol, static_cast<uint32_t>(FI_PROTO_EFA));
  EXPECT_GE(i->ep_attr->max_msg_size, size_t{1} << 30);
  EXPECT_TRUE(i->tx_attr->caps & FI_TAGGED);
  EXPECT_TRUE(i->tx_attr->caps & FI_ATOMIC);
  EXPECT_TRUE(i->rx_attr->caps & FI_TAGGED);
  EXPECT_GT(i->tx_attr->inject_size, 0u);
  EXPECT_GT(i->tx_attr->size, 0u);
  EXPECT_GT(i->rx_attr->size, 0u);
  EXPECT_EQ(i->domain_attr->mr_mode, kMrMode);
  EXPECT_FALSE(i->mode & FI_RX_CQ_DATA);
  // What the core keeps although SRD reorders: matching, atomics and writes in posting order
  // (rma_test, tagged_test and atomics_test check each); nothing about RDMA reads.
  const uint64_t order = FI_ORDER_SAS | FI_ORDER_WAW | FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_RAR |
                         FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
  EXPECT_EQ(i->tx_attr->msg_order, order);
  EXPECT_EQ(i->rx_attr->msg_order, order);
  EXPECT_FALSE(i->tx_attr->msg_order & (FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAR | FI_ORDER_RAW));
  EXPECT_EQ(i->tx_attr->iov_limit, 4u);
  EXPECT_EQ(i->rx_attr->iov_limit, 4u);
  // Secondary capabilities come unasked; FI_RMA (primary) when the hints ask (rma_test).
  EXPECT_EQ(i->caps & (FI_RMA_EVENT | FI_FENCE), FI_RMA_EVENT | FI_FENCE);
}

TEST_F(Offers, FabricNamedEfaSelectsTheProtocolFabric) {
  fi_info* h = hints(FI_MSG);
  h->fabric_attr->name = strdup("efa");
  ASSERT_EQ(get(h), 0);
  for (fi_info* i = got_; i; i = i->next) EXPECT_TRUE(is_protocol(i));
  // The same by its domain name.
  h = hints(FI_MSG);
  h->domain_attr->name = strdup(got_->domain_attr->name);
  ASSERT_EQ(get(h), 0);
  for (fi_info* i = got_; i; i = i->next) EXPECT_TRUE(is_protocol(i));
}

TEST_F(Offers, MessagesBeyondTheMtuSelectTheProtocolFabric) {
  fi_info* h = hints(FI_MSG);
  h->ep_attr->max_msg_size = size_t{4} << 20;
  ASSERT_EQ(get(h), 0);
  EXPECT_TRUE(is_protocol(got_));
}

TEST_F(Offers, PlainAndXpuHintsKeepEfaDirectFirst) {
  ASSERT_EQ(get(hints(FI_MSG)), 0);
  EXPECT_STREQ(got_->fabric_attr->name, "efa-direct");
  bool protocol_too = false;
  for (fi_info* i = got_; i; i = i->next) protocol_too |= is_protocol(i);
  EXPECT_TRUE(protocol_too);
  // RMA: efa-direct first, the protocol fabric (which has it on every generation) after it.
  ASSERT_EQ(get(hints(FI_MSG | FI_RMA)), 0);
  EXPECT_STREQ(got_->fabric_attr->name, "efa-direct");
  protocol_too = false;
  for (fi_info* i = got_; i; i = i->next) {
    EXPECT_TRUE(i->caps & FI_RMA);
    protocol_too |= is_protocol(i);
  }
  EXPECT_TRUE(protocol_too);
  ASSERT_EQ(get(hints(FI_MSG | FI_RMA | FI_XPU)), 0);
  EXPECT_STREQ(got_->fabric_attr->name, "efa-direct");
  EXPECT_TRUE(got_->caps & FI_XPU);
  // Without hints: every device's efa-direct offer ahead of its protocol offer.
  fi_freeinfo(got_);
  got_ = nullptr;
  ASSERT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, nullptr, &got_), 0);
  EXPECT_STREQ(got_->fabric_attr->name, "efa-direct");
  ASSERT_NE(got_->next, nullptr);
  EXPECT_TRUE(is_protocol(got_->next));
  EXPECT_EQ(std::string(got_->next->domain_attr->name),
            std::string(got_->domain_attr->name) + "-rdm");
}

TEST_F(Offers, TaggedCqFormatBelongsToTheProtocolFabric) {
  for (bool protocol : {true, false}) {
    ASSERT_EQ(get(hints(protocol ? FI_MSG | FI_TAGGED : FI_MSG)), 0);
    fid_fabric* fab = nullptr;
    fid_domain* dom = nullptr;
    ASSERT_EQ(fi_fabric(got_->fabric_attr, &fab, nullptr), 0);
    ASSERT_EQ(fi_domain(fab, got_, &dom, nullptr), 0);
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_TAGGED;
    fid_cq* cq = nullptr;
    const int rc = fi_cq_open(dom, &ca, &cq, nullptr);
    if (protocol) {
      ASSERT_EQ(rc, 0);
      EXPECT_EQ(fi_close(&cq->fid), 0);
    } else {
      EXPECT_EQ(rc, -FI_ENOSYS);
    }
    EXPECT_EQ(fi_close(&dom->fid), 0);
    EXPECT_EQ(fi_close(&fab->fid), 0);
  }
}

TEST_F(Offers, EfaDirectDomainsRefuseTagsAndAtomics) {
  ASSERT_EQ(get(hints(FI_MSG)), 0);
  ASSERT_STREQ(got_->fabric_attr->name, "efa-direct");
  fid_fabric* fab = nullptr;
  fid_domain* dom = nullptr;
  ASSERT_EQ(fi_fabric(got_->fabric_attr, &fab, nullptr), 0);
  got_->caps |= FI_TAGGED;
  EXPECT_EQ(fi_domain(fab, got_, &dom, nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_close(&fab->fid), 0);
}

}  // namespace
}  // namespace xpufab::efa_fabric
