// Fuzz target, two stages over the same bytes. fuzz_decode: the bytes are TX WQEs given straight
// to the decoder (emu/wqe_decode.h) for every generation and both WQE sizes; it must read nothing
// past the WQE, and what it accepts must satisfy the generation's limits. fuzz_one: the bytes
// become SQ WQEs and RX descriptors of an emulated device pair; the engine must never touch
// memory outside registered buffers and its queues, never crash, and only write CQEs with
// statuses the hardware defines. Built two ways: with libFuzzer by run_wqe_fuzzer.sh (clang,
// -fsanitize=fuzzer,address) and as a gtest smoke run (wqe_fuzz_test.cc) over a fixed set of
// generated inputs.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device/efa_cq.h"
#include "device/efa_io_defs.h"
#include "emu/device.h"
#include "emu/profile.h"
#include "emu/wqe_decode.h"

namespace xpufab {
namespace emu {
namespace {

using namespace ::xpufab::backend;

bool defined_status(uint8_t s) {
  return s <= EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE ||
         s == EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH;
}

struct End {
  std::unique_ptr<EmuDevice> dev;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp64 = nullptr;
  Qp* qp128 = nullptr;
  Mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  efa_cq cqp{};
  WqAttr sq64{}, rq64{}, sq128{}, rq128{};
  uint32_t pc64 = 0, pc128 = 0, rpc = 0;
};

struct World {
  std::shared_ptr<InProcFabric> fabric = std::make_shared<InProcFabric>();
  End a, b;
  std::vector<Ah*> ahs;
  uint64_t stale_seen = 0;
};

void bring_up(Qp* qp);

Qp* make_qp(End* e, uint32_t flags) {
  QpInitAttr q;
  q.pd = e->pd;
  q.send_cq = e->cq;
  q.recv_cq = e->cq;
  q.max_send_wr = 64;
  q.max_recv_wr = 64;
  q.max_send_sge = 2;
  q.max_recv_sge = 2;
  q.flags = flags;
  Qp* qp = nullptr;
  if (e->dev->create_qp(q, &qp) != 0) std::abort();
  bring_up(qp);
  return qp;
}

void bring_up(Qp* qp) {
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = 0x11;
  qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey);
  a.state = QpState::kRtr;
  qp->modify(a, kQpAttrState);
  a.state = QpState::kRts;
  a.rnr_retry = 1;  // bounded: an unanswered SEND must finish
  qp->modify(a, kQpAttrState | kQpAttrSqPsn | kQpAttrRnrRetry);
}

void open_end(World* w, End* e) {
  DeviceOptions o;
  o.fabric = w->fabric;
  o.engine_thread = false;
  o.unreach_timeout_us = 50;
  o.response_timeout_us = 100;
  o.rnr_delay_us = 1;
  if (create_device(o, &e->dev) != 0) std::abort();
  e->dev->alloc_pd(&e->pd);
  MrInitAttr m;
  m.addr = e->buf.data();
  m.length = e->buf.size();
  DeviceAttr da{};
  e->dev->query(&da);
  m.access = served_access(kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite, da.device_caps);
  e->dev->reg_mr(e->pd, m, &e->mr);
  CqInitAttr c;
  c.entries = 1024;
  c.with_sgid = true;
  e->dev->create_cq(c, &e->cq);
  CqAttr ca;
  e->cq->query(&ca);
  efa_dp_cq_attr cqa = {ca.buffer, ca.entry_size, ca.num_entries, ca.doorbell};
  efa_cq_init(&e->cqp, &cqa);
  e->qp64 = make_qp(e, 0);
  e->qp128 = make_qp(e, kQpInlineWrite | kQpUnsolicitedWriteRecv);
  e->qp64->query_wqs(&e->sq64, &e->rq64);
  e->qp128->query_wqs(&e->sq128, &e->rq128);
}

World* world() {
  static World* w = [] {
    auto* nw = new World();
    open_end(nw, &nw->a);
    open_end(nw, &nw->b);
    Gid gb = nw->b.dev->gid(), ga = nw->a.dev->gid();
    uint8_t none[16] = {0xfe, 0x80, 1};
    Ah* ah = nullptr;
    nw->a.dev->create_ah(nw->a.pd, gb.data(), &ah);  // ahn 0: the peer
    nw->ahs.push_back(ah);
    nw->a.dev->create_ah(nw->a.pd, ga.data(), &ah);  // ahn 1: ourselves
    nw->ahs.push_back(ah);
    nw->a.dev->create_ah(nw->a.pd, none, &ah);       // ahn 2: nobody
    nw->ahs.push_back(ah);
    nw->b.dev->create_ah(nw->b.pd, ga.data(), &ah);
    return nw;
  }();
  return w;
}

void check_cqes(End* e) {
  efa_dp_cqe c;
  while (efa_cq_poll(&e->cqp, &c) == 0) {
    if (!defined_status(c.status)) std::abort();
    if (c.q_type != EFA_IO_SEND_QUEUE && c.q_type != EFA_IO_RECV_QUEUE) std::abort();
    if (c.qp_num != e->qp64->qpn() && c.qp_num != e->qp128->qpn()) std::abort();
  }
  efa_cq_update_db(&e->cqp, 0);
}

// Keeps fuzzed addresses near the registered buffers most of the time so that deep paths run;
// the rest stay arbitrary.
void steer(uint8_t* p, size_t off, uint64_t base, uint8_t sel) {
  if ((sel & 3) == 0) return;
  uint64_t v;
  std::memcpy(&v, p + off, 8);
  v = base + (v % (1u << 17)) - (1u << 15);
  std::memcpy(p + off, &v, 8);
}

void check_decode(const uint8_t* wqe, uint32_t wqe_size, const Profile& p) {
  WqeDecode d = decode_wqe(wqe, wqe_size, p);
  const WqeRequest& r = d.req;
  if (d.status != EFA_IO_COMP_STATUS_OK && d.status != EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR &&
      d.status != EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP &&
      d.status != EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH) {
    std::abort();
  }
  if (r.cqe_op > EFA_IO_RDMA_WRITE) std::abort();
  if (d.status != EFA_IO_COMP_STATUS_OK) return;
  if (r.op > EFA_IO_RDMA_WRITE) std::abort();
  if (r.op == EFA_IO_RDMA_READ && (!(p.device_caps & kCapRdmaRead) || r.has_imm || r.is_inline)) std::abort();
  if (r.op == EFA_IO_RDMA_WRITE && !(p.device_caps & kCapRdmaWrite)) std::abort();
  if (r.is_inline) {
    if (r.inline_data < wqe || r.inline_data + r.inline_len > wqe + wqe_size) std::abort();
    if (r.op == EFA_IO_SEND && r.inline_len > p.mtu) std::abort();
    if (r.op == EFA_IO_RDMA_WRITE && (wqe_size != EFA_IO_TX_WQE_128_SIZE || r.inline_len != r.length)) std::abort();
  }
  if (r.op == EFA_IO_SEND && !r.is_inline && r.num_sge > std::min<uint32_t>(p.max_sq_sge, EFA_IO_TX_DESC_NUM_BUFS)) {
    std::abort();
  }
  if (r.op != EFA_IO_SEND) {
    if (r.length > p.max_rdma_size) std::abort();
    if (!r.is_inline && r.local.length != r.length) std::abort();
  }
}

}  // namespace

int fuzz_decode(const uint8_t* data, size_t size) {
  for (size_t pos = 0; pos < size; pos += EFA_IO_TX_WQE_128_SIZE) {
    size_t n = std::min<size_t>(EFA_IO_TX_WQE_128_SIZE, size - pos);
    for (uint32_t wqe_size : {uint32_t{EFA_IO_TX_WQE_SIZE}, uint32_t{EFA_IO_TX_WQE_128_SIZE}}) {
      // Exactly wqe_size bytes on the heap, so that a read past the WQE trips ASan.
      std::vector<uint8_t> wqe(wqe_size, 0);
      std::memcpy(wqe.data(), data + pos, std::min<size_t>(n, wqe_size));
      for (const Profile* p : all_profiles()) check_decode(wqe.data(), wqe_size, *p);
      // Well framed, so that the op and length checks run more often.
      auto* meta = reinterpret_cast<efa_io_tx_meta_desc*>(wqe.data());
      efa_io_tx_meta_desc_set_meta_desc(meta, 1);
      efa_io_tx_meta_desc_set_first(meta, 1);
      efa_io_tx_meta_desc_set_last(meta, 1);
      efa_io_tx_meta_desc_set_meta_extension(meta, 0);
      meta->ctrl2 &= static_cast<uint8_t>(~0xe2);
      meta->ctrl3 &= 0x03;
      for (const Profile* p : all_profiles()) check_decode(wqe.data(), wqe_size, *p);
    }
  }
  return 0;
}

int fuzz_one(const uint8_t* data, size_t size) {
  World* w = world();
  End& a = w->a;
  End& b = w->b;
  size_t pos = 0;
  while (pos + 2 <= size) {
    uint8_t kind = data[pos++];
    uint8_t sel = data[pos++];
    if ((kind & 1) == 0) {  // a TX WQE
      bool big = (kind & 2) != 0;
      WqAttr& sq = big ? a.sq128 : a.sq64;
      uint32_t& pc = big ? a.pc128 : a.pc64;
      uint8_t wqe[128] = {};
      size_t n = std::min<size_t>(sq.entry_size, size - pos);
      std::memcpy(wqe, data + pos, n);
      pos += n;
      auto* meta = reinterpret_cast<efa_io_tx_meta_desc*>(wqe);
      if (sel & 0x80) {  // mostly well-framed, so validation goes deeper
        efa_io_tx_meta_desc_set_meta_desc(meta, 1);
        efa_io_tx_meta_desc_set_first(meta, 1);
        efa_io_tx_meta_desc_set_last(meta, 1);
        meta->ah = static_cast<uint16_t>(meta->ah % 4);
        meta->dest_qp_num = (sel & 0x40) ? static_cast<uint16_t>(b.qp64->qpn()) : meta->dest_qp_num;
        meta->qkey = (sel & 0x20) ? 0x11 : meta->qkey;
        meta->ctrl1 = static_cast<uint8_t>((meta->ctrl1 & 0xf3) | (meta->ctrl1 & 0x03));
      }
      steer(wqe, 40, reinterpret_cast<uint64_t>(a.buf.data()), sel);        // sgl[0] / remote addr
      steer(wqe, 56, reinterpret_cast<uint64_t>(b.buf.data()), sel >> 2);   // sgl[1] / local addr
      if ((sel & 0x1c) != 0) {  // 1 in 8 keeps its fuzzed phase (a stale-WQE bug)
        efa_io_tx_meta_desc_set_phase(meta, (pc / sq.num_entries) & 1);
      }
      std::memcpy(sq.buffer + (pc & (sq.num_entries - 1)) * sq.entry_size, wqe, sq.entry_size);
      ++pc;
      __atomic_store_n(sq.doorbell, pc & 0xffffu, __ATOMIC_RELEASE);
    } else {  // an RX descriptor on the peer
      efa_io_rx_desc d;
      uint8_t raw[16] = {};
      size_t n = std::min<size_t>(16, size - pos);
      std::memcpy(raw, data + pos, n);
      pos += n;
      std::memcpy(&d, raw, 16);
      if (sel & 1) {
        uint64_t addr = reinterpret_cast<uint64_t>(b.buf.data()) + (d.buf_addr_lo % (1u << 16));
        efa_io_rx_desc_set_addr(&d, addr);
      }
      std::memcpy(b.rq64.buffer + (b.rpc & (b.rq64.num_entries - 1)) * 16, &d, 16);
      ++b.rpc;
      __atomic_store_n(b.rq64.doorbell, b.rpc & 0xffffu, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < 3; ++i) {
      a.dev->step(64);
      b.dev->step(64);
    }
    check_cqes(&a);
    check_cqes(&b);
    // A stale WQE stops its SQ for good (the engine waits for it): start the QPs over.
    uint64_t stale = a.dev->stats().diag[static_cast<int>(DiagKind::kStaleWqe)];
    if (stale != w->stale_seen) {
      w->stale_seen = stale;
      for (Qp* qp : {a.qp64, a.qp128}) {
        QpAttr r;
        r.state = QpState::kReset;
        qp->modify(r, kQpAttrState);
        bring_up(qp);
      }
      a.pc64 = a.pc128 = 0;
      check_cqes(&a);
    }
  }
  return 0;
}

}  // namespace emu
}  // namespace xpufab

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xpufab::emu::fuzz_decode(data, size);
  return xpufab::emu::fuzz_one(data, size);
}
