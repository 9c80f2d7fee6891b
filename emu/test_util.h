// Test helpers for the emulated device: a pair of devices on a private in-process fabric, QP
// bring-up, WQE/RX-descriptor builders and a CQ poller. Every byte goes through the formats in
// device/efa_io_defs.h; producer/consumer bookkeeping follows rdma-core (reference/efa-queues.md
// 2.3-2.5): SQ phase from the lap of the absolute producer count starting at 0, absolute 16-bit
// doorbells, CQ phase starting at 1.
#ifndef XPUFAB_EMU_TEST_UTIL_H_
#define XPUFAB_EMU_TEST_UTIL_H_

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "api/backend/backend.h"
#include "device/efa_dp.h"
#include "device/efa_io_defs.h"
#include "emu/device.h"
#include "emu/options_env.h"

namespace xpufab {
namespace emu {
namespace testing {

using backend::Ah;
using backend::Cq;
using backend::Mr;
using backend::Pd;
using backend::Qp;
using backend::QpAttr;
using backend::QpState;

// One WQE of either size, built on the stack and copied into the ring.
struct Wqe {
  efa_io_tx_wqe_128 w;
  Wqe() { std::memset(&w, 0, sizeof(w)); }
};

inline void bring_up(Qp* qp, uint32_t qkey, uint8_t rnr_retry = 7, bool set_rnr = true) {
  QpAttr a;
  a.state = QpState::kInit;
  a.pkey_index = 0;
  a.port = 1;
  a.qkey = qkey;
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                              backend::kQpAttrQkey),
            0);
  a.state = QpState::kRtr;
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState), 0);
  a.state = QpState::kRts;
  a.sq_psn = 0;
  a.rnr_retry = rnr_retry;
  ASSERT_EQ(qp->modify(a, backend::kQpAttrState | backend::kQpAttrSqPsn |
                              (set_rnr ? backend::kQpAttrRnrRetry : 0u)),
            0);
}

// Producer side of one SQ and one RQ, and the consumer side of a CQ.
struct SqWriter {
  backend::WqAttr sq{};
  uint32_t pc = 0;
  void write(const Wqe& in, uint32_t at) {
    Wqe wq = in;
    efa_io_tx_meta_desc_set_phase(&wq.w.meta, (at / sq.num_entries) & 1);
    efa_dp_copy_wqe(sq.buffer + (at & (sq.num_entries - 1)) * sq.entry_size, &wq.w, sq.entry_size);
  }
  void ring() { __atomic_store_n(sq.doorbell, pc & 0xffffu, __ATOMIC_RELEASE); }
  void post(const Wqe& w) {
    write(w, pc);
    ++pc;
    ring();
  }
};

struct RqWriter {
  backend::WqAttr rq{};
  uint32_t pc = 0;
  struct Sge {
    void* addr;
    uint32_t len;
    uint32_t lkey;
  };
  void post(uint16_t req_id, std::vector<Sge> sges, bool ring_db = true) {
    for (size_t i = 0; i < sges.size(); ++i) {
      efa_io_rx_desc d;
      std::memset(&d, 0, sizeof(d));
      efa_io_rx_desc_set_addr(&d, reinterpret_cast<uint64_t>(sges[i].addr));
      d.req_id = req_id;
      d.length = static_cast<uint16_t>(sges[i].len);
      efa_io_rx_desc_set_lkey(&d, sges[i].lkey);
      efa_io_rx_desc_set_first(&d, i == 0);
      efa_io_rx_desc_set_last(&d, i + 1 == sges.size());
      std::memcpy(rq.buffer + (pc & (rq.num_entries - 1)) * 16, &d, sizeof(d));
      ++pc;
    }
    if (ring_db) __atomic_store_n(rq.doorbell, pc & 0xffffu, __ATOMIC_RELEASE);
  }
};

// The data path's CQ poller (device/efa_cq.h), reporting its index through the CQ doorbell.
struct CqReader {
  backend::CqAttr attr{};
  efa_cq cq{};
  bool ready = false;
  bool write_db = true;
  void init() {
    efa_dp_cq_attr a = {attr.buffer, attr.entry_size, attr.num_entries, attr.doorbell};
    ASSERT_EQ(efa_cq_init(&cq, &a), 0);
    ready = true;
  }
  // Copies the next CQE out if its phase says it is new.
  bool poll(efa_io_rx_cdesc_ex* out) {
    efa_dp_cqe c;
    if (efa_cq_poll(&cq, &c) != 0) return false;
    *out = c.raw;
    if (write_db && attr.doorbell != nullptr) efa_cq_update_db(&cq, 0);
    return true;
  }
};

// A device with one PD, CQ and QP plus a registered buffer.
struct Node {
  std::unique_ptr<EmuDevice> dev;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20);
  SqWriter sq;
  RqWriter rq;
  CqReader cqr;
  uint32_t qkey = 0x1234;

  void open(const DeviceOptions& o) {
    ASSERT_EQ(create_device(o, &dev), 0);
    ASSERT_EQ(dev->alloc_pd(&pd), 0);
    backend::MrInitAttr m;
    m.addr = buf.data();
    m.length = buf.size();
    backend::DeviceAttr da{};
    ASSERT_EQ(dev->query(&da), 0);
    m.access = backend::served_access(
        backend::kAccessLocalWrite | backend::kAccessRemoteRead | backend::kAccessRemoteWrite,
        da.device_caps);
    ASSERT_EQ(dev->reg_mr(pd, m, &mr), 0);
  }
  void make_qp(uint32_t flags = 0, uint32_t depth = 64, uint32_t cq_entries = 256,
               uint32_t recv_sge = 2, backend::QpType type = backend::QpType::kSrd) {
    backend::CqInitAttr c;
    c.entries = cq_entries;
    c.with_event_fd = true;
    c.with_sgid = true;
    ASSERT_EQ(dev->create_cq(c, &cq), 0);
    ASSERT_EQ(cq->query(&cqr.attr), 0);
    cqr.init();
    backend::QpInitAttr q;
    q.pd = pd;
    q.send_cq = cq;
    q.recv_cq = cq;
    q.max_send_wr = depth;
    q.max_recv_wr = depth;
    q.max_send_sge = 2;
    q.max_recv_sge = recv_sge;
    q.flags = flags;
    q.type = type;
    ASSERT_EQ(dev->create_qp(q, &qp), 0);
    ASSERT_EQ(qp->query_wqs(&sq.sq, &rq.rq), 0);
  }
  uint8_t* at(size_t off) { return buf.data() + off; }
  uint64_t addr(size_t off) const { return reinterpret_cast<uint64_t>(buf.data() + off); }
};

// Opens a and b with these options, one QP each brought up to RTS, and an AH each way; *ab is
// A's for B. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
inline void open_pair(Node* a, Node* b, const DeviceOptions& oa, const DeviceOptions& ob, Ah** ab) {
  ASSERT_NO_FATAL_FAILURE(a->open(oa));
  ASSERT_NO_FATAL_FAILURE(b->open(ob));
  ASSERT_NO_FATAL_FAILURE(a->make_qp());
  ASSERT_NO_FATAL_FAILURE(b->make_qp());
  ASSERT_NO_FATAL_FAILURE(bring_up(a->qp, a->qkey));
  ASSERT_NO_FATAL_FAILURE(bring_up(b->qp, b->qkey));
  Gid gb = b->dev->gid(), ga = a->dev->gid();
  ASSERT_EQ(a->dev->create_ah(a->pd, gb.data(), ab), 0);
  Ah* back = nullptr;
  ASSERT_EQ(b->dev->create_ah(b->pd, ga.data(), &back), 0);
}

inline DeviceOptions inline_options(std::shared_ptr<Fabric> fabric, const char* profile = "gen4") {
  DeviceOptions o;
  o.fabric = std::move(fabric);
  o.engine_thread = false;
  o.profile = find_profile(profile);
  o.unreach_timeout_us = 1000;
  o.response_timeout_us = 2000;
  o.rnr_delay_us = 1;
  o.log = log_to_stderr;
  return o;
}

// WQE builders.
inline Wqe send_wqe(uint16_t req_id, uint16_t ah, uint16_t dqpn, uint32_t qkey) {
  Wqe w;
  efa_io_tx_meta_desc* m = &w.w.meta;
  m->req_id = req_id;
  efa_io_tx_meta_desc_set_op_type(m, EFA_IO_SEND);
  efa_io_tx_meta_desc_set_meta_desc(m, 1);
  efa_io_tx_meta_desc_set_first(m, 1);
  efa_io_tx_meta_desc_set_last(m, 1);
  efa_io_tx_meta_desc_set_comp_req(m, 1);
  m->dest_qp_num = dqpn;
  m->ah = ah;
  m->qkey = qkey;
  return w;
}

inline void add_sge(Wqe* w, uint64_t addr, uint32_t len, uint32_t lkey) {
  uint16_t n = w->w.meta.length;
  efa_io_tx_buf_desc* d = &w->w.data.sgl[n];
  d->length = len;
  efa_io_tx_buf_desc_set_lkey(d, lkey);
  efa_io_tx_buf_desc_set_addr(d, addr);
  w->w.meta.length = static_cast<uint16_t>(n + 1);
}

inline void set_inline(Wqe* w, const void* data, uint16_t len) {
  efa_io_tx_meta_desc_set_inline_msg(&w->w.meta, 1);
  w->w.meta.length = len;
  std::memcpy(w->w.data.inline_data, data, len);
}

inline void set_imm(Wqe* w, uint32_t imm) {
  efa_io_tx_meta_desc_set_has_imm(&w->w.meta, 1);
  w->w.meta.immediate_data = imm;
}

inline Wqe rdma_wqe(uint8_t op, uint16_t req_id, uint16_t ah, uint16_t dqpn, uint32_t qkey, uint64_t laddr,
                    uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len) {
  Wqe w = send_wqe(req_id, ah, dqpn, qkey);
  efa_io_tx_meta_desc_set_op_type(&w.w.meta, op);
  efa_io_rdma_req_128* r = &w.w.data.rdma_req_128;
  r->remote_mem.length = len;
  r->remote_mem.rkey = rkey;
  efa_io_remote_mem_addr_set_addr(&r->remote_mem, raddr);
  r->local_mem[0].length = len;
  efa_io_tx_buf_desc_set_lkey(&r->local_mem[0], lkey);
  efa_io_tx_buf_desc_set_addr(&r->local_mem[0], laddr);
  w.w.meta.length = 1;
  return w;
}

inline Wqe inline_write_wqe(uint16_t req_id, uint16_t ah, uint16_t dqpn, uint32_t qkey, const void* data,
                            uint16_t len, uint64_t raddr, uint32_t rkey) {
  Wqe w = send_wqe(req_id, ah, dqpn, qkey);
  efa_io_tx_meta_desc_set_op_type(&w.w.meta, EFA_IO_RDMA_WRITE);
  efa_io_tx_meta_desc_set_inline_msg(&w.w.meta, 1);
  efa_io_rdma_req_128* r = &w.w.data.rdma_req_128;
  r->remote_mem.length = len;
  r->remote_mem.rkey = rkey;
  efa_io_remote_mem_addr_set_addr(&r->remote_mem, raddr);
  std::memcpy(r->inline_data, data, len);
  w.w.meta.length = len;
  return w;
}

// Steps the devices until `cq` yields a CQE or ~2 s pass.
inline bool wait_cqe(std::initializer_list<EmuDevice*> devs, CqReader* cq, efa_io_rx_cdesc_ex* out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cq->poll(out)) return true;
    for (EmuDevice* d : devs) {
      if (d != nullptr) d->step(64);
    }
  }
  return cq->poll(out);
}

inline uint8_t q_type(const efa_io_rx_cdesc_ex& c) { return efa_io_cdesc_common_get_q_type(&c.base.common); }
inline uint8_t op_type(const efa_io_rx_cdesc_ex& c) { return efa_io_cdesc_common_get_op_type(&c.base.common); }

}  // namespace testing
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_TEST_UTIL_H_
