// Completion queues. Host CQs are polled with device/efa_cq.h (efa_cq_poll) and their CQEs are
// translated by device/efa_completion.h, the same code device kernels use on XPU CQs: each CQE
// goes straight into its CQ's staging entry. XPU CQs are only set up and exported here. Host
// CQs are Pollable (api/core/pollable.h): poll sets and wait sets watch them.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "api/core/wait_set.h"
#include "api/efa/casts.h"

#include "api/efa/cq_trace.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/efa/wait.h"
#include "device/efa_completion.h"
#include "device/xpu_prims.h"

namespace xpufab::efa {

namespace {

// Source address of an RX completion: the AV entry with the sender's AH and QPN.
fi_addr_t lookup_src(EfaEp* ep, uint16_t ahn, uint16_t qpn) {
  if (!ep->av || ahn == EFA_IO_AH_UNKNOWN) return FI_ADDR_NOTAVAIL;
  SerialLock g(ep->av->lock, ep->av->dom->app_serialized);
  for (size_t i = 0; i < ep->av->entries.size(); ++i) {
    const EfaAvEntry& e = ep->av->entries[i];
    if (e.valid && e.ahn == ahn && e.addr.qpn == qpn) return i;
  }
  return FI_ADDR_NOTAVAIL;
}

// The stale-CQE policy device code follows too: drop, count; the host logs the first.
void drop_stale(EfaCq* cq, const efa_dp_cqe& c) {
  if (efa_comp_count_stale(&cq->stale_cqes))
    EFA_WARN(kCq,
             "dropped a %s CQE (QP %u, req_id %u) naming no outstanding request; "
             "later ones are only counted",
             c.q_type == EFA_IO_SEND_QUEUE ? "TX" : "RX", c.qp_num, c.req_id);
}

// One CQE's accounting: frees its request, counts it, and fills `out` with the completion the CQ
// it belongs to reports. Returns that CQ (null when none reports it: a selective completion, an
// internal CQ, a stale CQE); `ep_out` is the endpoint, for the source address.
EfaCq* account(EfaCq* cq, const efa_dp_cqe& c, Completion* out, EfaEp** ep_out) {
  EfaDomain* dom = cq->dom;
  EfaEp* ep = dom->ep_by_qpn(c.qp_num);
  if (!ep) {
    drop_stale(cq, c);
    return nullptr;
  }
  if (g_cq_trace_on) cq_trace_record(dom->trace_id, ep->trace_qp, c);
  const bool tx = c.q_type == EFA_IO_SEND_QUEUE;
  // Read the request's slot while it is still outstanding: its index is reused once freed.
  uint64_t rx_buf = 0;
  bool report = true;
  const uint32_t idx = efa_comp_req_index(&ep->sq, &ep->rq, &c);
  if (idx != EFA_COMP_NO_REQ) {
    OpSlot& s = (tx ? ep->sq_slots : ep->rq_slots)[idx];
    rx_buf = xpu_load_relaxed_u64(&s.buf);
    report = xpu_load_relaxed_u32(&s.report) != 0;
  }
  uint64_t op_context = 0;
  if (efa_comp_take(&ep->sq, &ep->rq, &c, &op_context) != 0) {
    drop_stale(cq, c);
    return nullptr;
  }
  const bool error = efa_io_status_to_fi_errno(c.status) != 0;
  const uint64_t op = efa_comp_op_flags(c.q_type, c.op_type, 0);
  EfaCntr* cntr;
  if (tx) {
    cntr = (op & FI_SEND) ? ep->cntr_send : (op & FI_READ) ? ep->cntr_read : ep->cntr_write;
  } else {
    // Remote writes are reported whether or not they consumed a receive.
    if (op & FI_REMOTE_WRITE) report = true;
    cntr = (op & FI_REMOTE_WRITE) ? ep->cntr_rwrite : ep->cntr_recv;
  }
  if (cntr && !cntr->is_xpu()) cntr->inc(error);
  EfaCq* target = tx ? ep->tx_cq : ep->rx_cq;
  if (!target || target->internal || !(report || error)) return nullptr;
  efa_comp_from_cqe(&c, op_context, rx_buf, &out->c);
  *ep_out = ep;
  return target;
}

fi_addr_t source_of(EfaEp* ep, const efa_dp_cqe& c) {
  return c.q_type == EFA_IO_SEND_QUEUE ? FI_ADDR_NOTAVAIL : lookup_src(ep, c.ah, c.src_qp);
}

void dispatch(EfaCq* cq, const efa_dp_cqe& c) {
  Completion out;
  EfaEp* ep = nullptr;
  EfaCq* target = account(cq, c, &out, &ep);
  if (!target) return;
  out.src = source_of(ep, c);
  target->stage(out);
}

// Adds a host CQ's event fd to the domain's epoll set of CQ notifications, or takes it out.
void watch_cq(EfaCq* cq, bool on) {
  const int fd = cq->bcq ? cq->bcq->event_fd() : -1;
  if (fd < 0 || cq->dom->cq_epoll < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(cq->dom->cq_epoll, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev) < 0)
    EFA_INFO(kCq, "epoll_ctl(%d): %d", on ? 1 : 0, errno);
}

// One application entry; the tagged format carries the protocol's tag, which the data path's
// translation (a CQE has no tag) leaves 0.
void write_entry(const EfaCq* cq, const Completion& c, uint8_t* out) {
  efa_comp_write_entry(cq->format, &c.c, out);
  if (cq->format == FI_CQ_FORMAT_TAGGED)
    memcpy(out + offsetof(fi_cq_tagged_entry, tag), &c.tag, sizeof(c.tag));
}

// fi_cq_read* on an XPU CQ: device code owns its ring.
bool refuse_host(EfaCq* cq) { return cq->is_xpu(); }

// Hands out the staged entries up to the first error (the CQ's lock held where the domain needs
// it). Out of line: an idle read never gets here, and its frame stays small.
__attribute__((noinline)) ssize_t cq_take(EfaCq* cq, void* buf, size_t count, fi_addr_t* src) {
  if (cq->staged.empty()) return -FI_EAGAIN;
  if (cq->staged.front().error()) return -FI_EAVAIL;
  size_t n = 0;
  auto* out = static_cast<uint8_t*>(buf);
  while (n < count && !cq->staged.empty() && !cq->staged.front().error()) {
    write_entry(cq, cq->staged.front(), out + n * cq->entry_size);
    if (src) src[n] = cq->staged.front().src;
    cq->staged.pop_front();
    n++;
  }
  cq->nstaged.store(cq->staged.size(), std::memory_order_relaxed);
  return static_cast<ssize_t>(n);
}

__attribute__((noinline)) ssize_t cq_take_locked(EfaCq* cq, void* buf, size_t count,
                                                 fi_addr_t* src) {
  std::lock_guard<Lock> g(cq->lock);
  return cq_take(cq, buf, count, src);
}

// The CQ's own CQEs, translated straight into the caller's entries: no staging entry, no lock
// of the CQ, and no source lookup unless asked for. Stops at an error, which it stages for
// fi_cq_readerr. Only while nothing is staged (staged entries are older), with the domain's
// lock held where it takes one. Returns the entries written.
size_t read_direct(EfaCq* cq, uint8_t* out, size_t count, fi_addr_t* src) {
  size_t n = 0;
  efa_dp_cqe c;
  while (n < count && efa_cq_poll(&cq->poll, &c) == 0) {
    Completion e;
    EfaEp* ep = nullptr;
    EfaCq* target = account(cq, c, &e, &ep);
    if (!target) continue;
    if (target != cq || e.error()) {
      e.src = source_of(ep, c);
      target->stage(e);
      if (target == cq) break;
      continue;
    }
    write_entry(cq, e, out + n * cq->entry_size);
    if (src) src[n] = source_of(ep, c);
    ++n;
  }
  return n;
}

// The domain's progress for a read of `cq` in a protocol domain: the completions of `cq` go
// straight into the caller's entries while it has nothing staged. Returns the entries written.
__attribute__((noinline)) size_t proto_progress_into(EfaCq* cq, void* buf, size_t count,
                                                     fi_addr_t* src) {
  EfaDomain* dom = cq->dom;
  dom->dev->progress(64);
  DirectRead d{cq, static_cast<uint8_t*>(buf), count, 0, src};
  SerialLock g(dom->lock, dom->app_serialized);
  if (!dom->proto_eps.empty()) proto_progress_all(dom->proto_eps, &d);
  return d.n;
}

// The domain's progress for a read of `cq` in a domain without the protocol: `cq` is drained
// straight into the caller's entries when it has nothing staged, and the internal CQs (of
// endpoints without a CQ for a direction) into nothing, freeing their requests and counting. The
// application's other CQs keep their CQEs, as a device's CQ does until it is polled: each is
// read directly in its turn, rather than staged here and copied again there (fi_pingpong reads
// its receive CQ while its send completions arrive on another). Counter reads, waits and a post
// that finds its queue full still drain every CQ. Returns the entries written.
__attribute__((noinline)) size_t progress_into(EfaCq* cq, void* buf, size_t count,
                                               fi_addr_t* src) {
  EfaDomain* dom = cq->dom;
  dom->dev->progress(64);
  // A waiting poller's usual finding, nothing to read and no internal CQ to drain, is told
  // without the domain's lock (two locked instructions a poll). A CQE written meanwhile is
  // found by the next read, as one written just after the locked look would be.
  if (dom->internal_cqs.load(std::memory_order_relaxed) == 0 && !efa_cq_ready(&cq->poll)) return 0;
  SerialLock g(dom->lock, dom->app_serialized);
  for (EfaCq* other : dom->cqs)
    if (other->internal && efa_cq_ready(&other->poll)) cq_drain(other);
  if (!efa_cq_ready(&cq->poll)) return 0;
  if (cq->nstaged.load(std::memory_order_acquire) != 0) {
    cq_drain(cq);
    return 0;
  }
  return read_direct(cq, static_cast<uint8_t*>(buf), count, src);
}

// Inlined into fi_cq_read and fi_cq_readfrom: an idle read is a call to the domain's progress
// and a look at the staging list.
__attribute__((always_inline)) inline ssize_t cq_readfrom_impl(EfaCq* cq, void* buf,
                                                               size_t count, fi_addr_t* src) {
  if (!cq) return -FI_EINVAL;
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (!buf && count) return -FI_EINVAL;
  EfaDomain* dom = cq->dom;
  if (count == 0) {
    dom->progress();
  } else if (const size_t n = dom->proto ? proto_progress_into(cq, buf, count, src)
                                         : progress_into(cq, buf, count, src);
             n != 0) {
    return static_cast<ssize_t>(n);
  }
  if (!dom->app_serialized) {
    if (cq->nstaged.load(std::memory_order_acquire) == 0) return -FI_EAGAIN;
    return cq_take_locked(cq, buf, count, src);
  }
  // FI_THREAD_DOMAIN: nobody stages concurrently, and an empty CQ is told without a call.
  if (cq->staged.empty()) return -FI_EAGAIN;
  return cq_take(cq, buf, count, src);
}

ssize_t cq_read(fid_cq* f, void* buf, size_t count) {
  return cq_readfrom_impl(to_cq(f), buf, count, nullptr);
}

ssize_t cq_readfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src) {
  return cq_readfrom_impl(to_cq(f), buf, count, src);
}

ssize_t cq_readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
  EfaCq* cq = to_cq(f);
  if (!cq) return -FI_EINVAL;
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (!buf || flags) return -FI_EINVAL;
  cq->dom->progress();
  std::lock_guard<Lock> g(cq->lock);
  if (cq->staged.empty() || !cq->staged.front().error()) return -FI_EAGAIN;
  // err_data is provider memory: the caller's err_data stays, err_data_size becomes 0.
  efa_comp_write_err(&cq->staged.front().c, buf);
  buf->tag = cq->staged.front().tag;
  buf->olen = cq->staged.front().olen;
  cq->staged.pop_front();
  cq->nstaged.store(cq->staged.size(), std::memory_order_relaxed);
  return 1;
}

// Blocks on the backend CQ event fds (and the CQ's own wake fd for fi_cq_signal) rather than
// spinning. timeout < 0 waits forever; on expiry -FI_EAGAIN, as libfabric's sread.
ssize_t cq_sreadfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void* cond,
                     int timeout) {
  EfaCq* cq = to_cq(f);
  if (!cq) return -FI_EINVAL;
  if (refuse_host(cq)) return -FI_EOPNOTSUPP;
  if (cond) return -FI_EINVAL;  // FI_CQ_COND_NONE only
  if (!buf && count) return -FI_EINVAL;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
  WaiterScope ws(&cq->wake);
  auto ready = [cq] {
    if (cq->signaled.load()) return true;
    std::lock_guard<Lock> g(cq->lock);
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
  EfaCq* cq = to_cq(f);
  if (!cq) return -FI_EINVAL;
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
  EfaCq* cq = to_cq(f);
  if (!cq) return -FI_EINVAL;
  int rc = cq->refs.try_close();
  if (rc) return rc;
  // No set holds the CQ any more (each would have held a reference): leave their view.
  cq->sets.leave(&cq->pollable);
  EfaDomain* dom = cq->dom;
  {
    std::lock_guard<Lock> g(dom->lock);
    for (auto it = dom->cqs.begin(); it != dom->cqs.end(); ++it) {
      if (*it == cq) {
        dom->cqs.erase(it);
        if (cq->internal) dom->internal_cqs.fetch_sub(1, std::memory_order_relaxed);
        watch_cq(cq, false);
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
  EfaCq* cq = to_cq(f);
  if (!cq) return -FI_EINVAL;
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

void cq_report(EfaCq* cq, const Completion& c, DirectRead* d) {
  if (d == nullptr || d->cq != cq || d->n == d->room || c.error() ||
      cq->nstaged.load(std::memory_order_acquire) != 0) {
    cq->stage(c);
    return;
  }
  write_entry(cq, c, d->out + d->n * cq->entry_size);
  if (d->src) d->src[d->n] = c.src;
  d->n++;
}

void EfaCq::stage(const Completion& c) {
  {
    SerialLock g(lock, dom->app_serialized);
    staged.push_back(c);
    nstaged.store(staged.size(), std::memory_order_release);
  }
  pollable.wake_watchers();
}

fid* CqPollable::pollable_fid() { return &cq->cq.fid; }
core::FidRefs& CqPollable::pollable_refs() { return cq->refs; }

// The NIC writes CQEs without provider code running, so a set sleeps on the backend CQ's event
// fd; has_event() keeps it armed.
int CqPollable::pollable_fd() { return cq->bcq ? cq->bcq->event_fd() : -1; }

bool CqPollable::has_event() {
  const int fd = pollable_fd();
  if (fd >= 0) {
    // Acknowledge an earlier notification (a set's epoll is level-triggered) and re-arm before
    // draining, so that a CQE written after the drain signals the fd.
    pollfd p{fd, POLLIN, 0};
    uint64_t v;
    if (poll(&p, 1, 0) == 1 && read(fd, &v, sizeof(v)) < 0) {
      EFA_INFO(kCq, "event fd read: %d", errno);
    }
    int rc = cq->bcq->arm();
    if (rc) EFA_INFO(kCq, "arm: %d", rc);
  }
  cq->dom->progress();
  std::lock_guard<Lock> g(cq->lock);
  return !cq->staged.empty();
}

void cq_drain(EfaCq* cq) {
  efa_dp_cqe c;
  while (efa_cq_poll(&cq->poll, &c) == 0) dispatch(cq, c);
}

int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq_p, void* context) {
  if (!domain || !attr || !cq_p) return -FI_EINVAL;
  EfaDomain* dom = to_domain(domain);
  if (!dom) return -FI_EINVAL;
  if (attr->flags & ~FI_XPU) return -FI_EBADFLAGS;
  // The fi_xpu(3) example sets xpu_ctx without FI_XPU; both forms make an XPU CQ.
  fid_xpu_ctx* xctx = attr_xpu_ctx(dom, attr);
  if ((attr->flags & FI_XPU) && !xctx) return -FI_EINVAL;
  fi_cq_format fmt = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  // Only the protocol fabric has tags to report.
  if (fmt == FI_CQ_FORMAT_TAGGED && !dom->proto) return -FI_ENOSYS;
  if (!efa_comp_entry_size(fmt)) return -FI_EINVAL;
  fi_wait_obj w = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
  if (w != FI_WAIT_NONE && w != FI_WAIT_FD && w != FI_WAIT_SET) return -FI_ENOSYS;
  if (attr->wait_cond != FI_CQ_COND_NONE) return -FI_EINVAL;
  // fi_cq(3): wait_set names the set of an FI_WAIT_SET CQ and nothing otherwise.
  if ((w == FI_WAIT_SET) != (attr->wait_set != nullptr)) return -FI_EINVAL;
  if (attr->wait_set && !core::is_wait_set(&attr->wait_set->fid)) return -FI_EINVAL;
  EfaXpuCtx* x = nullptr;
  if (xctx) {
    x = to_xpu_ctx(xctx);
    if (!x || x->dom != dom) return -FI_EINVAL;
    if (attr->wait_obj == FI_WAIT_FD || attr->wait_obj == FI_WAIT_SET) return -FI_EINVAL;
    w = FI_WAIT_NONE;
  }
  auto* cq = new (std::nothrow) EfaCq();
  if (!cq) return -FI_ENOMEM;
  cq->dom = dom;
  cq->format = fmt;
  cq->entry_size = efa_comp_entry_size(fmt);
  cq->wait_obj = w;
  cq->xctx = x;
  int rc = cq_setup(cq, attr->size, w != FI_WAIT_NONE);
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
    cq->pollable.cq = cq;
    rc = cq->sets.join(&cq->pollable, w == FI_WAIT_SET ? attr->wait_set : nullptr);
    if (rc) {
      dom->dev->destroy_cq(cq->bcq);
      dom->refs.release();
      cq->wake.close();
      delete cq;
      return rc;
    }
    std::lock_guard<Lock> g(dom->lock);
    dom->cqs.push_back(cq);
    watch_cq(cq, true);
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
    std::lock_guard<Lock> g(dom->lock);
    dom->cqs.push_back(cq);
    dom->internal_cqs.fetch_add(1, std::memory_order_relaxed);
    watch_cq(cq, true);
  }
  *cq_p = cq;
  return 0;
}

void cq_destroy_internal(EfaCq* cq) { cq_close(&cq->cq.fid); }

namespace {

int cq_export(fid_cq* f, uint64_t flags, fid_xpu_cq* out) {
  EfaCq* cq = to_cq(f);
  if (!cq || !out) return -FI_EINVAL;
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
    stamp_xpu_handle(st, FI_CLASS_CQ, cq->state.dev);
    cq->xstate = st;
    cq->exported = true;
  }
  *out = cq->xstate->fid;
  return 0;
}

}  // namespace

}  // namespace xpufab::efa
