// Completion queues and counters. Host CQs are polled with device/efa_cq.h (efa_cq_poll) and
// their CQEs are turned into libfabric entries here; XPU CQs and counters are only set up on the
// host and read by device code.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "api/efa/cq_trace.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

namespace {

using Clock = std::chrono::steady_clock;

size_t format_size(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_CONTEXT: return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
    default: return 0;
  }
}

void write_entry(const EfaCq* cq, const Completion& c, uint8_t* out) {
  switch (cq->format) {
    case FI_CQ_FORMAT_CONTEXT: {
      fi_cq_entry e{c.e.op_context};
      memcpy(out, &e, sizeof(e));
      break;
    }
    case FI_CQ_FORMAT_MSG: {
      fi_cq_msg_entry e{c.e.op_context, c.e.flags, c.e.len};
      memcpy(out, &e, sizeof(e));
      break;
    }
    default: {
      fi_cq_data_entry e{c.e.op_context, c.e.flags, c.e.len, c.e.buf, c.e.data};
      memcpy(out, &e, sizeof(e));
      break;
    }
  }
}

// Source address of an RX completion: the AV entry with the sender's AH and QPN.
fi_addr_t lookup_src(EfaEp* ep, uint16_t ahn, uint16_t qpn) {
  if (!ep->av || ahn == EFA_IO_AH_UNKNOWN) return FI_ADDR_NOTAVAIL;
  std::lock_guard<std::mutex> g(ep->av->lock);
  for (size_t i = 0; i < ep->av->entries.size(); ++i) {
    const EfaAvEntry& e = ep->av->entries[i];
    if (e.valid && e.ahn == ahn && e.addr.qpn == qpn) return i;
  }
  return FI_ADDR_NOTAVAIL;
}

void dispatch(EfaCq* cq, const efa_dp_cqe& c) {
  EfaDomain* dom = cq->dom;
  EfaEp* ep = dom->ep_by_qpn(c.qp_num);
  if (!ep) {
    EFA_WARN(kCq, "CQE for unknown QP %u dropped", c.qp_num);
    return;
  }
  if (g_cq_trace_on) cq_trace_record(dom->trace_id, ep->trace_qp, c);
  Completion out;
  const int err = efa_io_status_to_fi_errno(c.status);
  out.error = err != 0;
  EfaCntr* cntr = nullptr;
  EfaCq* target = nullptr;
  bool report = true;
  if (c.q_type == EFA_IO_SEND_QUEUE) {
    uint64_t ctx = 0;
    if (efa_sq_complete(&ep->sq, c.req_id, &ctx) != 0) {
      EFA_WARN(kCq, "stale TX CQE req_id %u on QP %u", c.req_id, c.qp_num);
      return;
    }
    auto* rec = reinterpret_cast<OpRecord*>(ctx);
    out.e.op_context = rec->context;
    out.e.flags = rec->flags;
    out.e.len = 0;
    report = rec->completion;
    if (rec->flags & FI_SEND) cntr = ep->cntr_send;
    else if (rec->flags & FI_READ) cntr = ep->cntr_read;
    else cntr = ep->cntr_write;
    delete rec;
    target = ep->tx_cq;
  } else {
    const bool rdma_write = c.op_type == EFA_IO_RDMA_WRITE;
    OpRecord* rec = nullptr;
    if (!c.unsolicited) {
      uint64_t ctx = 0;
      if (efa_rq_complete(&ep->rq, c.req_id, &ctx) != 0) {
        EFA_WARN(kCq, "stale RX CQE req_id %u on QP %u", c.req_id, c.qp_num);
        return;
      }
      rec = reinterpret_cast<OpRecord*>(ctx);
    }
    out.e.op_context = rec ? rec->context : nullptr;
    out.e.buf = (rec && !rdma_write) ? rec->buf : nullptr;
    out.e.len = c.byte_len;
    out.e.flags = rdma_write ? (FI_RMA | FI_REMOTE_WRITE) : (FI_MSG | FI_RECV);
    if (c.has_imm) {
      out.e.flags |= FI_REMOTE_CQ_DATA;
      out.e.data = c.imm;
    }
    if (!rdma_write && rec) report = rec->completion;
    out.src = lookup_src(ep, c.ah, c.src_qp);
    cntr = rdma_write ? ep->cntr_rwrite : ep->cntr_recv;
    delete rec;
    target = ep->rx_cq;
  }
  if (out.error) {
    out.e.err = err;
    out.e.prov_errno = c.status;
    out.e.olen = 0;
  }
  if (cntr && !cntr->is_xpu()) cntr->inc(out.error);
  if (target && !target->internal && (report || out.error)) target->stage(out);
}

// fi_cq_read* on an XPU CQ: device code owns its ring.
bool refuse_host(EfaCq* cq) { return cq->is_xpu(); }

ssize_t cq_readfrom_impl(EfaCq* cq, void* buf, size_t count, fi_addr_t* src) {
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (!buf && count) return -FI_EINVAL;
  cq->dom->progress();
  std::lock_guard<std::mutex> g(cq->lock);
  if (cq->staged.empty()) return -FI_EAGAIN;
  if (cq->staged.front().error) return -FI_EAVAIL;
  size_t n = 0;
  auto* out = static_cast<uint8_t*>(buf);
  while (n < count && !cq->staged.empty() && !cq->staged.front().error) {
    write_entry(cq, cq->staged.front(), out + n * cq->entry_size);
    if (src) src[n] = cq->staged.front().src;
    cq->staged.pop_front();
    n++;
  }
  return static_cast<ssize_t>(n);
}

ssize_t cq_read(fid_cq* f, void* buf, size_t count) {
  return cq_readfrom_impl(reinterpret_cast<EfaCq*>(f), buf, count, nullptr);
}

ssize_t cq_readfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src) {
  return cq_readfrom_impl(reinterpret_cast<EfaCq*>(f), buf, count, src);
}

ssize_t cq_readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
  auto* cq = reinterpret_cast<EfaCq*>(f);
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (!buf || flags) return -FI_EINVAL;
  cq->dom->progress();
  std::lock_guard<std::mutex> g(cq->lock);
  if (cq->staged.empty() || !cq->staged.front().error) return -FI_EAGAIN;
  const fi_cq_err_entry& e = cq->staged.front().e;
  // err_data is provider memory: keep the caller's err_data/err_data_size out of it.
  buf->op_context = e.op_context;
  buf->flags = e.flags;
  buf->len = e.len;
  buf->buf = e.buf;
  buf->data = e.data;
  buf->tag = 0;
  buf->olen = e.olen;
  buf->err = e.err;
  buf->prov_errno = e.prov_errno;
  buf->err_data_size = 0;
  cq->staged.pop_front();
  return 1;
}

// Whole milliseconds left until `deadline`, rounded up so a wait never ends early.
int ms_left(Clock::time_point deadline) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
  return us <= 0 ? 0 : static_cast<int>((us + 999) / 1000);
}

// Counts a sleeping waiter for the lifetime of a wait call (WakeFd writes only while > 0).
struct WaiterScope {
  explicit WaiterScope(WakeFd* w) : w_(w) { w_->waiters.fetch_add(1, std::memory_order_acq_rel); }
  ~WaiterScope() { w_->waiters.fetch_sub(1, std::memory_order_acq_rel); }
  WakeFd* w_;
};

// Blocks on the backend CQ event fds (and the CQ's own wake fd for fi_cq_signal) rather than
// spinning. timeout < 0 waits forever; on expiry -FI_EAGAIN, as libfabric's sread.
ssize_t cq_sreadfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void* cond,
                     int timeout) {
  auto* cq = reinterpret_cast<EfaCq*>(f);
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (cond) return -FI_EINVAL;  // FI_CQ_COND_NONE only
  if (!buf && count) return -FI_EINVAL;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
  WaiterScope ws(&cq->wake);
  auto ready = [cq] {
    if (cq->signaled.load()) return true;
    std::lock_guard<std::mutex> g(cq->lock);
    return !cq->staged.empty();
  };
  for (;;) {
    ssize_t n = cq_readfrom_impl(cq, buf, count, src);
    if (n != -FI_EAGAIN) return n;
    if (cq->signaled.exchange(false)) return -FI_ECANCELED;
    const int left = timeout < 0 ? kWaitSliceMs : ms_left(deadline);
    if (timeout >= 0 && left == 0) return -FI_EAGAIN;
    cq->dom->wait_event(left, cq->wake.fd, ready);
  }
}

ssize_t cq_sread(fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
  return cq_sreadfrom(f, buf, count, nullptr, cond, timeout);
}

int cq_signal(fid_cq* f) {
  auto* cq = reinterpret_cast<EfaCq*>(f);
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  cq->signaled = true;
  cq->wake.wake();
  return 0;
}

const char* cq_strerror(fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
  const char* s = efa_io_status_str(static_cast<uint32_t>(prov_errno));
  if (buf && len) {
    snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}

int cq_close(fid* f) {
  auto* cq = reinterpret_cast<EfaCq*>(f);
  int rc = cq->refs.try_close();
  if (rc) return rc;
  EfaDomain* dom = cq->dom;
  {
    std::lock_guard<std::mutex> g(dom->lock);
    for (auto it = dom->cqs.begin(); it != dom->cqs.end(); ++it) {
      if (*it == cq) {
        dom->cqs.erase(it);
        break;
      }
    }
  }
  rc = dom->dev->destroy_cq(cq->bcq);
  if (rc) EFA_WARN(kCq, "destroy_cq: %d", rc);
  if (cq->xctx) {
    cq->xctx->release(&cq->state);
    cq->xctx->release(&cq->ring);
    cq->xctx->refs.release();
  }
  if (!cq->internal) dom->refs.release();
  cq->wake.close();
  delete cq;
  return 0;
}

int cq_control(fid* f, int command, void* arg) {
  auto* cq = reinterpret_cast<EfaCq*>(f);
  switch (command) {
    case FI_GETWAIT:
      if (cq->wait_obj != FI_WAIT_FD) return -FI_ENODATA;
      if (!arg) return -FI_EINVAL;
      *static_cast<int*>(arg) = cq->bcq->event_fd();
      return 0;
    case FI_GETWAITOBJ:
      if (!arg) return -FI_EINVAL;
      *static_cast<fi_wait_obj*>(arg) = cq->wait_obj;
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

int cq_export(fid_cq* f, uint64_t flags, fid_xpu_cq* out);

fi_ops g_cq_fi_ops = {sizeof(fi_ops), cq_close, fi_no_bind, cq_control,
                      fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_cq g_cq_ops = {sizeof(fi_ops_cq), cq_read,     cq_readfrom,  cq_readerr, cq_sread,
                      cq_sreadfrom,      cq_signal,   cq_strerror,  cq_export};

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 2;
  while (p < v) p <<= 1;
  return p;
}

// Creates the backend CQ (in XPU memory for an XPU CQ) and, for host CQs, the polling state.
int cq_setup(EfaCq* cq, size_t size, bool event_fd) {
  EfaDomain* dom = cq->dom;
  uint32_t want = static_cast<uint32_t>(size ? size : dom->attr.max_sq_wr + dom->attr.max_rq_wr);
  if (dom->attr.max_cq_depth && want > dom->attr.max_cq_depth) want = dom->attr.max_cq_depth;
  const uint32_t entries = round_pow2(want);
  backend::CqInitAttr a;
  a.entries = entries;
  // Every host CQ gets an event fd where the device offers notifications: counter waits sleep
  // on the CQs (internal ones included) whose completions they count.
  a.with_event_fd = !cq->xctx && (event_fd || (dom->attr.device_caps & backend::kCapCqNotifications));
  if (cq->xctx) {
    int rc = cq->xctx->alloc_mem(static_cast<size_t>(entries) * EFA_IO_CQE_SIZE,
                                 FI_XPU_ALLOC_DMABUF, &cq->ring);
    if (rc) return rc;
    memset(cq->ring.host, 0, cq->ring.size);
    a.ext_buffer = cq->ring.host;
    a.ext_length = cq->ring.size;
    a.ext_fd = cq->ring.fd;
    a.ext_offset = cq->ring.offset;
  }
  int rc = dom->dev->create_cq(a, &cq->bcq);
  if (rc) {
    if (cq->xctx) cq->xctx->release(&cq->ring);
    return to_fi_err(rc);
  }
  rc = cq->bcq->query(&cq->battr);
  if (rc == 0 && !cq->xctx) {
    efa_dp_cq_attr pa{cq->battr.buffer, cq->battr.entry_size, cq->battr.num_entries, nullptr};
    rc = efa_cq_init(&cq->poll, &pa);
  }
  if (rc) {
    dom->dev->destroy_cq(cq->bcq);
    if (cq->xctx) cq->xctx->release(&cq->ring);
    return rc < 0 && rc > -256 ? to_fi_err(rc) : rc;
  }
  return 0;
}

}  // namespace

void EfaCq::stage(const Completion& c) {
  {
    std::lock_guard<std::mutex> g(lock);
    staged.push_back(c);
  }
  cv.notify_all();
}

void cq_drain(EfaCq* cq) {
  efa_dp_cqe c;
  while (efa_cq_poll(&cq->poll, &c) == 0) dispatch(cq, c);
}

int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq_p, void* context) {
  if (!domain || !attr || !cq_p) return -FI_EINVAL;
  auto* dom = reinterpret_cast<EfaDomain*>(domain);
  if (attr->flags & ~FI_XPU) return -FI_EBADFLAGS;
  // The fi_xpu(3) example sets xpu_ctx without FI_XPU; both forms make an XPU CQ.
  fid_xpu_ctx* xctx = attr->xpu_ctx;
  if ((attr->flags & FI_XPU) && !xctx) return -FI_EINVAL;
  fi_cq_format fmt = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  if (fmt == FI_CQ_FORMAT_TAGGED) return -FI_ENOSYS;
  if (!format_size(fmt)) return -FI_EINVAL;
  fi_wait_obj w = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
  if (w != FI_WAIT_NONE && w != FI_WAIT_FD) return -FI_ENOSYS;
  if (attr->wait_cond != FI_CQ_COND_NONE || attr->wait_set) return -FI_EINVAL;
  EfaXpuCtx* x = nullptr;
  if (xctx) {
    if (xctx->fid.fclass != FI_CLASS_XPU_CTX) return -FI_EINVAL;
    x = reinterpret_cast<EfaXpuCtx*>(xctx);
    if (x->dom != dom) return -FI_EINVAL;
    if (attr->wait_obj == FI_WAIT_FD) return -FI_EINVAL;
    w = FI_WAIT_NONE;
  }
  auto* cq = new (std::nothrow) EfaCq();
  if (!cq) return -FI_ENOMEM;
  cq->dom = dom;
  cq->format = fmt;
  cq->entry_size = format_size(fmt);
  cq->wait_obj = w;
  cq->xctx = x;
  int rc = cq_setup(cq, attr->size, w == FI_WAIT_FD);
  if (rc) {
    delete cq;
    return rc;
  }
  if (!x && cq->wake.open() != 0) {
    dom->dev->destroy_cq(cq->bcq);
    delete cq;
    return -FI_ENOMEM;
  }
  rc = dom->refs.acquire();
  if (rc == 0 && x) {
    rc = x->refs.acquire();
    if (rc) dom->refs.release();
  }
  if (rc) {
    dom->dev->destroy_cq(cq->bcq);
    if (x) x->release(&cq->ring);
    cq->wake.close();
    delete cq;
    return rc;
  }
  cq->cq.fid.fclass = FI_CLASS_CQ;
  cq->cq.fid.context = context;
  cq->cq.fid.ops = &g_cq_fi_ops;
  cq->cq.ops = &g_cq_ops;
  if (!x) {
    std::lock_guard<std::mutex> g(dom->lock);
    dom->cqs.push_back(cq);
  }
  *cq_p = &cq->cq;
  return 0;
}

int cq_create_internal(EfaDomain* dom, EfaCq** cq_p) {
  auto* cq = new (std::nothrow) EfaCq();
  if (!cq) return -FI_ENOMEM;
  cq->dom = dom;
  cq->internal = true;
  int rc = cq_setup(cq, 0, false);
  if (rc) {
    delete cq;
    return rc;
  }
  cq->cq.fid.fclass = FI_CLASS_CQ;
  cq->cq.fid.ops = &g_cq_fi_ops;
  cq->cq.ops = &g_cq_ops;
  {
    std::lock_guard<std::mutex> g(dom->lock);
    dom->cqs.push_back(cq);
  }
  *cq_p = cq;
  return 0;
}

void cq_destroy_internal(EfaCq* cq) { cq_close(&cq->cq.fid); }

namespace {

int cq_export(fid_cq* f, uint64_t flags, fid_xpu_cq* out) {
  if (!f || !out) return -FI_EINVAL;
  auto* cq = reinterpret_cast<EfaCq*>(f);
  if (flags) return -FI_EBADFLAGS;
  if (!cq->is_xpu()) return -FI_EINVAL;
  EfaXpuCtx* x = cq->xctx;
  if (!cq->exported) {
    int rc = x->import_mem(nullptr, sizeof(efa_xpu_cq), FI_XPU_IMPORT_DEVICEMAP, &cq->state);
    if (rc) return rc;
    auto* st = static_cast<efa_xpu_cq*>(cq->state.host);
    memset(st, 0, sizeof(*st));
    // The ring is XPU memory; cq.buf is its device address.
    efa_dp_cq_attr pa{static_cast<uint8_t*>(cq->ring.dev), EFA_IO_CQE_SIZE, cq->battr.num_entries,
                      nullptr};
    rc = efa_cq_init(&st->cq, &pa);
    if (rc) {
      x->release(&cq->state);
      return rc;
    }
    st->version = EFA_XPU_VERSION;
    st->size = sizeof(*st);
    st->format = cq->format;
    st->entry_size = static_cast<uint32_t>(cq->entry_size);
    st->fid.fid.fclass = FI_CLASS_CQ;
    st->fid.fid.prov_id = FI_XPU_PROV_EFA;
    st->fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(cq->state.dev);
    cq->xstate = st;
    cq->exported = true;
  }
  *out = cq->xstate->fid;
  return 0;
}

// ---- counters -------------------------------------------------------------------------------

uint64_t cntr_read(fid_cntr* f) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return 0;  // device code reads it
  c->dom->progress();
  return c->value.load();
}

uint64_t cntr_readerr(fid_cntr* f) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return 0;
  c->dom->progress();
  return c->err.load();
}

int cntr_add(fid_cntr* f, uint64_t v) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->value += v;
  c->cv.notify_all();
  c->wake.wake();
  return 0;
}

int cntr_set(fid_cntr* f, uint64_t v) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->value = v;
  c->cv.notify_all();
  c->wake.wake();
  return 0;
}

int cntr_adderr(fid_cntr* f, uint64_t v) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->err += v;
  c->cv.notify_all();
  c->wake.wake();
  return 0;
}

int cntr_seterr(fid_cntr* f, uint64_t v) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  if (c->is_xpu()) return -FI_EOPNOTSUPP;
  c->err = v;
  c->cv.notify_all();
  c->wake.wake();
  return 0;
}

// Sleeps on the domain's CQ event fds (counted completions arrive through them) and the
// counter's wake fd (fi_cntr_add/set from another thread). -FI_ETIMEDOUT on expiry (fi_cntr(3)).
int cntr_wait(fid_cntr* f, uint64_t threshold, int timeout) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
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
  if (!f || !out) return -FI_EINVAL;
  auto* c = reinterpret_cast<EfaCntr*>(f);
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
    st->fid.fid.fclass = FI_CLASS_CNTR;
    st->fid.fid.prov_id = FI_XPU_PROV_EFA;
    st->fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(c->state.dev);
    c->xstate = st;
    c->exported = true;
  }
  *out = c->xstate->fid;
  return 0;
}

int cntr_close(fid* f) {
  auto* c = reinterpret_cast<EfaCntr*>(f);
  int rc = c->refs.try_close();
  if (rc) return rc;
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
  auto* c = reinterpret_cast<EfaCntr*>(f);
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
  cv.notify_all();
  wake.wake();
}

int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr_p, void* context) {
  if (!domain || !attr || !cntr_p) return -FI_EINVAL;
  auto* dom = reinterpret_cast<EfaDomain*>(domain);
  if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
  if (attr->flags & ~FI_XPU) return -FI_EBADFLAGS;
  if (attr->wait_set) return -FI_EINVAL;
  fid_xpu_ctx* xctx = attr->xpu_ctx;
  if ((attr->flags & FI_XPU) && !xctx) return -FI_EINVAL;
  fi_wait_obj w = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
  if (w != FI_WAIT_NONE && w != FI_WAIT_FD) return -FI_ENOSYS;
  EfaXpuCtx* x = nullptr;
  if (xctx) {
    if (xctx->fid.fclass != FI_CLASS_XPU_CTX) return -FI_EINVAL;
    x = reinterpret_cast<EfaXpuCtx*>(xctx);
    if (x->dom != dom) return -FI_EINVAL;
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
  *cntr_p = &c->cntr;
  return 0;
}

}  // namespace xpufab::efa
