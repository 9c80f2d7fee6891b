// RDM endpoints over one SRD QP: control (bind, enable, getname, options, export). The host data
// path is ep_data.cc.
#include <algorithm>
#include <cstring>

#include "api/core/eq.h"
#include "api/core/no_ops.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "base/resident.h"
#include "device/efa_io_status.h"

namespace xpufab::efa {

namespace {

constexpr uint64_t kCntrFlags = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// ---- bind -----------------------------------------------------------------------------------

int bind_cq(EfaEp* ep, EfaCq* cq, uint64_t flags) {
  if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) return -FI_EBADFLAGS;
  if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EINVAL;
  if (cq->dom != ep->dom) return -FI_EINVAL;
  if (cq->is_xpu()) {
    if (!ep->is_xpu() || cq->xctx != ep->xctx) return -FI_EINVAL;
  } else if (ep->is_xpu()) {
    // A host CQ on an XPU EP receives the errors the host learns about (QP failures).
    if (ep->err_cq) return -FI_EINVAL;
    int rc = cq->refs.acquire();
    if (rc) return rc;
    ep->err_cq = cq;
    return 0;
  }
  if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq)) return -FI_EINVAL;
  const int n = ((flags & FI_TRANSMIT) ? 1 : 0) + ((flags & FI_RECV) ? 1 : 0);
  for (int i = 0; i < n; ++i) {
    int rc = cq->refs.acquire();
    if (rc) {
      if (i) cq->refs.release();
      return rc;
    }
  }
  if (flags & FI_TRANSMIT) {
    ep->tx_cq = cq;
    ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
  }
  if (flags & FI_RECV) {
    ep->rx_cq = cq;
    ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
  }
  return 0;
}

int bind_cntr(EfaEp* ep, EfaCntr* c, uint64_t flags) {
  if (!flags || (flags & ~kCntrFlags)) return -FI_EBADFLAGS;
  if (c->dom != ep->dom) return -FI_EINVAL;
  if (c->is_xpu() != ep->is_xpu() || (c->is_xpu() && c->xctx != ep->xctx)) return -FI_EINVAL;
  EfaCntr** slots[6] = {&ep->cntr_send,  &ep->cntr_recv,  &ep->cntr_read,
                        &ep->cntr_write, &ep->cntr_rread, &ep->cntr_rwrite};
  const uint64_t bits[6] = {FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE};
  for (int i = 0; i < 6; ++i)
    if ((flags & bits[i]) && *slots[i]) return -FI_EINVAL;
  for (int i = 0; i < 6; ++i) {
    if (!(flags & bits[i])) continue;
    int rc = c->refs.acquire();
    if (rc) return rc;
    *slots[i] = c;
  }
  return 0;
}

int ep_bind(fid* f, fid* bfid, uint64_t flags) {
  EfaEp* ep = to_ep(f);
  if (!ep || !bfid) return -FI_EINVAL;
  if (ep->enabled) return -FI_EOPBADSTATE;
  switch (bfid->fclass) {
    case FI_CLASS_AV: {
      EfaAv* av = to_av(bfid);
      if (flags) return -FI_EBADFLAGS;
      if (!av || ep->av || av->dom != ep->dom) return -FI_EINVAL;
      int rc = av->refs.acquire();
      if (rc) return rc;
      ep->av = av;
      return 0;
    }
    case FI_CLASS_CQ: {
      EfaCq* cq = to_cq(bfid);
      return cq ? bind_cq(ep, cq, flags) : -FI_EINVAL;
    }
    case FI_CLASS_CNTR: {
      EfaCntr* c = to_cntr(bfid);
      return c ? bind_cntr(ep, c, flags) : -FI_EINVAL;
    }
    case FI_CLASS_EQ: {
      // One EQ per endpoint; libfabric ignores the flags of an EQ binding.
      if (ep->eq) return -FI_EINVAL;
      int rc = core::eq_bind_acquire(bfid);
      if (rc) return rc;
      // A core EQ's fid is the first member of its fid_eq (eq_bind_acquire checked it is one).
      ep->eq = reinterpret_cast<fid_eq*>(bfid);
      return 0;
    }
    default:
      return -FI_EINVAL;
  }
}

// ---- enable ---------------------------------------------------------------------------------

// The entries of a request table that the first requests take and free (index 0 of each array),
// resident from the start as the device's SQ and CQ are (base/resident.h): the tables are lazily
// mapped, so that a deep queue keeps only the pages it uses, and a request's first completion
// would otherwise fault on its timed path.
void make_first_requests_resident(const efa_dp_reqs& r) {
  base::make_resident(r.ctx, sizeof(*r.ctx));
  base::make_resident(r.aux, sizeof(*r.aux));
  base::make_resident(r.state, sizeof(*r.state));
  base::make_resident(r.link, sizeof(*r.link));
}

int ep_enable(EfaEp* ep) {
  if (ep->enabled) return 0;
  EfaDomain* dom = ep->dom;
  if (!ep->av) return -FI_ENOAV;
  if (ep->is_xpu()) {
    // Device code polls the CQs of an XPU EP; one XPU CQ may serve both directions.
    if (!ep->tx_cq && !ep->rx_cq) return -FI_ENOCQ;
    if (!ep->tx_cq) ep->tx_cq = ep->rx_cq, ep->tx_cq->refs.acquire();
    if (!ep->rx_cq) ep->rx_cq = ep->tx_cq, ep->rx_cq->refs.acquire();
  } else {
    int rc = 0;
    if (!ep->tx_cq) rc = cq_create_internal(dom, &ep->tx_cq);
    if (rc == 0 && !ep->rx_cq) rc = cq_create_internal(dom, &ep->rx_cq);
    if (rc) return rc;
  }
  if (ep->dom->proto) {
    // The protocol core owns the QP, its own CQ and its receive buffers.
    int rc = proto_ep_enable(ep);
    if (rc) return rc;
    {
      std::lock_guard<std::mutex> g(dom->sdev->ep_lock);
      dom->sdev->eps[ep->qp] = ep;
    }
    ep->enabled = true;
    return 0;
  }
  backend::QpInitAttr qa;
  qa.type = ep->dgram ? backend::QpType::kUd : backend::QpType::kSrd;
  qa.pd = dom->pd;
  qa.send_cq = ep->tx_cq->bcq;
  qa.recv_cq = ep->rx_cq->bcq;
  qa.max_send_wr = static_cast<uint32_t>(ep->tx_size);
  qa.max_recv_wr = static_cast<uint32_t>(ep->rx_size);
  qa.max_send_sge = dom->attr.max_sq_sge;
  qa.max_recv_sge = dom->attr.max_rq_sge;
  if (!ep->dgram && (dom->attr.device_caps & backend::kCapUnsolicitedWriteRecv))
    qa.flags |= backend::kQpUnsolicitedWriteRecv;
  int rc = qp_create_rts(ep, qa);
  if (rc) return rc;
  backend::WqAttr sq{}, rq{};
  if (rc == 0) rc = ep->qp->query_wqs(&sq, &rq);
  if (rc == 0 && !ep->is_xpu()) {
    efa_dp_wq_attr s{sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
    efa_dp_wq_attr r{rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
    ep->sq_scratch.reset(efa_sq_scratch_size(sq.num_entries) / 8 + 1);
    ep->rq_scratch.reset(efa_rq_scratch_size(rq.num_entries) / 8 + 1);
    rc = efa_sq_init(&ep->sq, &s, dom->attr.max_sq_sge > 2 ? 2 : dom->attr.max_sq_sge,
                     ep->sq_scratch.data(), ep->sq_scratch.size() * 8);
    if (rc == 0)
      rc = efa_rq_init(&ep->rq, &r, dom->attr.max_rq_sge, ep->rq_scratch.data(),
                       ep->rq_scratch.size() * 8);
    if (rc) rc = rc > -256 ? rc : -FI_EINVAL;
    if (rc == 0) {
      ep->sq_slots.reset(ep->sq.reqs.count);
      ep->rq_slots.reset(ep->rq.reqs.count);
      make_first_requests_resident(ep->sq.reqs);
      base::make_resident(ep->sq_slots.data(), sizeof(OpSlot));
      // The receive side's ring, slots and the rest of its table are written as the first
      // receives are posted, which a program does while it sets up; the free stack only when
      // the first of them completes. An idle endpoint keeps the rest unmapped.
      base::make_resident(ep->rq.reqs.link, sizeof(*ep->rq.reqs.link));
    }
  }
  // XPU counters are the device's completion counters, attached to the QP.
  if (rc == 0 && ep->is_xpu()) {
    struct {
      EfaCntr* c;
      uint32_t op;
    } map[6] = {{ep->cntr_send, backend::kCntrSend},      {ep->cntr_recv, backend::kCntrRecv},
                {ep->cntr_read, backend::kCntrRdmaRead},  {ep->cntr_write, backend::kCntrRdmaWrite},
                {ep->cntr_rread, backend::kCntrRemoteRdmaRead},
                {ep->cntr_rwrite, backend::kCntrRemoteRdmaWrite}};
    for (int i = 0; i < 6 && rc == 0; ++i) {
      if (!map[i].c) continue;
      uint32_t ops = 0;
      for (int j = 0; j < 6; ++j)
        if (map[j].c == map[i].c) ops |= map[j].op;
      bool seen = false;
      for (auto* a : ep->attached) seen |= a == map[i].c->bcntr;
      if (seen) continue;
      rc = ep->qp->attach_comp_cntr(map[i].c->bcntr, ops);
      if (rc == 0) ep->attached.push_back(map[i].c->bcntr);
    }
  }
  if (rc) {
    EFA_WARN(kEpCtrl, "enabling QP %u failed: %d (sq %u x %u, rq %u x %u)", ep->qpn, rc,
             sq.num_entries, sq.entry_size, rq.num_entries, rq.entry_size);
    for (auto* a : ep->attached) ep->qp->detach_comp_cntr(a);
    ep->attached.clear();
    dom->dev->destroy_qp(ep->qp);
    ep->qp = nullptr;
    return rc < 0 && rc > -256 ? to_fi_err(rc) : rc;
  }
  {
    std::lock_guard<Lock> g(dom->lock);
    dom->eps.push_back(ep);
    dom->ep_of_qpn[ep->qpn] = ep;
    ep->trace_qp = dom->trace_next_qp++;
  }
  {
    std::lock_guard<std::mutex> g(dom->sdev->ep_lock);
    dom->sdev->eps[ep->qp] = ep;
  }
  ep->enabled = true;
  return 0;
}

int ep_control(fid* f, int command, void* arg) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  switch (command) {
    case FI_ENABLE:
      return ep_enable(ep);
    case FI_GETOPSFLAG: {
      if (!arg) return -FI_EINVAL;
      auto* flags = static_cast<uint64_t*>(arg);
      if (*flags & FI_TRANSMIT) *flags = ep->tx_op_flags;
      else if (*flags & FI_RECV) *flags = ep->rx_op_flags;
      else return -FI_EINVAL;
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

int ep_close(fid* f) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  EfaDomain* dom = ep->dom;
  if (ep->proto) {
    {
      std::lock_guard<std::mutex> g(dom->sdev->ep_lock);
      dom->sdev->eps.erase(ep->qp);
    }
    proto_ep_close(ep);  // destroys the QP
  }
  if (ep->qp) {
    {
      // From here on a failure report for this QP finds no EP.
      std::lock_guard<std::mutex> g(dom->sdev->ep_lock);
      dom->sdev->eps.erase(ep->qp);
    }
    for (auto* a : ep->attached) ep->qp->detach_comp_cntr(a);
    int rc = dom->dev->destroy_qp(ep->qp);
    if (rc) return to_fi_err(rc);
    if (!ep->is_xpu()) {
      // Flushed completions of this QP still name it: dispatch them while it is registered.
      dom->progress();
    }
    std::lock_guard<Lock> g(dom->lock);
    for (auto it = dom->eps.begin(); it != dom->eps.end(); ++it) {
      if (*it == ep) {
        dom->eps.erase(it);
        break;
      }
    }
    auto by_qpn = dom->ep_of_qpn.find(ep->qpn);
    if (by_qpn != dom->ep_of_qpn.end() && by_qpn->second == ep) dom->ep_of_qpn.erase(by_qpn);
    if (dom->last_ep == ep) dom->last_ep = nullptr;
  }
  if (ep->exported) {
    // Device CQ state must not keep pointing at this EP's released state.
    void* dev_state = reinterpret_cast<void*>(static_cast<uintptr_t>(ep->xstate->fid.fid.prov_ctx));
    for (EfaCq* cq : {ep->tx_cq, ep->rx_cq}) {
      efa_xpu_cq* cst = cq ? cq->xstate : nullptr;
      if (!cst) continue;
      uint32_t k = 0;
      for (uint32_t i = 0; i < cst->num_eps; ++i)
        if (cst->eps[i] != dev_state) cst->eps[k++] = cst->eps[i];
      for (uint32_t i = k; i < cst->num_eps; ++i) cst->eps[i] = nullptr;
      cst->num_eps = k;
    }
  }
  for (auto it = ep->xmem.rbegin(); it != ep->xmem.rend(); ++it) ep->xctx->release(&*it);
  ep->xmem.clear();
  auto drop_cq = [](EfaCq* cq) {
    if (!cq) return;
    if (cq->internal) cq_destroy_internal(cq);
    else cq->refs.release();
  };
  if (ep->tx_cq == ep->rx_cq && ep->tx_cq && ep->tx_cq->internal) ep->rx_cq = nullptr;
  drop_cq(ep->tx_cq);
  drop_cq(ep->rx_cq);
  if (ep->err_cq) ep->err_cq->refs.release();
  for (EfaCntr* c : {ep->cntr_send, ep->cntr_recv, ep->cntr_read, ep->cntr_write, ep->cntr_rread,
                     ep->cntr_rwrite})
    if (c) c->refs.release();
  if (ep->av) ep->av->refs.release();
  if (ep->eq) core::eq_bind_release(&ep->eq->fid);
  if (ep->xctx) ep->xctx->refs.release();
  fi_freeinfo(ep->info);
  dom->refs.release();
  delete ep;
  return 0;
}

// ---- ep ops -----------------------------------------------------------------------------------

// fi_endpoint(3): fi_cancel removes a matching operation not yet started. Posted work belongs to
// the NIC once written to its queue and EFA cannot take it back, so no operation is ever found:
// -FI_ENOENT (also for a NULL context, which names no operation).
ssize_t ep_cancel(fid_t f, void* context) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  // The protocol fabric's receives wait in the core's lists until matched: those it can take back.
  if (ep->proto) return proto_cancel(ep, context);
  return -FI_ENOENT;
}

int ep_getopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  if (!optval || !optlen) return -FI_EINVAL;
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  size_t v;
  switch (optname) {
    case FI_OPT_MAX_MSG_SIZE: v = ep->dom->proto ? kProtoMaxMsgSize : ep->dom->attr.mtu; break;
    case FI_OPT_MAX_RMA_SIZE: v = ep->dgram ? 0 : ep->dom->attr.max_rdma_size; break;
    case FI_OPT_INJECT_MSG_SIZE:
      v = ep->dom->proto ? proto_inject_size(ep->dom->attr) : ep->dom->attr.inline_buf_size;
      break;
    case FI_OPT_INJECT_RMA_SIZE: v = 0; break;
    case FI_OPT_TX_SIZE: v = ep->tx_size; break;
    case FI_OPT_RX_SIZE: v = ep->rx_size; break;
    case FI_OPT_MIN_MULTI_RECV:
      if (!ep->dom->proto) return -FI_ENOPROTOOPT;  // efa-direct has no multi-receive buffers
      v = ep->min_multi_recv;
      break;
    default: return -FI_ENOPROTOOPT;
  }
  if (*optlen < sizeof(size_t)) {
    *optlen = sizeof(size_t);
    return -FI_ETOOSMALL;
  }
  memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(size_t);
  return 0;
}

int ep_setopt(fid_t f, int level, int optname, const void* optval, size_t optlen) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  if (!optval) return -FI_EINVAL;
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  switch (optname) {
    case FI_OPT_CUDA_API_PERMITTED:
    case FI_OPT_SHARED_MEMORY_PERMITTED:
      return optlen == sizeof(bool) ? 0 : -FI_EINVAL;
    case FI_OPT_TX_SIZE:
    case FI_OPT_RX_SIZE: {
      if (optlen != sizeof(size_t)) return -FI_EINVAL;
      if (ep->enabled) return -FI_EOPBADSTATE;
      size_t v;
      memcpy(&v, optval, sizeof(v));
      const size_t max = optname == FI_OPT_TX_SIZE ? ep->dom->attr.max_sq_wr : ep->dom->attr.max_rq_wr;
      if (v == 0 || v > max) return -FI_EINVAL;
      (optname == FI_OPT_TX_SIZE ? ep->tx_size : ep->rx_size) = v;
      return 0;
    }
    case FI_OPT_MIN_MULTI_RECV: {
      if (!ep->dom->proto) return -FI_ENOPROTOOPT;
      if (optlen != sizeof(size_t)) return -FI_EINVAL;
      size_t v;
      memcpy(&v, optval, sizeof(v));
      proto_set_min_multi_recv(ep, v);
      return 0;
    }
    default:
      return -FI_ENOPROTOOPT;
  }
}

int ep_no_ctx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int ep_no_rxctx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }

ssize_t ep_rx_size_left(fid_ep* e) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;
  if (ep->proto) return proto_ops_left(ep);
  // A lower bound (fi_endpoint(3)): the ring counts descriptors, a receive takes up to max_rq_sge.
  const uint32_t per_recv = ep->dom->attr.max_rq_sge ? ep->dom->attr.max_rq_sge : 1;
  return (ep->rq.ring.num_entries - efa_dp_ring_inflight(&ep->rq.ring)) / per_recv;
}

ssize_t ep_tx_size_left(fid_ep* e) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;
  if (ep->proto) return proto_ops_left(ep);
  return ep->sq.ring.num_entries - efa_dp_ring_inflight(&ep->sq.ring);
}

int ep_export(fid_ep* e, uint64_t flags, fid_xpu_ep* out);

// ---- cm ---------------------------------------------------------------------------------------

int cm_getname(fid_t f, void* addr, size_t* addrlen) {
  EfaEp* ep = to_ep(f);
  if (!ep) return -FI_EINVAL;
  if (!addrlen) return -FI_EINVAL;
  if (!ep->enabled) return -FI_EOPBADSTATE;
  EfaAddr a{};
  uint32_t qpn = 0, qkey = 0;
  int rc = ep->dom->dev->local_address(ep->qp, a.gid, &qpn, &qkey);
  if (rc) return to_fi_err(rc);
  a.qpn = static_cast<uint16_t>(qpn);
  a.qkey = qkey;
  if (*addrlen < sizeof(a)) {
    *addrlen = sizeof(a);
    return -FI_ETOOSMALL;
  }
  if (!addr) return -FI_EINVAL;
  memcpy(addr, &a, sizeof(a));
  *addrlen = sizeof(a);
  return 0;
}

int cm_no_setname(fid_t, void*, size_t) { return -FI_ENOSYS; }
int cm_no_getpeer(fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int cm_no_connect(fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int cm_no_listen(fid_pep*) { return -FI_ENOSYS; }
int cm_no_accept(fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int cm_no_reject(fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int cm_no_shutdown(fid_ep*, uint64_t) { return -FI_ENOSYS; }
int cm_no_join(fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; }

fi_ops g_ep_fi_ops = {sizeof(fi_ops), ep_close, ep_bind, ep_control,
                      fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_ep g_ep_ops = {sizeof(fi_ops_ep), ep_cancel,       ep_getopt,       ep_setopt, ep_no_ctx,
                      ep_no_rxctx,       ep_rx_size_left, ep_tx_size_left, ep_export};
fi_ops_cm g_cm_ops = {sizeof(fi_ops_cm), cm_no_setname,  cm_getname,  cm_no_getpeer,
                      cm_no_connect,     cm_no_listen,   cm_no_accept, cm_no_reject,
                      cm_no_shutdown,    cm_no_join};

int ep_open_common(fid_domain* domain, fi_info* info, fid_ep** ep_p, uint64_t flags, void* context) {
  if (!domain || !info || !ep_p) return -FI_EINVAL;
  if (flags & ~FI_XPU) return -FI_EBADFLAGS;
  EfaDomain* dom = to_domain(domain);
  if (!dom) return -FI_EINVAL;
  // A DGRAM domain makes DGRAM endpoints (UD QPs), any other RDM ones (SRD QPs).
  const fi_ep_type type = info->ep_attr ? info->ep_attr->type : FI_EP_UNSPEC;
  if (type != FI_EP_UNSPEC && type != (dom->dgram ? FI_EP_DGRAM : FI_EP_RDM)) return -FI_EINVAL;
  if (dom->dgram && (flags & FI_XPU)) return -FI_EOPNOTSUPP;
  fid_xpu_ctx* xc = info->ep_attr ? info->ep_attr->xpu_ctx : nullptr;
  const bool xpu = flags & FI_XPU;
  if (xpu != (xc != nullptr)) return -FI_EINVAL;  // FI_XPU needs xpu_ctx, and only it allows one
  EfaXpuCtx* x = nullptr;
  if (xc) {
    x = to_xpu_ctx(xc);
    if (!x || x->dom != dom) return -FI_EINVAL;
  }
  auto* ep = new (std::nothrow) EfaEp();
  if (!ep) return -FI_ENOMEM;
  ep->info = fi_dupinfo(info);
  if (!ep->info) {
    delete ep;
    return -FI_ENOMEM;
  }
  int rc = dom->refs.acquire();
  if (rc == 0 && x) {
    rc = x->refs.acquire();
    if (rc) dom->refs.release();
  }
  if (rc) {
    fi_freeinfo(ep->info);
    delete ep;
    return rc;
  }
  ep->dom = dom;
  ep->xctx = x;
  ep->caps = info->caps ? info->caps
                        : dom->proto ? (FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA) : (FI_MSG | FI_RMA);
  if (!(ep->caps & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
    ep->caps |= FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (dom->dgram) {
    // UD carries SEND only; every buffer starts with the GRH-sized prefix.
    ep->dgram = true;
    ep->caps &= ~(FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_XPU);
    ep->prefix = backend::kGrhSize;
  }
  // The data path's rings hold at most EFA_DP_MAX_ENTRIES entries; the RQ counts descriptors.
  const uint32_t rq_sge = dom->attr.max_rq_sge ? dom->attr.max_rq_sge : 1;
  ep->tx_size = std::min<size_t>(dom->attr.max_sq_wr, EFA_DP_MAX_ENTRIES / 2);
  ep->rx_size = std::min<size_t>(dom->attr.max_rq_wr, EFA_DP_MAX_ENTRIES / 2 / rq_sge);
  if (info->tx_attr) {
    ep->tx_op_flags = info->tx_attr->op_flags;
    if (info->tx_attr->size && info->tx_attr->size < ep->tx_size) ep->tx_size = info->tx_attr->size;
  }
  if (info->rx_attr) {
    ep->rx_op_flags = info->rx_attr->op_flags;
    if (info->rx_attr->size && info->rx_attr->size < ep->rx_size) ep->rx_size = info->rx_attr->size;
  }
  ep->ep.fid.fclass = FI_CLASS_EP;
  ep->ep.fid.context = context;
  ep->ep.fid.ops = &g_ep_fi_ops;
  ep->ep.ops = &g_ep_ops;
  ep->ep.cm = &g_cm_ops;
  if (dom->proto) {
    ep->ep.msg = proto_msg_ops();
    ep->ep.rma = proto_rma_ops();
    ep->ep.tagged = proto_tagged_ops();
    ep->ep.atomic = proto_atomic_ops();
  } else {
    ep->ep.msg = direct_msg_ops();
    ep->ep.rma = direct_rma_ops();
    // efa-direct has no tagged messages, atomics or collectives; the wrappers of their headers
    // call through these tables, which refuse every operation.
    ep->ep.tagged = no_tagged_ops();
    ep->ep.atomic = no_atomic_ops();
  }
  ep->ep.collective = core::no_collective_ops();
  *ep_p = &ep->ep;
  return 0;
}

// ---- export -----------------------------------------------------------------------------------

int ep_export(fid_ep* e, uint64_t flags, fid_xpu_ep* out) {
  EfaEp* ep = to_ep(e);
  if (!ep || !out) return -FI_EINVAL;
  return xpu_ep_export(ep, flags, out);
}

}  // namespace

int qp_create_rts(EfaEp* ep, const backend::QpInitAttr& qa) {
  EfaDomain* dom = ep->dom;
  int rc = dom->dev->create_qp(qa, &ep->qp);
  if (rc) {
    EFA_WARN(kEpCtrl, "create_qp(%u, %u): %d", qa.max_send_wr, qa.max_recv_wr, rc);
    return to_fi_err(rc);
  }
  backend::QpAttr at;
  at.state = backend::QpState::kInit;
  at.pkey_index = 0;
  at.port = 1;
  at.qkey = (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ep) >> 4) ^ 0x5a5a1234u) & 0x7fffffffu;
  rc = ep->qp->modify(at, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                              backend::kQpAttrQkey);
  if (rc == 0) {
    at.state = backend::QpState::kRtr;
    rc = ep->qp->modify(at, backend::kQpAttrState);
  }
  if (rc == 0) {
    at.state = backend::QpState::kRts;
    at.sq_psn = 0;
    at.rnr_retry = 7;
    uint32_t mask = backend::kQpAttrState | backend::kQpAttrSqPsn;
    // A UD QP has no RNR retry: a datagram nobody waits for is dropped.
    if (!ep->dgram && (dom->attr.device_caps & backend::kCapRnrRetry))
      mask |= backend::kQpAttrRnrRetry;
    rc = ep->qp->modify(at, mask);
  }
  uint8_t gid[16];
  if (rc == 0) rc = dom->dev->local_address(ep->qp, gid, &ep->qpn, &ep->qkey);
  if (rc) {
    EFA_WARN(kEpCtrl, "bringing QP %u to RTS failed: %d", ep->qpn, rc);
    dom->dev->destroy_qp(ep->qp);
    ep->qp = nullptr;
    return rc < 0 && rc > -256 ? to_fi_err(rc) : rc;
  }
  return 0;
}

void ep_qp_failed(SharedDevice* sd, backend::Qp* qp, int status) {
  std::lock_guard<std::mutex> g(sd->ep_lock);
  auto it = sd->eps.find(qp);
  if (it == sd->eps.end()) return;
  EfaEp* ep = it->second;
  ep->failed = true;
  EFA_WARN(kEpData, "QP %u failed with status %d (%s)", ep->qpn, status,
           efa_io_status_str(static_cast<uint32_t>(status)));
  // A host EP learns of each outstanding operation through its flushed completions. An XPU EP's
  // completions go to device code, so the host CQ bound to it for errors gets one entry.
  if (!ep->is_xpu() || !ep->err_cq) return;
  Completion c;
  c.c.op_context = reinterpret_cast<uintptr_t>(ep->ep.fid.context);
  const int err = efa_io_status_to_fi_errno(static_cast<uint32_t>(status));
  c.c.err = err ? err : FI_EIO;
  c.c.prov_errno = static_cast<uint32_t>(status);
  ep->err_cq->stage(c);
  ep->err_cq->wake.wake();
}

int endpoint_open(fid_domain* domain, fi_info* info, fid_ep** ep_p, void* context) {
  return ep_open_common(domain, info, ep_p, 0, context);
}

int endpoint2_open(fid_domain* domain, fi_info* info, fid_ep** ep_p, uint64_t flags,
                   void* context) {
  return ep_open_common(domain, info, ep_p, flags, context);
}

}  // namespace xpufab::efa
