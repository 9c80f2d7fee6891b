// The XPU endpoint export (fi_ep_export_xpu): the efa_xpu_ep that rdma/fi_xpu_device_efa.h
// works on, built in XPU-visible memory from the QP's queues, and its mirror of the bound AV.
#include <cstring>
#include <type_traits>

#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"

namespace xpufab::efa {

namespace {

// The exported state is one block laid out by hand: a T lives at byte `off`, in the host mapping
// and in the device mapping of the block alike. This is the one place its bytes become objects.
template <typename T>
T* at(uint8_t* base, size_t off) {
  return reinterpret_cast<T*>(base + off);
}

size_t offset_in(const void* p, const uint8_t* base) {
  return static_cast<size_t>(static_cast<const uint8_t*>(p) - base);
}

// Copies the bound AV into the device's mirror (source addresses for fi_xpu_cq_readfrom).
void mirror_av(EfaEp* ep, efa_xpu_ep* st, efa_xpu_av_entry* host_av) {
  uint32_t n = 0;
  if (ep->av) {
    std::lock_guard<Lock> g(ep->av->lock);
    const size_t total = ep->av->entries.size();
    n = total < EFA_XPU_AV_MIRROR_MAX ? static_cast<uint32_t>(total) : EFA_XPU_AV_MIRROR_MAX;
    if (total > EFA_XPU_AV_MIRROR_MAX)
      EFA_WARN(kEpCtrl, "AV has %zu entries; fi_xpu_cq_readfrom resolves the first %u", total,
               EFA_XPU_AV_MIRROR_MAX);
    for (uint32_t i = 0; i < n; ++i) {
      const EfaAvEntry& e = ep->av->entries[i];
      host_av[i].ahn = e.ahn;
      host_av[i].qpn = e.addr.qpn;
      host_av[i].valid = e.valid ? 1 : 0;
    }
  }
  __atomic_store_n(&st->av_count, n, __ATOMIC_RELEASE);
}

// Exports the EP's CQs and counters, names the EP in each CQ's table and points the state at
// their device addresses.
int attach_cqs_and_cntrs(EfaEp* ep, efa_xpu_ep* st, efa_xpu_ep* dev_st) {
  fid_xpu_cq hq;
  for (EfaCq* cq : {ep->tx_cq, ep->rx_cq}) {
    int rc = cq->cq.ops->export_xpu(&cq->cq, 0, &hq);
    if (rc) return rc;
    efa_xpu_cq* cst = cq->xstate;
    bool present = false;
    for (uint32_t i = 0; i < cst->num_eps; ++i)
      present |= cst->eps[i] == dev_st;
    if (!present) {
      if (cst->num_eps >= EFA_XPU_CQ_MAX_EPS) return -FI_ENOSPC;
      cst->eps[cst->num_eps++] = dev_st;
    }
  }
  st->tx_cq = static_cast<efa_xpu_cq*>(ep->tx_cq->state.dev);
  st->rx_cq = static_cast<efa_xpu_cq*>(ep->rx_cq->state.dev);
  EfaCntr* cs[6] = {ep->cntr_send, ep->cntr_recv, ep->cntr_read, ep->cntr_write, ep->cntr_rread,
                    ep->cntr_rwrite};
  efa_xpu_cntr** dst[6] = {&st->cntr_send,  &st->cntr_recv,         &st->cntr_read,
                           &st->cntr_write, &st->cntr_remote_read, &st->cntr_remote_write};
  for (int i = 0; i < 6; ++i) {
    if (!cs[i]) continue;
    fid_xpu_cntr hc;
    int rc = cs[i]->cntr.ops->export_xpu(&cs[i]->cntr, 0, &hc);
    if (rc) return rc;
    *dst[i] = static_cast<efa_xpu_cntr*>(cs[i]->state.dev);
  }
  return 0;
}

// A protocol-fabric EP: the core owns the QP, so the state names the core endpoint (already in
// XPU-visible memory, api/efa/proto_setup.cc) instead of the rings; device calls take its lock.
int export_proto(EfaEp* ep, fid_xpu_ep* out) {
  EfaXpuCtx* x = ep->xctx;
  EfaDomain* dom = ep->dom;
  const size_t av_off = (sizeof(efa_xpu_ep) + 63) / 64 * 64;
  const size_t total = av_off + sizeof(efa_xpu_av_entry) * EFA_XPU_AV_MIRROR_MAX;
  XpuMem m;
  int rc = x->import_mem(nullptr, total, FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return rc;
  auto* host = static_cast<uint8_t*>(m.host);
  auto* dev = static_cast<uint8_t*>(m.dev);
  memset(host, 0, total);
  auto* st = at<efa_xpu_ep>(host, 0);
  efa_xpu_ep* dev_st = at<efa_xpu_ep>(dev, 0);
  st->version = EFA_XPU_VERSION;
  st->size = sizeof(*st);
  st->qpn = ep->qpn;
  st->qkey = ep->qkey;
  st->caps = EFA_XPU_EP_CAP_PROTO |
             ((dom->attr.device_caps & backend::kCapRdmaRead) ? EFA_XPU_EP_CAP_RDMA_READ : 0) |
             ((ep->caps & FI_RMA) ? EFA_XPU_EP_CAP_RMA : 0);
  st->mtu = dom->attr.mtu;
  st->max_rdma_size = dom->attr.max_rdma_size;
  st->inline_size = dom->attr.inline_buf_size;
  st->tx_op_flags = ep->tx_op_flags;
  st->av = at<efa_xpu_av_entry>(dev, av_off);
  st->proto = proto_core_of(ep);
  stamp_xpu_handle(st, FI_CLASS_EP, dev_st);
  rc = attach_cqs_and_cntrs(ep, st, dev_st);
  if (rc) {
    x->release(&m);
    return rc;
  }
  ep->xav_host = at<efa_xpu_av_entry>(host, av_off);
  mirror_av(ep, st, ep->xav_host);
  proto_export_sync(ep, &st->proto_lock);
  ep->xmem.push_back(m);
  ep->xstate = st;
  ep->exported = true;
  *out = st->fid;
  return 0;
}

}  // namespace

void xpu_ep_av_grown(EfaEp* ep) {
  if (!ep->exported) return;
  mirror_av(ep, ep->xstate, ep->xav_host);
  if (ep->proto) proto_export_sync(ep, &ep->xstate->proto_lock);
}

int xpu_ep_export(EfaEp* ep, uint64_t flags, fid_xpu_ep* out) {
  if (!ep || !out) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  if (!ep->is_xpu() || !ep->enabled) return -FI_EINVAL;
  if (ep->exported) {
    mirror_av(ep, ep->xstate, ep->xav_host);
    // Peers inserted since the last export become the core's too.
    if (ep->proto) proto_export_sync(ep, &ep->xstate->proto_lock);
    *out = ep->xstate->fid;
    return 0;
  }
  if (ep->proto) return export_proto(ep, out);
  EfaXpuCtx* x = ep->xctx;
  EfaDomain* dom = ep->dom;
  backend::WqAttr sq{}, rq{};
  int rc = ep->qp->query_wqs(&sq, &rq);
  if (rc) return rc == -EOPNOTSUPP ? -FI_EOPNOTSUPP : -FI_EINVAL;
  std::vector<XpuMem> mem;
  auto fail = [&](int code) {
    for (auto it = mem.rbegin(); it != mem.rend(); ++it) x->release(&*it);
    return code;
  };
  // Where hardware hands out BAR memory (the SQ ring is the LLQ, doorbells are MMIO) the
  // regions are imported as IOMEMORY; only the 4 doorbell bytes, never the whole page.
  XpuMem m;
  rc = x->import_mem(sq.buffer, size_t(sq.entry_size) * sq.num_entries,
                     FI_XPU_IMPORT_IOMEMORY | FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return fail(rc);
  mem.push_back(m);
  void* dev_sq = m.dev;
  rc = x->import_mem(sq.doorbell, 4, FI_XPU_IMPORT_IOMEMORY | FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return fail(rc);
  mem.push_back(m);
  void* dev_sq_db = m.dev;
  rc = x->import_mem(rq.buffer, size_t(rq.entry_size) * rq.num_entries, FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return fail(rc);
  mem.push_back(m);
  void* dev_rq = m.dev;
  rc = x->import_mem(rq.doorbell, 4, FI_XPU_IMPORT_IOMEMORY | FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return fail(rc);
  mem.push_back(m);
  void* dev_rq_db = m.dev;
  // One host block mapped for the device: state, both req tables, the receive-buffer table and
  // the AV mirror, each 64-byte aligned.
  auto up64 = [](size_t v) { return (v + 63) / 64 * 64; };
  const size_t sq_scr = efa_sq_scratch_size(sq.num_entries);
  const size_t rq_scr = efa_rq_scratch_size(rq.num_entries);
  const size_t sq_off = up64(sizeof(efa_xpu_ep));
  const size_t rq_off = sq_off + up64(sq_scr);
  const size_t rxb_off = rq_off + up64(rq_scr);
  const size_t av_off = rxb_off + up64(size_t{8} * rq.num_entries);
  const size_t total = av_off + sizeof(efa_xpu_av_entry) * EFA_XPU_AV_MIRROR_MAX;
  rc = x->import_mem(nullptr, total, FI_XPU_IMPORT_DEVICEMAP, &m);
  if (rc) return fail(rc);
  mem.push_back(m);
  auto* host = static_cast<uint8_t*>(m.host);
  auto* dev = static_cast<uint8_t*>(m.dev);
  memset(host, 0, total);
  auto* st = at<efa_xpu_ep>(host, 0);
  efa_xpu_ep* dev_st = at<efa_xpu_ep>(dev, 0);
  efa_dp_wq_attr s{sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  efa_dp_wq_attr r{rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
  rc = efa_sq_init(&st->sq, &s, dom->attr.max_sq_sge > 2 ? 2 : dom->attr.max_sq_sge, host + sq_off,
                   sq_scr);
  if (rc == 0) rc = efa_rq_init(&st->rq, &r, dom->attr.max_rq_sge, host + rq_off, rq_scr);
  if (rc) return fail(-FI_EINVAL);
  // Rebase every pointer onto device addresses.
  auto rebase = [&](auto* p, size_t base_off, const uint8_t* host_base) {
    using T = std::remove_pointer_t<decltype(p)>;
    return at<T>(dev, base_off + offset_in(p, host_base));
  };
  st->sq.ring.buf = static_cast<uint8_t*>(dev_sq);
  st->sq.ring.db = static_cast<uint32_t*>(dev_sq_db);
  st->rq.ring.buf = static_cast<uint8_t*>(dev_rq);
  st->rq.ring.db = static_cast<uint32_t*>(dev_rq_db);
  const uint8_t* sqb = host + sq_off;
  const uint8_t* rqb = host + rq_off;
  st->sq.reqs.ctx = rebase(st->sq.reqs.ctx, sq_off, sqb);
  st->sq.reqs.aux = rebase(st->sq.reqs.aux, sq_off, sqb);
  st->sq.reqs.state = rebase(st->sq.reqs.state, sq_off, sqb);
  st->sq.reqs.link = rebase(st->sq.reqs.link, sq_off, sqb);
  st->rq.reqs.ctx = rebase(st->rq.reqs.ctx, rq_off, rqb);
  st->rq.reqs.aux = rebase(st->rq.reqs.aux, rq_off, rqb);
  st->rq.reqs.state = rebase(st->rq.reqs.state, rq_off, rqb);
  st->rq.reqs.link = rebase(st->rq.reqs.link, rq_off, rqb);
  st->rx_bufs = at<uint64_t>(dev, rxb_off);
  st->av = at<efa_xpu_av_entry>(dev, av_off);
  st->version = EFA_XPU_VERSION;
  st->size = sizeof(*st);
  st->qpn = ep->qpn;
  st->qkey = ep->qkey;
  const uint32_t dc = dom->attr.device_caps;
  st->caps = ((dc & backend::kCapRdmaRead) ? EFA_XPU_EP_CAP_RDMA_READ : 0) |
             ((dc & backend::kCapRdmaWrite) ? EFA_XPU_EP_CAP_RDMA_WRITE : 0) |
             ((dc & backend::kCapUnsolicitedWriteRecv) ? EFA_XPU_EP_CAP_UNSOLICITED_WRITE_RECV : 0);
  st->mtu = dom->attr.mtu;
  st->max_rdma_size = dom->attr.max_rdma_size;
  st->inline_size = dom->attr.inline_buf_size;
  st->tx_op_flags = ep->tx_op_flags;
  stamp_xpu_handle(st, FI_CLASS_EP, dev_st);
  // CQ and counter handles must be exported for their device addresses; export them now.
  rc = attach_cqs_and_cntrs(ep, st, dev_st);
  if (rc) return fail(rc);
  ep->xav_host = at<efa_xpu_av_entry>(host, av_off);
  mirror_av(ep, st, ep->xav_host);
  ep->xmem = std::move(mem);
  ep->xstate = st;
  ep->exported = true;
  *out = st->fid;
  return 0;
}

}  // namespace xpufab::efa
