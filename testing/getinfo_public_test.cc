// fi_getinfo as applications call it, through the public API on every present backend: hints
// written the way programs write them, node/FI_SOURCE addressing, and the limits an offer states
// holding on the data path.
#include <arpa/inet.h>

#include <string>
#include <vector>

#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

constexpr uint32_t kV27 = FI_VERSION(2, 7);
constexpr int kDirectMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

class Getinfo : public DataPathFixture {
 protected:
  void SetUp() override { select_backend(GetParam()); }

  // fi_getinfo with make_hints(false) edited by `edit`; the result replaces got_.
  int get(const std::function<void(fi_info*)>& edit, const char* node = nullptr,
          const char* service = nullptr, uint64_t flags = 0) {
    fi_info* h = make_hints(false);
    if (edit) edit(h);
    fi_freeinfo(got_);
    got_ = nullptr;
    int rc = fi_getinfo(kV27, node, service, flags, h, &got_);
    fi_freeinfo(h);
    return rc;
  }
  void TearDown() override {
    fi_freeinfo(got_);
    DataPathFixture::TearDown();
  }

  // Sends `len` bytes from `from` to `to_addr`, received on `to`; true when both complete.
  bool send_recv(fid_ep* from, fid_cq* from_cq, fi_addr_t to_addr, fid_ep* to, fid_cq* to_cq,
                 size_t len) {
    std::vector<uint8_t> s(len, 0x5a), r(len, 0);
    fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
    fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
    int sc = 0, rcx = 0;
    EXPECT_EQ(fi_recv(to, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &rcx), 0);
    EXPECT_EQ(fi_send(from, s.data(), s.size(), fi_mr_desc(sm), to_addr, &sc), 0);
    auto tx = take(from_cq, 1);
    auto rx = take(to_cq, 1);
    return tx.size() == 1 && rx.size() == 1 && rx[0].len == len && r == s;
  }

  fi_info* got_ = nullptr;
};

TEST_P(Getinfo, NegativeMrModeAcceptsAnyMode) {
  ASSERT_EQ(get([](fi_info* h) { h->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE); }),
            0);
  EXPECT_EQ(got_->domain_attr->mr_mode, kDirectMrMode);
  ASSERT_EQ(get([](fi_info* h) {
              h->caps |= FI_XPU;
              h->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
            }),
            0);
  EXPECT_EQ(got_->domain_attr->mr_mode, kDirectMrMode | FI_MR_XPU_DESC);
}

TEST_P(Getinfo, ReturnedMrModeHasOnlyAllowedBits) {
  // The FI_LOCAL_MR mode bit grants FI_MR_LOCAL; it comes back as that mode bit.
  ASSERT_EQ(get([](fi_info* h) {
              h->mode |= FI_LOCAL_MR;
              h->domain_attr->mr_mode = kDirectMrMode & ~FI_MR_LOCAL;
            }),
            0);
  EXPECT_EQ(got_->domain_attr->mr_mode, kDirectMrMode & ~FI_MR_LOCAL);
  EXPECT_TRUE(got_->mode & FI_LOCAL_MR);
  // Extra bits the application allows but the provider does not need are not returned.
  ASSERT_EQ(get([](fi_info* h) { h->domain_attr->mr_mode |= FI_MR_ENDPOINT | FI_MR_RAW; }), 0);
  EXPECT_EQ(got_->domain_attr->mr_mode, kDirectMrMode);
  EXPECT_FALSE(got_->mode & FI_LOCAL_MR);
}

// FI_WRITE (or FI_READ) refines FI_RMA only: FI_MSG keeps sending and receiving.
TEST_P(Getinfo, RmaModifiersLeaveMessagingWhole) {
  ASSERT_EQ(get(nullptr), 0);
  const uint64_t dir = offers_rma(got_, FI_WRITE) ? FI_WRITE | FI_REMOTE_WRITE
                                                  : FI_READ | FI_REMOTE_READ;
  ASSERT_EQ(open([&](fi_info* h) { h->caps = FI_MSG | FI_RMA | dir; }), 0);
  EXPECT_EQ(info_->caps & (FI_SEND | FI_RECV), FI_SEND | FI_RECV);
  EXPECT_TRUE(info_->tx_attr->caps & FI_SEND);
  EXPECT_TRUE(info_->rx_attr->caps & FI_RECV);
  EXPECT_EQ(info_->caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE), dir);
  fid_cq* ca = cq();
  fid_cq* cb = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(ca, &a);
  fid_ep* eb = ep(cb, &b);
  ASSERT_TRUE(ea && eb);
  EXPECT_TRUE(send_recv(ea, ca, b, eb, cb, 64));
}

TEST_P(Getinfo, NodeThatNamesNothingIsNoData) {
  EXPECT_EQ(get(nullptr, "no-such-host.invalid", nullptr), -FI_ENODATA);
  EXPECT_EQ(get(nullptr, "fi_addr_efa://[zz::1]:1:2", nullptr), -FI_ENODATA);
  EXPECT_EQ(get(nullptr, "fi_addr_efa://[fe80::1]:70000:2", nullptr), -FI_ENODATA);
  EXPECT_EQ(get(nullptr, "10.0.0.1", "4711", FI_SOURCE), -FI_ENODATA);
  // A GID no local device has is no source address.
  EXPECT_EQ(get(nullptr, "fe80::dead:beef", nullptr, FI_SOURCE), -FI_ENODATA);
  ASSERT_EQ(get(nullptr), 0);
  EXPECT_EQ(got_->dest_addr, nullptr);
}

TEST_P(Getinfo, SourceAddressSelectsTheLocalDevice) {
  ASSERT_EQ(get(nullptr), 0);
  ASSERT_EQ(got_->addr_format, static_cast<uint32_t>(FI_ADDR_EFA));
  ASSERT_GE(got_->src_addrlen, 16u);
  char gid[INET6_ADDRSTRLEN];
  ASSERT_NE(inet_ntop(AF_INET6, got_->src_addr, gid, sizeof(gid)), nullptr);
  std::vector<uint8_t> src(static_cast<uint8_t*>(got_->src_addr),
                           static_cast<uint8_t*>(got_->src_addr) + 16);
  const std::string bracketed = std::string("[") + gid + "]";
  for (const std::string& node : {std::string(gid), bracketed}) {
    ASSERT_EQ(get(nullptr, node.c_str(), "9228", FI_SOURCE), 0) << node;
    EXPECT_EQ(got_->dest_addr, nullptr);
    EXPECT_EQ(memcmp(got_->src_addr, src.data(), 16), 0);
  }
  // The hints' src_addr selects the same way.
  ASSERT_EQ(get([&](fi_info* h) {
              h->src_addr = calloc(1, 32);
              memcpy(h->src_addr, src.data(), 16);
              h->src_addrlen = 32;
            }),
            0);
  EXPECT_EQ(get([&](fi_info* h) {
              h->src_addr = calloc(1, 32);
              h->src_addrlen = 32;
            }),
            -FI_ENODATA);
  EXPECT_EQ(get([&](fi_info* h) {
              h->src_addr = calloc(1, 8);
              h->src_addrlen = 8;
            }),
            -FI_ENODATA);
}

// A server prints its address (fi_av_straddr); a client on the same host passes it as node and
// reaches the server through the dest_addr fi_getinfo returns.
TEST_P(Getinfo, ClientReachesServerThroughNode) {
  ASSERT_EQ(open(), 0);
  fid_cq* cs = cq();
  fi_addr_t self = 0;
  fid_ep* server = ep(cs, &self);
  ASSERT_NE(server, nullptr);
  uint8_t name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&server->fid, name, &len), 0);
  char text[128];
  size_t tlen = sizeof(text);
  ASSERT_NE(fi_av_straddr(av_, name, text, &tlen), nullptr);

  ASSERT_EQ(get(nullptr, text, nullptr), 0) << text;
  ASSERT_EQ(got_->dest_addrlen, len);
  EXPECT_EQ(memcmp(got_->dest_addr, name, len), 0);

  fid_cq* cc = cq();
  fid_ep* client = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, got_, &client, nullptr), 0);
  closing_.push_back(&client->fid);
  fid_av* cav = nullptr;
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  ASSERT_EQ(fi_av_open(domain_, &aa, &cav, nullptr), 0);
  closing_.insert(closing_.begin(), &cav->fid);  // closed after the client EP
  ASSERT_EQ(fi_ep_bind(client, &cav->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(client, &cc->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(client), 0);
  fi_addr_t srv = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(cav, got_->dest_addr, 1, &srv, 0, nullptr), 1);
  // The server must know the client before an RMA, not before a send; insert it as a server
  // would on first contact.
  uint8_t cname[64];
  size_t clen = sizeof(cname);
  ASSERT_EQ(fi_getname(&client->fid, cname, &clen), 0);
  fi_addr_t cli = 0;
  ASSERT_EQ(fi_av_insert(av_, cname, 1, &cli, 0, nullptr), 1);
  EXPECT_TRUE(send_recv(client, cc, srv, server, cs, 100));
}

TEST_P(Getinfo, ResourceManagementEnabled) {
  ASSERT_EQ(get(nullptr), 0);
  EXPECT_EQ(got_->domain_attr->resource_mgmt, FI_RM_ENABLED);
  ASSERT_EQ(get([](fi_info* h) { h->domain_attr->resource_mgmt = FI_RM_ENABLED; }), 0);
  EXPECT_EQ(got_->domain_attr->resource_mgmt, FI_RM_ENABLED);
  ASSERT_EQ(get([](fi_info* h) { h->domain_attr->resource_mgmt = FI_RM_DISABLED; }), 0);
  EXPECT_EQ(got_->domain_attr->resource_mgmt, FI_RM_DISABLED);

  // A send to a peer with no receive posted yet waits for one (receiver-not-ready is retried),
  // then completes: no overrun error reaches the application.
  ASSERT_EQ(open([](fi_info* h) { h->domain_attr->resource_mgmt = FI_RM_ENABLED; }), 0);
  fid_cq* ca = cq();
  fid_cq* cb = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(ca, &a);
  fid_ep* eb = ep(cb, &b);
  ASSERT_TRUE(ea && eb);
  std::vector<uint8_t> s(32, 7), r(32, 0);
  fid_mr* sm = reg(s.data(), s.size(), FI_SEND);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  int sc = 0, rcx = 0;
  ASSERT_EQ(fi_send(ea, s.data(), s.size(), fi_mr_desc(sm), b, &sc), 0);
  EXPECT_TRUE(stays_empty(cb, 20));
  ASSERT_EQ(fi_recv(eb, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &rcx), 0);
  auto tx = take(ca, 1);
  auto rx = take(cb, 1);
  ASSERT_EQ(tx.size(), 1u);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(tx[0].op_context, &sc);
  EXPECT_EQ(r, s);
}

// max_msg_size and inject_size are what the data path accepts: messaging alone is told the MTU
// (a SEND's limit), with FI_RMA the largest RDMA transfer; both as fi_getopt reports them.
TEST_P(Getinfo, StatedSizeLimitsHoldOnTheDataPath) {
  ASSERT_EQ(open([](fi_info* h) { h->caps = FI_MSG; }), 0);
  fid_cq* ca = cq();
  fid_cq* cb = cq();
  fi_addr_t a = 0, b = 0;
  fid_ep* ea = ep(ca, &a);
  fid_ep* eb = ep(cb, &b);
  ASSERT_TRUE(ea && eb);
  size_t v = 0, vlen = sizeof(v);
  ASSERT_EQ(fi_getopt(&ea->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &v, &vlen), 0);
  const size_t max_msg = info_->ep_attr->max_msg_size;
  EXPECT_EQ(max_msg, v);
  vlen = sizeof(v);
  ASSERT_EQ(fi_getopt(&ea->fid, FI_OPT_ENDPOINT, FI_OPT_INJECT_MSG_SIZE, &v, &vlen), 0);
  EXPECT_EQ(info_->tx_attr->inject_size, v);

  EXPECT_TRUE(send_recv(ea, ca, b, eb, cb, max_msg));
  std::vector<uint8_t> big(max_msg + 1, 1);
  fid_mr* bm = reg(big.data(), big.size(), FI_SEND);
  EXPECT_EQ(fi_send(ea, big.data(), big.size(), fi_mr_desc(bm), b, nullptr), -FI_EMSGSIZE);

  std::vector<uint8_t> inj(info_->tx_attr->inject_size, 3), r(info_->tx_attr->inject_size, 0);
  fid_mr* rm = reg(r.data(), r.size(), FI_RECV);
  int rcx = 0;
  ASSERT_EQ(fi_recv(eb, r.data(), r.size(), fi_mr_desc(rm), FI_ADDR_UNSPEC, &rcx), 0);
  ASSERT_EQ(fi_inject(ea, inj.data(), inj.size(), b), 0);
  ASSERT_EQ(take(cb, 1).size(), 1u);
  EXPECT_EQ(r, inj);
  inj.push_back(3);
  EXPECT_EQ(fi_inject(ea, inj.data(), inj.size(), b), -FI_EMSGSIZE);

  // Hints asking for more than a SEND carries, with only messaging, find the protocol fabric
  // (messages of any length), not efa-direct.
  ASSERT_EQ(get([&](fi_info* h) {
              h->caps = FI_MSG;
              h->ep_attr->max_msg_size = max_msg + 1;
            }),
            0);
  for (fi_info* i = got_; i; i = i->next) EXPECT_STREQ(i->fabric_attr->name, "efa");
  ASSERT_EQ(get(nullptr), 0);  // FI_MSG | FI_RMA
  vlen = sizeof(v);
  ASSERT_EQ(fi_getopt(&ea->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_RMA_SIZE, &v, &vlen), 0);
  EXPECT_EQ(got_->ep_attr->max_msg_size, std::max(v, max_msg));
}

INSTANTIATE_TEST_SUITE_P(Backends, Getinfo, ::testing::ValuesIn(present_backends()));

}  // namespace
}  // namespace xpufab::testing
