// Counters. Host counters count the completions the host CQ dispatch sees; XPU counters are the
// device's completion counters, only set up and exported here and read by device code. Host
// counters are Pollable (api/core/pollable.h): poll sets and wait sets watch them.
#include <cstring>

#include "api/core/wait_set.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/wait.h"

namespace xpufab::efa {

namespace {

uint64_t cntr_read(fid_cntr* f) {
  EfaCntr* c = to_cntr(f);
  if (!c || c->is_xpu()) return 0;  // device code reads it
  c->dom->progress();
  return c->value.load();
}

uint64_t cntr_readerr(fid_cntr* f) {
  EfaCntr* c = to_cntr(f);
  if (!c || c->is_xpu()) return 0;
  c->dom->progress();
  return c->err.load();
}

int cntr_add(fid_cntr* f, uint64_t v) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->value += v;
  c->wake.wake();
  c->pollable.wake_watchers();
  return 0;
}

int cntr_set(fid_cntr* f, uint64_t v) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->value = v;
  c->wake.wake();
  c->pollable.wake_watchers();
  return 0;
}

int cntr_adderr(fid_cntr* f, uint64_t v) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->err += v;
  c->wake.wake();
  c->pollable.wake_watchers();
  return 0;
}

int cntr_seterr(fid_cntr* f, uint64_t v) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->err = v;
  c->wake.wake();
  c->pollable.wake_watchers();
  return 0;
}

// Sleeps on the domain's CQ event fds (counted completions arrive through them) and the
// counter's wake fd (fi_cntr_add/set from another thread). -FI_ETIMEDOUT on expiry (fi_cntr(3)).
int cntr_wait(fid_cntr* f, uint64_t threshold, int timeout) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  const uint64_t err0 = c->err.load();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
  WaiterScope ws(&c->wake);
  auto ready = [c, err0, threshold] { return c->err.load() != err0 || c->value.load() >= threshold; };
  for (;;) {
    c->dom->progress();
    if (c->err.load() != err0) return -FI_EAVAIL;
    if (c->value.load() >= threshold) return 0;
    const int left = timeout < 0 ? kWaitSliceMs : ms_left(deadline);
    if (timeout >= 0 && left == 0) return -FI_ETIMEDOUT;
    c->dom->wait_event(left, c->wake.fd, ready);
  }
}

int cntr_export(fid_cntr* f, uint64_t flags, fid_xpu_cntr* out) {
  EfaCntr* c = to_cntr(f);
  if (!c || !out) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  if (!c->is_xpu()) return -FI_EINVAL;
  if (!c->exported) {
    int rc = c->xctx->import_mem(nullptr, sizeof(efa_xpu_cntr), FI_XPU_IMPORT_DEVICEMAP, &c->state);
    if (rc) return rc;
    auto* st = static_cast<efa_xpu_cntr*>(c->state.host);
    memset(st, 0, sizeof(*st));
    st->version = EFA_XPU_VERSION;
    st->size = sizeof(*st);
    st->value = static_cast<uint64_t*>(c->val_mem.dev);
    st->err_value = static_cast<uint64_t*>(c->err_mem.dev);
    stamp_xpu_handle(st, FI_CLASS_CNTR, c->state.dev);
    c->xstate = st;
    c->exported = true;
  }
  *out = c->xstate->fid;
  return 0;
}

int cntr_close(fid* f) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  int rc = c->refs.try_close();
  if (rc) return rc;
  // No set holds the counter any more (each would have held a reference): leave their view.
  c->sets.leave(&c->pollable);
  if (c->bcntr) c->dom->dev->destroy_comp_cntr(c->bcntr);
  if (c->xctx) {
    c->xctx->release(&c->state);
    c->xctx->release(&c->err_mem);
    c->xctx->release(&c->val_mem);
    c->xctx->refs.release();
  }
  c->dom->refs.release();
  c->wake.close();
  delete c;
  return 0;
}

int cntr_control(fid* f, int command, void* arg) {
  EfaCntr* c = to_cntr(f);
  if (!c) return -FI_EINVAL;
  if (command == FI_GETWAITOBJ) {
    if (!arg) return -FI_EINVAL;
    *static_cast<fi_wait_obj*>(arg) = c->wait_obj;
    return 0;
  }
  return -FI_ENOSYS;
}

fi_ops g_cntr_fi_ops = {sizeof(fi_ops), cntr_close, fi_no_bind, cntr_control,
                        fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_cntr g_cntr_ops = {sizeof(fi_ops_cntr), cntr_read,   cntr_readerr, cntr_add,
                          cntr_set,            cntr_wait,   cntr_adderr,  cntr_seterr,
                          cntr_export};

}  // namespace

void EfaCntr::inc(bool error) {
  if (error) err++;
  else value++;
  wake.wake();
  pollable.wake_watchers();
}

fid* CntrPollable::pollable_fid() { return &cntr->cntr.fid; }
int CntrPollable::pollable_fd() { return cntr->dom->cq_epoll; }
core::FidRefs& CntrPollable::pollable_refs() { return cntr->refs; }

// A counter has an event when its value or error count moved since the last time it said so.
// Its counts move in provider code (progress, fi_cntr_add/set), which wakes the watchers; the
// completions it counts arrive through any host CQ of the domain, so a set also sleeps on the
// domain's CQ notifications, re-armed here before progress looks for new CQEs.
bool CntrPollable::has_event() {
  cntr->dom->rearm_cqs();
  cntr->dom->progress();
  std::lock_guard<std::mutex> g(cntr->poll_lock);
  const uint64_t v = cntr->value.load(), e = cntr->err.load();
  if (v == cntr->seen_value && e == cntr->seen_err) return false;
  cntr->seen_value = v;
  cntr->seen_err = e;
  return true;
}

int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr_p, void* context) {
  if (!domain || !attr || !cntr_p) return -FI_EINVAL;
  EfaDomain* dom = to_domain(domain);
  if (!dom) return -FI_EINVAL;
  if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
  if (attr->flags & ~FI_XPU) return -FI_EBADFLAGS;
  fid_xpu_ctx* xctx = attr_xpu_ctx(dom, attr);
  if ((attr->flags & FI_XPU) && !xctx) return -FI_EINVAL;
  fi_wait_obj w = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
  if (w != FI_WAIT_NONE && w != FI_WAIT_FD && w != FI_WAIT_SET) return -FI_ENOSYS;
  // fi_cntr(3): wait_set names the set of an FI_WAIT_SET counter and nothing otherwise.
  if ((w == FI_WAIT_SET) != (attr->wait_set != nullptr)) return -FI_EINVAL;
  if (attr->wait_set && !core::is_wait_set(&attr->wait_set->fid)) return -FI_EINVAL;
  EfaXpuCtx* x = nullptr;
  if (xctx) {
    x = to_xpu_ctx(xctx);
    if (!x || x->dom != dom) return -FI_EINVAL;
    if (w == FI_WAIT_SET) return -FI_EINVAL;
    if (!(dom->attr.device_caps & backend::kCapCompCntr)) return -FI_EOPNOTSUPP;
    w = FI_WAIT_NONE;
  }
  auto* c = new (std::nothrow) EfaCntr();
  if (!c) return -FI_ENOMEM;
  c->dom = dom;
  c->wait_obj = w;
  c->xctx = x;
  if (x) {
    // The NIC adds into these: XPU memory with a dma-buf the hardware can target.
    int rc = x->alloc_mem(sizeof(uint64_t), FI_XPU_ALLOC_DMABUF, &c->val_mem);
    if (rc == 0) {
      rc = x->alloc_mem(sizeof(uint64_t), FI_XPU_ALLOC_DMABUF, &c->err_mem);
      if (rc) x->release(&c->val_mem);
    }
    if (rc) {
      delete c;
      return rc;
    }
    memset(c->val_mem.host, 0, sizeof(uint64_t));
    memset(c->err_mem.host, 0, sizeof(uint64_t));
    backend::CompCntrInitAttr a;
    a.value = static_cast<uint64_t*>(c->val_mem.host);
    a.error = static_cast<uint64_t*>(c->err_mem.host);
    rc = dom->dev->create_comp_cntr(a, &c->bcntr);
    if (rc) {
      x->release(&c->err_mem);
      x->release(&c->val_mem);
      delete c;
      return to_fi_err(rc);
    }
  }
  int rc = dom->refs.acquire();
  if (rc == 0 && x) {
    rc = x->refs.acquire();
    if (rc) dom->refs.release();
  }
  if (rc) {
    if (c->bcntr) dom->dev->destroy_comp_cntr(c->bcntr);
    if (x) {
      x->release(&c->err_mem);
      x->release(&c->val_mem);
    }
    delete c;
    return rc;
  }
  if (!x && c->wake.open() != 0) {
    dom->refs.release();
    delete c;
    return -FI_ENOMEM;
  }
  c->cntr.fid.fclass = FI_CLASS_CNTR;
  c->cntr.fid.context = context;
  c->cntr.fid.ops = &g_cntr_fi_ops;
  c->cntr.ops = &g_cntr_ops;
  if (!x) {
    c->pollable.cntr = c;
    rc = c->sets.join(&c->pollable, w == FI_WAIT_SET ? attr->wait_set : nullptr);
    if (rc) {
      dom->refs.release();
      c->wake.close();
      delete c;
      return rc;
    }
  }
  *cntr_p = &c->cntr;
  return 0;
}

}  // namespace xpufab::efa
