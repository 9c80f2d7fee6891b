// UD queue pairs on the emulated EFA: datagrams through real WQE/CQE bytes, the GRH the
// receiver finds, and every way a datagram is lost without anyone being told.
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

using backend::kGrhSize;
using backend::QpType;

class UdPair : public ::testing::Test {
 protected:
  void open(const std::string& plan_b = "") {
    fabric_ = std::make_shared<InProcFabric>();
    a_.open(inline_options(fabric_));
    DeviceOptions ob = inline_options(fabric_);
    ob.fault_plan = plan_b;
    b_.open(ob);
    a_.make_qp(0, 64, 256, 2, QpType::kUd);
    b_.make_qp(0, 64, 256, 2, QpType::kUd);
    bring_up(a_.qp, a_.qkey, 7, false);
    bring_up(b_.qp, b_.qkey, 7, false);
    Gid gb = b_.dev->gid(), ga = a_.dev->gid();
    ASSERT_EQ(a_.dev->create_ah(a_.pd, gb.data(), &ah_ab_), 0);
    ASSERT_EQ(b_.dev->create_ah(b_.pd, ga.data(), &ah_ba_), 0);
  }
  void SetUp() override { open(); }

  Wqe send_to_b(uint16_t req_id, uint32_t qkey) {
    return send_wqe(req_id, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), qkey);
  }
  // Posts a SEND of `len` bytes from A's buffer and returns A's TX completion status.
  uint8_t send(uint16_t req_id, uint32_t len, uint32_t qkey) {
    Wqe w = send_to_b(req_id, qkey);
    add_sge(&w, a_.addr(0), len, a_.mr->lkey());
    a_.sq.post(w);
    efa_io_rx_cdesc_ex c;
    EXPECT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &a_.cqr, &c));
    EXPECT_EQ(q_type(c), EFA_IO_SEND_QUEUE);
    EXPECT_EQ(c.base.common.req_id, req_id);
    return c.base.common.status;
  }
  // Steps both devices a while; true if B got a CQE meanwhile.
  bool b_gets_cqe(efa_io_rx_cdesc_ex* c) {
    for (int i = 0; i < 200; ++i) {
      a_.dev->step(64);
      b_.dev->step(64);
      if (b_.cqr.poll(c)) return true;
    }
    return false;
  }

  std::shared_ptr<InProcFabric> fabric_;
  Node a_, b_;
  Ah* ah_ab_ = nullptr;
  Ah* ah_ba_ = nullptr;
};

TEST_F(UdPair, SendLandsAfterTheGrhAndTheLengthCountsIt) {
  std::memcpy(a_.at(0), "datagram-bytes", 14);
  // The GRH straddles the first descriptor: 16 bytes there, the rest of it and the payload next.
  b_.rq.post(42, {{b_.at(1000), 16, b_.mr->lkey()}, {b_.at(2000), 200, b_.mr->lkey()}});
  Wqe w = send_to_b(3, b_.qkey);
  add_sge(&w, a_.addr(0), 14, a_.mr->lkey());
  set_imm(&w, 0xabcd0123);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex rx;
  ASSERT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &b_.cqr, &rx));
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(q_type(rx), EFA_IO_RECV_QUEUE);
  EXPECT_EQ(op_type(rx), EFA_IO_SEND);
  EXPECT_EQ(rx.base.common.req_id, 42);
  EXPECT_EQ(rx.base.length, kGrhSize + 14);
  EXPECT_EQ(rx.base.src_qp_num, a_.qp->qpn());
  EXPECT_EQ(rx.base.ah, ah_ba_->ahn());
  EXPECT_TRUE(efa_io_cdesc_common_get_has_imm(&rx.base.common));
  EXPECT_EQ(rx.base.imm, 0xabcd0123u);
  uint8_t grh[kGrhSize];
  std::memcpy(grh, b_.at(1000), 16);
  std::memcpy(grh + 16, b_.at(2000), kGrhSize - 16);
  EXPECT_EQ(grh[0] >> 4, 6);                  // IP version 6
  EXPECT_EQ((grh[4] << 8) | grh[5], 14);      // payload length
  EXPECT_EQ(grh[6], 0x1b);                    // next header
  Gid ga = a_.dev->gid(), gb = b_.dev->gid();
  EXPECT_EQ(std::memcmp(grh + 8, ga.data(), 16), 0);   // source GID
  EXPECT_EQ(std::memcmp(grh + 24, gb.data(), 16), 0);  // destination GID
  EXPECT_EQ(std::memcmp(b_.at(2000) + (kGrhSize - 16), "datagram-bytes", 14), 0);
  efa_io_rx_cdesc_ex tx;
  ASSERT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &a_.cqr, &tx));
  EXPECT_EQ(tx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(tx.base.common.req_id, 3);
}

TEST_F(UdPair, ZeroByteDatagramStillCarriesTheGrh) {
  b_.rq.post(1, {{b_.at(0), kGrhSize, b_.mr->lkey()}});
  EXPECT_EQ(send(1, 0, b_.qkey), EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex rx;
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(rx.base.length, kGrhSize);
  EXPECT_EQ(b_.at(0)[0] >> 4, 6);
}

TEST_F(UdPair, WrongQkeyIsDroppedSilentlyAndTheReceiveStaysPosted) {
  std::memcpy(a_.at(0), "second", 6);
  b_.rq.post(9, {{b_.at(0), 100, b_.mr->lkey()}});
  EXPECT_EQ(send(1, 6, b_.qkey + 1), EFA_IO_COMP_STATUS_OK);  // the sender never knows
  efa_io_rx_cdesc_ex rx;
  EXPECT_FALSE(b_gets_cqe(&rx));
  EXPECT_EQ(b_.dev->qp_stats()[0].dropped_packets, 1u);
  EXPECT_EQ(send(2, 6, b_.qkey), EFA_IO_COMP_STATUS_OK);
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.req_id, 9);
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(b_.at(kGrhSize), "second", 6), 0);
}

TEST_F(UdPair, NoPostedReceiveDropsWithoutRnrOrRetry) {
  EXPECT_EQ(send(1, 8, b_.qkey), EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex rx;
  EXPECT_FALSE(b_gets_cqe(&rx));
  // Posting now does not bring the datagram back: nothing was kept to send again.
  b_.rq.post(5, {{b_.at(0), 100, b_.mr->lkey()}});
  EXPECT_FALSE(b_gets_cqe(&rx));
  Stats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_EQ(sb.rnr_naks, 0u);
  EXPECT_EQ(sa.rnr_retries, 0u);
  EXPECT_EQ(sa.retransmits, 0u);
  EXPECT_EQ(sb.dropped_packets, 1u);
  EXPECT_EQ(send(2, 8, b_.qkey), EFA_IO_COMP_STATUS_OK);
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.req_id, 5);
}

TEST_F(UdPair, LengthErrors) {
  backend::DeviceAttr attr;
  ASSERT_EQ(a_.dev->query(&attr), 0);
  const uint32_t mtu = attr.mtu;
  // Longer than one MTU: the sender's own length error, nothing leaves.
  EXPECT_EQ(send(1, mtu + 1, b_.qkey), EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  EXPECT_EQ(a_.dev->stats().packets_tx, 0u);
  // Exactly one MTU fits when the receive has room for it and the GRH.
  b_.rq.post(7, {{b_.at(0), kGrhSize + mtu, b_.mr->lkey()}});
  EXPECT_EQ(send(2, mtu, b_.qkey), EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex rx;
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(rx.base.length, kGrhSize + mtu);
  // A receive with room for the payload but not the GRH as well is consumed with an error.
  b_.rq.post(8, {{b_.at(0), 64, b_.mr->lkey()}});
  EXPECT_EQ(send(3, 64, b_.qkey), EFA_IO_COMP_STATUS_OK);
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.req_id, 8);
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
}

TEST_F(UdPair, RdmaIsUnsupportedOnUd) {
  for (uint8_t op : {uint8_t{EFA_IO_RDMA_WRITE}, uint8_t{EFA_IO_RDMA_READ}}) {
    a_.sq.post(rdma_wqe(op, 4, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey, a_.addr(0),
                        a_.mr->lkey(), b_.addr(0), b_.mr->rkey(), 8));
    efa_io_rx_cdesc_ex c;
    ASSERT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &a_.cqr, &c));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);
  }
  EXPECT_EQ(a_.dev->stats().packets_tx, 0u);
}

TEST_F(UdPair, ReceiveNeedsRtr) {
  QpAttr reset;
  reset.state = QpState::kReset;
  ASSERT_EQ(b_.qp->modify(reset, backend::kQpAttrState), 0);
  b_.rq = RqWriter{b_.rq.rq, 0};
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = b_.qkey;
  ASSERT_EQ(b_.qp->modify(a, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                                 backend::kQpAttrQkey),
            0);
  b_.rq.post(1, {{b_.at(0), 100, b_.mr->lkey()}});
  EXPECT_EQ(send(1, 8, b_.qkey), EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex rx;
  EXPECT_FALSE(b_gets_cqe(&rx));
  a.state = QpState::kRtr;
  ASSERT_EQ(b_.qp->modify(a, backend::kQpAttrState), 0);
  EXPECT_EQ(send(2, 8, b_.qkey), EFA_IO_COMP_STATUS_OK);
  ASSERT_TRUE(b_gets_cqe(&rx));
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
}

// Every packet B's plan drops on arrival is gone: the sender completed each one with success
// and nothing is retransmitted.
class UdLossyPair : public UdPair {
 protected:
  void SetUp() override { open("seed=11;drop=50%"); }
};

TEST_F(UdLossyPair, PlanDropsAreRealLosses) {
  const int kSent = 40;
  for (int i = 0; i < kSent; ++i) b_.rq.post(static_cast<uint16_t>(i), {{b_.at(0), 100, b_.mr->lkey()}});
  for (int i = 0; i < kSent; ++i) {
    EXPECT_EQ(send(static_cast<uint16_t>(i), 8, b_.qkey), EFA_IO_COMP_STATUS_OK);
  }
  int got = 0;
  efa_io_rx_cdesc_ex rx;
  while (b_gets_cqe(&rx)) {
    EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
    ++got;
  }
  Stats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_GT(got, 0);
  EXPECT_LT(got, kSent);
  EXPECT_EQ(sb.dropped_packets, static_cast<uint64_t>(kSent - got));
  EXPECT_EQ(sa.packets_tx, static_cast<uint64_t>(kSent));
  EXPECT_EQ(sa.retransmits, 0u);
}

TEST(UdControl, CreateAndModifyRules) {
  auto fabric = std::make_shared<InProcFabric>();
  Node n;
  n.open(inline_options(fabric));
  backend::CqInitAttr c;
  c.entries = 64;
  Cq* cq = nullptr;
  ASSERT_EQ(n.dev->create_cq(c, &cq), 0);
  backend::QpInitAttr q;
  q.type = QpType::kUd;
  q.pd = n.pd;
  q.send_cq = cq;
  q.recv_cq = cq;
  q.max_send_wr = 16;
  q.max_recv_wr = 16;
  Qp* qp = nullptr;
  q.flags = backend::kQpUnsolicitedWriteRecv;  // there are no writes on UD
  EXPECT_EQ(n.dev->create_qp(q, &qp), -EINVAL);
  q.flags = 0;
  q.sl = 1;
  EXPECT_EQ(n.dev->create_qp(q, &qp), -EINVAL);
  q.sl = 0;
  q.type = static_cast<QpType>(9);
  EXPECT_EQ(n.dev->create_qp(q, &qp), -EOPNOTSUPP);
  q.type = QpType::kUd;
  ASSERT_EQ(n.dev->create_qp(q, &qp), 0);
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = 0x11;
  // RESET -> INIT needs PKEY_INDEX, PORT and QKEY.
  EXPECT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrPort | backend::kQpAttrQkey), -EINVAL);
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                              backend::kQpAttrQkey),
            0);
  a.state = QpState::kRtr;
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState), 0);
  a.state = QpState::kRts;
  // RTR -> RTS needs SQ_PSN and, unlike SRD, refuses RNR_RETRY.
  EXPECT_EQ(qp->modify(a, backend::kQpAttrState), -EINVAL);
  EXPECT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrSqPsn | backend::kQpAttrRnrRetry), -EINVAL);
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrSqPsn), 0);
  EXPECT_EQ(qp->state(), QpState::kRts);
  uint8_t gid[16];
  uint32_t qpn = 0, qkey = 0;
  ASSERT_EQ(n.dev->local_address(qp, gid, &qpn, &qkey), 0);
  EXPECT_EQ(qkey, 0x11u);
  EXPECT_EQ(n.dev->destroy_qp(qp), 0);
  EXPECT_EQ(n.dev->destroy_cq(cq), 0);
}

// UD and SRD do not talk to each other: a datagram for an SRD QP vanishes, an SRD request for a
// UD QP is refused as a bad destination.
TEST(UdMixed, TypesDoNotMeet) {
  auto fabric = std::make_shared<InProcFabric>();
  Node ud, srd;
  ud.open(inline_options(fabric));
  srd.open(inline_options(fabric));
  ud.make_qp(0, 64, 256, 2, QpType::kUd);
  srd.make_qp();
  bring_up(ud.qp, 5, 7, false);
  bring_up(srd.qp, 5);
  Gid gs = srd.dev->gid(), gu = ud.dev->gid();
  Ah *to_srd = nullptr, *to_ud = nullptr;
  ASSERT_EQ(ud.dev->create_ah(ud.pd, gs.data(), &to_srd), 0);
  ASSERT_EQ(srd.dev->create_ah(srd.pd, gu.data(), &to_ud), 0);
  srd.rq.post(1, {{srd.at(0), 100, srd.mr->lkey()}});
  ud.rq.post(1, {{ud.at(0), 100, ud.mr->lkey()}});
  Wqe w = send_wqe(1, to_srd->ahn(), static_cast<uint16_t>(srd.qp->qpn()), 5);
  add_sge(&w, ud.addr(0), 8, ud.mr->lkey());
  ud.sq.post(w);
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({ud.dev.get(), srd.dev.get()}, &ud.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  for (int i = 0; i < 100; ++i) {
    ud.dev->step(64);
    srd.dev->step(64);
  }
  EXPECT_FALSE(srd.cqr.poll(&c));
  Wqe s = send_wqe(2, to_ud->ahn(), static_cast<uint16_t>(ud.qp->qpn()), 5);
  add_sge(&s, srd.addr(0), 8, srd.mr->lkey());
  srd.sq.post(s);
  ASSERT_TRUE(wait_cqe({ud.dev.get(), srd.dev.get()}, &srd.cqr, &c));
  EXPECT_EQ(q_type(c), EFA_IO_SEND_QUEUE);
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);
  EXPECT_FALSE(ud.cqr.poll(&c));
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
