#include "testing/faults/fault_suite.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "device/efa_cq.h"
#include "device/efa_dp.h"
#include "device/efa_io_defs.h"
#include "emu/faults/plan.h"
#include "emu/options_env.h"

namespace xpufab {
namespace emu {
namespace faults_suite {
namespace {

using namespace ::xpufab::backend;

constexpr uint32_t kSlot = 256;  // bytes per operation slot

struct Node {
  std::unique_ptr<EmuDevice> dev;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Mr* mr = nullptr;
  Ah* ah = nullptr;
  std::vector<uint8_t> buf;
  WqAttr sq{}, rq{};
  CqAttr cqa{};
  efa_cq cqr{};
  uint32_t sq_pc = 0, rq_pc = 0;
};

std::string open_node(Node* n, const Workload& w, const std::string& plan, const char* name,
                      const std::shared_ptr<Fabric>& fabric, uint8_t id) {
  DeviceOptions o;
  o.name = name;
  o.fabric = fabric;
  o.engine_thread = false;
  o.has_gid = true;
  o.gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f, id};
  o.fault_plan = plan;
  o.trace = w.trace;
  o.step_clock_ns = w.step_clock_ns;
  o.response_timeout_us = w.response_timeout_us;
  o.max_retransmits = w.max_retransmits;
  o.rnr_delay_us = 5;
  o.seed = w.seed;
  o.log = log_to_stderr;
  std::string env_error;
  if (device_options_from_env(&o, &env_error) != 0) return env_error;
  if (create_device(o, &n->dev) != 0) return std::string("create_device ") + name;
  n->buf.assign(size_t{w.window} * kSlot * 4, 0);
  if (n->dev->alloc_pd(&n->pd) != 0) return "alloc_pd";
  MrInitAttr m;
  m.addr = n->buf.data();
  m.length = n->buf.size();
  DeviceAttr da{};
  n->dev->query(&da);
  m.access = served_access(kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite, da.device_caps);
  if (n->dev->reg_mr(n->pd, m, &n->mr) != 0) return "reg_mr";
  CqInitAttr c;
  c.entries = w.window * 8;
  if (n->dev->create_cq(c, &n->cq) != 0) return "create_cq";
  n->cq->query(&n->cqa);
  efa_dp_cq_attr ca = {n->cqa.buffer, n->cqa.entry_size, n->cqa.num_entries, n->cqa.doorbell};
  if (efa_cq_init(&n->cqr, &ca) != 0) return "efa_cq_init";
  QpInitAttr q;
  q.pd = n->pd;
  q.send_cq = n->cq;
  q.recv_cq = n->cq;
  q.max_send_wr = w.window * 2;
  q.max_recv_wr = w.window * 2;
  q.max_send_sge = 1;
  q.max_recv_sge = 1;
  if (n->dev->create_qp(q, &n->qp) != 0) return "create_qp";
  n->qp->query_wqs(&n->sq, &n->rq);
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = 0x77;
  a.port = 1;
  if (n->qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey) != 0) return "init";
  a.state = QpState::kRtr;
  if (n->qp->modify(a, kQpAttrState) != 0) return "rtr";
  a.state = QpState::kRts;
  a.rnr_retry = 7;
  if (n->qp->modify(a, kQpAttrState | kQpAttrSqPsn | kQpAttrRnrRetry) != 0) return "rts";
  return "";
}

void post_wqe(Node* n, efa_io_tx_wqe_128* w) {
  efa_io_tx_meta_desc_set_phase(&w->meta, (n->sq_pc / n->sq.num_entries) & 1);
  efa_dp_copy_wqe(n->sq.buffer + (n->sq_pc & (n->sq.num_entries - 1)) * n->sq.entry_size, w,
                  n->sq.entry_size);
  ++n->sq_pc;
  __atomic_store_n(n->sq.doorbell, n->sq_pc & 0xffffu, __ATOMIC_RELEASE);
}

void post_recv(Node* n, uint16_t req_id, void* addr, uint32_t len) {
  efa_io_rx_desc d;
  std::memset(&d, 0, sizeof(d));
  efa_io_rx_desc_set_addr(&d, reinterpret_cast<uint64_t>(addr));
  d.req_id = req_id;
  d.length = static_cast<uint16_t>(len);
  efa_io_rx_desc_set_lkey(&d, n->mr->lkey());
  efa_io_rx_desc_set_first(&d, 1);
  efa_io_rx_desc_set_last(&d, 1);
  std::memcpy(n->rq.buffer + (n->rq_pc & (n->rq.num_entries - 1)) * 16, &d, sizeof(d));
  ++n->rq_pc;
  __atomic_store_n(n->rq.doorbell, n->rq_pc & 0xffffu, __ATOMIC_RELEASE);
}

uint8_t pattern(uint64_t seq, uint32_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + 1); }

}  // namespace

Result run_workload(const Workload& w) {
  Result r;
  auto fabric = std::make_shared<InProcFabric>();
  Node a, b;
  r.error = open_node(&a, w, w.plan_a, "fa", fabric, 1);
  if (r.error.empty()) r.error = open_node(&b, w, w.plan_b, "fb", fabric, 2);
  if (!r.error.empty()) return r;
  Gid bg = b.dev->gid();
  if (a.dev->create_ah(a.pd, bg.data(), &a.ah) != 0) return r.error = "create_ah", r;
  Gid ag = a.dev->gid();
  Ah* back = nullptr;
  if (b.dev->create_ah(b.pd, ag.data(), &back) != 0) return r.error = "create_ah back", r;
  const uint32_t win = w.window;
  // B's receive buffers live past the RDMA slots: region 2 (SEND) of B's buffer.
  uint8_t* b_recv = b.buf.data() + size_t{win} * kSlot * 2;
  for (uint32_t i = 0; i < win * 2; ++i) post_recv(&b, static_cast<uint16_t>(i), b_recv + size_t{i % (win * 2)} * 128, 128);
  std::vector<uint64_t> slot_seq(win, UINT64_MAX);  // op in flight per slot
  std::vector<uint8_t> seen_send(w.ops, 0), seen_imm(w.ops, 0);
  uint64_t next = 0;
  auto fail = [&](const std::string& e) {
    if (r.error.empty()) r.error = e;
  };
  auto post = [&](uint32_t s, uint64_t seq) {
    efa_io_tx_wqe_128 wq;
    std::memset(&wq, 0, sizeof(wq));
    efa_io_tx_meta_desc* m = &wq.meta;
    m->req_id = static_cast<uint16_t>(s);
    efa_io_tx_meta_desc_set_meta_desc(m, 1);
    efa_io_tx_meta_desc_set_first(m, 1);
    efa_io_tx_meta_desc_set_last(m, 1);
    efa_io_tx_meta_desc_set_comp_req(m, 1);
    m->dest_qp_num = static_cast<uint16_t>(b.qp->qpn());
    m->ah = a.ah->ahn();
    m->qkey = 0x77;
    uint8_t* la = a.buf.data() + size_t{s} * kSlot;
    uint8_t* rb = b.buf.data() + size_t{s} * kSlot;
    uint32_t kind = static_cast<uint32_t>(seq % 4);
    uint32_t len = kind == 0 ? 64 : kSlot;
    if (kind == 2) {
      for (uint32_t i = 0; i < len; ++i) rb[i] = pattern(seq, i);
      std::memset(la, 0, len);
    } else {
      for (uint32_t i = 0; i < len; ++i) la[i] = pattern(seq, i);
      std::memcpy(la, &seq, sizeof(seq));
    }
    if (kind == 0) {
      efa_io_tx_meta_desc_set_op_type(m, EFA_IO_SEND);
      efa_io_tx_buf_desc* d = &wq.data.sgl[0];
      d->length = len;
      efa_io_tx_buf_desc_set_lkey(d, a.mr->lkey());
      efa_io_tx_buf_desc_set_addr(d, reinterpret_cast<uint64_t>(la));
      m->length = 1;
    } else {
      efa_io_tx_meta_desc_set_op_type(m, kind == 2 ? EFA_IO_RDMA_READ : EFA_IO_RDMA_WRITE);
      efa_io_rdma_req_128* q = &wq.data.rdma_req_128;
      q->remote_mem.length = len;
      q->remote_mem.rkey = b.mr->rkey();
      efa_io_remote_mem_addr_set_addr(&q->remote_mem, reinterpret_cast<uint64_t>(rb));
      q->local_mem[0].length = len;
      efa_io_tx_buf_desc_set_lkey(&q->local_mem[0], a.mr->lkey());
      efa_io_tx_buf_desc_set_addr(&q->local_mem[0], reinterpret_cast<uint64_t>(la));
      m->length = 1;
      if (kind == 3) {
        efa_io_tx_meta_desc_set_has_imm(m, 1);
        m->immediate_data = static_cast<uint32_t>(seq);
      }
    }
    slot_seq[s] = seq;
    post_wqe(&a, &wq);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  uint64_t spins = 0;
  while (r.completed < w.ops && r.error.empty()) {
    for (uint32_t s = 0; s < win && next < w.ops; ++s) {
      if (slot_seq[s] == UINT64_MAX) post(s, next++);
    }
    a.dev->step(64);
    b.dev->step(64);
    efa_dp_cqe c;
    while (efa_cq_poll(&b.cqr, &c) == 0) {
      efa_cq_update_db(&b.cqr, 0);
      const efa_io_rx_cdesc_ex& x = c.raw;
      if (x.base.common.status != EFA_IO_COMP_STATUS_OK) {
        fail("B: receive completion status " + std::to_string(x.base.common.status));
        break;
      }
      uint16_t rid = x.base.common.req_id;
      if (efa_io_cdesc_common_get_has_imm(&x.base.common)) {
        uint32_t seq = x.base.imm;
        if (seq >= w.ops || seq % 4 != 3 || seen_imm[seq]++ != 0) fail("immediate duplicated or bogus: " + std::to_string(seq));
        ++r.imms_received;
      } else {
        uint8_t* p = b_recv + size_t{rid} * 128;
        uint64_t seq;
        std::memcpy(&seq, p, sizeof(seq));
        if (seq >= w.ops || seq % 4 != 0 || seen_send[seq]++ != 0 || x.base.length != 64) {
          fail("SEND duplicated or bogus: " + std::to_string(seq));
        } else {
          for (uint32_t i = 8; i < 64; ++i) {
            if (p[i] != pattern(seq, i)) {
              fail("SEND data corrupted, op " + std::to_string(seq));
              break;
            }
          }
        }
        ++r.sends_received;
      }
      post_recv(&b, rid, b_recv + size_t{rid} * 128, 128);
    }
    while (efa_cq_poll(&a.cqr, &c) == 0) {
      efa_cq_update_db(&a.cqr, 0);
      const efa_io_rx_cdesc_ex& x = c.raw;
      uint16_t s = x.base.common.req_id;
      if (s >= win || slot_seq[s] == UINT64_MAX) {
        fail("A: completion for a slot with nothing in flight: " + std::to_string(s));
        break;
      }
      uint64_t seq = slot_seq[s];
      if (x.base.common.status != EFA_IO_COMP_STATUS_OK) {
        fail("A: op " + std::to_string(seq) + " completed with status " +
             faults::status_name(x.base.common.status));
        break;
      }
      uint32_t kind = static_cast<uint32_t>(seq % 4);
      uint8_t* la = a.buf.data() + size_t{s} * kSlot;
      uint8_t* rb = b.buf.data() + size_t{s} * kSlot;
      if (kind == 2) {
        for (uint32_t i = 0; i < kSlot; ++i) {
          if (la[i] != pattern(seq, i)) {
            fail("READ data wrong, op " + std::to_string(seq));
            break;
          }
        }
      } else if (kind != 0 && std::memcmp(la, rb, kSlot) != 0) {
        fail("WRITE data wrong, op " + std::to_string(seq));
      }
      slot_seq[s] = UINT64_MAX;
      ++r.completed;
    }
    if ((++spins & 1023) == 0 && std::chrono::steady_clock::now() > deadline) fail("timed out");
  }
  // Every immediate and SEND reported once; give stragglers (RX CQEs after the TX ones) a few passes.
  for (int i = 0; i < 10000 && r.error.empty() && r.sends_received + r.imms_received < w.ops / 2; ++i) {
    a.dev->step(64);
    b.dev->step(64);
    efa_dp_cqe c;
    while (efa_cq_poll(&b.cqr, &c) == 0) {
      efa_cq_update_db(&b.cqr, 0);
      if (efa_io_cdesc_common_get_has_imm(&c.raw.base.common)) {
        uint32_t seq = c.raw.base.imm;
        if (seq >= w.ops || seen_imm[seq]++ != 0) fail("late immediate duplicated");
        ++r.imms_received;
      } else {
        uint64_t seq;
        std::memcpy(&seq, b_recv + size_t{c.raw.base.common.req_id} * 128, sizeof(seq));
        if (seq >= w.ops || seen_send[seq]++ != 0) fail("late SEND duplicated");
        ++r.sends_received;
      }
    }
  }
  // Let duplicates still in flight arrive: none may surface.
  for (int i = 0; i < 2000 && r.error.empty(); ++i) {
    a.dev->step(64);
    b.dev->step(64);
    efa_dp_cqe c;
    if (efa_cq_poll(&b.cqr, &c) == 0 || efa_cq_poll(&a.cqr, &c) == 0) fail("completion after the run ended");
  }
  if (r.error.empty()) {
    uint64_t sends = (w.ops + 3) / 4, imms = w.ops / 4;
    if (r.sends_received != sends || r.imms_received != imms) {
      char m[128];
      std::snprintf(m, sizeof(m), "received %llu SENDs / %llu immediates, expected %llu / %llu",
                    static_cast<unsigned long long>(r.sends_received), static_cast<unsigned long long>(r.imms_received),
                    static_cast<unsigned long long>(sends), static_cast<unsigned long long>(imms));
      fail(m);
    }
  }
  r.a = a.dev->stats();
  r.b = b.dev->stats();
  r.qa = a.dev->qp_stats();
  r.qb = b.dev->qp_stats();
  if (w.trace) {
    r.trace_a = a.dev->trace()->text();
    r.trace_b = b.dev->trace()->text();
  }
  return r;
}

}  // namespace faults_suite
}  // namespace emu
}  // namespace xpufab
