// Two emulated devices in one process exchange every op through real WQE/CQE bytes; every
// completion status is produced by the input that causes it.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

// Two nodes with a QP each (SQ/RQ `depth`, CQ `cq_entries`), brought up, and A's AH to B.
void open_nodes(const DeviceOptions& oa, const DeviceOptions& ob, Node* a, Node* b, Ah** ah_ab,
                uint32_t depth = 64, uint32_t cq_entries = 256) {
  a->open(oa);
  b->open(ob);
  a->make_qp(0, depth, cq_entries);
  b->make_qp(0, depth, cq_entries);
  bring_up(a->qp, a->qkey);
  bring_up(b->qp, b->qkey);
  Gid gb = b->dev->gid();
  ASSERT_EQ(a->dev->create_ah(a->pd, gb.data(), ah_ab), 0);
}

class Pair : public ::testing::Test {
 protected:
  void open(const char* profile_a = "gen4", const char* profile_b = "gen4", uint32_t flags_b = 0) {
    fabric_ = std::make_shared<InProcFabric>();
    a_.open(inline_options(fabric_, profile_a));
    b_.open(inline_options(fabric_, profile_b));
    a_.make_qp();
    b_.make_qp(flags_b);
    bring_up(a_.qp, a_.qkey);
    bring_up(b_.qp, b_.qkey);
    Gid gb = b_.dev->gid(), ga = a_.dev->gid();
    ASSERT_EQ(a_.dev->create_ah(a_.pd, gb.data(), &ah_ab_), 0);
    ASSERT_EQ(b_.dev->create_ah(b_.pd, ga.data(), &ah_ba_), 0);
  }
  void SetUp() override { open(); }

  Wqe send_to_b(uint16_t req_id) {
    return send_wqe(req_id, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey);
  }
  Wqe rdma_to_b(uint8_t op, uint16_t req_id, size_t loff, size_t roff, uint32_t len) {
    return rdma_wqe(op, req_id, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey, a_.addr(loff),
                    a_.mr->lkey(), b_.addr(roff), b_.mr->rkey(), len);
  }
  efa_io_rx_cdesc_ex wait_a() {
    efa_io_rx_cdesc_ex c;
    EXPECT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &a_.cqr, &c));
    return c;
  }
  efa_io_rx_cdesc_ex wait_b() {
    efa_io_rx_cdesc_ex c;
    EXPECT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &b_.cqr, &c));
    return c;
  }
  // Posts on A and returns A's TX completion status.
  uint8_t tx_status(const Wqe& w) {
    a_.sq.post(w);
    efa_io_rx_cdesc_ex c = wait_a();
    EXPECT_EQ(q_type(c), EFA_IO_SEND_QUEUE);
    EXPECT_EQ(c.base.common.req_id, w.w.meta.req_id);
    return c.base.common.status;
  }

  std::shared_ptr<InProcFabric> fabric_;
  Node a_, b_;
  Ah* ah_ab_ = nullptr;
  Ah* ah_ba_ = nullptr;
};

TEST_F(Pair, SendRecvWithTwoSgesAndImmediate) {
  std::memcpy(a_.at(0), "hello ", 6);
  std::memcpy(a_.at(100), "world", 5);
  b_.rq.post(77, {{b_.at(1000), 4, b_.mr->lkey()}, {b_.at(2000), 64, b_.mr->lkey()}});
  Wqe w = send_to_b(5);
  add_sge(&w, a_.addr(0), 6, a_.mr->lkey());
  add_sge(&w, a_.addr(100), 5, a_.mr->lkey());
  set_imm(&w, 0xdeadbeef);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(q_type(rx), EFA_IO_RECV_QUEUE);
  EXPECT_EQ(op_type(rx), EFA_IO_SEND);
  EXPECT_EQ(rx.base.common.req_id, 77);
  EXPECT_EQ(rx.base.common.qp_num, b_.qp->qpn());
  EXPECT_EQ(rx.base.length, 11);
  EXPECT_EQ(rx.base.src_qp_num, a_.qp->qpn());
  EXPECT_EQ(rx.base.ah, ah_ba_->ahn());
  EXPECT_TRUE(efa_io_cdesc_common_get_has_imm(&rx.base.common));
  EXPECT_EQ(rx.base.imm, 0xdeadbeefu);
  EXPECT_EQ(std::memcmp(b_.at(1000), "hell", 4), 0);
  EXPECT_EQ(std::memcmp(b_.at(2000), "o world", 7), 0);
  efa_io_rx_cdesc_ex tx = wait_a();
  EXPECT_EQ(tx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(tx.base.common.req_id, 5);
  EXPECT_EQ(op_type(tx), EFA_IO_SEND);
  EXPECT_EQ(efa_io_cdesc_common_get_phase(&tx.base.common), 1);
}

TEST_F(Pair, ARequestBuiltWhereAFailedOneWasCarriesNothingOfIt) {
  // Requests are built in the slot they are kept in; a WQE that fails its key check gives the
  // slot back, and the next request there starts from nothing.
  std::memcpy(a_.at(0), "first!", 6);
  std::memcpy(a_.at(200), "second", 6);
  b_.rq.post(1, {{b_.at(1000), 64, b_.mr->lkey()}});
  b_.rq.post(2, {{b_.at(2000), 64, b_.mr->lkey()}});
  Wqe w = send_to_b(1);
  add_sge(&w, a_.addr(0), 6, a_.mr->lkey());
  set_imm(&w, 0x1234);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(wait_b().base.imm, 0x1234u);
  w = send_to_b(2);
  add_sge(&w, a_.addr(0), 4, a_.mr->lkey());
  add_sge(&w, a_.addr(0), 8, a_.mr->lkey() ^ 0x100);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  w = send_to_b(3);
  add_sge(&w, a_.addr(200), 6, a_.mr->lkey());
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_OK);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(rx.base.common.req_id, 2);
  EXPECT_EQ(rx.base.length, 6);
  EXPECT_FALSE(efa_io_cdesc_common_get_has_imm(&rx.base.common));
  EXPECT_EQ(std::memcmp(b_.at(2000), "second", 6), 0);
  EXPECT_EQ(a_.dev->stats().packets_tx, 2u);  // the failed WQE sent nothing
  EXPECT_EQ(a_.dev->stats().retransmits, 0u);
}

// A post's doorbell, rung through ring_sq, sends that queue's new requests during the call and
// does nothing else: a request waiting for this device is left to the next progress call.
TEST_F(Pair, RingingASendQueueSendsItsRequestsAndLeavesTheRest) {
  b_.rq.post(1, {{b_.at(1000), 64, b_.mr->lkey()}});
  a_.rq.post(1, {{a_.at(1000), 64, a_.mr->lkey()}});
  std::memcpy(b_.at(0), "from b", 6);
  Wqe wb = send_wqe(1, ah_ba_->ahn(), static_cast<uint16_t>(a_.qp->qpn()), a_.qkey);
  add_sge(&wb, b_.addr(0), 6, b_.mr->lkey());
  b_.sq.post(wb);
  ASSERT_GT(b_.dev->ring_sq(b_.qp, 16), 0);
  EXPECT_EQ(b_.dev->stats().packets_tx, 1u);
  std::memcpy(a_.at(0), "from a", 6);
  Wqe wa = send_to_b(1);
  add_sge(&wa, a_.addr(0), 6, a_.mr->lkey());
  a_.sq.post(wa);
  ASSERT_GT(a_.dev->ring_sq(a_.qp, 16), 0);
  EXPECT_EQ(a_.dev->stats().packets_tx, 1u);  // sent during the call
  EXPECT_EQ(a_.dev->stats().packets_rx, 0u);  // B's request still waits
  efa_io_rx_cdesc_ex c;
  EXPECT_FALSE(a_.cqr.poll(&c));
  // Ringing again with nothing new does no work.
  EXPECT_EQ(a_.dev->ring_sq(a_.qp, 16), 0);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.length, 6);
  EXPECT_EQ(std::memcmp(b_.at(1000), "from a", 6), 0);
  // A's next progress call takes B's request in and completes its own send.
  bool got_rx = false, got_tx = false;
  for (int i = 0; i < 2; ++i) {
    c = wait_a();
    (q_type(c) == EFA_IO_SEND_QUEUE ? got_tx : got_rx) = true;
  }
  EXPECT_TRUE(got_rx && got_tx);
  EXPECT_EQ(std::memcmp(a_.at(1000), "from b", 6), 0);
}

TEST_F(Pair, InlineSendAndUnknownAhCarriesSourceGid) {
  ASSERT_EQ(b_.dev->destroy_ah(ah_ba_), 0);
  ah_ba_ = nullptr;
  b_.rq.post(1, {{b_.at(0), 100, b_.mr->lkey()}});
  Wqe w = send_to_b(9);
  set_inline(&w, "inline-bytes", 12);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(rx.base.length, 12);
  EXPECT_EQ(rx.base.ah, EFA_IO_AH_UNKNOWN);
  Gid ga = a_.dev->gid();
  EXPECT_EQ(std::memcmp(rx.u.src_addr, ga.data(), 16), 0);
  EXPECT_EQ(std::memcmp(b_.at(0), "inline-bytes", 12), 0);
  EXPECT_EQ(wait_a().base.common.status, EFA_IO_COMP_STATUS_OK);
}

// An arriving SEND names its source by the receiver's lowest-numbered AH for the sender's GID
// in the QP's PD, whatever AHs come and go, and by none once the last one goes.
TEST_F(Pair, ReceiveNamesTheLowestNumberedAhOfTheSender) {
  auto received_ah = [this](uint16_t req_id) {
    b_.rq.post(req_id, {{b_.at(0), 64, b_.mr->lkey()}});
    Wqe w = send_to_b(req_id);
    set_inline(&w, "x", 1);
    a_.sq.post(w);
    efa_io_rx_cdesc_ex rx = wait_b();
    EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
    EXPECT_EQ(wait_a().base.common.status, EFA_IO_COMP_STATUS_OK);
    return rx.base.ah;
  };
  // Many peers of B's: the sender's AH is found among them.
  std::vector<Ah*> others;
  for (int i = 0; i < 40; ++i) {
    Gid g{};
    g[0] = 0xfd;
    g[15] = static_cast<uint8_t>(i);
    Ah* ah = nullptr;
    ASSERT_EQ(b_.dev->create_ah(b_.pd, g.data(), &ah), 0);
    others.push_back(ah);
  }
  EXPECT_EQ(received_ah(1), ah_ba_->ahn());
  // A second AH for the same GID has a higher number: the first still names the sender.
  const Gid ga = a_.dev->gid();
  Ah* second = nullptr;
  ASSERT_EQ(b_.dev->create_ah(b_.pd, ga.data(), &second), 0);
  ASSERT_GT(second->ahn(), ah_ba_->ahn());
  EXPECT_EQ(received_ah(2), ah_ba_->ahn());
  // The first goes: the second names it; a third takes the freed (lower) number and names it.
  const uint16_t freed = ah_ba_->ahn();
  ASSERT_EQ(b_.dev->destroy_ah(ah_ba_), 0);
  ah_ba_ = nullptr;
  EXPECT_EQ(received_ah(3), second->ahn());
  Ah* third = nullptr;
  ASSERT_EQ(b_.dev->create_ah(b_.pd, ga.data(), &third), 0);
  ASSERT_EQ(third->ahn(), freed);
  EXPECT_EQ(received_ah(4), third->ahn());
  // None left: unknown.
  ASSERT_EQ(b_.dev->destroy_ah(third), 0);
  ASSERT_EQ(b_.dev->destroy_ah(second), 0);
  EXPECT_EQ(received_ah(5), EFA_IO_AH_UNKNOWN);
  for (Ah* ah : others) EXPECT_EQ(b_.dev->destroy_ah(ah), 0);
}

TEST_F(Pair, RdmaReadAndWrite) {
  for (int i = 0; i < 4096; ++i) b_.buf[8192 + i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_READ, 3, 0, 8192, 4096)), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(8192), 4096), 0);
  for (int i = 0; i < 1000; ++i) a_.buf[50000 + i] = static_cast<uint8_t>(i ^ 0x5a);
  Wqe w = rdma_to_b(EFA_IO_RDMA_WRITE, 4, 50000, 300000, 1000);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex tx = wait_a();
  EXPECT_EQ(tx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(op_type(tx), EFA_IO_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(a_.at(50000), b_.at(300000), 1000), 0);
  efa_io_rx_cdesc_ex none;
  EXPECT_FALSE(b_.cqr.poll(&none));  // a write without immediate is silent at the target
}

TEST_F(Pair, WriteWithImmediateConsumesReceive) {
  b_.rq.post(42, {{b_.at(0), 16, b_.mr->lkey()}});
  Wqe w = rdma_to_b(EFA_IO_RDMA_WRITE, 6, 0, 70000, 70000);  // > 64 KiB: length_hi used
  set_imm(&w, 0x01020304);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(op_type(rx), EFA_IO_RDMA_WRITE);
  EXPECT_EQ(rx.base.common.req_id, 42);
  EXPECT_FALSE(efa_io_cdesc_common_get_unsolicited(&rx.base.common));
  EXPECT_EQ(efa_io_rx_cdesc_ex_byte_len(&rx), 70000u);
  EXPECT_EQ(rx.base.imm, 0x01020304u);
  EXPECT_EQ(wait_a().base.common.status, EFA_IO_COMP_STATUS_OK);
}

TEST_F(Pair, InlineRdmaWriteWith128ByteWqe) {
  ASSERT_EQ(a_.sq.sq.entry_size, 64u);
  backend::QpInitAttr q;
  q.pd = a_.pd;
  q.send_cq = a_.cq;
  q.recv_cq = a_.cq;
  q.max_send_wr = 8;
  q.max_recv_wr = 8;
  q.flags = backend::kQpInlineWrite;
  Qp* qp = nullptr;
  ASSERT_EQ(a_.dev->create_qp(q, &qp), 0);
  bring_up(qp, 77);
  SqWriter sq;
  RqWriter rq;
  ASSERT_EQ(qp->query_wqs(&sq.sq, &rq.rq), 0);
  EXPECT_EQ(sq.sq.entry_size, 128u);
  EXPECT_EQ(sq.sq.max_batch, 8u - 1);  // (16 * 64) / 128 = 8, capped at depth - 1
  char data[80];
  for (int i = 0; i < 80; ++i) data[i] = static_cast<char>('A' + i % 26);
  sq.post(inline_write_wqe(11, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey, data, 80,
                           b_.addr(4000), b_.mr->rkey()));
  efa_io_rx_cdesc_ex tx = wait_a();
  EXPECT_EQ(tx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(tx.base.common.qp_num, qp->qpn());
  EXPECT_EQ(std::memcmp(b_.at(4000), data, 80), 0);
  // 81 bytes do not fit.
  char big[96] = {};
  Wqe w = inline_write_wqe(12, ah_ab_->ahn(), static_cast<uint16_t>(b_.qp->qpn()), b_.qkey, big, 80,
                           b_.addr(0), b_.mr->rkey());
  w.w.meta.length = 81;
  w.w.data.rdma_req_128.remote_mem.length = 81;
  sq.post(w);
  EXPECT_EQ(wait_a().base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  ASSERT_EQ(a_.dev->destroy_qp(qp), 0);
}

TEST_F(Pair, LocalErrors) {
  Wqe w = send_to_b(1);
  add_sge(&w, a_.addr(0), 8, a_.mr->lkey() ^ 0x100);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  w = send_to_b(2);
  add_sge(&w, a_.addr(a_.buf.size() - 4), 8, a_.mr->lkey());  // past the MR's end
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  w = send_to_b(3);
  add_sge(&w, a_.addr(0), 9000, a_.mr->lkey());  // > MTU
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  w = send_to_b(4);
  set_inline(&w, "x", 1);
  w.w.meta.length = 33;  // 64-byte WQE holds 32 inline bytes
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  w = send_to_b(5);
  w.w.meta.ah = 999;
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH);
  w = send_to_b(6);
  efa_io_tx_meta_desc_set_op_type(&w.w.meta, 5);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);
  w = send_to_b(7);
  efa_io_tx_meta_desc_set_first(&w.w.meta, 0);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  w = rdma_to_b(EFA_IO_RDMA_WRITE, 8, 0, 0, 16);
  w.w.data.rdma_req_128.local_mem[0].length = 8;  // local and remote lengths disagree
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  w = rdma_to_b(EFA_IO_RDMA_READ, 9, 0, 0, 16);
  set_imm(&w, 1);  // a read carries no immediate
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);
}

TEST_F(Pair, RemoteErrors) {
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_WRITE, 1, 0, b_.buf.size() - 8, 16)),
            EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  Wqe w = rdma_to_b(EFA_IO_RDMA_READ, 2, 0, 0, 16);
  w.w.data.rdma_req_128.remote_mem.rkey ^= 0x10000;  // another generation of the key
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  w = send_to_b(3);
  w.w.meta.dest_qp_num = 999;
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);
  w = send_to_b(4);
  w.w.meta.qkey = b_.qkey + 1;
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);
  b_.rq.post(5, {{b_.at(0), 4, b_.mr->lkey()}});
  w = send_to_b(5);
  set_inline(&w, "too long", 8);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH);
  efa_io_rx_cdesc_ex rx = wait_b();
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  EXPECT_EQ(rx.base.common.req_id, 5);
  // A receive buffer with a bad key: the responder's status is unexpected for the requester.
  b_.rq.post(6, {{b_.at(0), 64, b_.mr->lkey() + 1}});
  w = send_to_b(6);
  set_inline(&w, "x", 1);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS);
  EXPECT_EQ(wait_b().base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  // RDMA needs an AH for the requester at the responder.
  ASSERT_EQ(b_.dev->destroy_ah(ah_ba_), 0);
  ah_ba_ = nullptr;
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_READ, 7, 0, 0, 16)),
            EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER);
  b_.qp->modify(QpAttr{QpState::kErr}, backend::kQpAttrState);
  w = send_to_b(8);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);
}

TEST_F(Pair, RnrRetryCountAndInfinite) {
  // rnr_retry 0: the first RNR completes the WQE.
  QpAttr a;
  a.state = QpState::kRts;
  Wqe w = send_to_b(1);
  set_inline(&w, "x", 1);
  ASSERT_EQ(a_.dev->destroy_qp(a_.qp), 0);
  backend::QpInitAttr q;
  q.pd = a_.pd;
  q.send_cq = a_.cq;
  q.recv_cq = a_.cq;
  q.max_send_wr = 8;
  q.max_recv_wr = 8;
  ASSERT_EQ(a_.dev->create_qp(q, &a_.qp), 0);
  ASSERT_EQ(a_.qp->query_wqs(&a_.sq.sq, &a_.rq.rq), 0);
  a_.sq.pc = 0;
  bring_up(a_.qp, a_.qkey, 0);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
  EXPECT_GE(b_.dev->stats().rnr_naks, 1u);
  // rnr_retry 7 (forever): the send waits until a receive is posted.
  ASSERT_EQ(a_.dev->destroy_qp(a_.qp), 0);
  ASSERT_EQ(a_.dev->create_qp(q, &a_.qp), 0);
  ASSERT_EQ(a_.qp->query_wqs(&a_.sq.sq, &a_.rq.rq), 0);
  a_.sq.pc = 0;
  bring_up(a_.qp, a_.qkey, 7);
  a_.sq.post(w);
  efa_io_rx_cdesc_ex c;
  for (int i = 0; i < 50; ++i) {
    a_.dev->step(64);
    b_.dev->step(64);
    usleep(20);
  }
  EXPECT_FALSE(a_.cqr.poll(&c));
  EXPECT_GE(a_.dev->stats().rnr_retries, 1u);
  b_.rq.post(3, {{b_.at(0), 8, b_.mr->lkey()}});
  c = wait_a();
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(wait_b().base.common.req_id, 3);
}

// An op's first RNR retries come after 1/8, 1/4 and 1/2 of rnr_delay_us, later ones after all of
// it: counted in passes of a step clock (1 us each), so the schedule is exact.
TEST(RnrRetry, FirstRetriesComeSooner) {
  auto fabric = std::make_shared<InProcFabric>();
  DeviceOptions o = inline_options(fabric);
  o.step_clock_ns = 1000;
  o.rnr_delay_us = 80;
  o.reorder = false;
  Node a, b;
  a.open(o);
  b.open(o);
  a.make_qp();
  b.make_qp();
  bring_up(a.qp, a.qkey, 7);
  bring_up(b.qp, b.qkey);
  Ah* ah = nullptr;
  Gid gb = b.dev->gid();
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ah), 0);
  Wqe w = send_wqe(1, ah->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey);
  set_inline(&w, "x", 1);
  a.sq.post(w);
  // The pass (of A) in which each retry went out.
  std::vector<uint64_t> at;
  for (int pass = 0; pass < 400 && at.size() < 6; ++pass) {
    a.dev->step(64);
    b.dev->step(64);
    const uint64_t retries = a.dev->stats().rnr_retries;
    if (retries > at.size()) at.push_back(a.dev->stats().steps);
    ASSERT_LE(retries, at.size());
  }
  ASSERT_EQ(at.size(), 6u);
  // Each wait starts in the pass that reads the NAK, one after the (re)transmission.
  const uint64_t expect[] = {20, 40, 80, 80, 80};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(at[i + 1] - at[i], expect[i] + 1) << "retry " << i + 2;
  EXPECT_EQ(b.dev->stats().rnr_naks, 7u);  // the first transmission and six retries
  // A receive ends the wait at the next retry.
  b.rq.post(9, {{b.at(0), 8, b.mr->lkey()}});
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &c));
  EXPECT_EQ(c.base.common.req_id, 9);
}

// A caller that drove the device parks its engine thread; arming a CQ (the caller is about to
// block on its event) hands the engine back at once, though the park would last far longer.
TEST(EngineThread, ArmingACqEndsTheCallersPark) {
  auto fabric = std::make_shared<InProcFabric>();
  DeviceOptions o = inline_options(fabric);
  o.engine_thread = true;
  o.park_us = 60u * 1000 * 1000;
  o.idle_sleep_max_us = 200;
  Node a, b;
  Ah* ah = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_nodes(o, o, &a, &b, &ah));
  b.rq.post(4, {{b.at(0), 8, b.mr->lkey()}});
  a.dev->progress(64);
  b.dev->progress(64);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both engine threads park
  Wqe w = send_wqe(1, ah->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey);
  set_inline(&w, "parked", 6);
  a.sq.post(w);
  ASSERT_EQ(a.cq->arm(), 0);
  ASSERT_EQ(b.cq->arm(), 0);
  // Nobody calls progress from here on.
  efa_io_rx_cdesc_ex c;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool got = false;
  while (!(got = b.cqr.poll(&c)) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(c.base.common.req_id, 4);
  EXPECT_EQ(std::memcmp(b.at(0), "parked", 6), 0);
  until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(got = a.cqr.poll(&c)) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
}

// A device idle for a second sleeps up to 4 x idle_sleep_max_us: over 2.5 s at 2 ms it sleeps
// about 500 + 1,500 / 8 times, where a 2 ms cap alone would make it 1,250 (a slow scheduler only
// lowers both counts).
TEST(EngineThread, ALongIdleDeviceSleepsLonger) {
  DeviceOptions o = inline_options(std::make_shared<InProcFabric>());
  o.engine_thread = true;
  o.idle_sleep_max_us = 2000;
  Node a;
  a.open(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const uint64_t sleeps = a.dev->stats().idle_sleeps;
  EXPECT_GT(sleeps, 0u);
  EXPECT_LT(sleeps, 1000u);
}

TEST_F(Pair, UnreachableAndUnresponsivePeers) {
  uint8_t nowhere[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9};
  Ah* ah = nullptr;
  ASSERT_EQ(a_.dev->create_ah(a_.pd, nowhere, &ah), 0);
  Wqe w = send_wqe(1, ah->ahn(), 1, 1);
  EXPECT_EQ(tx_status(w), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  // B answered before (a completed op), then disappears.
  b_.rq.post(1, {{b_.at(0), 8, b_.mr->lkey()}});
  Wqe s = send_to_b(2);
  set_inline(&s, "x", 1);
  EXPECT_EQ(tx_status(s), EFA_IO_COMP_STATUS_OK);
  Wqe gone = send_to_b(3);
  b_.dev.reset();
  b_.qp = nullptr;
  EXPECT_EQ(tx_status(gone), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
}

TEST(Profiles, FeatureMismatchAndUnsupportedOps) {
  auto fabric = std::make_shared<InProcFabric>();
  Node a, b, old;
  a.open(inline_options(fabric, "gen4"));
  b.open(inline_options(fabric, "gen2"));  // reads, no writes
  old.open(inline_options(fabric, "gen1"));
  a.make_qp();
  b.make_qp();
  old.make_qp();
  bring_up(a.qp, 1);
  bring_up(b.qp, 2);
  bring_up(old.qp, 3, 0, false);
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  Ah *ab = nullptr, *ba = nullptr, *oldb = nullptr;
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ab), 0);
  ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &ba), 0);
  ASSERT_EQ(old.dev->create_ah(old.pd, gb.data(), &oldb), 0);
  auto run = [&](Node& n, const Wqe& w) {
    n.sq.post(w);
    efa_io_rx_cdesc_ex c;
    EXPECT_TRUE(wait_cqe({a.dev.get(), b.dev.get(), old.dev.get()}, &n.cqr, &c));
    return c.base.common.status;
  };
  uint16_t bq = static_cast<uint16_t>(b.qp->qpn());
  EXPECT_EQ(run(a, rdma_wqe(EFA_IO_RDMA_WRITE, 1, ab->ahn(), bq, 2, a.addr(0), a.mr->lkey(), b.addr(0),
                            b.mr->rkey(), 8)),
            EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH);
  EXPECT_EQ(run(a, rdma_wqe(EFA_IO_RDMA_READ, 2, ab->ahn(), bq, 2, a.addr(0), a.mr->lkey(), b.addr(0),
                            b.mr->rkey(), 8)),
            EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(run(old, rdma_wqe(EFA_IO_RDMA_READ, 3, oldb->ahn(), bq, 2, old.addr(0), old.mr->lkey(),
                              b.addr(0), b.mr->rkey(), 8)),
            EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP);
  // gen1 has no RNR retry cap; gen3 has no 128-byte WQE.
  QpAttr attr;
  attr.state = QpState::kRts;
  EXPECT_EQ(old.qp->modify(attr, backend::kQpAttrRnrRetry), -EINVAL);
  backend::DeviceAttr da;
  ASSERT_EQ(old.dev->query(&da), 0);
  EXPECT_EQ(da.device_caps & backend::kCapRdmaRead, 0u);
  EXPECT_EQ(da.inline_buf_size_ex, 0);
  backend::QpInitAttr q;
  q.pd = old.pd;
  q.send_cq = old.cq;
  q.recv_cq = old.cq;
  q.max_send_wr = 8;
  q.flags = backend::kQpInlineWrite;
  Qp* qp = nullptr;
  EXPECT_EQ(old.dev->create_qp(q, &qp), -EOPNOTSUPP);
  q.flags = backend::kQpUnsolicitedWriteRecv;
  EXPECT_EQ(old.dev->create_qp(q, &qp), -EOPNOTSUPP);
}

TEST(Unsolicited, WriteWithImmediateWithoutReceive) {
  auto fabric = std::make_shared<InProcFabric>();
  Node a, b;
  a.open(inline_options(fabric));
  b.open(inline_options(fabric));
  a.make_qp();
  b.make_qp(backend::kQpUnsolicitedWriteRecv);
  bring_up(a.qp, 1);
  bring_up(b.qp, 2);
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  Ah *ab = nullptr, *ba = nullptr;
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ab), 0);
  ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &ba), 0);
  Wqe w = rdma_wqe(EFA_IO_RDMA_WRITE, 1, ab->ahn(), static_cast<uint16_t>(b.qp->qpn()), 2, a.addr(0),
                   a.mr->lkey(), b.addr(64), b.mr->rkey(), 32);
  set_imm(&w, 99);
  a.sq.post(w);
  efa_io_rx_cdesc_ex rx;
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &b.cqr, &rx));
  EXPECT_EQ(rx.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_TRUE(efa_io_cdesc_common_get_unsolicited(&rx.base.common));
  EXPECT_EQ(rx.base.common.req_id, 0);
  EXPECT_EQ(rx.base.imm, 99u);
  EXPECT_EQ(efa_io_rx_cdesc_ex_byte_len(&rx), 32u);
}

TEST_F(Pair, FlushOnErrorAndDestroy) {
  b_.rq.post(10, {{b_.at(0), 8, b_.mr->lkey()}});
  b_.rq.post(11, {{b_.at(8), 8, b_.mr->lkey()}});
  b_.dev->step(64);
  ASSERT_EQ(b_.qp->modify(QpAttr{QpState::kErr}, backend::kQpAttrState), 0);
  std::set<uint16_t> flushed;
  efa_io_rx_cdesc_ex c;
  while (b_.cqr.poll(&c)) {
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_FLUSHED);
    flushed.insert(c.base.common.req_id);
  }
  EXPECT_EQ(flushed, (std::set<uint16_t>{10, 11}));
  // A WQE posted to a QP in error completes as flushed.
  b_.sq.post(send_wqe(12, ah_ba_->ahn(), 1, 1));
  c = wait_b();
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_FLUSHED);
  EXPECT_EQ(c.base.common.req_id, 12);
  // Destroy flushes operations in flight: A sends to a QP that will RNR forever.
  ASSERT_EQ(b_.qp->modify(QpAttr{QpState::kReset}, backend::kQpAttrState), 0);
  b_.sq.pc = 0;
  b_.rq.pc = 0;
  bring_up(b_.qp, b_.qkey);
  Wqe w = send_to_b(13);
  a_.sq.post(w);
  for (int i = 0; i < 10; ++i) {
    a_.dev->step(64);
    b_.dev->step(64);
  }
  ASSERT_EQ(a_.dev->destroy_qp(a_.qp), 0);
  a_.qp = nullptr;
  ASSERT_TRUE(a_.cqr.poll(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_FLUSHED);
  EXPECT_EQ(c.base.common.req_id, 13);
}

// Counts the answers that cross it: alone (kResponse) or together (kAnswers).
class AnswerCountingFabric : public InProcFabric {
 public:
  int send(const Gid& dst, Packet&& pkt, uint64_t now_ns) override {
    if (pkt.type == PacketType::kResponse) ++single;
    if (pkt.type == PacketType::kAnswers) {
      ++packets;
      coalesced += pkt.payload.size() / kAnswerBytes;
    }
    return InProcFabric::send(dst, std::move(pkt), now_ns);
  }
  std::atomic<int> single{0}, packets{0}, coalesced{0};
};

class PassThrough : public FaultHooks {
 public:
  FaultDecision at(const FaultContext&) override { return FaultDecision(); }
};

// 150 SENDs served in one pass, 100 finding a receive and 50 none (`hooks` on the responder):
// reports the answers counted right after that pass, then checks that every send completes OK
// (the 50 RNR-answered ones once receives came) and every receive lands once.
void serve_150_sends(const std::shared_ptr<AnswerCountingFabric>& fabric, FaultHooks* hooks,
                     int* single_after_pass, int* packets_after_pass, int* coalesced_after_pass) {
  Node a, b;
  DeviceOptions ob = inline_options(fabric);
  ob.faults = hooks;
  Ah* ah = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_nodes(inline_options(fabric), ob, &a, &b, &ah, 256, 1024));
  for (uint16_t i = 0; i < 100; ++i) b.rq.post(i, {{b.at(i * 64u), 64, b.mr->lkey()}});
  for (uint32_t i = 0; i < 150; ++i) {
    Wqe w = send_wqe(static_cast<uint16_t>(i), ah->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey);
    set_inline(&w, &i, sizeof(i));
    a.sq.write(w, a.sq.pc++);
  }
  a.sq.ring();
  a.dev->step(1024);  // every request leaves in one pass
  b.dev->step(1024);  // and is served in one
  *single_after_pass = fabric->single.load();
  *packets_after_pass = fabric->packets.load();
  *coalesced_after_pass = fabric->coalesced.load();
  for (uint16_t i = 100; i < 150; ++i) b.rq.post(i, {{b.at(i * 64u), 64, b.mr->lkey()}});
  std::set<uint16_t> tx, rx;
  efa_io_rx_cdesc_ex c;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((tx.size() < 150 || rx.size() < 150) && std::chrono::steady_clock::now() < deadline) {
    a.dev->step(1024);
    b.dev->step(1024);
    while (a.cqr.poll(&c)) {
      EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
      EXPECT_TRUE(tx.insert(c.base.common.req_id).second);
    }
    while (b.cqr.poll(&c)) {
      EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
      EXPECT_TRUE(rx.insert(c.base.common.req_id).second);
    }
  }
  EXPECT_EQ(tx.size(), 150u);
  EXPECT_EQ(rx.size(), 150u);
  EXPECT_GE(a.dev->stats().rnr_retries, 50u);
  // Counted as the packets they stand for.
  EXPECT_EQ(a.dev->stats().packets_rx, b.dev->stats().packets_tx);
}

// The answers a pass makes to one requester travel together, as a NIC acks what it served: of
// 150, the first at once and the others in 3 packets (64 at most each), RNR naks among them; a
// lone one as a plain response. A fault plan sees every answer alone.
TEST(Answers, APassAnswersARequesterInFewPackets) {
  auto fabric = std::make_shared<AnswerCountingFabric>();
  int single = 0, packets = 0, coalesced = 0;
  ASSERT_NO_FATAL_FAILURE(serve_150_sends(fabric, nullptr, &single, &packets, &coalesced));
  EXPECT_EQ(single, 1);
  EXPECT_EQ(packets, 3);
  EXPECT_EQ(coalesced, 149);
  // Two answers in a pass: the first at once, the second alone at the pass's end, each as a
  // plain response.
  auto lone = std::make_shared<AnswerCountingFabric>();
  Node a, b;
  Ah* ah = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_nodes(inline_options(lone), inline_options(lone), &a, &b, &ah));
  for (uint16_t i = 0; i < 2; ++i) {
    b.rq.post(i, {{b.at(i * 64u), 64, b.mr->lkey()}});
    Wqe w = send_wqe(static_cast<uint16_t>(5 + i), ah->ahn(), static_cast<uint16_t>(b.qp->qpn()), b.qkey);
    set_inline(&w, "hi", 2);
    a.sq.write(w, a.sq.pc++);
  }
  a.sq.ring();
  a.dev->step(64);
  b.dev->step(64);
  EXPECT_EQ(lone->single.load(), 2);
  EXPECT_EQ(lone->packets.load(), 0);
  for (uint16_t i = 0; i < 2; ++i) {
    efa_io_rx_cdesc_ex c;
    ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
    EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
    EXPECT_EQ(c.base.common.req_id, 5 + i);
  }
  auto faulted = std::make_shared<AnswerCountingFabric>();
  PassThrough hooks;
  ASSERT_NO_FATAL_FAILURE(serve_150_sends(faulted, &hooks, &single, &packets, &coalesced));
  EXPECT_EQ(single, 150);
  EXPECT_EQ(packets, 0);
}

class ResponseFault : public FaultHooks {
 public:
  FaultDecision at(const FaultContext& ctx) override {
    FaultDecision d;
    if (ctx.point == FaultPoint::kPacketOut && ctx.response && status != 0) {
      d.action = FaultAction::kFail;
      d.status = status;
    }
    if (ctx.point == FaultPoint::kPacketOut && !ctx.response && drop_requests > 0) {
      --drop_requests;
      d.action = FaultAction::kDrop;
    }
    return d;
  }
  uint8_t status = 0;
  int drop_requests = 0;
};

TEST(Faults, AbortBadStatusAndRetransmit) {
  auto fabric = std::make_shared<InProcFabric>();
  ResponseFault fault_b, fault_a;
  Node a, b;
  DeviceOptions oa = inline_options(fabric), ob = inline_options(fabric);
  oa.faults = &fault_a;
  ob.faults = &fault_b;
  oa.response_timeout_us = 200;
  a.open(oa);
  b.open(ob);
  a.make_qp();
  b.make_qp();
  bring_up(a.qp, 1);
  bring_up(b.qp, 2);
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  Ah *ab = nullptr, *ba = nullptr;
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ab), 0);
  ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &ba), 0);
  auto write = [&](uint16_t id) {
    a.sq.post(rdma_wqe(EFA_IO_RDMA_WRITE, id, ab->ahn(), static_cast<uint16_t>(b.qp->qpn()), 2, a.addr(0),
                       a.mr->lkey(), b.addr(0), b.mr->rkey(), 8));
    efa_io_rx_cdesc_ex c;
    EXPECT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
    return c.base.common.status;
  };
  fault_b.status = EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT;
  EXPECT_EQ(write(1), EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT);
  fault_b.status = 200;  // not a status a responder sends
  EXPECT_EQ(write(2), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS);
  fault_b.status = 0;
  fault_a.drop_requests = 2;  // lost twice, delivered on the third try
  EXPECT_EQ(write(3), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a.dev->stats().retransmits, 2u);
  fault_a.drop_requests = 100;  // lost for good: the peer answered before, so UNRESP
  EXPECT_EQ(write(4), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
}

// A scripted hook: the next decision at `point` is `action` (with `status`), once.
class OneShot : public FaultHooks {
 public:
  FaultDecision at(const FaultContext& ctx) override {
    FaultDecision d;
    if (armed && ctx.point == point && (queue == 0 || ctx.queue == queue)) {
      armed = false;
      d.action = action;
      d.status = status;
      hits++;
    }
    return d;
  }
  bool armed = false;
  FaultPoint point = FaultPoint::kWqeFetch;
  FaultAction action = FaultAction::kPass;
  uint8_t status = 0;
  uint8_t queue = 0;  // 0: any
  int hits = 0;
};

TEST(Faults, EveryHookPoint) {
  auto fabric = std::make_shared<InProcFabric>();
  OneShot hook;
  Node a, b;
  DeviceOptions oa = inline_options(fabric);
  oa.faults = &hook;
  oa.response_timeout_us = 200;
  a.open(oa);
  b.open(inline_options(fabric));
  a.make_qp();
  b.make_qp();
  bring_up(a.qp, 1);
  bring_up(b.qp, 2);
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  Ah *ab = nullptr, *ba = nullptr;
  ASSERT_EQ(a.dev->create_ah(a.pd, gb.data(), &ab), 0);
  ASSERT_EQ(b.dev->create_ah(b.pd, ga.data(), &ba), 0);
  auto wqe = [&](uint16_t id) {
    return rdma_wqe(EFA_IO_RDMA_WRITE, id, ab->ahn(), static_cast<uint16_t>(b.qp->qpn()), 2, a.addr(0),
                    a.mr->lkey(), b.addr(0), b.mr->rkey(), 8);
  };
  auto arm = [&](FaultPoint p, FaultAction act, uint8_t st = 0) {
    hook.armed = true;
    hook.point = p;
    hook.action = act;
    hook.status = st;
  };
  efa_io_rx_cdesc_ex c;
  // WQE fetch: the WQE completes with the injected status.
  arm(FaultPoint::kWqeFetch, FaultAction::kFail, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  a.sq.post(wqe(1));
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR);
  // Doorbell read: a stalled doorbell is seen on a later pass.
  arm(FaultPoint::kDoorbellRead, FaultAction::kDrop);
  hook.queue = EFA_IO_SEND_QUEUE;
  a.sq.post(wqe(2));
  a.dev->step(64);
  EXPECT_EQ(a.dev->stats().wqes, 1u);  // not fetched yet
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  hook.queue = 0;
  // Packet in: a lost response is recovered by retransmission, executed once.
  arm(FaultPoint::kPacketIn, FaultAction::kDrop);
  a.sq.post(wqe(3));
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(a.dev->stats().retransmits, 1u);
  // Completion write: a rewritten status, then a lost CQE.
  arm(FaultPoint::kCompletionWrite, FaultAction::kFail, EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT);
  a.sq.post(wqe(4));
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT);
  arm(FaultPoint::kCompletionWrite, FaultAction::kDrop);
  a.sq.post(wqe(5));
  a.sq.post(wqe(6));
  ASSERT_TRUE(wait_cqe({a.dev.get(), b.dev.get()}, &a.cqr, &c));
  EXPECT_EQ(c.base.common.req_id, 6);
  EXPECT_EQ(hook.hits, 5);
  EXPECT_EQ(a.dev->stats().faults_injected, 5u);
}

TEST_F(Pair, CountersAndCqEvent) {
  uint64_t value = 0, error = 0, remote = 0;
  backend::CompCntr *c = nullptr, *rc = nullptr;
  ASSERT_EQ(a_.dev->create_comp_cntr({&value, &error}, &c), 0);
  ASSERT_EQ(b_.dev->create_comp_cntr({&remote, nullptr}, &rc), 0);
  ASSERT_EQ(a_.qp->attach_comp_cntr(c, backend::kCntrRdmaWrite), 0);
  EXPECT_EQ(a_.qp->attach_comp_cntr(c, backend::kCntrRdmaWrite), -EEXIST);
  ASSERT_EQ(b_.qp->attach_comp_cntr(rc, backend::kCntrRemoteRdmaWrite), 0);
  EXPECT_EQ(a_.dev->destroy_comp_cntr(c), -EBUSY);
  ASSERT_EQ(a_.cq->arm(), 0);
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_WRITE, 1, 0, 0, 64)), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_WRITE, 2, 0, b_.buf.size(), 64)),
            EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  EXPECT_EQ(__atomic_load_n(&value, __ATOMIC_ACQUIRE), 1u);
  EXPECT_EQ(__atomic_load_n(&error, __ATOMIC_ACQUIRE), 1u);
  EXPECT_EQ(__atomic_load_n(&remote, __ATOMIC_ACQUIRE), 1u);
  uint64_t events = 0;
  ASSERT_EQ(read(a_.cq->event_fd(), &events, sizeof(events)), 8);
  EXPECT_EQ(events, 1u);  // armed once: one event for two CQEs
  ASSERT_EQ(a_.qp->detach_comp_cntr(c), 0);
  EXPECT_EQ(a_.dev->destroy_comp_cntr(c), 0);
}

TEST_F(Pair, ArmThroughTheCqDoorbell) {
  uint64_t events = 0;
  EXPECT_EQ(read(a_.cq->event_fd(), &events, sizeof(events)), -1);  // nothing yet
  ASSERT_EQ(efa_cq_arm(&a_.cqr.cq), 0);  // consumer index + arm bit, as device code writes it
  a_.dev->step(64);
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_WRITE, 1, 0, 0, 8)), EFA_IO_COMP_STATUS_OK);
  ASSERT_EQ(read(a_.cq->event_fd(), &events, sizeof(events)), 8);
  EXPECT_EQ(events, 1u);
  // Not re-armed: the next CQE raises no event.
  EXPECT_EQ(tx_status(rdma_to_b(EFA_IO_RDMA_WRITE, 2, 0, 0, 8)), EFA_IO_COMP_STATUS_OK);
  EXPECT_EQ(read(a_.cq->event_fd(), &events, sizeof(events)), -1);
}

TEST_F(Pair, ReorderingDeliversEverythingOutOfOrder) {
  constexpr int kN = 32;
  for (int i = 0; i < kN; ++i) b_.rq.post(static_cast<uint16_t>(i), {{b_.at(i * 16), 16, b_.mr->lkey()}});
  for (int i = 0; i < kN; ++i) {
    Wqe w = send_to_b(static_cast<uint16_t>(i));
    set_inline(&w, &i, sizeof(i));
    a_.sq.write(w, a_.sq.pc++);
  }
  // One doorbell per max_batch WQEs, as rdma-core does.
  for (uint32_t pc = 0; pc < kN; pc += a_.sq.sq.max_batch) {
    __atomic_store_n(a_.sq.sq.doorbell, std::min<uint32_t>(pc + a_.sq.sq.max_batch, kN), __ATOMIC_RELEASE);
    a_.dev->step(1000);
  }
  std::vector<int> order;
  efa_io_rx_cdesc_ex c;
  while (order.size() < kN && wait_cqe({a_.dev.get(), b_.dev.get()}, &b_.cqr, &c)) {
    int v;
    std::memcpy(&v, b_.at(c.base.common.req_id * 16), sizeof(v));
    order.push_back(v);
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(kN));
  EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), static_cast<size_t>(kN));
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
}

TEST_F(Pair, ProducerCountWrapsPast16Bits) {
  // 66,048 sends through a 64-entry SQ, one doorbell per max_batch WQEs: the 16-bit doorbell and
  // the phase wrap many times.
  constexpr uint32_t kN = 66048;
  const uint32_t batch = a_.sq.sq.max_batch;
  ASSERT_EQ(kN % batch, 0u);
  efa_io_rx_cdesc_ex c;
  for (uint32_t i = 0; i < kN; i += batch) {
    for (uint32_t k = 0; k < batch; ++k) {
      // A missing QPN at the peer: no receive needed, still a full round trip.
      a_.sq.write(send_wqe(static_cast<uint16_t>(i + k), ah_ab_->ahn(), 999, b_.qkey), a_.sq.pc++);
    }
    a_.sq.ring();
    for (uint32_t k = 0; k < batch; ++k) {
      ASSERT_TRUE(wait_cqe({a_.dev.get(), b_.dev.get()}, &a_.cqr, &c)) << i;
      ASSERT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN) << i;
    }
  }
  Stats s = a_.dev->stats();
  EXPECT_EQ(s.wqes, kN);
  EXPECT_EQ(s.cqes, kN);
  for (uint64_t d : s.diag) EXPECT_EQ(d, 0u);
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
