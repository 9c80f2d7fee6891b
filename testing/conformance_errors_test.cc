// Error codes of the provider's calls (fi_endpoint(3), fi_cq(3), fi_cntr(3), fi_av(3), fi_mr(3),
// fi_domain(3)): NULL arguments, bad flags, closing objects in use, calls in the wrong state,
// sizes over the device limits. Every case returns its code and leaves the objects usable.
#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

class Errors : public DataPathFixture {
 protected:
  void SetUp() override {
    select_backend(GetParam());
    ASSERT_EQ(open(), 0);
  }
};

TEST_P(Errors, NullArguments) {
  fid_fabric* fab = nullptr;
  EXPECT_EQ(fi_fabric(nullptr, &fab, nullptr), -FI_EINVAL);
  fid_domain* dom = nullptr;
  EXPECT_EQ(fi_domain(fabric_, nullptr, &dom, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_domain(fabric_, info_, nullptr, nullptr), -FI_EINVAL);
  fid_av* av = nullptr;
  EXPECT_EQ(fi_av_open(domain_, nullptr, &av, nullptr), -FI_EINVAL);
  fid_cq* c = nullptr;
  EXPECT_EQ(fi_cq_open(domain_, nullptr, &c, nullptr), -FI_EINVAL);
  fi_cq_attr ca{};
  EXPECT_EQ(fi_cq_open(domain_, &ca, nullptr, nullptr), -FI_EINVAL);
  fid_cntr* cn = nullptr;
  EXPECT_EQ(fi_cntr_open(domain_, nullptr, &cn, nullptr), -FI_EINVAL);
  fid_ep* e = nullptr;
  EXPECT_EQ(fi_endpoint(domain_, nullptr, &e, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_endpoint(domain_, info_, nullptr, nullptr), -FI_EINVAL);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, nullptr, 64, FI_SEND, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_regattr(domain_, nullptr, 0, &mr), -FI_EINVAL);

  fid_cq* q = cq();
  fi_addr_t a = 0;
  fid_ep* ep1 = ep(q, &a);
  EXPECT_EQ(fi_ep_bind(ep1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_getname(&ep1->fid, nullptr, nullptr), -FI_EINVAL);
  size_t len = 64;
  EXPECT_EQ(fi_getname(&ep1->fid, nullptr, &len), -FI_EINVAL);
  size_t optlen = sizeof(size_t);
  EXPECT_EQ(fi_getopt(&ep1->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, nullptr, &optlen), -FI_EINVAL);
  size_t v = 0;
  EXPECT_EQ(fi_getopt(&ep1->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &v, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_setopt(&ep1->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, nullptr, sizeof(size_t)), -FI_EINVAL);
  EXPECT_EQ(fi_control(&ep1->fid, FI_GETOPSFLAG, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_sendv(ep1, nullptr, nullptr, 1, a, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(ep1, nullptr, nullptr, 1, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_sendmsg(ep1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_recvmsg(ep1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_writemsg(ep1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_readmsg(ep1, nullptr, 0), -FI_EINVAL);
  // A device without RDMA write refuses the call before looking at its arguments.
  EXPECT_EQ(fi_writev(ep1, nullptr, nullptr, 1, a, 0, 0, nullptr),
            offers_rma(info_, FI_WRITE) ? -FI_EINVAL : -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_readv(ep1, nullptr, nullptr, 1, a, 0, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_cq_read(q, nullptr, 1), -FI_EINVAL);
  EXPECT_EQ(fi_cq_readfrom(q, nullptr, 1, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_cq_readerr(q, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_cq_sread(q, nullptr, 1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_control(&q->fid, FI_GETWAITOBJ, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_insert(av_, nullptr, 1, nullptr, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_remove(av_, nullptr, 1, 0), -FI_EINVAL);
  EXPECT_EQ(fi_av_lookup(av_, a, nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_cancel(&ep1->fid, nullptr), -FI_ENOENT);  // names no operation
  // Still usable after all of that.
  std::vector<uint8_t> r(8), s(8, 1);
  fid_mr* rm = reg(r.data(), 8, FI_RECV);
  fid_mr* sm = reg(s.data(), 8, FI_SEND);
  ASSERT_EQ(fi_recv(ep1, r.data(), 8, fi_mr_desc(rm), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(ep1, s.data(), 8, fi_mr_desc(sm), a, nullptr), 0);
  EXPECT_EQ(take(q, 2).size(), 2u);
  EXPECT_EQ(r, s);
}

TEST_P(Errors, BadFlags) {
  fi_cq_attr ca{};
  ca.flags = FI_SEND;
  fid_cq* bad = nullptr;
  EXPECT_EQ(fi_cq_open(domain_, &ca, &bad, nullptr), -FI_EBADFLAGS);
  fi_cntr_attr na{};
  na.events = FI_CNTR_EVENTS_COMP;
  na.flags = FI_SEND;
  fid_cntr* badc = nullptr;
  EXPECT_EQ(fi_cntr_open(domain_, &na, &badc, nullptr), -FI_EBADFLAGS);
  std::vector<uint8_t> buf(64);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, buf.data(), buf.size(), FI_SEND, 0, 0, FI_MORE, &mr, nullptr),
            -FI_EBADFLAGS);
  fid_ep* e2 = nullptr;
  EXPECT_EQ(fi_endpoint2(domain_, info_, &e2, FI_SEND, nullptr), -FI_EBADFLAGS);
  fid_domain* d2 = nullptr;
  EXPECT_EQ(fi_domain2(fabric_, info_, &d2, FI_SEND, nullptr), -FI_EBADFLAGS);

  fid_cq* q = cq();
  na.flags = 0;
  fid_cntr* cn = nullptr;
  ASSERT_EQ(fi_cntr_open(domain_, &na, &cn, nullptr), 0);
  closing_.push_back(&cn->fid);
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  closing_.push_back(&e->fid);
  EXPECT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT | FI_REMOTE_READ), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(e, &q->fid, 0), -FI_EINVAL);  // neither direction
  EXPECT_EQ(fi_ep_bind(e, &cn->fid, 0), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(e, &cn->fid, FI_SELECTIVE_COMPLETION), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(e, &av_->fid, FI_SEND), -FI_EBADFLAGS);
  ASSERT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
  EXPECT_EQ(fi_ep_bind(e, &av_->fid, 0), -FI_EINVAL);  // one AV
  ASSERT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT | FI_RECV), 0);
  EXPECT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT), -FI_EINVAL);  // already bound
  ASSERT_EQ(fi_enable(e), 0);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(q, &err, 1), -FI_EINVAL);
  char name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&e->fid, name, &len), 0);
  fi_addr_t a = 0;
  EXPECT_EQ(fi_av_insert(av_, name, 1, &a, FI_MORE, nullptr), -FI_EINVAL);
  fid_xpu_ep xe;
  EXPECT_EQ(fi_ep_export_xpu(e, FI_SEND, &xe), -FI_EBADFLAGS);
}

TEST_P(Errors, ClosingObjectsInUseIsBusy) {
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);  // a domain
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);  // an AV
  fid_cq* q = cq();
  fi_cntr_attr na{};
  na.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* cn = nullptr;
  ASSERT_EQ(fi_cntr_open(domain_, &na, &cn, nullptr), 0);
  closing_.push_back(&cn->fid);
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_ep_bind(e, &cn->fid, FI_SEND | FI_RECV), 0);
  ASSERT_EQ(fi_enable(e), 0);
  EXPECT_EQ(fi_close(&av_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&q->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&cn->fid), -FI_EBUSY);
  ASSERT_EQ(fi_close(&e->fid), 0);
  // Released with the EP.
  EXPECT_EQ(fi_close(&cn->fid), 0);
  closing_.pop_back();
}

TEST_P(Errors, WrongStateAndLimits) {
  fid_cq* q = cq();
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  closing_.push_back(&e->fid);
  EXPECT_EQ(fi_tx_size_left(e), -FI_EOPBADSTATE);
  EXPECT_EQ(fi_rx_size_left(e), -FI_EOPBADSTATE);
  std::vector<uint8_t> buf(16384);
  fid_mr* mr = reg(buf.data(), buf.size(), FI_SEND | FI_RECV | FI_WRITE | FI_READ);
  EXPECT_EQ(fi_recv(e, buf.data(), 8, fi_mr_desc(mr), FI_ADDR_UNSPEC, nullptr), -FI_EOPBADSTATE);
  size_t big = SIZE_MAX;
  EXPECT_EQ(fi_setopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &big, sizeof(big)), -FI_EINVAL);
  size_t small = 64;
  EXPECT_EQ(fi_setopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &small, sizeof(small)), 0);
  EXPECT_EQ(fi_setopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &small, 1), -FI_EINVAL);
  EXPECT_EQ(fi_setopt(&e->fid, FI_OPT_ENDPOINT + 1, FI_OPT_TX_SIZE, &small, sizeof(small)), -FI_ENOPROTOOPT);
  ASSERT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(e), 0);
  EXPECT_EQ(fi_setopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &small, sizeof(small)), -FI_EOPBADSTATE);
  size_t v = 0, vl = 1;
  EXPECT_EQ(fi_getopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &v, &vl), -FI_ETOOSMALL);
  EXPECT_EQ(vl, sizeof(size_t));
  vl = sizeof(v);
  ASSERT_EQ(fi_getopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_TX_SIZE, &v, &vl), 0);
  EXPECT_EQ(v, 64u);
  EXPECT_EQ(fi_tx_size_left(e), 64);
  char name[64];
  size_t len = sizeof(name);
  ASSERT_EQ(fi_getname(&e->fid, name, &len), 0);
  fi_addr_t a = 0;
  ASSERT_EQ(fi_av_insert(av_, name, 1, &a, 0, nullptr), 1);
  size_t mtu = 0, ml = sizeof(mtu);
  ASSERT_EQ(fi_getopt(&e->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &mtu, &ml), 0);
  ASSERT_LT(mtu, buf.size());
  EXPECT_EQ(fi_send(e, buf.data(), mtu + 1, fi_mr_desc(mr), a, nullptr), -FI_EMSGSIZE);
  EXPECT_EQ(fi_send(e, buf.data(), 8, fi_mr_desc(mr), a + 100, nullptr), -FI_EINVAL);  // no such peer
  EXPECT_EQ(fi_send(e, buf.data(), 8, nullptr, a, nullptr), -FI_EINVAL);  // FI_MR_LOCAL needs desc
  EXPECT_EQ(fi_recv(e, buf.data(), 8, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(e, &q->fid, FI_TRANSMIT), -FI_EOPBADSTATE);
  EXPECT_TRUE(stays_empty(q, 5));  // refused posts leave nothing behind
}

INSTANTIATE_TEST_SUITE_P(Backends, Errors, ::testing::ValuesIn(present_backends()));

}  // namespace
}  // namespace xpufab::testing
