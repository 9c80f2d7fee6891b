// SQ posting into plain memory: exact WQE bytes, phase across laps, doorbell
// values, batching, FI_MORE, full-queue refusal and req_id mapping.
#include "device/efa_sq.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

class SqTest : public ::testing::Test {
 protected:
  void Init(uint32_t depth, uint32_t wqe_size = 64, uint32_t max_batch = 16, uint32_t max_sge = 2) {
    ring_.assign(static_cast<size_t>(depth) * wqe_size, 0xee);  // garbage: every byte must be written
    scratch_.assign(efa_sq_scratch_size(depth) / 8 + 1, 0);
    db_ = 0;
    efa_dp_wq_attr a{ring_.data(), wqe_size, depth, &db_, max_batch};
    ASSERT_EQ(efa_sq_init(&sq_, &a, max_sge, scratch_.data(), efa_sq_scratch_size(depth)), 0);
  }
  const uint8_t* Slot(uint32_t i) const { return ring_.data() + (i & sq_.ring.mask) * sq_.ring.entry_size; }
  const efa_io_tx_wqe_128* Wqe(uint32_t i) const { return reinterpret_cast<const efa_io_tx_wqe_128*>(Slot(i)); }
  uint16_t ReqId(uint32_t i) const { return Wqe(i)->meta.req_id; }

  static efa_dp_wr Send(uint64_t ctx) {
    efa_dp_wr wr{};
    wr.op = EFA_DP_OP_SEND;
    wr.ah = 0x0102;
    wr.dest_qpn = 0x0304;
    wr.qkey = 0x05060708;
    wr.num_sge = 1;
    wr.sge[0] = {0x1122334455667788ull, 256, 0x00abcdef};
    wr.context = ctx;
    return wr;
  }

  std::vector<uint8_t> ring_;
  std::vector<uint64_t> scratch_;
  uint32_t db_ = 0;
  efa_sq sq_{};
};

TEST_F(SqTest, SendWqeBytes) {
  Init(8);
  efa_dp_wr wr = Send(7);
  wr.num_sge = 2;
  wr.sge[1] = {0x1000, 0x20, 0x123456};
  wr.flags = EFA_DP_WR_IMM;
  wr.imm = 0xcafef00d;
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  const uint8_t* b = Slot(0);
  const uint16_t req_id = ReqId(0);
  EXPECT_EQ(b[0] | b[1] << 8, req_id);
  EXPECT_EQ(b[2], 0x90);  // meta_desc | has_imm | op SEND
  EXPECT_EQ(b[3], 0x1c);  // comp_req | last | first | phase 0
  EXPECT_EQ(b[4] | b[5] << 8, 0x0304);  // dest_qp_num
  EXPECT_EQ(b[6] | b[7] << 8, 2);       // two buffer descriptors
  uint32_t imm;
  std::memcpy(&imm, b + 8, 4);
  EXPECT_EQ(imm, 0xcafef00du);
  EXPECT_EQ(b[12] | b[13] << 8, 0x0102);  // ah
  EXPECT_EQ(b[14], 0);
  uint32_t qkey;
  std::memcpy(&qkey, b + 16, 4);
  EXPECT_EQ(qkey, 0x05060708u);
  for (int i = 20; i < 32; ++i) EXPECT_EQ(b[i], 0) << i;  // reserved2, req_id_ex
  const efa_io_tx_wqe* w = reinterpret_cast<const efa_io_tx_wqe*>(b);
  EXPECT_EQ(w->data.sgl[0].length, 256u);
  EXPECT_EQ(w->data.sgl[0].lkey, 0x00abcdefu);
  EXPECT_EQ(w->data.sgl[0].buf_addr_lo, 0x55667788u);
  EXPECT_EQ(w->data.sgl[0].buf_addr_hi, 0x11223344u);
  EXPECT_EQ(w->data.sgl[1].length, 0x20u);
  EXPECT_EQ(w->data.sgl[1].lkey, 0x123456u);
  EXPECT_EQ(efa_io_tx_buf_desc_get_addr(&w->data.sgl[1]), 0x1000u);
  EXPECT_EQ(db_, 1u);
  // The next slot is untouched.
  for (int i = 0; i < 64; ++i) EXPECT_EQ(Slot(1)[i], 0xee);
}

TEST_F(SqTest, PhaseFlipsEachLapAndDoorbellIsAbsolute) {
  Init(4);
  for (uint32_t i = 0; i < 12; ++i) {
    efa_dp_wr wr = Send(i);
    ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
    EXPECT_EQ(efa_io_tx_meta_desc_get_phase(&Wqe(i)->meta), (i / 4) & 1) << i;
    EXPECT_EQ(db_, i + 1);
    uint64_t ctx = 0;
    ASSERT_EQ(efa_sq_complete(&sq_, ReqId(i), &ctx), 0);
    EXPECT_EQ(ctx, i);
  }
}

TEST_F(SqTest, DoorbellWrapsAt16Bits) {
  Init(4);
  for (uint32_t i = 0; i < 70000; ++i) {
    efa_dp_wr wr = Send(i);
    ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
    ASSERT_EQ(efa_sq_complete(&sq_, ReqId(i), nullptr), 0);
  }
  EXPECT_EQ(db_, 70000u & 0xffffu);
  EXPECT_EQ(efa_io_tx_meta_desc_get_phase(&Wqe(69999)->meta), (69999u / 4) & 1);
}

TEST_F(SqTest, FullQueueRefusesUntilACompletionIsConsumed) {
  Init(4);
  for (uint32_t i = 0; i < 4; ++i) {
    efa_dp_wr wr = Send(100 + i);
    ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  }
  std::vector<uint8_t> before(ring_);
  efa_dp_wr wr = Send(999);
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EAGAIN);
  EXPECT_EQ(ring_, before);  // nothing written
  EXPECT_EQ(db_, 4u);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 4u);
  // Completing out of order (slot 2) frees one slot: the next post reuses ring slot 0 in lap 1.
  uint64_t ctx = 0;
  ASSERT_EQ(efa_sq_complete(&sq_, ReqId(2), &ctx), 0);
  EXPECT_EQ(ctx, 102u);
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(efa_io_tx_meta_desc_get_phase(&Wqe(4)->meta), 1);
  EXPECT_EQ(db_, 5u);
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EAGAIN);
}

TEST_F(SqTest, ReqIdsMapOutOfOrderCompletions) {
  Init(8);
  std::vector<uint16_t> ids;
  for (uint32_t i = 0; i < 8; ++i) {
    efa_dp_wr wr = Send(1000 + i);
    ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
    ids.push_back(ReqId(i));
  }
  // Distinct ids.
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = i + 1; j < ids.size(); ++j) EXPECT_NE(ids[i], ids[j]);
  const int order[] = {5, 2, 7, 0, 3, 6, 1, 4};
  for (int k : order) {
    uint64_t ctx = 0;
    ASSERT_EQ(efa_sq_complete(&sq_, ids[k], &ctx), 0);
    EXPECT_EQ(ctx, 1000u + k);
  }
  // A second completion of the same id is stale; an unknown id is refused.
  EXPECT_EQ(efa_sq_complete(&sq_, ids[3], nullptr), -FI_EINVAL);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 0u);
  // Reused indices carry a new generation, so old ids stay stale.
  for (uint32_t i = 8; i < 16; ++i) {
    efa_dp_wr wr = Send(2000 + i);
    ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
    for (uint16_t old : ids) EXPECT_NE(ReqId(i), old);
  }
  for (uint16_t old : ids) EXPECT_EQ(efa_sq_complete(&sq_, old, nullptr), -FI_EINVAL);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 8u);  // nothing given back by stale ids
}

TEST_F(SqTest, MoreDefersDoorbellBoundedByMaxBatch) {
  Init(64, 64, 4);
  efa_dp_wr wr = Send(1);
  wr.flags = EFA_DP_WR_MORE;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(db_, 0u);
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(db_, 4u);  // a whole max_batch chunk is due
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(db_, 4u);
  efa_sq_flush(&sq_);
  EXPECT_EQ(db_, 5u);
  efa_sq_flush(&sq_);  // nothing new: no change
  EXPECT_EQ(db_, 5u);
  // A batch of 10 with MORE rings only whole chunks (4 + 4), leaving 2 pending.
  std::vector<efa_dp_wr> wrs(10, Send(2));
  ASSERT_EQ(efa_sq_post_batch(&sq_, wrs.data(), 10, EFA_DP_WR_MORE), 0);
  EXPECT_EQ(db_, 13u);  // 5 + 8; 15 published
  wr.flags = 0;
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(db_, 16u);
}

TEST_F(SqTest, BatchIsAllOrNothing) {
  Init(8);
  std::vector<efa_dp_wr> wrs(3, Send(5));
  wrs[2].op = 77;
  std::vector<uint8_t> before(ring_);
  EXPECT_EQ(efa_sq_post_batch(&sq_, wrs.data(), 3, 0), -FI_EINVAL);
  EXPECT_EQ(ring_, before);
  EXPECT_EQ(db_, 0u);
  wrs[2].op = EFA_DP_OP_SEND;
  std::vector<efa_dp_wr> big(9, Send(5));
  EXPECT_EQ(efa_sq_post_batch(&sq_, big.data(), 9, 0), -FI_EINVAL);  // larger than the queue
  ASSERT_EQ(efa_sq_post_batch(&sq_, wrs.data(), 3, 0), 0);
  EXPECT_EQ(db_, 3u);
  std::vector<efa_dp_wr> six(6, Send(6));
  EXPECT_EQ(efa_sq_post_batch(&sq_, six.data(), 6, 0), -FI_EAGAIN);  // 3 + 6 > 8
  EXPECT_EQ(db_, 3u);
}

TEST_F(SqTest, InlineSend) {
  Init(8);
  uint8_t data[40];
  for (int i = 0; i < 40; ++i) data[i] = static_cast<uint8_t>(i + 1);
  efa_dp_wr wr = Send(1);
  wr.flags = EFA_DP_WR_INLINE;
  wr.num_sge = 2;
  wr.sge[0] = {reinterpret_cast<uintptr_t>(data), 20, 0};
  wr.sge[1] = {reinterpret_cast<uintptr_t>(data + 20), 12, 0};
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  const efa_io_tx_wqe* w = reinterpret_cast<const efa_io_tx_wqe*>(Slot(0));
  EXPECT_EQ(w->meta.ctrl1, 0xa0);  // meta_desc | inline_msg | SEND
  EXPECT_EQ(w->meta.length, 32);
  EXPECT_EQ(std::memcmp(w->data.inline_data, data, 32), 0);
  wr.sge[1].length = 13;  // 33 bytes do not fit a 64-B WQE
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EMSGSIZE);
}

TEST_F(SqTest, RdmaReadAndWrite) {
  Init(8);
  efa_dp_wr wr = Send(1);
  wr.op = EFA_DP_OP_RDMA_READ;
  wr.sge[0] = {0xaaaa0000bbbb0000ull, 8192, 0x42};
  wr.remote_addr = 0x0000123400005678ull;
  wr.rkey = 0xfedcba98;
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  const efa_io_tx_wqe* w = reinterpret_cast<const efa_io_tx_wqe*>(Slot(0));
  EXPECT_EQ(w->meta.ctrl1, 0x81);
  EXPECT_EQ(w->meta.length, 1);
  EXPECT_EQ(w->data.rdma_req.remote_mem.length, 8192u);
  EXPECT_EQ(w->data.rdma_req.remote_mem.rkey, 0xfedcba98u);
  EXPECT_EQ(efa_io_remote_mem_addr_get_addr(&w->data.rdma_req.remote_mem), 0x0000123400005678ull);
  EXPECT_EQ(w->data.rdma_req.local_mem[0].length, 8192u);
  EXPECT_EQ(w->data.rdma_req.local_mem[0].lkey, 0x42u);
  EXPECT_EQ(efa_io_tx_buf_desc_get_addr(&w->data.rdma_req.local_mem[0]), 0xaaaa0000bbbb0000ull);

  wr.op = EFA_DP_OP_RDMA_WRITE;
  wr.flags = EFA_DP_WR_IMM | EFA_DP_WR_PPS_HINT;
  wr.imm = 77;
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  w = reinterpret_cast<const efa_io_tx_wqe*>(Slot(1));
  EXPECT_EQ(w->meta.ctrl1, 0x92);  // meta_desc | has_imm | RDMA_WRITE
  EXPECT_EQ(w->meta.immediate_data, 77u);
  EXPECT_EQ(w->meta.ctrl3, 0x01);
  EXPECT_EQ(w->data.rdma_req.remote_mem.length, 8192u);

  // Inline write needs the 128-B WQE.
  wr.flags = EFA_DP_WR_INLINE;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EOPNOTSUPP);
}

TEST_F(SqTest, InlineWriteUses128ByteWqe) {
  Init(8, 128);
  uint8_t data[80];
  for (int i = 0; i < 80; ++i) data[i] = static_cast<uint8_t>(0xf0 ^ i);
  efa_dp_wr wr = Send(1);
  wr.op = EFA_DP_OP_RDMA_WRITE;
  wr.flags = EFA_DP_WR_INLINE;
  wr.sge[0] = {reinterpret_cast<uintptr_t>(data), 80, 0};
  wr.remote_addr = 0x5000;
  wr.rkey = 9;
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  const uint8_t* b = Slot(0);
  EXPECT_EQ(b[2], 0xa2);  // meta_desc | inline_msg | RDMA_WRITE
  EXPECT_EQ(b[6] | b[7] << 8, 80);
  const efa_io_tx_wqe_128* w = Wqe(0);
  EXPECT_EQ(w->data.rdma_req_128.remote_mem.length, 80u);
  EXPECT_EQ(w->data.rdma_req_128.remote_mem.rkey, 9u);
  EXPECT_EQ(std::memcmp(b + 48, data, 80), 0);
  // The second slot starts at byte 128.
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(ring_[128 + 2], 0xa2);
  wr.sge[0].length = 81;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EMSGSIZE);
  // A 128-B queue takes 80-B inline sends too.
  wr = Send(2);
  wr.flags = EFA_DP_WR_INLINE;
  wr.sge[0] = {reinterpret_cast<uintptr_t>(data), 80, 0};
  ASSERT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(std::memcmp(Slot(2) + 32, data, 80), 0);
}

TEST_F(SqTest, RejectsMalformedRequests) {
  Init(8, 64, 16, 1);
  efa_dp_wr wr = Send(1);
  wr.op = 3;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  wr = Send(1);
  wr.flags = 1u << 20;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  wr = Send(1);
  wr.num_sge = 2;  // this device takes one SGE
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  wr = Send(1);
  wr.op = EFA_DP_OP_RDMA_READ;
  wr.num_sge = 0;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  wr.num_sge = 1;
  wr.flags = EFA_DP_WR_IMM;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  wr.flags = EFA_DP_WR_INLINE;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  EXPECT_EQ(efa_sq_post(&sq_, nullptr), -FI_EINVAL);
  wr = Send(1);
  wr.flags = EFA_DP_WR_INLINE;
  wr.sge[0] = {0, 8, 0};  // inline bytes at address 0
  EXPECT_EQ(efa_sq_post(&sq_, &wr), -FI_EINVAL);
  EXPECT_EQ(efa_sq_post_batch(&sq_, nullptr, 2, 0), -FI_EINVAL);
  EXPECT_EQ(efa_sq_complete(&sq_, 0, nullptr), -FI_EINVAL);  // nothing outstanding
  EXPECT_EQ(db_, 0u);
  uint32_t first;
  EXPECT_EQ(efa_sq_claim(&sq_, 0, &first), -FI_EINVAL);
  // A zero-SGE send is a valid zero-length message.
  wr = Send(1);
  wr.num_sge = 0;
  EXPECT_EQ(efa_sq_post(&sq_, &wr), 0);
  EXPECT_EQ(Wqe(0)->meta.length, 0);
}

TEST_F(SqTest, InitValidates) {
  std::vector<uint8_t> ring(64 * 8);
  std::vector<uint64_t> scratch(64);
  uint32_t db = 0;
  efa_sq sq;
  efa_dp_wq_attr a{ring.data(), 64, 8, &db, 4};
  EXPECT_EQ(efa_sq_init(&sq, &a, 2, scratch.data(), efa_sq_scratch_size(8)), 0);
  EXPECT_EQ(efa_sq_init(&sq, &a, 3, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  EXPECT_EQ(efa_sq_init(&sq, &a, 0, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  EXPECT_EQ(efa_sq_init(&sq, &a, 2, scratch.data(), efa_sq_scratch_size(8) - 1), -FI_EINVAL);
  EXPECT_EQ(efa_sq_init(&sq, &a, 2, reinterpret_cast<uint8_t*>(scratch.data()) + 4, efa_sq_scratch_size(8)),
            -FI_EINVAL);
  efa_dp_wq_attr bad = a;
  bad.num_entries = 6;
  EXPECT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  bad = a;
  bad.entry_size = 32;
  EXPECT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  bad = a;
  bad.doorbell = nullptr;
  EXPECT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  bad = a;
  bad.buffer = nullptr;
  EXPECT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  bad = a;
  bad.max_batch = 0;
  EXPECT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
  bad = a;
  bad.max_batch = 1000;  // capped at the depth
  ASSERT_EQ(efa_sq_init(&sq, &bad, 2, scratch.data(), efa_sq_scratch_size(8)), 0);
  EXPECT_EQ(sq.ring.max_batch, 8u);
  EXPECT_EQ(efa_sq_init(&sq, nullptr, 2, scratch.data(), efa_sq_scratch_size(8)), -FI_EINVAL);
}

}  // namespace
