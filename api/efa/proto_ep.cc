// A protocol-fabric endpoint's data path (proto_state.h): posts handed to the protocol core or
// held behind a fence, the core's progress, and the translation of its completions into the
// application's CQ entries and counter updates (the inject calls' count without an entry).
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/efa/proto_state.h"
#include "api/proto/proto.h"

namespace xpufab::efa {

namespace {

// Completions taken from the core per call of its progress.
constexpr int kProgressBatch = 64;

static_assert(kProtoIovLimit == PROTO_IOV_MAX, "iov_limit is what the core takes");

// The buffers of an operation; FI_MR_LOCAL: a descriptor for any byte the core may touch
// through the device (rendezvous and RMA reads and writes), none for inject. A buffer without
// one is marked unregistered, and the core only copies it.
int make_bufs(const iovec* iov, void** desc, size_t count, bool need_desc, proto_buf* b) {
  if (count > kProtoIovLimit || (count && !iov)) return -FI_EINVAL;
  for (size_t k = 0; k < count; ++k) {
    b[k] = proto_buf{iov[k].iov_base, iov[k].iov_len, PROTO_KEY_NONE, PROTO_KEY_NONE};
    if (!iov[k].iov_base && iov[k].iov_len) return -FI_EINVAL;
    EfaMr* mr = desc ? static_cast<EfaMr*>(desc[k]) : nullptr;
    if (mr) {
      b[k].lkey = mr->lkey;
      b[k].rkey = mr->rkey;
    } else if (need_desc && b[k].len) {
      return -FI_EINVAL;
    }
  }
  return 0;
}

uint64_t bufs_len(const proto_buf* b, size_t n) {
  uint64_t t = 0;
  for (size_t k = 0; k < n; ++k) t += b[k].len;
  return t;
}

// Hands request r to the core (lock held): 0, or the core's error (-FI_EAGAIN: pools full).
int issue(ProtoState* ps, const TxReq& r) {
  int rc = 0;
  switch (r.kind) {
    case TxReq::kSend:
      rc = ::proto_sendv(ps->pep, r.peer, r.b, r.nbuf, r.tag, r.data, r.flags, r.ctx);
      break;
    case TxReq::kRma:
      rc = ::proto_rma(ps->pep, r.peer, r.write ? 1 : 0, r.b, r.nbuf, r.addr, r.key, r.data,
                       r.flags, r.ctx);
      break;
    case TxReq::kAtomic:
      rc = ::proto_atomic(ps->pep, r.peer, r.akind, r.op, r.datatype, r.operand, r.compare,
                          r.count, r.addr, r.key, r.result, r.flags, r.ctx);
      break;
  }
  if (rc == 0 && r.silent) ps->silent.insert(r.ctx);
  return rc;
}

// Makes r own the bytes its caller may reuse on return, before it waits.
void take_copies(TxReq* r) {
  if (r->kind == TxReq::kAtomic) {
    const size_t bytes = r->count * proto_atomic_datatype_size(r->datatype);
    const size_t n = (r->operand ? bytes : 0) + (r->compare ? bytes : 0);
    r->copy.resize(n);
    uint8_t* d = r->copy.data();
    if (r->operand) {
      memcpy(d, r->operand, bytes);
      r->operand = d;
      d += bytes;
    }
    if (r->compare) {
      memcpy(d, r->compare, bytes);
      r->compare = d;
    }
    return;
  }
  // FI_INJECT data is the caller's again once the post returned.
  if (!r->inject) return;
  size_t n = 0;
  for (uint32_t k = 0; k < r->nbuf; ++k) n += r->b[k].len;
  r->copy.resize(n);
  size_t off = 0;
  for (uint32_t k = 0; k < r->nbuf; ++k) {
    if (r->b[k].len) memcpy(r->copy.data() + off, r->b[k].addr, r->b[k].len);
    off += r->b[k].len;
  }
  r->b[0] = proto_buf{r->copy.data(), n, PROTO_KEY_NONE, PROTO_KEY_NONE};
  r->nbuf = 1;
}

// A post (lock held): issued now, or queued for its peer when a fence makes it wait (FI_FENCE
// with earlier operations to the peer outstanding, or requests already waiting for it).
bool may_issue_now(ProtoState* ps, uint32_t peer, bool fenced) {
  return ps->waiting[peer].empty() && !(fenced && proto_peer_ops_out(ps->pep, peer) > 0);
}

// Queues r behind its peer's fence (lock held).
int defer(EfaEp* ep, ProtoState* ps, TxReq&& r) {
  if (ps->deferred >= ep->tx_size) return -FI_EAGAIN;
  take_copies(&r);
  ps->waiting[r.peer].push_back(std::move(r));
  ps->deferred++;
  return 0;
}

int post(EfaEp* ep, ProtoState* ps, TxReq&& r) {
  if (may_issue_now(ps, r.peer, r.fenced)) return issue(ps, r);
  return defer(ep, ps, std::move(r));
}

bool reports(const EfaEp* ep, bool tx, uint64_t flags) {
  const bool selective = tx ? ep->tx_selective : ep->rx_selective;
  return !selective || (flags & FI_COMPLETION);
}

// Runs the domain's progress after a post that found the core's pools full: what frees them
// is the completions progress reaps.
ssize_t busy(EfaEp* ep) {
  ep->dom->progress();
  return -FI_EAGAIN;
}

void stage(EfaCq* cq, const Completion& c, DirectRead* d) {
  if (!cq || cq->internal) return;
  cq_report(cq, c, d);
}

// The counter an initiator's completion counts in.
EfaCntr* initiator_cntr(EfaEp* ep, uint64_t flags) {
  if (flags & FI_RECV) return ep->cntr_recv;
  if (flags & (FI_ATOMIC | FI_RMA)) return (flags & FI_READ) ? ep->cntr_read : ep->cntr_write;
  return ep->cntr_send;
}

// A peer read or wrote this endpoint's memory: the remote counters, and for a write with remote
// CQ data an entry on the receive CQ.
void deliver_remote(EfaEp* ep, ProtoState* ps, const proto_comp& pc, DirectRead* d) {
  EfaCntr* cntr = (pc.flags & FI_REMOTE_WRITE) ? ep->cntr_rwrite : ep->cntr_rread;
  if (cntr) cntr->inc(false);
  if (!(pc.flags & FI_REMOTE_CQ_DATA)) return;
  Completion c;
  c.c.flags = pc.flags;
  c.c.len = pc.len;
  c.c.data = pc.data;
  if (pc.src < ps->av_of_peer.size()) c.src = ps->av_of_peer[pc.src];
  stage(ep->rx_cq, c, d);
}

void deliver(EfaEp* ep, ProtoState* ps, const proto_comp& pc, DirectRead* d = nullptr) {
  if (pc.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ)) {
    deliver_remote(ep, ps, pc, d);
    return;
  }
  const bool error = pc.err != 0;
  if (pc.op_context == ps->inject_ctx()) {
    // An inject call's operation: counted; only a failure makes an entry (with no context).
    EfaCntr* c = initiator_cntr(ep, pc.flags);
    if (c) c->inc(error);
    if (!error) return;
  } else if (!error && !ps->silent.empty()) {
    auto it = ps->silent.find(pc.op_context);
    if (it != ps->silent.end()) {
      ps->silent.erase(it);
      // Counted, not reported.
      EfaCntr* c = initiator_cntr(ep, pc.flags);
      if (c) c->inc(false);
      return;
    }
  }
  Completion c;
  c.c.op_context = pc.op_context == ps->inject_ctx() ? 0 : pc.op_context;
  c.c.flags = pc.flags;
  c.c.len = pc.len;
  c.c.buf = reinterpret_cast<uintptr_t>(pc.buf);
  c.c.data = pc.data;
  c.c.err = pc.err;
  c.c.prov_errno = static_cast<uint32_t>(pc.prov_errno);
  c.tag = pc.tag;
  c.olen = pc.olen;
  if (pc.src < ps->av_of_peer.size()) c.src = ps->av_of_peer[pc.src];
  const bool rx = pc.flags & FI_RECV;
  EfaCntr* cntr = pc.op_context == ps->inject_ctx() ? nullptr : initiator_cntr(ep, pc.flags);
  if (cntr) cntr->inc(error);
  stage(rx ? ep->rx_cq : ep->tx_cq, c, d);
}

// An error completion for a waiting request the core refused when its turn came.
void fail_waiting(EfaEp* ep, ProtoState* ps, const TxReq& r, int rc) {
  proto_comp pc{};
  pc.op_context = r.ctx;
  pc.flags = r.kind == TxReq::kSend
                 ? (FI_SEND | ((r.flags & FI_TAGGED) ? FI_TAGGED : FI_MSG))
                 : r.kind == TxReq::kRma
                       ? (FI_RMA | (r.write ? FI_WRITE : FI_READ))
                       : (FI_ATOMIC | (r.akind == PROTO_ATOMIC_PLAIN ? FI_WRITE : FI_READ));
  pc.err = -rc;
  pc.src = r.peer;
  deliver(ep, ps, pc);
}

// Issues the waiting requests whose fence is over, in each peer's order (lock held).
void run_waiting(EfaEp* ep, ProtoState* ps) {
  if (!ps->deferred) return;
  for (uint32_t peer = 0; peer < ps->waiting.size(); ++peer) {
    std::deque<TxReq>& q = ps->waiting[peer];
    while (!q.empty()) {
      const TxReq& r = q.front();
      if (r.fenced && proto_peer_ops_out(ps->pep, peer) > 0) break;
      const int rc = issue(ps, r);
      if (rc == -FI_EAGAIN) break;
      if (rc) fail_waiting(ep, ps, r, rc);
      q.pop_front();
      ps->deferred--;
    }
  }
}

// What proto_progress does when there may be something to do; out of line, so that the idle
// check sets up no frame for the completions.
__attribute__((noinline)) void progress_run(EfaEp* ep, ProtoState* ps, DirectRead* d) {
  proto_comp comps[kProgressBatch];
  CoreLock g(ps);
  if (!ps->host_serialized && !progress_due(ep, ps)) return;
  sync_peers(ep, ps);
  for (;;) {
    const int n = ::proto_progress(ps->pep, comps, kProgressBatch);
    for (int i = 0; i < n; ++i) deliver(ep, ps, comps[i], d);
    if (n < kProgressBatch) break;
  }
  run_waiting(ep, ps);
}

// Runs the core's progress and stages its completions on the endpoint's CQs and counters.
inline void progress_one(EfaEp* ep, DirectRead* d) {
  // An XPU endpoint's completions are its device CQ's: device code's CQ reads progress it.
  if (ep->is_xpu()) return;
  ProtoState* ps = ep->proto;
  // Most polls find nothing. Under FI_THREAD_DOMAIN nobody else touches the core: its fields
  // say so without taking any lock. Otherwise what the last holder of the lock left says so.
  if (ps->host_serialized) {
    if (!progress_due(ep, ps)) return;
  } else if (ps->quiet.load(std::memory_order_acquire) &&
             ep->av->count.load(std::memory_order_acquire) == ps->av_seen.load(std::memory_order_relaxed) &&
             !efa_cq_ready(&ps->pep->cq)) {
    return;
  }
  progress_run(ep, ps, d);
}

}  // namespace

void proto_progress_all(const std::vector<EfaEp*>& eps, DirectRead* d) {
  for (EfaEp* ep : eps) progress_one(ep, d);
}

ssize_t proto_ops_left(EfaEp* ep) {
  ProtoState* ps = ep->proto;
  CoreLock g(ps);
  ssize_t n = 0;
  for (uint32_t i = 0; i < ps->cfg.max_ops; ++i) n += ps->pep->ops[i].kind == PROTO_K_FREE;
  n -= static_cast<ssize_t>(ps->deferred);
  return n > 0 ? n : 0;
}

ssize_t proto_send(EfaEp* ep, const ProtoSend& s) {
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;  // device code owns an XPU endpoint's core
  if (!(ep->caps & FI_SEND) || !(ep->caps & (s.tagged ? FI_TAGGED : FI_MSG)))
    return -FI_EOPNOTSUPP;
  const bool inject = s.flags & FI_INJECT;
  proto_buf b[kProtoIovLimit];
  int rc = make_bufs(s.iov, s.desc, s.count, !inject && ep->dom->local_mr, b);
  if (rc) return rc;
  const uint64_t len = bufs_len(b, s.count);
  if (len > kProtoMaxMsgSize) return -FI_EMSGSIZE;
  if (inject && len > proto_inject_size(ep->dom->attr)) return -FI_EMSGSIZE;
  ProtoState* ps = ep->proto;
  // The inject calls report nothing but count; FI_INJECT on a *msg call only makes the buffer
  // reusable on return, which an eager send's copy already does. Both go to the core as eager
  // sends with an operation, whose completion comes once the device sent the packet.
  const bool inject_call = s.no_completion;
  const bool fenced = s.flags & FI_FENCE;
  const bool silent = !inject_call && !reports(ep, true, s.flags);
  const uint64_t flags = (s.tagged ? FI_TAGGED : 0) | (s.flags & FI_REMOTE_CQ_DATA);
  const uint64_t ctx = inject_call ? ps->inject_ctx() : reinterpret_cast<uintptr_t>(s.context);
  const auto nbuf = static_cast<uint32_t>(s.count);
  {
    CoreLock g(ps);
    sync_peers(ep, ps);
    const uint32_t peer = peer_of(ps, s.dest);
    if (peer == PROTO_NONE) return -FI_EINVAL;
    if (may_issue_now(ps, peer, fenced)) {
      // The common case goes to the core without a request of its own.
      rc = ::proto_sendv(ps->pep, peer, b, nbuf, s.tag, s.data, flags, ctx);
      if (rc == 0 && silent) ps->silent.insert(ctx);
    } else {
      TxReq r;
      r.kind = TxReq::kSend;
      r.fenced = fenced;
      r.inject = inject || inject_call;
      r.silent = silent;
      r.peer = peer;
      r.nbuf = nbuf;
      for (size_t k = 0; k < s.count; ++k) r.b[k] = b[k];
      r.tag = s.tag;
      r.data = s.data;
      r.flags = flags;
      r.ctx = ctx;
      rc = defer(ep, ps, std::move(r));
    }
  }
  if (rc == -FI_EAGAIN) return busy(ep);
  if (rc) return rc;
  ep->dom->dev->ring_sq(ep->qp, 16);
  return 0;
}

ssize_t proto_recv(EfaEp* ep, const ProtoRecv& r) {
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;  // device code owns an XPU endpoint's core
  if (!(ep->caps & FI_RECV) || !(ep->caps & (r.tagged ? FI_TAGGED : FI_MSG)))
    return -FI_EOPNOTSUPP;
  const uint64_t peek = r.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD);
  if (peek && !r.tagged) return -FI_EINVAL;
  // FI_MULTI_RECV: one buffer that several messages fill, untagged ones, or tagged ones
  // (FI_TAGGED_MULTI_RECV); the core refuses the rest.
  const uint64_t multi = r.flags & FI_MULTI_RECV;
  if (multi && r.tagged && !(ep->caps & FI_TAGGED_MULTI_RECV)) return -FI_EINVAL;
  proto_buf b[kProtoIovLimit];
  // A peek moves no data; a discard neither.
  int rc = make_bufs(r.iov, r.desc, r.count,
                     !(r.flags & (FI_PEEK | FI_DISCARD)) && ep->dom->local_mr, b);
  if (rc) return rc;
  ProtoState* ps = ep->proto;
  const auto ctx = reinterpret_cast<uintptr_t>(r.context);
  const uint64_t flags = (r.tagged ? FI_TAGGED : 0) | peek | multi;
  {
    CoreLock g(ps);
    sync_peers(ep, ps);
    uint64_t src = PROTO_ADDR_ANY;
    if (r.src != FI_ADDR_UNSPEC && (ep->caps & FI_DIRECTED_RECV)) {
      const uint32_t peer = peer_of(ps, r.src);
      if (peer == PROTO_NONE) return -FI_EINVAL;
      src = peer;
    }
    rc = ::proto_recvv(ps->pep, src, b, static_cast<uint32_t>(r.count), r.tag, r.ignore, flags,
                       ctx);
    // A multi-receive buffer reports every message, each the only word of where it landed.
    if (rc == 0 && !peek && !multi && !reports(ep, false, r.flags)) ps->silent.insert(ctx);
  }
  if (rc == -FI_EAGAIN) return busy(ep);
  return rc;
}

ssize_t proto_atomic(EfaEp* ep, const ProtoAtomic& a) {
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;  // device code owns an XPU endpoint's core
  if (!(ep->caps & FI_ATOMIC)) return -FI_EOPNOTSUPP;
  ProtoState* ps = ep->proto;
  // The core copies the operands into the request packet, so FI_INJECT needs nothing more; only
  // fi_inject_atomic reports nothing (and counts).
  TxReq r;
  r.kind = TxReq::kAtomic;
  r.fenced = a.flags & FI_FENCE;
  r.inject = true;
  r.silent = !a.no_completion && !reports(ep, true, a.flags);
  r.akind = a.kind;
  r.op = a.op;
  r.datatype = a.datatype;
  r.count = a.count;
  r.operand = a.buf;
  r.compare = a.compare;
  r.result = a.result;
  r.addr = a.addr;
  r.ctx = a.no_completion ? ps->inject_ctx() : reinterpret_cast<uintptr_t>(a.context);
  // The core refuses a key wider than an EFA rkey; such a key names no region anywhere.
  r.key = static_cast<uint32_t>(a.key);
  if (r.key != a.key) return -FI_EINVAL;
  int rc;
  {
    CoreLock g(ps);
    sync_peers(ep, ps);
    r.peer = peer_of(ps, a.dest);
    if (r.peer == PROTO_NONE) return -FI_EINVAL;
    rc = post(ep, ps, std::move(r));
  }
  if (rc == -FI_EAGAIN) return busy(ep);
  if (rc) return rc;
  ep->dom->dev->ring_sq(ep->qp, 16);
  return 0;
}

ssize_t proto_rma(EfaEp* ep, bool write, const iovec* iov, void** desc, size_t count,
                  fi_addr_t dest, uint64_t addr, uint64_t key, void* context, uint64_t data,
                  uint64_t flags, bool inject_call) {
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;  // device code owns an XPU endpoint's core
  if (!(ep->caps & FI_RMA) || !(ep->caps & (write ? FI_WRITE : FI_READ))) return -FI_EOPNOTSUPP;
  const bool inject = flags & FI_INJECT;
  proto_buf b[kProtoIovLimit];
  // FI_MR_LOCAL: what the device reads or writes needs its descriptor (RDMA reads, and RDMA
  // writes where the device has them); inject data is copied, and without FI_MR_LOCAL buffers
  // that have none go by packets.
  int rc = make_bufs(iov, desc, count, !inject && ep->dom->local_mr, b);
  if (rc) return rc;
  const uint64_t len = bufs_len(b, count);
  if (len > kProtoMaxMsgSize) return -FI_EMSGSIZE;
  if (inject && len > proto_inject_size(ep->dom->attr)) return -FI_EMSGSIZE;
  // A key wider than an EFA rkey names no region anywhere: the target reports a bad key.
  const uint32_t rkey = key <= UINT32_MAX ? static_cast<uint32_t>(key) : UINT32_MAX;
  ProtoState* ps = ep->proto;
  TxReq r;
  r.kind = TxReq::kRma;
  r.write = write;
  r.fenced = flags & FI_FENCE;
  r.inject = write && (inject || inject_call);
  r.silent = !inject_call && !reports(ep, true, flags);
  r.nbuf = static_cast<uint32_t>(count);
  for (size_t k = 0; k < count; ++k) r.b[k] = b[k];
  r.addr = addr;
  r.key = rkey;
  r.data = data;
  // FI_INJECT on fi_writemsg makes the buffer reusable at once; the inject calls' completions
  // come back under the inject context, to be counted.
  r.flags = (write ? (flags & FI_REMOTE_CQ_DATA) : 0) | (inject ? FI_INJECT : 0) | FI_COMPLETION;
  r.ctx = inject_call ? ps->inject_ctx() : reinterpret_cast<uintptr_t>(context);
  {
    CoreLock g(ps);
    sync_peers(ep, ps);
    r.peer = peer_of(ps, dest);
    if (r.peer == PROTO_NONE) return -FI_EINVAL;
    rc = post(ep, ps, std::move(r));
  }
  if (rc == -FI_EAGAIN) return busy(ep);
  if (rc) return rc;
  ep->dom->dev->ring_sq(ep->qp, 16);
  return 0;
}

ssize_t proto_cancel(EfaEp* ep, void* context) {
  if (!ep->enabled || ep->is_xpu()) return -FI_ENOENT;
  ProtoState* ps = ep->proto;
  for (;;) {
    int rc;
    {
      CoreLock g(ps);
      rc = ::proto_cancel(ps->pep, reinterpret_cast<uintptr_t>(context));
    }
    if (rc != -FI_EAGAIN) return rc;
    ep->dom->progress();
  }
}

}  // namespace xpufab::efa
