// RQ posting and CQ polling on plain memory rings, and an SQ -> CQ round trip.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/efa_dp.h"

namespace {

class RqTest : public ::testing::Test {
 protected:
  void Init(uint32_t depth, uint32_t max_sge) {
    ring_.assign(depth * 16u, 0xee);
    scratch_.assign(efa_rq_scratch_size(depth) / 8 + 1, 0);
    efa_dp_wq_attr a{ring_.data(), 16, depth, &db_, depth};
    ASSERT_EQ(efa_rq_init(&rq_, &a, max_sge, scratch_.data(), efa_rq_scratch_size(depth)), 0);
  }
  const efa_io_rx_desc* Desc(uint32_t i) const {
    return reinterpret_cast<const efa_io_rx_desc*>(ring_.data() + (i & rq_.ring.mask) * 16);
  }
  std::vector<uint8_t> ring_;
  std::vector<uint64_t> scratch_;
  uint32_t db_ = 0;
  efa_rq rq_{};
};

TEST_F(RqTest, DescriptorBytes) {
  Init(8, 3);
  efa_dp_sge sgl[3] = {{0x1111222233334444ull, 100, 0x10}, {0x2000, 70000, 0x20}, {0x3000, 0, 0xffffff}};
  ASSERT_EQ(efa_rq_post(&rq_, sgl, 3, 55), 0);
  EXPECT_EQ(db_, 3u);  // descriptor count, not receive count
  const uint16_t req_id = Desc(0)->req_id;
  const uint8_t* b = ring_.data();
  EXPECT_EQ(b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24, 0x33334444u);
  EXPECT_EQ(b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24, 0x11112222u);
  EXPECT_EQ(Desc(0)->length, 100);
  EXPECT_EQ(Desc(0)->lkey_ctrl, 0x40000010u);  // first
  EXPECT_EQ(Desc(1)->req_id, req_id);
  EXPECT_EQ(Desc(1)->length, 0xffff);  // clamped to 16 bits
  EXPECT_EQ(Desc(1)->lkey_ctrl, 0x00000020u);
  EXPECT_EQ(Desc(2)->req_id, req_id);
  EXPECT_EQ(Desc(2)->lkey_ctrl, 0x80ffffffu);  // last
  EXPECT_EQ(ring_[48], 0xee);                  // next descriptor untouched
  // One SGE: first and last on the same descriptor.
  ASSERT_EQ(efa_rq_post(&rq_, sgl, 1, 56), 0);
  EXPECT_EQ(Desc(3)->lkey_ctrl, 0xc0000010u);
  EXPECT_EQ(db_, 4u);
}

TEST_F(RqTest, SpaceComesBackPerReceive) {
  Init(8, 2);
  efa_dp_sge sgl[2] = {{0x1000, 64, 1}, {0x2000, 64, 1}};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(efa_rq_post(&rq_, sgl, 2, 100 + i), 0);
  EXPECT_EQ(efa_rq_post(&rq_, sgl, 1, 9), -FI_EAGAIN);
  EXPECT_EQ(db_, 8u);
  uint64_t ctx = 0;
  ASSERT_EQ(efa_rq_complete(&rq_, Desc(4)->req_id, &ctx), 0);  // the third receive
  EXPECT_EQ(ctx, 102u);
  EXPECT_EQ(efa_rq_complete(&rq_, Desc(4)->req_id, &ctx), -FI_EINVAL);
  ASSERT_EQ(efa_rq_post(&rq_, sgl, 2, 200), 0);  // both descriptors came back
  EXPECT_EQ(db_, 10u);
  EXPECT_EQ(efa_rq_post(&rq_, sgl, 1, 9), -FI_EAGAIN);
}

TEST_F(RqTest, RejectsBadPosts) {
  Init(8, 2);
  efa_dp_sge sgl[3] = {};
  EXPECT_EQ(efa_rq_post(&rq_, sgl, 0, 1), -FI_EINVAL);
  EXPECT_EQ(efa_rq_post(&rq_, sgl, 3, 1), -FI_EINVAL);
  EXPECT_EQ(efa_rq_post(&rq_, nullptr, 1, 1), -FI_EINVAL);
  EXPECT_EQ(db_, 0u);
  efa_dp_wq_attr a{ring_.data(), 64, 8, &db_, 8};  // wrong entry size
  efa_rq rq;
  EXPECT_EQ(efa_rq_init(&rq, &a, 1, scratch_.data(), efa_rq_scratch_size(8)), -FI_EINVAL);
}

class CqTest : public ::testing::Test {
 protected:
  void Init(uint32_t depth, bool with_db = true) {
    ring_.assign(depth * 32u, 0);
    efa_dp_cq_attr a{ring_.data(), 32, depth, with_db ? &db_ : nullptr};
    ASSERT_EQ(efa_cq_init(&cq_, &a), 0);
  }
  // Writes CQE number i (absolute) the way the NIC does.
  void Produce(uint32_t i, const efa_io_rx_cdesc_ex& cqe) {
    efa_dp_nic_write_cqe(ring_.data() + (i & cq_.mask) * 32, &cqe, efa_dp_cq_phase(i, cq_.log2_entries));
  }
  static efa_io_rx_cdesc_ex Tx(uint16_t req_id, uint8_t status = 0) {
    efa_io_rx_cdesc_ex c;
    std::memset(&c, 0, sizeof(c));
    c.base.common.req_id = req_id;
    c.base.common.status = status;
    c.base.common.qp_num = 9;
    efa_io_cdesc_common_set_q_type(&c.base.common, EFA_IO_SEND_QUEUE);
    return c;
  }
  std::vector<uint8_t> ring_;
  uint32_t db_ = 0;
  efa_cq cq_{};
};

TEST_F(CqTest, EmptyUntilPhaseMatchesAndPhaseFlipsPerLap) {
  Init(4);
  efa_dp_cqe out;
  EXPECT_EQ(efa_cq_poll(&cq_, &out), -FI_EAGAIN);  // zeroed ring: phase 0 != expected 1
  for (uint32_t i = 0; i < 13; ++i) {
    Produce(i, Tx(static_cast<uint16_t>(i)));
    EXPECT_EQ(ring_[(i & 3) * 32 + 3] & 1, static_cast<int>(((i / 4) & 1) ^ 1));
    ASSERT_EQ(efa_cq_poll(&cq_, &out), 0) << i;
    EXPECT_EQ(out.req_id, i);
    EXPECT_EQ(out.q_type, EFA_IO_SEND_QUEUE);
    EXPECT_EQ(out.qp_num, 9);
    EXPECT_EQ(out.byte_len, 0u);
    // The old entry of the previous lap in the next slot is not taken for a new one.
    EXPECT_EQ(efa_cq_poll(&cq_, &out), -FI_EAGAIN) << i;
  }
  EXPECT_EQ(efa_cq_consumed(&cq_), 13u);
}

TEST_F(CqTest, DecodesRxCompletions) {
  Init(8);
  efa_io_rx_cdesc_ex c;
  std::memset(&c, 0, sizeof(c));
  c.base.common.req_id = 3;
  c.base.common.status = EFA_IO_COMP_STATUS_OK;
  c.base.common.qp_num = 0x77;
  efa_io_cdesc_common_set_q_type(&c.base.common, EFA_IO_RECV_QUEUE);
  efa_io_cdesc_common_set_op_type(&c.base.common, EFA_IO_RDMA_WRITE);
  efa_io_cdesc_common_set_has_imm(&c.base.common, 1);
  efa_io_cdesc_common_set_unsolicited(&c.base.common, 1);
  c.base.length = 0x1234;
  c.base.ah = EFA_IO_AH_UNKNOWN;
  c.base.src_qp_num = 0x55;
  c.base.imm = 0xabcd0123;
  c.u.rdma_write.length_hi = 0x2;
  Produce(0, c);
  efa_io_cdesc_common_set_op_type(&c.base.common, EFA_IO_SEND);
  efa_io_cdesc_common_set_has_imm(&c.base.common, 0);
  efa_io_cdesc_common_set_unsolicited(&c.base.common, 0);
  c.base.ah = 4;
  Produce(1, c);
  Produce(2, Tx(8, EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR));

  efa_dp_cqe out;
  ASSERT_EQ(efa_cq_poll(&cq_, &out), 0);
  EXPECT_EQ(out.q_type, EFA_IO_RECV_QUEUE);
  EXPECT_EQ(out.op_type, EFA_IO_RDMA_WRITE);
  EXPECT_EQ(out.byte_len, 0x21234u);
  EXPECT_EQ(out.has_imm, 1);
  EXPECT_EQ(out.imm, 0xabcd0123u);
  EXPECT_EQ(out.unsolicited, 1);
  EXPECT_EQ(out.ah, EFA_IO_AH_UNKNOWN);
  EXPECT_EQ(out.src_qp, 0x55);
  EXPECT_EQ(out.qp_num, 0x77);
  EXPECT_EQ(efa_io_cdesc_common_get_phase(&out.raw.base.common), 1);

  ASSERT_EQ(efa_cq_poll(&cq_, &out), 0);
  EXPECT_EQ(out.op_type, EFA_IO_SEND);
  EXPECT_EQ(out.byte_len, 0x1234u);  // length_hi ignored for SEND
  EXPECT_EQ(out.has_imm, 0);
  EXPECT_EQ(out.imm, 0u);
  EXPECT_EQ(out.ah, 4);

  ASSERT_EQ(efa_cq_poll(&cq_, &out), 0);
  EXPECT_EQ(out.status, EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
  EXPECT_EQ(efa_io_status_to_fi_errno(out.status), FI_ENORX);
}

TEST_F(CqTest, Doorbell) {
  Init(4);
  EXPECT_EQ(efa_cq_update_db(&cq_, 0), 0);
  EXPECT_EQ(db_, 0u);
  efa_dp_cqe out;
  for (uint32_t i = 0; i < 6; ++i) {
    Produce(i, Tx(1));
    ASSERT_EQ(efa_cq_poll(&cq_, &out), 0);
  }
  EXPECT_EQ(efa_cq_update_db(&cq_, 0), 0);
  EXPECT_EQ(db_, 6u);
  EXPECT_EQ(efa_cq_arm(&cq_), 0);
  EXPECT_EQ(db_, 0x80000006u);
  efa_cq_ack_event(&cq_);
  efa_cq_ack_event(&cq_);
  efa_cq_ack_event(&cq_);
  EXPECT_EQ(efa_cq_arm(&cq_), 0);
  EXPECT_EQ(db_, 0xe0000006u);
  efa_cq_ack_event(&cq_);  // cmd_sn 4 keeps 2 bits: 0
  EXPECT_EQ(efa_cq_update_db(&cq_, 0), 0);
  EXPECT_EQ(db_, 6u);

  Init(4, false);
  EXPECT_EQ(efa_cq_update_db(&cq_, 0), -FI_ENOSYS);
  EXPECT_EQ(efa_cq_arm(&cq_), -FI_ENOSYS);
}

TEST_F(CqTest, InitValidates) {
  std::vector<uint8_t> ring(32 * 8);
  efa_cq cq;
  efa_dp_cq_attr a{ring.data(), 32, 8, nullptr};
  EXPECT_EQ(efa_cq_init(&cq, &a), 0);
  a.entry_size = 16;
  EXPECT_EQ(efa_cq_init(&cq, &a), -FI_EINVAL);
  a.entry_size = 32;
  a.num_entries = 12;
  EXPECT_EQ(efa_cq_init(&cq, &a), -FI_EINVAL);
  a.num_entries = 8;
  a.buffer = nullptr;
  EXPECT_EQ(efa_cq_init(&cq, &a), -FI_EINVAL);
  EXPECT_EQ(efa_cq_init(&cq, nullptr), -FI_EINVAL);
  a.buffer = ring.data();
  ASSERT_EQ(efa_cq_init(&cq, &a), 0);
  EXPECT_EQ(efa_cq_poll(&cq, nullptr), -FI_EINVAL);
  efa_dp_cqe out;
  EXPECT_EQ(efa_cq_poll(nullptr, &out), -FI_EINVAL);
}

// Post -> (fake NIC) CQE out of order -> poll -> complete: contexts and space come back.
TEST(DataPath, SqCompletionsThroughCq) {
  std::vector<uint8_t> sq_ring(64 * 4), cq_ring(32 * 4, 0);
  std::vector<uint64_t> scratch(efa_sq_scratch_size(4) / 8 + 1);
  uint32_t sq_db = 0;
  efa_dp_wq_attr sa{sq_ring.data(), 64, 4, &sq_db, 4};
  efa_sq sq;
  ASSERT_EQ(efa_sq_init(&sq, &sa, 2, scratch.data(), efa_sq_scratch_size(4)), 0);
  efa_dp_cq_attr ca{cq_ring.data(), 32, 4, nullptr};
  efa_cq cq;
  ASSERT_EQ(efa_cq_init(&cq, &ca), 0);

  uint32_t produced = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<uint16_t> ids;
    for (uint64_t k = 0; k < 4; ++k) {
      efa_dp_wr wr{};
      wr.op = EFA_DP_OP_SEND;
      wr.context = round * 10 + k;
      ASSERT_EQ(efa_sq_post(&sq, &wr), 0);
      ids.push_back(reinterpret_cast<const efa_io_tx_meta_desc*>(sq_ring.data() + (sq_db - 1) % 4 * 64)->req_id);
    }
    efa_dp_wr wr{};
    EXPECT_EQ(efa_sq_post(&sq, &wr), -FI_EAGAIN);
    const int order[] = {3, 1, 0, 2};
    for (int k : order) {
      efa_io_rx_cdesc_ex c;
      std::memset(&c, 0, sizeof(c));
      c.base.common.req_id = ids[k];
      efa_io_cdesc_common_set_q_type(&c.base.common, EFA_IO_SEND_QUEUE);
      efa_dp_nic_write_cqe(cq_ring.data() + (produced & 3) * 32, &c, efa_dp_cq_phase(produced, 2));
      ++produced;
    }
    efa_dp_cqe out;
    for (int k : order) {
      ASSERT_EQ(efa_cq_poll(&cq, &out), 0);
      uint64_t ctx = 0;
      ASSERT_EQ(efa_sq_complete(&sq, out.req_id, &ctx), 0);
      EXPECT_EQ(ctx, static_cast<uint64_t>(round * 10 + k));
    }
    EXPECT_EQ(efa_cq_poll(&cq, &out), -FI_EAGAIN);
    EXPECT_EQ(efa_dp_ring_inflight(&sq.ring), 0u);
  }
}

}  // namespace
