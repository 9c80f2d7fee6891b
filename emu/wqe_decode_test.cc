// decode_wqe on hand-built WQEs: every op, every malformed framing, every length limit, and the
// status each gets, per generation and WQE size.
#include "emu/wqe_decode.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "device/efa_io_defs.h"
#include "emu/profile.h"

namespace xpufab {
namespace emu {
namespace {

constexpr uint8_t kOk = EFA_IO_COMP_STATUS_OK;
constexpr uint8_t kFraming = EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR;
constexpr uint8_t kUnsupported = EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP;
constexpr uint8_t kBadLength = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;

const Profile& gen(const char* name) { return *find_profile(name); }

// A well-framed WQE of `size` bytes (64 or 128) with header fields set.
struct Wqe {
  std::vector<uint8_t> bytes;
  explicit Wqe(uint8_t op, uint32_t size = EFA_IO_TX_WQE_SIZE) : bytes(size, 0) {
    efa_io_tx_meta_desc* m = meta();
    m->req_id = 0x1234;
    m->req_id_ex.w[0] = 0xaaaa;
    m->req_id_ex.w[2] = 0x5555;
    efa_io_tx_meta_desc_set_op_type(m, op);
    efa_io_tx_meta_desc_set_meta_desc(m, 1);
    efa_io_tx_meta_desc_set_first(m, 1);
    efa_io_tx_meta_desc_set_last(m, 1);
    efa_io_tx_meta_desc_set_comp_req(m, 1);
    m->dest_qp_num = 7;
    m->ah = 3;
    m->qkey = 0x11;
  }
  efa_io_tx_meta_desc* meta() { return reinterpret_cast<efa_io_tx_meta_desc*>(bytes.data()); }
  uint8_t* data() { return bytes.data() + offsetof(efa_io_tx_wqe, data); }
  void sge(uint32_t i, uint32_t lkey, uint64_t addr, uint32_t len) {
    efa_io_tx_buf_desc d;
    std::memset(&d, 0, sizeof(d));
    d.length = len;
    efa_io_tx_buf_desc_set_lkey(&d, lkey);
    efa_io_tx_buf_desc_set_addr(&d, addr);
    std::memcpy(data() + i * sizeof(d), &d, sizeof(d));
    meta()->length = static_cast<uint16_t>(i + 1);
  }
  void remote(uint64_t addr, uint32_t rkey, uint32_t len) {
    efa_io_remote_mem_addr r;
    std::memset(&r, 0, sizeof(r));
    efa_io_remote_mem_addr_set_addr(&r, addr);
    r.rkey = rkey;
    r.length = len;
    std::memcpy(data(), &r, sizeof(r));
  }
  void local(uint32_t lkey, uint64_t addr, uint32_t len) {
    efa_io_tx_buf_desc d;
    std::memset(&d, 0, sizeof(d));
    d.length = len;
    efa_io_tx_buf_desc_set_lkey(&d, lkey);
    efa_io_tx_buf_desc_set_addr(&d, addr);
    std::memcpy(data() + sizeof(efa_io_remote_mem_addr), &d, sizeof(d));
    meta()->length = EFA_IO_TX_DESC_NUM_RDMA_BUFS;
  }
  void inline_len(uint16_t n) {
    efa_io_tx_meta_desc_set_inline_msg(meta(), 1);
    meta()->length = n;
  }
  WqeDecode decode(const Profile& p = default_profile()) {
    return decode_wqe(bytes.data(), static_cast<uint32_t>(bytes.size()), p);
  }
};

TEST(WqeDecode, SendInline) {
  Wqe w(EFA_IO_SEND);
  w.inline_len(5);
  std::memcpy(w.data(), "hello", 5);
  efa_io_tx_meta_desc_set_has_imm(w.meta(), 1);
  w.meta()->immediate_data = 0xfeed;
  WqeDecode d = w.decode();
  ASSERT_EQ(d.status, kOk);
  const WqeRequest& r = d.req;
  EXPECT_EQ(r.op, EFA_IO_SEND);
  EXPECT_EQ(r.cqe_op, EFA_IO_SEND);
  EXPECT_TRUE(r.comp_req);
  EXPECT_EQ(r.req_id, 0x1234);
  EXPECT_EQ(r.req_id_ex.w[0], 0xaaaa);
  EXPECT_EQ(r.req_id_ex.w[2], 0x5555);
  EXPECT_EQ(r.ah, 3);
  EXPECT_EQ(r.dest_qpn, 7);
  EXPECT_EQ(r.qkey, 0x11u);
  EXPECT_TRUE(r.has_imm);
  EXPECT_EQ(r.imm, 0xfeedu);
  ASSERT_TRUE(r.is_inline);
  EXPECT_EQ(r.inline_data, w.data());  // a span of the WQE itself
  ASSERT_EQ(r.inline_len, 5u);
  EXPECT_EQ(std::memcmp(r.inline_data, "hello", 5), 0);
}

TEST(WqeDecode, SendInlineLimits) {
  Wqe w64(EFA_IO_SEND);
  w64.inline_len(EFA_IO_TX_DESC_INLINE_MAX_SIZE);
  EXPECT_EQ(w64.decode().status, kOk);
  w64.inline_len(EFA_IO_TX_DESC_INLINE_MAX_SIZE + 1);
  EXPECT_EQ(w64.decode().status, kBadLength);
  Wqe w128(EFA_IO_SEND, EFA_IO_TX_WQE_128_SIZE);
  w128.inline_len(EFA_IO_TX_DESC_INLINE_MAX_SIZE_128);
  WqeDecode d = w128.decode();
  ASSERT_EQ(d.status, kOk);
  EXPECT_EQ(d.req.inline_len, uint32_t{EFA_IO_TX_DESC_INLINE_MAX_SIZE_128});
  w128.inline_len(EFA_IO_TX_DESC_INLINE_MAX_SIZE_128 + 1);
  EXPECT_EQ(w128.decode().status, kBadLength);
  // The MTU bounds inline data too.
  Profile small_mtu = default_profile();
  small_mtu.mtu = 16;
  w64.inline_len(17);
  EXPECT_EQ(w64.decode(small_mtu).status, kBadLength);
  w64.inline_len(16);
  EXPECT_EQ(w64.decode(small_mtu).status, kOk);
}

TEST(WqeDecode, SendFromBuffers) {
  Wqe w(EFA_IO_SEND);
  WqeDecode d = w.decode();  // no SGE: an empty message
  ASSERT_EQ(d.status, kOk);
  EXPECT_EQ(d.req.num_sge, 0u);
  EXPECT_FALSE(d.req.is_inline);
  w.sge(0, 0x10001, 0x1000, 100);
  w.sge(1, 0x20002, 0x2000, 200);
  d = w.decode();
  ASSERT_EQ(d.status, kOk);
  ASSERT_EQ(d.req.num_sge, 2u);
  EXPECT_EQ(d.req.sge[0].lkey, 0x10001u);
  EXPECT_EQ(d.req.sge[0].addr, 0x1000u);
  EXPECT_EQ(d.req.sge[0].length, 100u);
  EXPECT_FALSE(d.req.sge[0].lkey_reserved);
  EXPECT_EQ(d.req.sge[1].lkey, 0x20002u);
  EXPECT_EQ(d.req.sge[1].addr, 0x2000u);
  EXPECT_EQ(d.req.sge[1].length, 200u);
  // Reserved key bits are reported for the device's key check (INVALID_LKEY there).
  uint32_t raw = 0x01000005;
  std::memcpy(w.data() + offsetof(efa_io_tx_buf_desc, lkey), &raw, 4);
  d = w.decode();
  ASSERT_EQ(d.status, kOk);
  EXPECT_TRUE(d.req.sge[0].lkey_reserved);
  EXPECT_EQ(d.req.sge[0].lkey, 5u);
  // The gathered total is not the decoder's to judge (an invalid key outranks it).
  w.sge(0, 1, 0x1000, 0xffffffffu);
  EXPECT_EQ(w.decode().status, kOk);
}

TEST(WqeDecode, SendSgeCount) {
  Wqe w(EFA_IO_SEND);
  w.meta()->length = EFA_IO_TX_DESC_NUM_BUFS + 1;
  EXPECT_EQ(w.decode().status, kBadLength);
  Profile one_sge = default_profile();
  one_sge.max_sq_sge = 1;
  w.meta()->length = 2;
  EXPECT_EQ(w.decode(one_sge).status, kBadLength);
  w.meta()->length = 1;
  EXPECT_EQ(w.decode(one_sge).status, kOk);
}

TEST(WqeDecode, RdmaRead) {
  Wqe w(EFA_IO_RDMA_READ);
  w.remote(0xabcdef012345ull, 0x77, 4096);
  w.local(0x30003, 0x5000, 4096);
  WqeDecode d = w.decode();
  ASSERT_EQ(d.status, kOk);
  EXPECT_EQ(d.req.op, EFA_IO_RDMA_READ);
  EXPECT_EQ(d.req.cqe_op, EFA_IO_RDMA_READ);
  EXPECT_EQ(d.req.remote_addr, 0xabcdef012345ull);
  EXPECT_EQ(d.req.rkey, 0x77u);
  EXPECT_EQ(d.req.length, 4096u);
  EXPECT_EQ(d.req.local.lkey, 0x30003u);
  EXPECT_EQ(d.req.local.addr, 0x5000u);
  EXPECT_EQ(d.req.local.length, 4096u);
  EXPECT_FALSE(d.req.is_inline);
  // A generation without RDMA read, immediate data or inline data on a read.
  EXPECT_EQ(w.decode(gen("gen1")).status, kUnsupported);
  EXPECT_EQ(w.decode(gen("gen2")).status, kOk);
  efa_io_tx_meta_desc_set_has_imm(w.meta(), 1);
  EXPECT_EQ(w.decode().status, kUnsupported);
  efa_io_tx_meta_desc_set_has_imm(w.meta(), 0);
  efa_io_tx_meta_desc_set_inline_msg(w.meta(), 1);
  EXPECT_EQ(w.decode().status, kUnsupported);
}

TEST(WqeDecode, RdmaWrite) {
  Wqe w(EFA_IO_RDMA_WRITE);
  w.remote(0x9000, 0x88, 64);
  w.local(0x40004, 0x6000, 64);
  efa_io_tx_meta_desc_set_has_imm(w.meta(), 1);
  w.meta()->immediate_data = 42;
  WqeDecode d = w.decode();
  ASSERT_EQ(d.status, kOk);
  EXPECT_EQ(d.req.op, EFA_IO_RDMA_WRITE);
  EXPECT_EQ(d.req.cqe_op, EFA_IO_RDMA_WRITE);
  EXPECT_TRUE(d.req.has_imm);
  EXPECT_EQ(d.req.imm, 42u);
  EXPECT_EQ(d.req.remote_addr, 0x9000u);
  EXPECT_EQ(d.req.local.lkey, 0x40004u);
  EXPECT_EQ(w.decode(gen("gen2")).status, kUnsupported);
  EXPECT_EQ(w.decode(gen("gen3")).status, kOk);
}

TEST(WqeDecode, RdmaWriteInline) {
  Wqe w(EFA_IO_RDMA_WRITE, EFA_IO_TX_WQE_128_SIZE);
  w.remote(0x9000, 0x88, 80);
  w.inline_len(80);
  WqeDecode d = w.decode();
  ASSERT_EQ(d.status, kOk);
  ASSERT_TRUE(d.req.is_inline);
  EXPECT_EQ(d.req.inline_data, w.data() + sizeof(efa_io_remote_mem_addr));
  EXPECT_EQ(d.req.inline_len, 80u);
  EXPECT_EQ(d.req.inline_data + d.req.inline_len, w.bytes.data() + w.bytes.size());
  // Only the 128-byte WQE has room for it.
  Wqe w64(EFA_IO_RDMA_WRITE);
  w64.remote(0x9000, 0x88, 16);
  w64.inline_len(16);
  EXPECT_EQ(w64.decode().status, kUnsupported);
  // Inline length must equal the remote length and fit.
  w.inline_len(79);
  EXPECT_EQ(w.decode().status, kBadLength);
  w.remote(0x9000, 0x88, 81);
  w.inline_len(81);
  EXPECT_EQ(w.decode().status, kBadLength);
}

TEST(WqeDecode, RdmaLengths) {
  Wqe w(EFA_IO_RDMA_WRITE);
  w.remote(0x9000, 0x88, 64);
  w.local(1, 0x6000, 64);
  ASSERT_EQ(w.decode().status, kOk);
  w.meta()->length = 0;  // local buffer count other than one
  EXPECT_EQ(w.decode().status, kBadLength);
  w.meta()->length = 2;
  EXPECT_EQ(w.decode().status, kBadLength);
  w.local(1, 0x6000, 63);  // local length other than the remote one
  EXPECT_EQ(w.decode().status, kBadLength);
  Profile small = default_profile();
  small.max_rdma_size = 63;
  w.local(1, 0x6000, 64);
  EXPECT_EQ(w.decode(small).status, kBadLength);
  small.max_rdma_size = 64;
  EXPECT_EQ(w.decode(small).status, kOk);
}

TEST(WqeDecode, UnknownOps) {
  for (uint8_t op = EFA_IO_RDMA_WRITE + 1; op <= 15; ++op) {
    Wqe w(op);
    WqeDecode d = w.decode();
    EXPECT_EQ(d.status, kUnsupported) << int{op};
    EXPECT_EQ(d.req.op, op);
    EXPECT_EQ(d.req.cqe_op, EFA_IO_SEND) << "the completion reports a SEND";
    EXPECT_EQ(d.req.req_id, 0x1234);
  }
}

TEST(WqeDecode, MalformedFraming) {
  using Spoil = void (*)(efa_io_tx_meta_desc*);
  const Spoil spoils[] = {
      [](efa_io_tx_meta_desc* m) { efa_io_tx_meta_desc_set_meta_desc(m, 0); },
      [](efa_io_tx_meta_desc* m) { efa_io_tx_meta_desc_set_first(m, 0); },
      [](efa_io_tx_meta_desc* m) { efa_io_tx_meta_desc_set_last(m, 0); },
      [](efa_io_tx_meta_desc* m) { efa_io_tx_meta_desc_set_meta_extension(m, 1); },
  };
  for (uint8_t op : {uint8_t{EFA_IO_SEND}, uint8_t{EFA_IO_RDMA_READ}, uint8_t{EFA_IO_RDMA_WRITE}, uint8_t{9}}) {
    for (uint32_t size : {uint32_t{EFA_IO_TX_WQE_SIZE}, uint32_t{EFA_IO_TX_WQE_128_SIZE}}) {
      for (Spoil spoil : spoils) {
        Wqe w(op, size);
        spoil(w.meta());
        WqeDecode d = w.decode();
        EXPECT_EQ(d.status, kFraming);  // framing outranks an unknown op
        EXPECT_EQ(d.req.req_id, 0x1234);
        EXPECT_TRUE(d.req.comp_req);
      }
      for (uint8_t bit : {uint8_t{0x02}, uint8_t{0x20}, uint8_t{0x40}, uint8_t{0x80}}) {  // ctrl2 MBZ bits
        Wqe w(op, size);
        w.meta()->ctrl2 |= bit;
        EXPECT_EQ(w.decode().status, kFraming) << int{bit};
      }
      for (uint8_t bit = 0x04; bit != 0; bit = static_cast<uint8_t>(bit << 1)) {  // ctrl3 MBZ bits
        Wqe w(op, size);
        w.meta()->ctrl3 |= bit;
        EXPECT_EQ(w.decode().status, kFraming) << int{bit};
      }
    }
  }
  // Processing hints (ctrl3[1:0]), the phase and comp_req are not framing.
  Wqe w(EFA_IO_SEND);
  w.meta()->ctrl3 = EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE | 2;
  efa_io_tx_meta_desc_set_phase(w.meta(), 1);
  efa_io_tx_meta_desc_set_comp_req(w.meta(), 0);
  WqeDecode d = w.decode();
  EXPECT_EQ(d.status, kOk);
  EXPECT_FALSE(d.req.comp_req);
}

TEST(WqeDecode, Precedence) {
  // An unsupported op outranks a bad length.
  Wqe w(EFA_IO_RDMA_READ);
  w.remote(0, 1, 8);
  w.local(1, 0, 9);
  EXPECT_EQ(w.decode(gen("gen1")).status, kUnsupported);
  EXPECT_EQ(w.decode(gen("gen2")).status, kBadLength);
}

TEST(WqeLength, BytesMoved) {
  Wqe s(EFA_IO_SEND);
  s.inline_len(12);
  EXPECT_EQ(wqe_length(s.bytes.data()), 12u);
  Wqe g(EFA_IO_SEND);
  g.sge(0, 1, 0, 100);
  g.sge(1, 1, 0, 28);
  EXPECT_EQ(wqe_length(g.bytes.data()), 128u);
  g.meta()->length = 9;  // malformed count: at most the two SGEs a WQE has
  EXPECT_EQ(wqe_length(g.bytes.data()), 128u);
  Wqe r(EFA_IO_RDMA_READ);
  r.remote(0, 1, 4096);
  EXPECT_EQ(wqe_length(r.bytes.data()), 4096u);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
