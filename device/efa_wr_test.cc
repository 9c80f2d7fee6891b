// The work request both the host provider and device code post: every op, the libfabric flags a
// WQE encodes, the size limits and the error codes, and the WQE the SQ then writes from it.
#include "device/efa_wr.h"

#include <gtest/gtest.h>

#include <vector>

#include "device/efa_dp.h"

namespace {

constexpr efa_wr_limits kLimits{8192, 1u << 20, 32};

efa_wr_args Args(uint32_t op, const efa_dp_sge* sge, uint32_t n, uint64_t flags) {
  efa_wr_args a{};
  a.op = op;
  a.num_sge = n;
  a.sge = sge;
  a.ah = 0x0102;
  a.dest_qpn = 0x0304;
  a.qkey = 0x05060708;
  a.remote_addr = 0x1122334455667788ull;
  a.key = 0xaabbccdd00112233ull;
  a.data = 0x99887766deadbeefull;
  a.context = 0xc0ffee;
  a.flags = flags;
  return a;
}

TEST(EfaWr, SendCarriesPeerBuffersContextAndImmediateData) {
  const efa_dp_sge sge[2] = {{0x1000, 100, 7}, {0x2000, 50, 8}};
  efa_dp_wr wr;
  const efa_wr_args a = Args(EFA_DP_OP_SEND, sge, 2, FI_REMOTE_CQ_DATA);
  ASSERT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  EXPECT_EQ(wr.op, static_cast<uint32_t>(EFA_DP_OP_SEND));
  EXPECT_EQ(wr.ah, 0x0102);
  EXPECT_EQ(wr.dest_qpn, 0x0304);
  EXPECT_EQ(wr.qkey, 0x05060708u);
  ASSERT_EQ(wr.num_sge, 2u);
  EXPECT_EQ(wr.sge[0].addr, 0x1000u);
  EXPECT_EQ(wr.sge[1].length, 50u);
  EXPECT_EQ(wr.sge[1].lkey, 8u);
  EXPECT_EQ(wr.flags, EFA_DP_WR_IMM);
  EXPECT_EQ(wr.imm, 0xdeadbeefu);  // the low 32 bits of data
  EXPECT_EQ(wr.context, 0xc0ffeeu);
}

TEST(EfaWr, WriteAndReadCarryRemoteAddressAndKey) {
  const efa_dp_sge sge{0x1000, 4096, 9};
  for (uint32_t op : {EFA_DP_OP_RDMA_WRITE, EFA_DP_OP_RDMA_READ}) {
    efa_dp_wr wr;
    const efa_wr_args a = Args(op, &sge, 1, 0);
    ASSERT_EQ(efa_wr_build(&a, &kLimits, &wr), 0) << op;
    EXPECT_EQ(wr.op, op);
    EXPECT_EQ(wr.remote_addr, 0x1122334455667788ull);
    EXPECT_EQ(wr.rkey, 0x00112233u);  // EFA keys are 32 bits
    EXPECT_EQ(wr.flags, 0u);
    EXPECT_EQ(wr.imm, 0u);
  }
  efa_dp_wr wr;
  const efa_wr_args w = Args(EFA_DP_OP_RDMA_WRITE, &sge, 1, FI_REMOTE_CQ_DATA | FI_MORE);
  ASSERT_EQ(efa_wr_build(&w, &kLimits, &wr), 0);
  EXPECT_EQ(wr.flags, EFA_DP_WR_IMM | EFA_DP_WR_MORE);
  EXPECT_EQ(wr.imm, 0xdeadbeefu);
}

TEST(EfaWr, ReadWithImmediateDataIsInvalid) {
  EXPECT_EQ(efa_wr_check_op(EFA_DP_OP_RDMA_READ, FI_REMOTE_CQ_DATA), -FI_EINVAL);
  EXPECT_EQ(efa_wr_check_op(EFA_DP_OP_RDMA_READ, FI_MORE), 0);
  EXPECT_EQ(efa_wr_check_op(EFA_DP_OP_RDMA_WRITE, FI_REMOTE_CQ_DATA), 0);
  EXPECT_EQ(efa_wr_check_op(EFA_DP_OP_SEND, FI_REMOTE_CQ_DATA), 0);
  const efa_dp_sge sge{0x1000, 16, 1};
  efa_dp_wr wr;
  // Checked before the size: an oversized read with immediate data is still -FI_EINVAL.
  const efa_dp_sge big{0x1000, (1u << 20) + 1, 1};
  efa_wr_args a = Args(EFA_DP_OP_RDMA_READ, &big, 1, FI_REMOTE_CQ_DATA);
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EINVAL);
  a.sge = &sge;
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EINVAL);
}

TEST(EfaWr, SizeLimitsPerOp) {
  efa_dp_wr wr;
  const efa_dp_sge mtu{0x1000, 8192, 1}, above_mtu{0x1000, 8193, 1};
  efa_wr_args a = Args(EFA_DP_OP_SEND, &mtu, 1, 0);
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  a.sge = &above_mtu;
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EMSGSIZE);
  // RDMA is bounded by max_rdma, not the MTU.
  for (uint32_t op : {EFA_DP_OP_RDMA_WRITE, EFA_DP_OP_RDMA_READ}) {
    const efa_dp_sge max{0x1000, 1u << 20, 1}, above{0x1000, (1u << 20) + 1, 1};
    a = Args(op, &above_mtu, 1, 0);
    EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), 0) << op;
    a.sge = &max;
    EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), 0) << op;
    a.sge = &above;
    EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EMSGSIZE) << op;
  }
  // Two SGEs count together.
  const efa_dp_sge two[2] = {{0x1000, 4096, 1}, {0x2000, 4097, 1}};
  a = Args(EFA_DP_OP_SEND, two, 2, 0);
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EMSGSIZE);
}

TEST(EfaWr, InjectIsInlineUpToMaxInline) {
  const uint8_t bytes[40] = {1, 2, 3};
  const efa_dp_sge fits{reinterpret_cast<uintptr_t>(bytes), 32, 0}, over{reinterpret_cast<uintptr_t>(bytes), 33, 0};
  efa_dp_wr wr;
  efa_wr_args a = Args(EFA_DP_OP_SEND, &fits, 1, FI_INJECT);
  ASSERT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  EXPECT_EQ(wr.flags, EFA_DP_WR_INLINE);
  a.sge = &over;
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EMSGSIZE);
}

TEST(EfaWr, FlagsAWqeDoesNotEncodeAreIgnoredAndSgeCountIsBounded) {
  const efa_dp_sge sge[3] = {{0x1000, 1, 1}, {0x2000, 1, 1}, {0x3000, 1, 1}};
  efa_dp_wr wr;
  efa_wr_args a = Args(EFA_DP_OP_SEND, sge, 1, FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE);
  ASSERT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  EXPECT_EQ(wr.flags, 0u);
  a.num_sge = 3;
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EINVAL);
  a.num_sge = 1;
  a.sge = nullptr;
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), -FI_EINVAL);
  a.num_sge = 0;  // a zero-length send names no buffer
  EXPECT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  EXPECT_EQ(wr.num_sge, 0u);
}

// What the SQ writes from a built request: the fields land in the WQE the NIC reads.
TEST(EfaWr, BuiltRequestPostsTheExpectedWqe) {
  std::vector<uint8_t> ring(8 * 64, 0xee);
  std::vector<uint64_t> scratch(efa_sq_scratch_size(8) / 8 + 1);
  uint32_t db = 0;
  efa_dp_wq_attr at{ring.data(), 64, 8, &db, 8};
  efa_sq sq;
  ASSERT_EQ(efa_sq_init(&sq, &at, 2, scratch.data(), scratch.size() * 8), 0);
  const efa_dp_sge sge{0x4000, 512, 0x77};
  efa_dp_wr wr;
  const efa_wr_args a = Args(EFA_DP_OP_RDMA_WRITE, &sge, 1, FI_REMOTE_CQ_DATA);
  ASSERT_EQ(efa_wr_build(&a, &kLimits, &wr), 0);
  ASSERT_EQ(efa_sq_post(&sq, &wr), 0);
  const auto* wqe = reinterpret_cast<const efa_io_tx_wqe*>(ring.data());
  EXPECT_EQ(efa_io_tx_meta_desc_get_op_type(&wqe->meta), EFA_IO_RDMA_WRITE);
  EXPECT_EQ(efa_io_tx_meta_desc_get_has_imm(&wqe->meta), 1);
  EXPECT_EQ(wqe->meta.immediate_data, 0xdeadbeefu);
  EXPECT_EQ(wqe->meta.ah, 0x0102);
  EXPECT_EQ(wqe->meta.dest_qp_num, 0x0304);
  EXPECT_EQ(wqe->meta.qkey, 0x05060708u);
  EXPECT_EQ(wqe->data.rdma_req.remote_mem.rkey, 0x00112233u);
  EXPECT_EQ(wqe->data.rdma_req.remote_mem.length, 512u);
  EXPECT_EQ(db, 1u);
}

}  // namespace
