// Round-trips every sub-byte accessor at its edges and checks the layouts
// against the reference and against the C11 compilation of the same header.
#include "device/efa_io_defs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "device/efa_io_c11_check.h"
#include "device/efa_io_layout.h"

namespace {

int CountTrailingZeros(uint32_t v) {
  int n = 0;
  while (v != 0 && (v & 1u) == 0) {
    v >>= 1;
    ++n;
  }
  return n;
}

// For one field: the mask is contiguous and matches its shift; writing 0, 1,
// max and an over-wide value reads back right; every other bit of the whole
// struct is left as it was, on both an all-zero and an all-one background.
template <typename S, typename W, typename V>
void CheckField(const char* name, W S::*word, V (*get)(const S*), void (*set)(S*, V), uint32_t mask,
                int shift) {
  SCOPED_TRACE(name);
  ASSERT_NE(mask, 0u);
  EXPECT_EQ(CountTrailingZeros(mask), shift);
  const uint32_t max = mask >> shift;
  EXPECT_EQ(max & (max + 1), 0u) << "mask is not contiguous";
  // The value type must be wide enough for the field.
  EXPECT_EQ(static_cast<uint32_t>(static_cast<V>(max)), max);

  for (unsigned char bg : {0x00, 0xff, 0xa5}) {
    S s;
    std::memset(&s, bg, sizeof(s));
    S before = s;
    const uint32_t word_before = static_cast<uint32_t>(s.*word);

    std::vector<uint32_t> values = {0, 1, max, max >> 1};
    for (uint32_t v : values) {
      set(&s, static_cast<V>(v));
      EXPECT_EQ(static_cast<uint32_t>(get(&s)), v);
      const uint32_t w = static_cast<uint32_t>(s.*word);
      EXPECT_EQ(w & ~mask, word_before & ~mask) << "neighbouring bits changed";
      EXPECT_EQ(w & mask, (v << shift) & mask);
      // Nothing outside the word changed either.
      S probe = s;
      probe.*word = before.*word;
      EXPECT_EQ(std::memcmp(&probe, &before, sizeof(S)), 0);
    }
    // A value wider than the field is truncated to the field.
    if (static_cast<uint64_t>(max) + 1 <= static_cast<uint64_t>(static_cast<V>(~V(0)))) {
      set(&s, static_cast<V>(max + 1));
      EXPECT_EQ(static_cast<uint32_t>(get(&s)), 0u);
      EXPECT_EQ(static_cast<uint32_t>(s.*word) & ~mask, word_before & ~mask);
    }
  }
}

#define CHECK_FIELD(stype, field, member, FIELD)                                                  \
  CheckField<stype>(#stype "." #field, &stype::member, stype##_get_##field, stype##_set_##field, \
                    FIELD##_MASK, FIELD##_SHIFT)

TEST(EfaIoDefs, TxMetaDescFields) {
  CHECK_FIELD(efa_io_tx_meta_desc, op_type, ctrl1, EFA_IO_TX_META_DESC_OP_TYPE);
  CHECK_FIELD(efa_io_tx_meta_desc, has_imm, ctrl1, EFA_IO_TX_META_DESC_HAS_IMM);
  CHECK_FIELD(efa_io_tx_meta_desc, inline_msg, ctrl1, EFA_IO_TX_META_DESC_INLINE_MSG);
  CHECK_FIELD(efa_io_tx_meta_desc, meta_extension, ctrl1, EFA_IO_TX_META_DESC_META_EXTENSION);
  CHECK_FIELD(efa_io_tx_meta_desc, meta_desc, ctrl1, EFA_IO_TX_META_DESC_META_DESC);
  CHECK_FIELD(efa_io_tx_meta_desc, phase, ctrl2, EFA_IO_TX_META_DESC_PHASE);
  CHECK_FIELD(efa_io_tx_meta_desc, first, ctrl2, EFA_IO_TX_META_DESC_FIRST);
  CHECK_FIELD(efa_io_tx_meta_desc, last, ctrl2, EFA_IO_TX_META_DESC_LAST);
  CHECK_FIELD(efa_io_tx_meta_desc, comp_req, ctrl2, EFA_IO_TX_META_DESC_COMP_REQ);
  CHECK_FIELD(efa_io_tx_meta_desc, processing_hints, ctrl3, EFA_IO_TX_META_DESC_PROCESSING_HINTS);
}

TEST(EfaIoDefs, BufAndRxDescFields) {
  CHECK_FIELD(efa_io_tx_buf_desc, lkey, lkey, EFA_IO_TX_BUF_DESC_LKEY);
  CHECK_FIELD(efa_io_rx_desc, lkey, lkey_ctrl, EFA_IO_RX_DESC_LKEY);
  CHECK_FIELD(efa_io_rx_desc, first, lkey_ctrl, EFA_IO_RX_DESC_FIRST);
  CHECK_FIELD(efa_io_rx_desc, last, lkey_ctrl, EFA_IO_RX_DESC_LAST);
}

TEST(EfaIoDefs, CdescCommonFields) {
  CHECK_FIELD(efa_io_cdesc_common, phase, flags, EFA_IO_CDESC_COMMON_PHASE);
  CHECK_FIELD(efa_io_cdesc_common, q_type, flags, EFA_IO_CDESC_COMMON_Q_TYPE);
  CHECK_FIELD(efa_io_cdesc_common, has_imm, flags, EFA_IO_CDESC_COMMON_HAS_IMM);
  CHECK_FIELD(efa_io_cdesc_common, op_type, flags, EFA_IO_CDESC_COMMON_OP_TYPE);
  CHECK_FIELD(efa_io_cdesc_common, unsolicited, flags, EFA_IO_CDESC_COMMON_UNSOLICITED);
}

// The masks of one word never overlap and cover exactly the non-MBZ bits.
TEST(EfaIoDefs, MasksPartitionTheirWords) {
  EXPECT_EQ(EFA_IO_TX_META_DESC_OP_TYPE_MASK | EFA_IO_TX_META_DESC_HAS_IMM_MASK |
                EFA_IO_TX_META_DESC_INLINE_MSG_MASK | EFA_IO_TX_META_DESC_META_EXTENSION_MASK |
                EFA_IO_TX_META_DESC_META_DESC_MASK,
            0xffu);
  EXPECT_EQ(EFA_IO_TX_META_DESC_OP_TYPE_MASK + EFA_IO_TX_META_DESC_HAS_IMM_MASK +
                EFA_IO_TX_META_DESC_INLINE_MSG_MASK + EFA_IO_TX_META_DESC_META_EXTENSION_MASK +
                EFA_IO_TX_META_DESC_META_DESC_MASK,
            0xffu);
  EXPECT_EQ(EFA_IO_TX_META_DESC_PHASE_MASK + EFA_IO_TX_META_DESC_FIRST_MASK +
                EFA_IO_TX_META_DESC_LAST_MASK + EFA_IO_TX_META_DESC_COMP_REQ_MASK,
            0x1du);  // bit 1 and bits 7:5 are MBZ
  EXPECT_EQ(EFA_IO_RX_DESC_LKEY_MASK + EFA_IO_RX_DESC_FIRST_MASK + EFA_IO_RX_DESC_LAST_MASK,
            0xc0ffffffu);  // bits 29:24 are MBZ
  EXPECT_EQ(EFA_IO_CDESC_COMMON_PHASE_MASK + EFA_IO_CDESC_COMMON_Q_TYPE_MASK +
                EFA_IO_CDESC_COMMON_HAS_IMM_MASK + EFA_IO_CDESC_COMMON_OP_TYPE_MASK +
                EFA_IO_CDESC_COMMON_UNSOLICITED_MASK,
            0xffu);
  EXPECT_EQ(EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK + EFA_IO_REGS_CQ_DB_CMD_SN_MASK +
                EFA_IO_REGS_CQ_DB_ARM_MASK,
            0xe000ffffu);
}

TEST(EfaIoDefs, EnumValues) {
  EXPECT_EQ(EFA_IO_SEND_QUEUE, 1);
  EXPECT_EQ(EFA_IO_RECV_QUEUE, 2);
  EXPECT_EQ(EFA_IO_SEND, 0);
  EXPECT_EQ(EFA_IO_RDMA_READ, 1);
  EXPECT_EQ(EFA_IO_RDMA_WRITE, 2);
  EXPECT_EQ(EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE, 1);
  EXPECT_EQ(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_OP_TYPE, 3);
  EXPECT_EQ(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE, 15);
  EXPECT_EQ(EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH, 18);
  EXPECT_EQ(EFA_IO_TX_DESC_INLINE_MAX_SIZE, 32);
  EXPECT_EQ(EFA_IO_TX_DESC_INLINE_MAX_SIZE_128, 80);
}

// Byte images that pin the masks to the positions in the reference tables.
TEST(EfaIoDefs, MetaDescBytes) {
  efa_io_tx_wqe wqe;
  std::memset(&wqe, 0, sizeof(wqe));
  efa_io_tx_meta_desc_set_op_type(&wqe.meta, EFA_IO_RDMA_WRITE);
  efa_io_tx_meta_desc_set_meta_desc(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_phase(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_comp_req(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_processing_hints(&wqe.meta, EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE);
  const auto* b = reinterpret_cast<const uint8_t*>(&wqe);
  EXPECT_EQ(b[2], 0x82);
  EXPECT_EQ(b[3], 0x11);
  EXPECT_EQ(b[14], 0x01);

  efa_io_rx_desc rx;
  std::memset(&rx, 0, sizeof(rx));
  efa_io_rx_desc_set_lkey(&rx, 0x123456);
  efa_io_rx_desc_set_first(&rx, 1);
  efa_io_rx_desc_set_last(&rx, 1);
  EXPECT_EQ(rx.lkey_ctrl, 0xc0123456u);
}

TEST(EfaIoDefs, CqDoorbell) {
  EXPECT_EQ(efa_io_cq_db_make(0, 0, 0), 0u);
  EXPECT_EQ(efa_io_cq_db_make(0xffff, 3, 1), 0xe000ffffu);
  EXPECT_EQ(efa_io_cq_db_make(0x1234, 2, 0), 0x40001234u);
  EXPECT_EQ(efa_io_cq_db_make(0x1234, 4, 0), 0x00001234u);  // cmd_sn is 2 bits
  EXPECT_EQ(efa_io_cq_db_make(5, 0, 2), 5u);                 // arm is 1 bit
  const uint32_t db = efa_io_cq_db_make(0xbeef, 1, 1);
  EXPECT_EQ(efa_io_cq_db_get_consumer_index(db), 0xbeef);
  EXPECT_EQ(efa_io_cq_db_get_cmd_sn(db), 1u);
  EXPECT_EQ(efa_io_cq_db_get_arm(db), 1u);
}

TEST(EfaIoDefs, AddressesAndRequestIds) {
  for (uint64_t a : {uint64_t{0}, uint64_t{0xffffffffffffffffull}, uint64_t{0x0123456789abcdefull}}) {
    efa_io_tx_buf_desc t{};
    efa_io_tx_buf_desc_set_addr(&t, a);
    EXPECT_EQ(efa_io_tx_buf_desc_get_addr(&t), a);
    EXPECT_EQ(t.buf_addr_lo, static_cast<uint32_t>(a));
    EXPECT_EQ(t.buf_addr_hi, static_cast<uint32_t>(a >> 32));
    efa_io_remote_mem_addr r{};
    efa_io_remote_mem_addr_set_addr(&r, a);
    EXPECT_EQ(efa_io_remote_mem_addr_get_addr(&r), a);
    efa_io_rx_desc x{};
    efa_io_rx_desc_set_addr(&x, a);
    EXPECT_EQ(efa_io_rx_desc_get_addr(&x), a);
    efa_io_req_id_ex ex{};
    efa_io_req_id_ex_set(&ex, a);
    EXPECT_EQ(efa_io_req_id_ex_get(&ex, static_cast<uint16_t>(a)), a);
  }
}

TEST(EfaIoDefs, RxByteLength) {
  efa_io_rx_cdesc_ex c;
  std::memset(&c, 0, sizeof(c));
  c.base.length = 0xffff;
  c.u.rdma_write.length_hi = 0x12;
  efa_io_cdesc_common_set_op_type(&c.base.common, EFA_IO_SEND);
  EXPECT_EQ(efa_io_rx_cdesc_ex_byte_len(&c), 0xffffu);  // length_hi only counts for RDMA write
  efa_io_cdesc_common_set_op_type(&c.base.common, EFA_IO_RDMA_WRITE);
  EXPECT_EQ(efa_io_rx_cdesc_ex_byte_len(&c), 0x12ffffu);
}

// The reference's sizes (the offsets are static_asserted in the header).
TEST(EfaIoDefs, Sizes) {
  EXPECT_EQ(sizeof(efa_io_tx_meta_desc), 32u);
  EXPECT_EQ(sizeof(efa_io_tx_buf_desc), 16u);
  EXPECT_EQ(sizeof(efa_io_remote_mem_addr), 16u);
  EXPECT_EQ(sizeof(efa_io_rdma_req), 32u);
  EXPECT_EQ(sizeof(efa_io_rdma_req_128), 96u);
  EXPECT_EQ(sizeof(efa_io_tx_wqe), 64u);
  EXPECT_EQ(sizeof(efa_io_tx_wqe_128), 128u);
  EXPECT_EQ(sizeof(efa_io_rx_desc), 16u);
  EXPECT_EQ(sizeof(efa_io_cdesc_common), 6u);
  EXPECT_EQ(sizeof(efa_io_tx_cdesc), 16u);
  EXPECT_EQ(sizeof(efa_io_rx_cdesc), 16u);
  EXPECT_EQ(sizeof(efa_io_rx_cdesc_ex), 32u);
  EXPECT_EQ(offsetof(efa_io_tx_wqe_128, data.rdma_req_128.inline_data), 48u);
}

TEST(EfaIoDefs, C11LayoutMatchesCxx) {
#define SIZE_(s) sizeof(s),
#define FIELD_(s, m) offsetof(s, m),
  const std::vector<size_t> cxx = {EFA_IO_LAYOUT_LIST(SIZE_, FIELD_)};
#undef SIZE_
#undef FIELD_
#define SIZE_(s) #s,
#define FIELD_(s, m) #s "." #m,
  const std::vector<std::string> names = {EFA_IO_LAYOUT_LIST(SIZE_, FIELD_)};
#undef SIZE_
#undef FIELD_
  ASSERT_EQ(efa_io_c11_layout_len, cxx.size());
  for (size_t i = 0; i < cxx.size(); ++i) EXPECT_EQ(efa_io_c11_layout[i], cxx[i]) << names[i];
}

TEST(EfaIoDefs, C11AccessorsMatchCxx) {
  uint8_t c_bytes[EFA_IO_TX_WQE_SIZE];
  efa_io_c11_build_send_wqe(c_bytes);

  efa_io_tx_wqe wqe;
  std::memset(&wqe, 0, sizeof(wqe));
  wqe.meta.req_id = 0x1234;
  efa_io_tx_meta_desc_set_op_type(&wqe.meta, EFA_IO_SEND);
  efa_io_tx_meta_desc_set_has_imm(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_meta_desc(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_phase(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_first(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_last(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_comp_req(&wqe.meta, 1);
  wqe.meta.dest_qp_num = 7;
  wqe.meta.length = 1;
  wqe.meta.immediate_data = 0xdeadbeef;
  wqe.meta.ah = 3;
  wqe.meta.qkey = 0x11223344;
  wqe.data.sgl[0].length = 4096;
  efa_io_tx_buf_desc_set_lkey(&wqe.data.sgl[0], 0xabcdef);
  efa_io_tx_buf_desc_set_addr(&wqe.data.sgl[0], 0x0102030405060708ull);
  EXPECT_EQ(std::memcmp(c_bytes, &wqe, sizeof(wqe)), 0);
  // Spot-check the bytes themselves.
  EXPECT_EQ(c_bytes[2], 0x90);  // meta_desc | has_imm | SEND
  EXPECT_EQ(c_bytes[3], 0x1d);  // comp_req | last | first | phase
  EXPECT_EQ(c_bytes[40], 0x08); // sgl[0].buf_addr_lo low byte
}

}  // namespace
