// A protocol-fabric endpoint's state: the SRD QP and the CQ the protocol core (api/proto/) owns,
// its pools and bounce buffers, the peer table kept in step with the AV, the key table kept in
// step with the domain's MRs, the requests a fence holds back (per peer, issued by progress in
// posting order), and the translation of the core's completions into the application's CQ
// entries and counter updates (the inject calls' count without an entry).
//
// Locking: ProtoState::lock serializes the host's calls into the core (it allows one caller at
// a time), and once an XPU endpoint is exported the host also takes the device's spin lock
// (efa_xpu_ep.proto_lock) that every device call holds (CoreLock). Progress runs under the
// domain lock and takes them after; posts take them alone, and drop them before they drive the
// domain's progress. A domain opened with FI_THREAD_DOMAIN is the application's to serialize:
// its host calls take no lock of their own (the device's lock stays).
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "api/core/param.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/proto/grow.h"
#include "api/proto/grow_bounce.h"
#include "api/proto/proto.h"

namespace xpufab::efa {

// One transmit request (send, RMA or atomic) as the core takes it: what a post hands the core at
// once, or what waits behind a fence until progress issues it.
struct TxReq {
  enum Kind : uint8_t { kSend, kRma, kAtomic };
  Kind kind = kSend;
  bool fenced = false;
  bool silent = false;  // FI_SELECTIVE_COMPLETION without FI_COMPLETION: counted, not reported
  bool write = false;   // RMA
  bool inject = false;  // FI_INJECT or an inject call: the buffer is the caller's on return
  uint32_t peer = PROTO_NONE;
  uint32_t nbuf = 0;
  proto_buf b[kProtoIovLimit]{};
  uint64_t tag = 0;
  uint64_t data = 0;
  uint64_t flags = 0;  // the core's flags
  uint64_t ctx = 0;
  uint64_t addr = 0;  // RMA and atomics: the peer's address and key
  uint32_t key = 0;
  int akind = 0, op = 0, datatype = 0;
  size_t count = 0;
  const void* operand = nullptr;
  const void* compare = nullptr;
  void* result = nullptr;
  // Bytes the caller may reuse once the post returned (inject data, atomic operands), copied
  // while the request waits.
  std::vector<uint8_t> copy;
};

struct ProtoState {
  std::mutex lock;
  bool host_serialized = false;  // FI_THREAD_DOMAIN: the application serializes every call
  backend::Cq* bcq = nullptr;  // the QP's one CQ, polled by the core alone
  // The packets' buffers for up to peer_limit peers, registered as the table grows.
  proto::GrowBounce bounce;
  std::vector<uint64_t> mem;  // the core's pools
  // The core's peer table grows on demand up to this many peers; a host endpoint keeps each
  // grown table here (an XPU endpoint's are mapped blocks in xmem).
  uint32_t peer_limit = 0;
  std::vector<std::vector<uint64_t>> peer_tables;
  proto_config cfg{};
  proto_dev dev{};
  proto_ep own_pep{};
  // The core endpoint: own_pep, or for an XPU endpoint the start of a block the XPU context
  // maps, where device code reaches it.
  proto_ep* pep = &own_pep;
  std::vector<XpuMem> xmem;  // an XPU endpoint's imports: the core's block, bounce, rings
  // The exported efa_xpu_ep's proto_lock once device code may call into the core.
  uint32_t* dev_lock = nullptr;
  // Peers by AV index and AV indices by peer, for the AV entries seen so far.
  std::vector<uint32_t> peer_of_av;
  std::vector<fi_addr_t> av_of_peer;
  // Contexts of successful operations that report no completion (FI_SELECTIVE_COMPLETION
  // without FI_COMPLETION): their success entries are dropped, their errors still reported.
  std::unordered_multiset<uint64_t> silent;
  // Requests waiting behind a fence, per peer, in posting order; `deferred` counts them all.
  std::vector<std::deque<TxReq>> waiting;
  size_t deferred = 0;
  // The context the inject calls run under: no application context can be this endpoint's
  // own state, so their completions are told apart (counted, never reported on success).
  uint64_t inject_ctx() const { return reinterpret_cast<uintptr_t>(this); }
  // Set as the host lock is released (without FI_THREAD_DOMAIN): true when nothing but a new CQE
  // or a new AV entry can give progress work (nothing deferred, nothing pending in the core),
  // and how many AV entries the peers then covered. A poller that finds both still so, and no
  // valid CQE, skips the lock; one that races a holder sees the state just before it.
  std::atomic<bool> quiet{false};
  std::atomic<size_t> av_seen{0};
};

namespace {

// The host's hold on the core: the host-side mutex, then the device's lock if it has one.
class CoreLock {
 public:
  explicit CoreLock(ProtoState* ps) : host_(ps->lock, ps->host_serialized), ps_(ps) {
    if (!ps_->dev_lock) return;
    for (;;) {
      uint32_t unlocked = 0;
      if (__atomic_compare_exchange_n(ps_->dev_lock, &unlocked, 1u, false, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED))
        return;
      sched_yield();
    }
  }
  ~CoreLock() {
    // (An XPU endpoint's core is device code's too, and its host side never polls it.)
    if (!ps_->host_serialized && !ps_->dev_lock) {
      ps_->av_seen.store(ps_->peer_of_av.size(), std::memory_order_relaxed);
      ps_->quiet.store(ps_->deferred == 0 && !proto_progress_pending(ps_->pep), std::memory_order_release);
    }
    if (ps_->dev_lock) __atomic_store_n(ps_->dev_lock, 0u, __ATOMIC_RELEASE);
  }  // then host_ lets go of the host-side mutex
  CoreLock(const CoreLock&) = delete;
  CoreLock& operator=(const CoreLock&) = delete;

 private:
  SerialLock host_;  // first in, last out: the host-side mutex encloses the device's lock
  ProtoState* ps_;
};

// The sizes every endpoint of the fabric uses (both sides of a pair must agree on credits). The
// peer table starts with kInitialPeers entries and doubles, with its receive buffers, up to
// FI_EFA_MAX_PEERS (kMaxPeersDefault), lowered to what the device's receive queue and CQ hold.
constexpr uint32_t kInitialPeers = 16;
constexpr uint32_t kMaxPeersDefault = 1024;
constexpr uint32_t kCredits = 32;
constexpr uint32_t kMaxOps = 1024;
constexpr uint32_t kTxBuffers = 256;
constexpr int kProgressBatch = 64;
// Bytes per rendezvous read: a 1 MiB message goes in one read (each read costs a WQE, a
// request, a response and completions; four per MiB gave about a tenth less bandwidth than one,
// side by side),
// while a larger message still has several reads in flight, which keep it moving while one of
// them is retransmitted.
constexpr uint32_t kRdmaChunk = 1u << 20;

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 2;
  while (p < v) p <<= 1;
  return p;
}

void fill_config(proto_config* c) {
  proto_config_default(c);
  c->max_peers = kInitialPeers;
  c->credits = kCredits;
  c->max_ops = kMaxOps;
  c->ntx = kTxBuffers;
  c->ncomp = round_pow2(kMaxOps);
  c->rdma_chunk = kRdmaChunk;
}

// Where a grown peer table lives: host memory the endpoint keeps, or for an XPU endpoint a block
// the XPU context maps, where device code follows the core's pointers into it.
int map_for_device(EfaEp* ep, ProtoState* ps, void* host, size_t len, uint64_t flags,
                   void** out = nullptr);

void* peer_table_memory(EfaEp* ep, ProtoState* ps, size_t len) {
  if (ep->is_xpu()) {
    void* block = nullptr;
    if (map_for_device(ep, ps, nullptr, len, FI_XPU_IMPORT_DEVICEMAP, &block)) return nullptr;
    return block;
  }
  ps->peer_tables.emplace_back(len / 8 + 1);
  return ps->peer_tables.back().data();
}

// Registers the receive buffers of a table of n peers (and maps those new since a table of
// `had` for device code): their lkey in *lkey.
int register_rx(EfaEp* ep, ProtoState* ps, uint32_t had, uint32_t n, uint32_t* lkey) {
  if (ep->is_xpu()) {
    const size_t from = had ? ps->bounce.rx_bytes(had) : 0;
    const int rc = map_for_device(ep, ps, ps->bounce.base() + from, ps->bounce.rx_bytes(n) - from,
                                  FI_XPU_IMPORT_DEVICEMAP);
    if (rc) return rc;
  }
  const int rc = ps->bounce.register_rx(n, lkey);
  return rc < 0 && rc > -256 ? to_fi_err(rc) : rc;
}

// A full peer table twice as large (and its new entries' receive buffers registered and
// posted), up to the limit (lock held): 0, or -FI_ENOSPC at the limit.
int grow_peers(EfaEp* ep, ProtoState* ps) {
  const uint32_t had = ps->pep->cfg.max_peers;
  const uint32_t n = std::min(ps->peer_limit, had * 2);
  if (n <= had) return -FI_ENOSPC;
  const size_t len = proto_grow_mem_size(&ps->pep->cfg, n);
  void* mem = peer_table_memory(ep, ps, len);
  if (!mem) return -FI_ENOMEM;
  uint32_t lkey = 0;
  int rc = register_rx(ep, ps, had, n, &lkey);
  if (rc) return rc;
  rc = proto_grow_peers(ps->pep, n, mem, len, lkey);
  if (rc) return rc;
  ps->waiting.resize(n);
  return 0;
}

// Adds the peer of AV entry e, growing the table when it is full (lock held).
int add_peer(EfaEp* ep, ProtoState* ps, const EfaAvEntry& e, uint32_t* peer) {
  for (;;) {
    const int rc = proto_peer_add_gid(ps->pep, e.ahn, e.addr.qpn, e.addr.qkey, e.addr.gid, peer);
    if (rc != -FI_ENOSPC) return rc;
    const int grown = grow_peers(ep, ps);
    if (grown) return grown;
  }
}

// Peers for the AV entries added since the last call (lock held). An entry that does not fit
// in the peer table stays unknown: operations naming it fail with -FI_EINVAL.
void sync_new_peers(EfaEp* ep, ProtoState* ps) {
  EfaAv* av = ep->av;
  std::lock_guard<std::mutex> g(av->lock);
  for (size_t i = ps->peer_of_av.size(); i < av->entries.size(); ++i) {
    const EfaAvEntry& e = av->entries[i];
    uint32_t peer = PROTO_NONE;
    if (!e.valid) {
      ps->peer_of_av.push_back(peer);
      continue;
    }
    const int rc = add_peer(ep, ps, e, &peer);
    if (rc == 0) {
      if (ps->av_of_peer.size() <= peer) ps->av_of_peer.resize(peer + 1, FI_ADDR_NOTAVAIL);
      if (ps->av_of_peer[peer] == FI_ADDR_NOTAVAIL) ps->av_of_peer[peer] = i;
    } else {
      peer = PROTO_NONE;
      EFA_WARN(kEpData, "QP %u: no room for AV entry %zu in the peer table (%u peers, at most "
               "%u: FI_EFA_MAX_PEERS): %d", ep->qpn, i, ps->pep->cfg.max_peers, ps->peer_limit, rc);
    }
    ps->peer_of_av.push_back(peer);
  }
}

// Every post and progress call asks; almost always nothing was appended.
inline void sync_peers(EfaEp* ep, ProtoState* ps) {
  if (ep->av->count.load(std::memory_order_acquire) != ps->peer_of_av.size())
    sync_new_peers(ep, ps);
}

// Whether progress has anything to do: new AV entries to make peers of (they may adopt waiting
// packets), requests behind a fence, or work in the core.
inline bool progress_due(EfaEp* ep, ProtoState* ps) {
  return ps->deferred || ep->av->count.load(std::memory_order_acquire) != ps->peer_of_av.size() ||
         proto_progress_due(ps->pep);
}

uint32_t peer_of(ProtoState* ps, fi_addr_t a) {
  return a < ps->peer_of_av.size() ? ps->peer_of_av[a] : PROTO_NONE;
}

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

void stage(EfaCq* cq, const Completion& c) {
  if (!cq || cq->internal) return;
  cq->stage(c);
}

// The counter an initiator's completion counts in.
EfaCntr* initiator_cntr(EfaEp* ep, uint64_t flags) {
  if (flags & FI_RECV) return ep->cntr_recv;
  if (flags & (FI_ATOMIC | FI_RMA)) return (flags & FI_READ) ? ep->cntr_read : ep->cntr_write;
  return ep->cntr_send;
}

// A peer read or wrote this endpoint's memory: the remote counters, and for a write with remote
// CQ data an entry on the receive CQ.
void deliver_remote(EfaEp* ep, ProtoState* ps, const proto_comp& pc) {
  EfaCntr* cntr = (pc.flags & FI_REMOTE_WRITE) ? ep->cntr_rwrite : ep->cntr_rread;
  if (cntr) cntr->inc(false);
  if (!(pc.flags & FI_REMOTE_CQ_DATA)) return;
  Completion c;
  c.c.flags = pc.flags;
  c.c.len = pc.len;
  c.c.data = pc.data;
  if (pc.src < ps->av_of_peer.size()) c.src = ps->av_of_peer[pc.src];
  stage(ep->rx_cq, c);
}

void deliver(EfaEp* ep, ProtoState* ps, const proto_comp& pc) {
  if (pc.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ)) {
    deliver_remote(ep, ps, pc);
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
  stage(rx ? ep->rx_cq : ep->tx_cq, c);
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

void release_device_maps(EfaEp* ep, ProtoState* ps) {
  for (auto it = ps->xmem.rbegin(); it != ps->xmem.rend(); ++it) ep->xctx->release(&*it);
  ps->xmem.clear();
}

// Maps [host, host + len) for the XPU (a new block when host is null); *out = the host address.
// The core keeps pointers into its memory, its bounce buffers and the QP's rings, which host
// and device code both follow: the context must map them at their host addresses (the
// host-memory defaults and CUDA's mapped host memory do), or the endpoint cannot be an XPU one.
int map_for_device(EfaEp* ep, ProtoState* ps, void* host, size_t len, uint64_t flags,
                   void** out) {
  XpuMem m;
  const int rc = ep->xctx->import_mem(host, len, flags, &m);
  if (rc) return rc;
  ps->xmem.push_back(m);
  if (m.dev != m.host) {
    EFA_WARN(kEpCtrl, "the XPU context maps %p at %p; the efa fabric's XPU endpoints need host "
             "memory at its own address", m.host, m.dev);
    return -FI_EOPNOTSUPP;
  }
  if (out) *out = m.host;
  return 0;
}

// An XPU endpoint's core where device code reaches it: proto_ep and its pools in one block from
// the XPU context, the transmit buffers (the receive buffers are mapped as they are registered),
// and the QP's rings and doorbells.
int map_core_for_device(EfaEp* ep, ProtoState* ps, const backend::WqAttr& sq,
                        const backend::WqAttr& rq, const backend::CqAttr& cqa, size_t mem_len,
                        void** mem) {
  const uint64_t dm = FI_XPU_IMPORT_DEVICEMAP, io = FI_XPU_IMPORT_IOMEMORY | dm;
  const size_t head = (sizeof(proto_ep) + 63) / 64 * 64;
  void* block = nullptr;
  int rc = map_for_device(ep, ps, nullptr, head + mem_len, dm, &block);
  const proto::GrowBounce& b = ps->bounce;
  if (rc == 0) rc = map_for_device(ep, ps, b.base() + b.tx_offset(), b.size() - b.tx_offset(), dm);
  if (rc == 0) rc = map_for_device(ep, ps, sq.buffer, size_t{sq.entry_size} * sq.num_entries, io);
  if (rc == 0) rc = map_for_device(ep, ps, sq.doorbell, 4, io);
  if (rc == 0) rc = map_for_device(ep, ps, rq.buffer, size_t{rq.entry_size} * rq.num_entries, dm);
  if (rc == 0) rc = map_for_device(ep, ps, rq.doorbell, 4, io);
  if (rc == 0) rc = map_for_device(ep, ps, cqa.buffer, size_t{cqa.entry_size} * cqa.num_entries, dm);
  if (rc == 0 && cqa.doorbell) rc = map_for_device(ep, ps, cqa.doorbell, 4, io);
  if (rc) return rc;
  memset(block, 0, head + mem_len);
  ps->pep = static_cast<proto_ep*>(block);
  *mem = static_cast<uint8_t*>(block) + head;
  return 0;
}

// FI_EFA_MAX_PEERS, or the default.
uint32_t max_peers_setting() {
  long long v = 0;
  if (core::get_param_int(kProvName, "max_peers", &v) && v >= 1)
    return static_cast<uint32_t>(std::min<long long>(v, 0xfffe));
  return kMaxPeersDefault;
}

// The most peers an endpoint's table may grow to: the setting, lowered to what the device's
// receive queue holds of their buffers and its CQ of their completions beside nsq sends'.
uint32_t peer_limit_of(const backend::DeviceAttr& at, const proto_config& cfg, uint32_t nsq) {
  const uint32_t per_peer = cfg.credits + PROTO_CTRL_SLACK;
  uint32_t limit = std::min(max_peers_setting(), at.max_rq_wr / per_peer);
  if (at.max_cq_depth)
    limit = std::min(limit, at.max_cq_depth > nsq ? (at.max_cq_depth - nsq) / per_peer : 0);
  return limit;
}

// Releases what was set up of the endpoint's state (its QP is gone): the CQ, the XPU
// context's maps, the bounce region.
void release_state(EfaEp* ep, ProtoState* ps) {
  if (ps->bcq) ep->dom->dev->destroy_cq(ps->bcq);
  ps->bcq = nullptr;
  release_device_maps(ep, ps);
  ps->bounce.release();
}

}  // namespace

proto_ep* proto_core_of(EfaEp* ep) { return ep->proto ? ep->proto->pep : nullptr; }

void proto_export_sync(EfaEp* ep, uint32_t* dev_lock) {
  ProtoState* ps = ep->proto;
  {
    std::lock_guard<std::mutex> g(ps->lock);
    ps->dev_lock = dev_lock;
  }
  CoreLock g(ps);
  sync_peers(ep, ps);
}

size_t proto_inject_size(const backend::DeviceAttr& a) {
  return a.mtu > sizeof(proto_hdr) ? a.mtu - sizeof(proto_hdr) : 0;
}

size_t proto_atomic_max_bytes(const EfaDomain* dom) {
  return proto_inject_size(dom->attr);
}

int proto_ep_enable(EfaEp* ep) {
  EfaDomain* dom = ep->dom;
  const backend::DeviceAttr& at = dom->attr;
  auto* ps = new (std::nothrow) ProtoState();
  if (!ps) return -FI_ENOMEM;
  fill_config(&ps->cfg);
  const uint32_t nsq = static_cast<uint32_t>(ep->tx_size);
  // Fewer credits where the device's receive queue cannot hold the first table's buffers.
  while (proto_rx_buffers(&ps->cfg) > at.max_rq_wr && ps->cfg.credits > 4) ps->cfg.credits /= 2;
  ps->peer_limit = peer_limit_of(at, ps->cfg, nsq);
  ps->cfg.max_peers = std::min(ps->cfg.max_peers, ps->peer_limit);
  // Receive queue entries for the buffers of every peer the table may grow to.
  const uint32_t nrx = proto_grow_rx_limit(&ps->cfg, ps->peer_limit);
  int rc = 0;
  auto fail = [&](int err) {
    if (ep->qp) dom->dev->destroy_qp(ep->qp);
    ep->qp = nullptr;
    release_state(ep, ps);
    delete ps;
    return err < 0 && err > -256 ? to_fi_err(err) : err;
  };
  if (ps->peer_limit == 0) {
    EFA_WARN(kEpCtrl, "the device's receive queue (%u) holds too few buffers for the protocol",
             at.max_rq_wr);
    return fail(-FI_EINVAL);
  }
  backend::CqInitAttr ca;
  ca.entries = round_pow2(nsq + nrx);
  if (at.max_cq_depth && ca.entries > at.max_cq_depth) ca.entries = at.max_cq_depth;
  // A peer may send before this side has inserted it into the AV; its packets then arrive with
  // no AH, and only the source GID in the CQE lets the core keep them until the insert.
  ca.with_sgid = (at.device_caps & backend::kCapCqWithSgid) != 0;
  // fi_cq_sread / fi_cntr_wait sleep on the CQ's event fd: every packet in or out wakes them.
  ca.with_event_fd = (at.device_caps & backend::kCapCqNotifications) != 0;
  rc = dom->dev->create_cq(ca, &ps->bcq);
  if (rc) return fail(rc);
  backend::QpInitAttr qa;
  qa.type = backend::QpType::kSrd;
  qa.pd = dom->pd;
  qa.send_cq = ps->bcq;
  qa.recv_cq = ps->bcq;
  qa.max_send_wr = nsq;
  qa.max_recv_wr = nrx;
  qa.max_send_sge = at.max_sq_sge;
  qa.max_recv_sge = 1;
  rc = qp_create_rts(ep, qa);
  if (rc) return fail(rc);
  backend::WqAttr sq{}, rq{};
  backend::CqAttr cqa{};
  rc = ep->qp->query_wqs(&sq, &rq);
  if (rc == 0) rc = ps->bcq->query(&cqa);
  if (rc) return fail(rc);
  proto_dev& d = ps->dev;
  d.sq = {sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  d.rq = {rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
  d.cq = {cqa.buffer, cqa.entry_size, cqa.num_entries, cqa.doorbell};
  d.max_sq_sge = at.max_sq_sge;
  d.max_rq_sge = 1;
  d.mtu = at.mtu;
  d.max_rdma_size = at.max_rdma_size;
  d.caps = ((at.device_caps & backend::kCapRdmaRead) ? PROTO_DEV_RDMA_READ : 0u) |
           ((at.device_caps & backend::kCapRdmaWrite) ? PROTO_DEV_RDMA_WRITE : 0u) |
           (ca.with_sgid ? PROTO_DEV_CQ_SGID : 0u);
  rc = ps->bounce.init(dom->dev, dom->pd, ps->cfg, d, ps->peer_limit);
  if (rc) return fail(rc);
  const size_t mem_len = proto_ep_mem_size(&ps->cfg, &d);
  void* mem = nullptr;
  if (ep->is_xpu()) {
    rc = map_core_for_device(ep, ps, sq, rq, cqa, mem_len, &mem);
    if (rc) return fail(rc);
  } else {
    ps->mem.assign(mem_len / 8 + 1, 0);
    mem = ps->mem.data();
  }
  uint32_t rx_lkey = 0;
  rc = register_rx(ep, ps, 0, ps->cfg.max_peers, &rx_lkey);
  if (rc) return fail(rc);
  rc = proto_ep_init(ps->pep, &ps->cfg, &d, mem, mem_len, ps->bounce.base(), rx_lkey);
  if (rc == 0) rc = proto_grow_reserve(ps->pep, ps->peer_limit, ps->bounce.tx_lkey());
  if (rc) {
    EFA_WARN(kEpCtrl, "proto_ep_init: %d (sq %u, rq %u, cq %u)", rc, sq.num_entries,
             rq.num_entries, cqa.num_entries);
    return fail(rc);
  }
  std::lock_guard<std::mutex> g(dom->lock);
  for (EfaMr* mr : dom->mrs) {
    if (!(mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) continue;
    if (proto_mr_add(ps->pep, mr->addr, mr->len, mr->bmr->rkey(), mr->access))
      EFA_WARN(kEpCtrl, "QP %u: the key table is full; MR %#x is no atomic target", ep->qpn,
               mr->bmr->rkey());
  }
  ps->waiting.resize(ps->cfg.max_peers);
  ps->pep->min_multi_recv = ep->min_multi_recv;
  ps->host_serialized = dom->app_serialized;
  ep->proto = ps;
  dom->proto_eps.push_back(ep);
  return 0;
}

void proto_ep_close(EfaEp* ep) {
  EfaDomain* dom = ep->dom;
  ProtoState* ps = ep->proto;
  {
    std::lock_guard<std::mutex> g(dom->lock);
    for (auto it = dom->proto_eps.begin(); it != dom->proto_eps.end(); ++it) {
      if (*it == ep) {
        dom->proto_eps.erase(it);
        break;
      }
    }
  }
  if (ep->qp) {
    int rc = dom->dev->destroy_qp(ep->qp);
    if (rc) EFA_WARN(kEpCtrl, "destroy_qp: %d", rc);
    ep->qp = nullptr;
  }
  release_state(ep, ps);
  delete ps;
  ep->proto = nullptr;
}

namespace {

// What proto_progress does when there may be something to do; out of line, so that the idle
// check sets up no frame for the completions.
__attribute__((noinline)) void progress_run(EfaEp* ep, ProtoState* ps) {
  proto_comp comps[kProgressBatch];
  CoreLock g(ps);
  if (!ps->host_serialized && !progress_due(ep, ps)) return;
  sync_peers(ep, ps);
  for (;;) {
    const int n = ::proto_progress(ps->pep, comps, kProgressBatch);
    for (int i = 0; i < n; ++i) deliver(ep, ps, comps[i]);
    if (n < kProgressBatch) break;
  }
  run_waiting(ep, ps);
}

// Runs the core's progress and stages its completions on the endpoint's CQs and counters.
inline void progress_one(EfaEp* ep) {
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
  progress_run(ep, ps);
}

}  // namespace

void proto_progress_all(const std::vector<EfaEp*>& eps) {
  for (EfaEp* ep : eps) progress_one(ep);
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
  ep->dom->dev->progress(16);
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
  ep->dom->dev->progress(16);
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
  ep->dom->dev->progress(16);
  return 0;
}

void proto_set_min_multi_recv(EfaEp* ep, size_t v) {
  ep->min_multi_recv = v;
  if (!ep->proto) return;
  CoreLock g(ep->proto);
  ep->proto->pep->min_multi_recv = v;
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

int proto_event_fd(EfaEp* ep) {
  ProtoState* ps = ep->proto;
  const int fd = ps->bcq->event_fd();
  return fd >= 0 && ps->bcq->arm() == 0 ? fd : -1;
}

void proto_mr_added(EfaMr* mr) {
  EfaDomain* dom = mr->dom;
  std::lock_guard<std::mutex> g(dom->lock);
  dom->mrs.push_back(mr);
  if (!(mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) return;
  for (EfaEp* ep : dom->proto_eps) {
    CoreLock pg(ep->proto);
    if (proto_mr_add(ep->proto->pep, mr->addr, mr->len, mr->bmr->rkey(), mr->access))
      EFA_WARN(kEpCtrl, "QP %u: the key table is full; MR %#x is no atomic target", ep->qpn,
               mr->bmr->rkey());
  }
}

void proto_mr_removed(EfaMr* mr) {
  EfaDomain* dom = mr->dom;
  std::lock_guard<std::mutex> g(dom->lock);
  for (auto it = dom->mrs.begin(); it != dom->mrs.end(); ++it) {
    if (*it == mr) {
      dom->mrs.erase(it);
      break;
    }
  }
  for (EfaEp* ep : dom->proto_eps) {
    CoreLock pg(ep->proto);
    proto_mr_remove(ep->proto->pep, mr->bmr->rkey());
  }
}

}  // namespace xpufab::efa
