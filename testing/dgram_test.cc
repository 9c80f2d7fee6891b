// FI_EP_DGRAM through the public API on the emulated EFA: the offer and its FI_MSG_PREFIX
// requirement, datagram round trips with the GRH in the prefix, the sender's address, and the
// limits of an unreliable, SEND-only endpoint.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr uint32_t kV27 = FI_VERSION(2, 7);
constexpr size_t kPrefix = 40;
constexpr int kMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

fi_info* dgram_hints(uint64_t mode) {
  fi_info* h = fi_allocinfo();
  h->caps = FI_MSG;
  h->mode = mode;
  h->ep_attr->type = FI_EP_DGRAM;
  h->domain_attr->mr_mode = kMrMode;
  return h;
}

struct Side {
  fid_domain* dom = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
};

class Dgram : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FI_EFA_BACKEND", "emu", 1);
    fi_info* h = dgram_hints(FI_MSG_PREFIX);
    ASSERT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, h, &info_), 0);
    fi_freeinfo(h);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fab_, nullptr), 0);
    open_side(&a_);
    open_side(&b_);
    // Each side knows the other and itself (the loopback datagram).
    for (Side* s : {&a_, &b_}) {
      for (Side* peer : {&a_, &b_}) {
        char addr[64];
        size_t len = sizeof(addr);
        ASSERT_EQ(fi_getname(&peer->ep->fid, addr, &len), 0);
        fi_addr_t fa = FI_ADDR_NOTAVAIL;
        ASSERT_EQ(fi_av_insert(s->av, addr, 1, &fa, 0, nullptr), 1);
        (s == &a_ ? a_to_ : b_to_)[peer == &a_ ? 0 : 1] = fa;
      }
    }
  }
  void open_side(Side* s) {
    ASSERT_EQ(fi_domain(fab_, info_, &s->dom, nullptr), 0);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(s->dom, &aa, &s->av, nullptr), 0);
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_DATA;
    ca.size = 64;
    ASSERT_EQ(fi_cq_open(s->dom, &ca, &s->cq, nullptr), 0);
    ASSERT_EQ(fi_endpoint(s->dom, info_, &s->ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(s->ep), 0);
  }
  void TearDown() override {
    for (fid_mr* m : mrs_) fi_close(&m->fid);
    for (Side* s : {&a_, &b_}) {
      if (s->ep) fi_close(&s->ep->fid);
      if (s->cq) fi_close(&s->cq->fid);
      if (s->av) fi_close(&s->av->fid);
      if (s->dom) fi_close(&s->dom->fid);
    }
    if (fab_) fi_close(&fab_->fid);
    fi_freeinfo(info_);
  }
  fid_mr* reg(fid_domain* d, void* buf, size_t len) {
    fid_mr* m = nullptr;
    EXPECT_EQ(fi_mr_reg(d, buf, len, FI_SEND | FI_RECV, 0, 0, 0, &m, nullptr), 0);
    mrs_.push_back(m);
    return m;
  }
  // Up to `want` completions of `cq` within a bounded number of polls; errors fail the test.
  std::vector<std::pair<fi_cq_data_entry, fi_addr_t>> take(fid_cq* cq, size_t want,
                                                           int polls = 20000) {
    std::vector<std::pair<fi_cq_data_entry, fi_addr_t>> got;
    for (int i = 0; i < polls && got.size() < want; ++i) {
      fi_cq_data_entry e{};
      fi_addr_t src = FI_ADDR_NOTAVAIL;
      ssize_t n = fi_cq_readfrom(cq, &e, 1, &src);
      if (n == 1) got.emplace_back(e, src);
      else if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq, &err, 0);
        ADD_FAILURE() << "error completion " << err.err << " prov " << err.prov_errno;
        break;
      } else {
        EXPECT_EQ(n, -FI_EAGAIN);
      }
    }
    return got;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fab_ = nullptr;
  Side a_, b_;
  fi_addr_t a_to_[2]{}, b_to_[2]{};  // [0] = a's EP, [1] = b's EP
  std::vector<fid_mr*> mrs_;
};

TEST(DgramOffer, OfferedOnlyWithMsgPrefix) {
  setenv("FI_EFA_BACKEND", "emu", 1);
  fi_info* h = dgram_hints(0);
  fi_info* got = nullptr;
  EXPECT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, h, &got), -FI_ENODATA);
  fi_freeinfo(h);
  h = dgram_hints(FI_MSG_PREFIX);
  ASSERT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, h, &got), 0);
  fi_freeinfo(h);
  for (fi_info* i = got; i; i = i->next) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_DGRAM);
    EXPECT_TRUE(i->mode & FI_MSG_PREFIX);
    EXPECT_EQ(i->ep_attr->msg_prefix_size, kPrefix);
    EXPECT_STREQ(i->fabric_attr->name, "efa");
    const std::string dom = i->domain_attr->name;
    ASSERT_GT(dom.size(), 5u);
    EXPECT_EQ(dom.substr(dom.size() - 5), "-dgrm");
    EXPECT_FALSE(i->caps & (FI_RMA | FI_XPU));
    EXPECT_GT(i->ep_attr->max_msg_size, 0u);
  }
  fi_freeinfo(got);
  // RDM hints never see the DGRAM offer.
  h = dgram_hints(FI_MSG_PREFIX);
  h->ep_attr->type = FI_EP_RDM;
  ASSERT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, h, &got), 0);
  fi_freeinfo(h);
  for (fi_info* i = got; i; i = i->next) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
    const std::string dom = i->domain_attr->name;
    EXPECT_EQ(dom.find("-dgrm"), std::string::npos) << dom;
  }
  fi_freeinfo(got);
  // Nor do DGRAM hints that ask for RMA.
  h = dgram_hints(FI_MSG_PREFIX);
  h->caps |= FI_RMA;
  EXPECT_EQ(fi_getinfo(kV27, nullptr, nullptr, 0, h, &got), -FI_ENODATA);
  fi_freeinfo(h);
}

TEST_F(Dgram, RoundTripWithGrhInPrefix) {
  constexpr size_t kPayload = 100;
  std::vector<uint8_t> s(kPrefix + kPayload), r(kPrefix + kPayload + 64, 0xee);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i < kPrefix ? 0xff : i * 7);
  fid_mr* sm = reg(a_.dom, s.data(), s.size());
  fid_mr* rm = reg(b_.dom, r.data(), r.size());
  int rctx = 0, sctx = 0;
  ASSERT_EQ(fi_recv(b_.ep, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, s.data(), s.size(), fi_mr_desc(sm), a_to_[1], &sctx), 0);
  auto tx = take(a_.cq, 1);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].first.op_context, &sctx);
  EXPECT_TRUE(tx[0].first.flags & FI_SEND);
  auto rx = take(b_.cq, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].first.op_context, &rctx);
  EXPECT_TRUE(rx[0].first.flags & FI_RECV);
  // The length counts the prefix the GRH filled, as the device reports it.
  EXPECT_EQ(rx[0].first.len, kPrefix + kPayload);
  // The sender's prefix bytes are not sent: the payload lands right after the prefix.
  EXPECT_EQ(memcmp(r.data() + kPrefix, s.data() + kPrefix, kPayload), 0);
  EXPECT_EQ(r[kPrefix + kPayload], 0xee);
  // FI_SOURCE: the sender as b's AV knows it.
  EXPECT_EQ(rx[0].second, b_to_[0]);
  // The prefix holds the GRH: IP version 6, source GID = the sender's (fi_getname's first 16
  // bytes are the GID).
  EXPECT_EQ(r[0] >> 4, 6);
  uint8_t name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&a_.ep->fid, name, &len), 0);
  EXPECT_EQ(memcmp(r.data() + 8, name, 16), 0);
}

TEST_F(Dgram, SendmsgRecvmsgAndInject) {
  std::vector<uint8_t> s(kPrefix + 16), r1(kPrefix + 64, 0), r2(kPrefix + 64, 0);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(0x30 + i);
  fid_mr* sm = reg(b_.dom, s.data(), s.size());
  fid_mr* rm1 = reg(a_.dom, r1.data(), r1.size());
  fid_mr* rm2 = reg(a_.dom, r2.data(), r2.size());
  iovec riov{r1.data(), r1.size()};
  void* rdesc = fi_mr_desc(rm1);
  fi_msg rmsg{};
  rmsg.msg_iov = &riov;
  rmsg.desc = &rdesc;
  rmsg.iov_count = 1;
  rmsg.addr = FI_ADDR_UNSPEC;
  rmsg.context = &r1;
  ASSERT_EQ(fi_recvmsg(a_.ep, &rmsg, 0), 0);
  ASSERT_EQ(fi_recv(a_.ep, r2.data(), r2.size(), fi_mr_desc(rm2), FI_ADDR_UNSPEC, &r2), 0);
  iovec siov{s.data(), s.size()};
  void* sdesc = fi_mr_desc(sm);
  fi_msg smsg{};
  smsg.msg_iov = &siov;
  smsg.desc = &sdesc;
  smsg.iov_count = 1;
  smsg.addr = b_to_[0];
  smsg.context = &s;
  ASSERT_EQ(fi_sendmsg(b_.ep, &smsg, FI_COMPLETION), 0);
  ASSERT_EQ(take(b_.cq, 1).size(), 1u);
  auto rx = take(a_.cq, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].first.op_context, &r1);
  EXPECT_EQ(memcmp(r1.data() + kPrefix, s.data() + kPrefix, 16), 0);
  EXPECT_EQ(rx[0].second, a_to_[1]);
  // fi_inject: a small datagram with no descriptor and no completion.
  uint8_t inj[kPrefix + 8];
  memset(inj, 0, sizeof(inj));
  memcpy(inj + kPrefix, "dgramINJ", 8);
  ASSERT_EQ(fi_inject(b_.ep, inj, sizeof(inj), b_to_[0]), 0);
  rx = take(a_.cq, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].first.op_context, &r2);
  EXPECT_EQ(rx[0].first.len, kPrefix + 8);
  EXPECT_EQ(memcmp(r2.data() + kPrefix, "dgramINJ", 8), 0);
  EXPECT_TRUE(take(b_.cq, 1, 200).empty());
}

TEST_F(Dgram, AboveMaxMsgSizeIsEmsgsize) {
  const size_t max = info_->ep_attr->max_msg_size;
  std::vector<uint8_t> s(kPrefix + max + 1);
  fid_mr* sm = reg(a_.dom, s.data(), s.size());
  EXPECT_EQ(fi_send(a_.ep, s.data(), s.size(), fi_mr_desc(sm), a_to_[1], nullptr), -FI_EMSGSIZE);
  // Exactly max_msg_size after the prefix goes through.
  std::vector<uint8_t> r(kPrefix + max);
  fid_mr* rm = reg(b_.dom, r.data(), r.size());
  ASSERT_EQ(fi_recv(b_.ep, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(a_.ep, s.data(), kPrefix + max, fi_mr_desc(sm), a_to_[1], nullptr), 0);
  auto rx = take(b_.cq, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].first.len, kPrefix + max);
  // A buffer shorter than the prefix is not a datagram.
  EXPECT_EQ(fi_send(a_.ep, s.data(), kPrefix - 1, fi_mr_desc(sm), a_to_[1], nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recv(b_.ep, r.data(), kPrefix - 1, fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr),
            -FI_EINVAL);
}

TEST_F(Dgram, RmaIsRefused) {
  std::vector<uint8_t> buf(kPrefix + 64);
  fid_mr* m = reg(a_.dom, buf.data(), buf.size());
  EXPECT_EQ(fi_write(a_.ep, buf.data(), 64, fi_mr_desc(m), a_to_[1], 0, 0, nullptr),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_read(a_.ep, buf.data(), 64, fi_mr_desc(m), a_to_[1], 0, 0, nullptr),
            -FI_EOPNOTSUPP);
  size_t v = 1, len = sizeof(v);
  ASSERT_EQ(fi_getopt(&a_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_RMA_SIZE, &v, &len), 0);
  EXPECT_EQ(v, 0u);
  len = sizeof(v);
  ASSERT_EQ(fi_getopt(&a_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &v, &len), 0);
  EXPECT_EQ(v, info_->ep_attr->max_msg_size);
}

TEST_F(Dgram, NoPostedReceiveLosesTheDatagram) {
  std::vector<uint8_t> s(kPrefix + 32, 0x11), r(kPrefix + 32, 0);
  fid_mr* sm = reg(a_.dom, s.data(), s.size());
  fid_mr* rm = reg(b_.dom, r.data(), r.size());
  // The send completes (UD does not wait for the receiver); nothing arrives.
  ASSERT_EQ(fi_send(a_.ep, s.data(), s.size(), fi_mr_desc(sm), a_to_[1], nullptr), 0);
  ASSERT_EQ(take(a_.cq, 1).size(), 1u);
  EXPECT_TRUE(take(b_.cq, 1, 500).empty());
  // A receive posted afterwards gets the next datagram, not the lost one.
  s[kPrefix] = 0x22;
  ASSERT_EQ(fi_recv(b_.ep, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  EXPECT_TRUE(take(b_.cq, 1, 500).empty());
  ASSERT_EQ(fi_send(a_.ep, s.data(), s.size(), fi_mr_desc(sm), a_to_[1], nullptr), 0);
  ASSERT_EQ(take(a_.cq, 1).size(), 1u);
  auto rx = take(b_.cq, 1);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(r[kPrefix], 0x22);
}

TEST_F(Dgram, RdmEndpointOnDgramDomainIsRefused) {
  fi_info* i = fi_dupinfo(info_);
  i->ep_attr->type = FI_EP_RDM;
  fid_ep* ep = nullptr;
  EXPECT_EQ(fi_endpoint(a_.dom, i, &ep, nullptr), -FI_EINVAL);
  fi_freeinfo(i);
}

}  // namespace
