// A protocol-fabric endpoint's set-up and teardown (proto_state.h): its QP, private CQ, pools
// and bounce buffers on enable, the peer table that grows with the AV, the XPU context's maps of
// what device code reaches, and the key table kept in step with the domain's MRs.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "api/core/param.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/efa/proto_state.h"
#include "api/proto/backend_dev.h"
#include "api/proto/grow.h"
#include "api/proto/grow_bounce.h"
#include "api/proto/proto.h"

namespace xpufab::efa {

namespace {

// The sizes every endpoint of the fabric uses (both sides of a pair must agree on credits). The
// peer table starts with kInitialPeers entries and doubles, with its receive buffers, up to
// FI_EFA_MAX_PEERS (kMaxPeersDefault), lowered to what the device's receive queue and CQ hold.
constexpr uint32_t kInitialPeers = 16;
constexpr uint32_t kMaxPeersDefault = 1024;
constexpr uint32_t kCredits = 32;
constexpr uint32_t kMaxOps = 1024;
constexpr uint32_t kTxBuffers = 256;
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
int map_core_for_device(EfaEp* ep, ProtoState* ps, const proto_dev& d, size_t mem_len, void** mem) {
  const efa_dp_wq_attr &sq = d.sq, &rq = d.rq;
  const efa_dp_cq_attr& cqa = d.cq;
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

// Peers for the AV entries added since the last call (lock held). An entry that does not fit
// in the peer table stays unknown: operations naming it fail with -FI_EINVAL.
void sync_new_peers(EfaEp* ep, ProtoState* ps) {
  EfaAv* av = ep->av;
  std::lock_guard<Lock> g(av->lock);
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

proto_ep* proto_core_of(EfaEp* ep) { return ep->proto ? ep->proto->pep : nullptr; }

void proto_export_sync(EfaEp* ep, uint32_t* dev_lock) {
  ProtoState* ps = ep->proto;
  {
    std::lock_guard<Lock> g(ps->lock);
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
  proto_dev& d = ps->dev;
  rc = proto::dev_of(ep->qp, ps->bcq, at, ca.with_sgid, &d);
  if (rc) return fail(rc);
  rc = ps->bounce.init(dom->dev, dom->pd, ps->cfg, d, ps->peer_limit);
  if (rc) return fail(rc);
  const size_t mem_len = proto_ep_mem_size(&ps->cfg, &d);
  void* mem = nullptr;
  if (ep->is_xpu()) {
    rc = map_core_for_device(ep, ps, d, mem_len, &mem);
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
    EFA_WARN(kEpCtrl, "proto_ep_init: %d (sq %u, rq %u, cq %u)", rc, d.sq.num_entries,
             d.rq.num_entries, d.cq.num_entries);
    return fail(rc);
  }
  std::lock_guard<Lock> g(dom->lock);
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
    std::lock_guard<Lock> g(dom->lock);
    dom->proto_eps.erase(std::remove(dom->proto_eps.begin(), dom->proto_eps.end(), ep), dom->proto_eps.end());
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

void proto_set_min_multi_recv(EfaEp* ep, size_t v) {
  ep->min_multi_recv = v;
  if (!ep->proto) return;
  CoreLock g(ep->proto);
  ep->proto->pep->min_multi_recv = v;
}

int proto_event_fd(EfaEp* ep) {
  ProtoState* ps = ep->proto;
  const int fd = ps->bcq->event_fd();
  return fd >= 0 && ps->bcq->arm() == 0 ? fd : -1;
}

void proto_mr_added(EfaMr* mr) {
  EfaDomain* dom = mr->dom;
  std::lock_guard<Lock> g(dom->lock);
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
  std::lock_guard<Lock> g(dom->lock);
  dom->mrs.erase(std::remove(dom->mrs.begin(), dom->mrs.end(), mr), dom->mrs.end());
  for (EfaEp* ep : dom->proto_eps) {
    CoreLock pg(ep->proto);
    proto_mr_remove(ep->proto->pep, mr->bmr->rkey());
  }
}

}  // namespace xpufab::efa
