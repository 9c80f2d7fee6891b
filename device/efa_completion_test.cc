// The libfabric view of a CQE that the host provider's fi_cq_read and device code's
// fi_xpu_cq_read both report: flags from the op, every field, every entry format, error entries,
// and the policy for a CQE that names no outstanding request.
#include "device/efa_completion.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/efa_dp.h"

namespace {

efa_dp_cqe Cqe(uint8_t q_type, uint8_t op_type, uint16_t req_id) {
  efa_dp_cqe q{};
  q.q_type = q_type;
  q.op_type = op_type;
  q.req_id = req_id;
  q.qp_num = 5;
  q.ah = EFA_IO_AH_UNKNOWN;
  q.status = EFA_IO_COMP_STATUS_OK;
  return q;
}

TEST(EfaCompletion, FlagsComeFromQueueAndOpAlone) {
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_SEND_QUEUE, EFA_IO_SEND, 0), FI_MSG | FI_SEND);
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_SEND_QUEUE, EFA_IO_RDMA_WRITE, 0), FI_RMA | FI_WRITE);
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_SEND_QUEUE, EFA_IO_RDMA_READ, 0), FI_RMA | FI_READ);
  // A transmit never reports FI_REMOTE_CQ_DATA, even if the CQE says imm.
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_SEND_QUEUE, EFA_IO_SEND, 1), FI_MSG | FI_SEND);
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_RECV_QUEUE, EFA_IO_SEND, 0), FI_MSG | FI_RECV);
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_RECV_QUEUE, EFA_IO_SEND, 1), FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(efa_comp_op_flags(EFA_IO_RECV_QUEUE, EFA_IO_RDMA_WRITE, 1),
            FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
}

TEST(EfaCompletion, TransmitsReportContextAndNoLength) {
  for (uint8_t op : {EFA_IO_SEND, EFA_IO_RDMA_WRITE, EFA_IO_RDMA_READ}) {
    efa_dp_cqe q = Cqe(EFA_IO_SEND_QUEUE, op, 3);
    q.byte_len = 77;  // ignored for transmits
    q.has_imm = 1;
    q.imm = 9;
    efa_comp c;
    efa_comp_from_cqe(&q, 0xabc, 0x5000, &c);
    EXPECT_EQ(c.op_context, 0xabcu);
    EXPECT_EQ(c.flags, efa_comp_op_flags(EFA_IO_SEND_QUEUE, op, 0));
    EXPECT_EQ(c.len, 0u);
    EXPECT_EQ(c.buf, 0u);
    EXPECT_EQ(c.data, 0u);
    EXPECT_EQ(c.err, 0);
    EXPECT_EQ(c.prov_errno, 0u);
  }
}

TEST(EfaCompletion, ReceivesReportLengthBufferAndImmediateData) {
  efa_dp_cqe q = Cqe(EFA_IO_RECV_QUEUE, EFA_IO_SEND, 3);
  q.byte_len = 1234;
  q.has_imm = 1;
  q.imm = 0xfeedf00d;
  efa_comp c;
  efa_comp_from_cqe(&q, 0xabc, 0x5000, &c);
  EXPECT_EQ(c.op_context, 0xabcu);
  EXPECT_EQ(c.flags, FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(c.len, 1234u);
  EXPECT_EQ(c.buf, 0x5000u);
  EXPECT_EQ(c.data, 0xfeedf00du);
  q.has_imm = 0;
  efa_comp_from_cqe(&q, 0xabc, 0x5000, &c);
  EXPECT_EQ(c.flags, FI_MSG | FI_RECV);
  EXPECT_EQ(c.data, 0u);
  // A remote write lands at the writer's address: no receive buffer.
  q = Cqe(EFA_IO_RECV_QUEUE, EFA_IO_RDMA_WRITE, 0);
  q.unsolicited = 1;
  q.byte_len = 65536 + 8;
  q.has_imm = 1;
  q.imm = 42;
  efa_comp_from_cqe(&q, 0, 0x5000, &c);
  EXPECT_EQ(c.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(c.len, 65536u + 8);
  EXPECT_EQ(c.buf, 0u);
  EXPECT_EQ(c.data, 42u);
}

TEST(EfaCompletion, ErrorStatusGivesErrAndProvErrno) {
  efa_dp_cqe q = Cqe(EFA_IO_SEND_QUEUE, EFA_IO_SEND, 3);
  q.status = EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN;
  efa_comp c;
  efa_comp_from_cqe(&q, 1, 0, &c);
  EXPECT_EQ(c.err, efa_io_status_to_fi_errno(q.status));
  EXPECT_NE(c.err, 0);
  EXPECT_EQ(c.prov_errno, static_cast<uint32_t>(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN));
}

efa_comp Sample() {
  efa_comp c{};
  c.op_context = 0x1111;
  c.flags = FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA;
  c.len = 300;
  c.buf = 0x2222;
  c.data = 0x3333;
  return c;
}

TEST(EfaCompletion, EveryFormatWritesItsEntryAndNothingBeyond) {
  EXPECT_EQ(efa_comp_entry_size(FI_CQ_FORMAT_CONTEXT), sizeof(fi_cq_entry));
  EXPECT_EQ(efa_comp_entry_size(FI_CQ_FORMAT_MSG), sizeof(fi_cq_msg_entry));
  EXPECT_EQ(efa_comp_entry_size(FI_CQ_FORMAT_DATA), sizeof(fi_cq_data_entry));
  EXPECT_EQ(efa_comp_entry_size(FI_CQ_FORMAT_TAGGED), sizeof(fi_cq_tagged_entry));
  EXPECT_EQ(efa_comp_entry_size(FI_CQ_FORMAT_UNSPEC), 0u);
  const efa_comp c = Sample();
  for (int fmt : {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED}) {
    // One byte off alignment: entries go into the application's array as bytes.
    uint8_t out[1 + sizeof(fi_cq_tagged_entry) + 8];
    memset(out, 0xa5, sizeof(out));
    efa_comp_write_entry(fmt, &c, out + 1);
    fi_cq_tagged_entry e;
    memcpy(&e, out + 1, sizeof(e));
    const size_t n = efa_comp_entry_size(fmt);
    EXPECT_EQ(out[0], 0xa5) << fmt;
    for (size_t i = 1 + n; i < sizeof(out); ++i) EXPECT_EQ(out[i], 0xa5) << fmt << " byte " << i;
    EXPECT_EQ(e.op_context, reinterpret_cast<void*>(0x1111)) << fmt;
    if (fmt == FI_CQ_FORMAT_CONTEXT) continue;
    EXPECT_EQ(e.flags, c.flags) << fmt;
    EXPECT_EQ(e.len, 300u) << fmt;
    if (fmt == FI_CQ_FORMAT_MSG) continue;
    EXPECT_EQ(e.buf, reinterpret_cast<void*>(0x2222)) << fmt;
    EXPECT_EQ(e.data, 0x3333u) << fmt;
    if (fmt == FI_CQ_FORMAT_DATA) continue;
    EXPECT_EQ(e.tag, 0u);
  }
}

TEST(EfaCompletion, ErrorEntryKeepsTheCallersErrData) {
  efa_comp c = Sample();
  c.err = FI_EIO;
  c.prov_errno = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
  fi_cq_err_entry e;
  memset(&e, 0x5a, sizeof(e));
  char mine[8];
  e.err_data = mine;
  e.src_addr = 77;
  efa_comp_write_err(&c, &e);
  EXPECT_EQ(e.op_context, reinterpret_cast<void*>(0x1111));
  EXPECT_EQ(e.flags, c.flags);
  EXPECT_EQ(e.len, 300u);
  EXPECT_EQ(e.buf, reinterpret_cast<void*>(0x2222));
  EXPECT_EQ(e.data, 0x3333u);
  EXPECT_EQ(e.tag, 0u);
  EXPECT_EQ(e.olen, 0u);
  EXPECT_EQ(e.err, FI_EIO);
  EXPECT_EQ(e.prov_errno, static_cast<int>(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH));
  EXPECT_EQ(e.err_data, static_cast<void*>(mine));
  EXPECT_EQ(e.err_data_size, 0u);
  EXPECT_EQ(e.src_addr, 77u);
}

// A real SQ and RQ: taking a completion frees its request and gives the queue space back once.
class EfaCompletionQueues : public ::testing::Test {
 protected:
  void SetUp() override {
    sq_ring_.assign(kDepth * 64, 0);
    rq_ring_.assign(kDepth * 16, 0);
    sq_scratch_.assign(efa_sq_scratch_size(kDepth) / 8 + 1, 0);
    rq_scratch_.assign(efa_rq_scratch_size(kDepth) / 8 + 1, 0);
    efa_dp_wq_attr s{sq_ring_.data(), 64, kDepth, &sq_db_, kDepth};
    efa_dp_wq_attr r{rq_ring_.data(), 16, kDepth, &rq_db_, kDepth};
    ASSERT_EQ(efa_sq_init(&sq_, &s, 2, sq_scratch_.data(), sq_scratch_.size() * 8), 0);
    ASSERT_EQ(efa_rq_init(&rq_, &r, 2, rq_scratch_.data(), rq_scratch_.size() * 8), 0);
  }
  uint16_t PostSend(uint64_t ctx) {
    efa_dp_wr wr{};
    wr.op = EFA_DP_OP_SEND;
    wr.context = ctx;
    uint32_t slot = 0;
    EXPECT_EQ(efa_sq_claim(&sq_, 1, &slot), 0);
    const int id = efa_sq_write(&sq_, slot, &wr);
    efa_sq_publish(&sq_, slot, 1, 0);
    return static_cast<uint16_t>(id);
  }
  uint16_t PostRecv(uint64_t ctx, uint32_t nsge) {
    const efa_dp_sge sge[2] = {{0x1000, 64, 1}, {0x2000, 64, 1}};
    uint32_t first = 0;
    EXPECT_EQ(efa_dp_ring_claim(&rq_.ring, nsge, &first), 0);
    const int id = efa_rq_write(&rq_, first, sge, nsge, ctx);
    efa_dp_ring_publish(&rq_.ring, first, nsge, 0);
    return static_cast<uint16_t>(id);
  }

  static constexpr uint32_t kDepth = 8;
  std::vector<uint8_t> sq_ring_, rq_ring_;
  std::vector<uint64_t> sq_scratch_, rq_scratch_;
  uint32_t sq_db_ = 0, rq_db_ = 0;
  efa_sq sq_{};
  efa_rq rq_{};
};

TEST_F(EfaCompletionQueues, TakeReturnsTheContextAndGivesSpaceBack) {
  const uint16_t tx = PostSend(0x77);
  const uint16_t rx = PostRecv(0x88, 2);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 1u);
  EXPECT_EQ(efa_dp_ring_inflight(&rq_.ring), 2u);
  const efa_dp_cqe t = Cqe(EFA_IO_SEND_QUEUE, EFA_IO_SEND, tx);
  const efa_dp_cqe r = Cqe(EFA_IO_RECV_QUEUE, EFA_IO_SEND, rx);
  EXPECT_EQ(efa_comp_req_index(&sq_, &rq_, &t), tx & (kDepth - 1));
  EXPECT_EQ(efa_comp_req_index(&sq_, &rq_, &r), rx & (kDepth - 1));
  uint64_t ctx = 0;
  ASSERT_EQ(efa_comp_take(&sq_, &rq_, &t, &ctx), 0);
  EXPECT_EQ(ctx, 0x77u);
  ASSERT_EQ(efa_comp_take(&sq_, &rq_, &r, &ctx), 0);
  EXPECT_EQ(ctx, 0x88u);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 0u);
  EXPECT_EQ(efa_dp_ring_inflight(&rq_.ring), 0u);
}

TEST_F(EfaCompletionQueues, StaleCqesAreRefusedAndGiveNothingBack) {
  const uint16_t tx = PostSend(0x77);
  PostSend(0x78);
  const efa_dp_cqe t = Cqe(EFA_IO_SEND_QUEUE, EFA_IO_SEND, tx);
  uint64_t ctx = 0;
  ASSERT_EQ(efa_comp_take(&sq_, &rq_, &t, &ctx), 0);
  // A duplicate, a req_id of an older generation of the same index, one never posted.
  ctx = 5;
  EXPECT_EQ(efa_comp_take(&sq_, &rq_, &t, &ctx), EFA_COMP_STALE);
  EXPECT_EQ(ctx, 0u);
  const uint16_t again = PostSend(0x79);  // reuses tx's index with the next generation
  ASSERT_EQ(again & (kDepth - 1), tx & (kDepth - 1));
  ASSERT_NE(again, tx);
  EXPECT_EQ(efa_comp_take(&sq_, &rq_, &t, &ctx), EFA_COMP_STALE);
  const efa_dp_cqe never = Cqe(EFA_IO_RECV_QUEUE, EFA_IO_SEND, 6);
  EXPECT_EQ(efa_comp_take(&sq_, &rq_, &never, &ctx), EFA_COMP_STALE);
  EXPECT_EQ(efa_dp_ring_inflight(&sq_.ring), 2u);
  // The live request still completes.
  const efa_dp_cqe live = Cqe(EFA_IO_SEND_QUEUE, EFA_IO_SEND, again);
  ASSERT_EQ(efa_comp_take(&sq_, &rq_, &live, &ctx), 0);
  EXPECT_EQ(ctx, 0x79u);
}

TEST_F(EfaCompletionQueues, UnsolicitedWriteUsesNoRequest) {
  const uint16_t rx = PostRecv(0x88, 1);
  efa_dp_cqe q = Cqe(EFA_IO_RECV_QUEUE, EFA_IO_RDMA_WRITE, rx);
  q.unsolicited = 1;
  EXPECT_EQ(efa_comp_req_index(&sq_, &rq_, &q), EFA_COMP_NO_REQ);
  uint64_t ctx = 5;
  EXPECT_EQ(efa_comp_take(&sq_, &rq_, &q, &ctx), 0);
  EXPECT_EQ(ctx, 0u);
  EXPECT_EQ(efa_dp_ring_inflight(&rq_.ring), 1u);  // the posted receive is untouched
}

TEST(EfaCompletion, StaleCountTellsTheFirst) {
  uint32_t count = 0;
  EXPECT_EQ(efa_comp_count_stale(&count), 1);
  EXPECT_EQ(efa_comp_count_stale(&count), 0);
  EXPECT_EQ(efa_comp_count_stale(&count), 0);
  EXPECT_EQ(count, 3u);
}

}  // namespace
