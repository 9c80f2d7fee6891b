// Active messages on the protocol core (api/proto): the core owns a second SRD QP of the
// interface, its receive buffers and its credits; UCT AM ids ride in the first payload byte of
// core AM kUctAmId, and core AM kCtlAmId carries the connection handshake. Senders unknown to
// the core (no AH here yet) are given an AH and a peer entry before the core polls their packet.
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "api/backend/backend.h"
#include "api/proto/grow.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

struct __attribute__((packed)) CtlMsg {
  uint8_t type;
  uint32_t am_qpn;
};

// A UCT_CB_PARAM_FLAG_DESC descriptor: what uct_iface_release_desc finds before `desc`.
struct DescHead {
  uct_recv_desc_t release;  // first: the callback gets its address
  DescPool* pool;
  uct_recv_desc_t* self;    // last: uct_iface_release_desc reads it just before the headroom
};

}  // namespace

// Descriptors of one size, reused instead of allocated per AM. A descriptor the user keeps past
// its interface's close frees itself (the pool outlives the interface until the last one).
struct DescPool {
  size_t block = 0;
  uint64_t allocs = 0;  // blocks allocated (the pool's misses)
  std::vector<void*> free;
  uint32_t out = 0;
  bool closed = false;
};

namespace {

void desc_release(uct_recv_desc_t* self, void*) {
  auto* h = reinterpret_cast<DescHead*>(self);
  DescPool* pool = h->pool;
  pool->out--;
  if (!pool->closed) {
    pool->free.push_back(h);
    return;
  }
  std::free(h);
  if (pool->out == 0) delete pool;
}

void* desc_get(DescPool* pool) {
  void* b;
  if (!pool->free.empty()) {
    b = pool->free.back();
    pool->free.pop_back();
  } else {
    b = std::malloc(pool->block);
    if (b == nullptr) return nullptr;
    pool->allocs++;
  }
  pool->out++;
  return b;
}

void desc_put(DescPool* pool, void* b) {
  pool->out--;
  pool->free.push_back(b);
}

void desc_pool_close(DescPool* pool) {
  if (pool == nullptr) return;
  for (void* b : pool->free) std::free(b);
  pool->free.clear();
  if (pool->out == 0)
    delete pool;
  else
    pool->closed = true;
}

int on_uct_am(void* arg, uint32_t, const void* payload, uint32_t len) {
  auto* iface = static_cast<SrdIface*>(arg);
  if (len < 1) return 0;
  const uint8_t id = *static_cast<const uint8_t*>(payload);
  if (id >= UCT_AM_ID_MAX) return 0;
  const uint32_t n = len - 1;
  // The payload lives in a core receive buffer that is reposted on return: the handler gets a
  // descriptor of its own so that it may keep it (UCS_INPROGRESS) until uct_iface_release_desc.
  uint8_t* data = desc_new(iface);
  if (data == nullptr) return -FI_EAGAIN;
  std::memcpy(data, static_cast<const uint8_t*>(payload) + 1, n);
  iface->stats.am_rx++;
  iface->stats.am_copy_bytes += n;
  const uct_am_handler_t& hd = iface->super.am[id];
  ucs_status_t st = hd.cb(hd.arg, data, n, UCT_CB_PARAM_FLAG_DESC);
  if (st != UCS_INPROGRESS) desc_drop(iface, data);
  return 0;
}

int on_ctl(void* arg, uint32_t src, const void* payload, uint32_t len) {
  auto* iface = static_cast<SrdIface*>(arg);
  CtlMsg m;
  if (len < sizeof(m)) return 0;
  std::memcpy(&m, payload, sizeof(m));
  if (m.type == kCtlConnReq) {
    CtlMsg ack{kCtlConnAck, iface->am_qpn};
    // No transmit buffer now: the request is handled again on a later progress call.
    return proto_am_send(iface->core, src, kCtlAmId, &ack, sizeof(ack), nullptr, 0) == 0 ? 0 : -FI_EAGAIN;
  }
  if (m.type == kCtlConnAck) {
    for (SrdEp* ep : iface->eps)
      if (ep->peer_idx == src) ep->acked = true;
  }
  return 0;
}

// The GID of an AH another interface of this device made (a sender known to the device but
// not yet to this interface's core).
bool gid_of_ahn(SharedDevice* dev, uint16_t ahn, uint8_t gid[16]) {
  std::lock_guard<std::mutex> g(dev->ah_lock);
  for (const auto& kv : dev->ahs)
    if (kv.second.first->ahn() == ahn) {
      std::memcpy(gid, kv.first.data(), 16);
      return true;
    }
  return false;
}

// Moves the core's CQEs from the device CQ to the ring the core polls, giving senders without
// an AH here one (and a peer entry) on the way: the CQE reaches the core as the device would
// have written it had the AH existed, and no CQE can reach the core before its sender is known.
void relay_cqes(SrdIface* iface) {
  efa_cq* shadow = &iface->core->cq;
  efa_dp_cqe c;
  while (iface->relay_prod - efa_cq_consumed(shadow) < shadow->num_entries && efa_cq_poll(&iface->am_pcq, &c) == 0) {
    if (c.q_type == EFA_IO_RECV_QUEUE && c.raw.base.ah == EFA_IO_AH_UNKNOWN) {
      backend::Ah* ah = nullptr;
      uint32_t idx;
      if (ah_get(iface, c.raw.u.src_addr, &ah) == 0) {
        if (core_peer_add(iface, ah->ahn(), c.raw.base.src_qp_num, &idx) == 0)
          c.raw.base.ah = ah->ahn();
        else
          ah_put(iface, c.raw.u.src_addr);  // table full: the core drops it as from nobody
      }
    } else if (c.q_type == EFA_IO_RECV_QUEUE &&
               proto_peer_lookup(iface->core, c.raw.base.ah, c.raw.base.src_qp_num) == PROTO_NONE) {
      // The device knows the sender (another interface made its AH), this core does not yet.
      uint8_t gid[16];
      backend::Ah* ah = nullptr;
      uint32_t idx;
      if (gid_of_ahn(iface->dev, c.raw.base.ah, gid) && ah_get(iface, gid, &ah) == 0 &&
          core_peer_add(iface, ah->ahn(), c.raw.base.src_qp_num, &idx) != 0)
        ah_put(iface, gid);
    }
    const uint32_t p = iface->relay_prod++;
    efa_dp_nic_write_cqe(iface->relay + static_cast<size_t>(p & shadow->mask) * EFA_IO_CQE_SIZE, &c.raw,
                         efa_dp_cq_phase(p, shadow->log2_entries));
  }
}

// ---- rc-style hooks ----

int init_rx(SrdIface* iface) {
  backend::WqAttr sq{}, rq{};
  int rc = iface->am_qp->query_wqs(&sq, &rq);
  if (rc) return rc;
  backend::CqAttr ca{};
  rc = iface->am_cq->query(&ca);
  if (rc) return rc;
  const backend::DeviceAttr& d = iface->dev->attr;
  proto_dev pd{};
  pd.sq = efa_dp_wq_attr{sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  pd.rq = efa_dp_wq_attr{rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
  efa_dp_cq_attr real{ca.buffer, ca.entry_size, ca.num_entries, ca.doorbell};
  if (efa_cq_init(&iface->am_pcq, &real)) return -EINVAL;
  iface->relay_len = static_cast<size_t>(ca.num_entries) * EFA_IO_CQE_SIZE;
  void* r = mmap(nullptr, iface->relay_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return -ENOMEM;
  iface->relay = static_cast<uint8_t*>(r);
  iface->relay_prod = 0;
  pd.cq = efa_dp_cq_attr{iface->relay, EFA_IO_CQE_SIZE, ca.num_entries, nullptr};
  pd.max_sq_sge = d.max_sq_sge;
  pd.max_rq_sge = d.max_rq_sge;
  pd.mtu = d.mtu;
  pd.max_rdma_size = d.max_rdma_size;
  pd.caps = (d.device_caps & backend::kCapRdmaRead) ? PROTO_DEV_RDMA_READ : 0;
  const size_t mem = proto_ep_mem_size(&iface->core_cfg, &pd);
  iface->core_mem.assign(mem / 8 + 16, 0);
  // Room for the receive buffers of every peer the table may grow to, committed by the kernel
  // as they are first written: only the buffers of the peers present are posted and registered.
  rc = iface->core_bounce.init(iface->dev->dev.get(), iface->dev->pd, iface->core_cfg, pd, iface->peer_limit);
  uint32_t rx_lkey = 0;
  if (rc == 0) rc = iface->core_bounce.register_rx(iface->core_cfg.max_peers, &rx_lkey);
  if (rc) return rc;
  iface->core = new proto_ep();
  rc = proto_ep_init(iface->core, &iface->core_cfg, &pd, iface->core_mem.data(), iface->core_mem.size() * 8,
                     iface->core_bounce.base(), rx_lkey);
  if (rc == 0) rc = proto_grow_reserve(iface->core, iface->peer_limit, iface->core_bounce.tx_lkey());
  if (rc) return -EINVAL;
  proto_am_set_handler(iface->core, kUctAmId, on_uct_am, iface);
  proto_am_set_handler(iface->core, kCtlAmId, on_ctl, iface);
  iface->scratch.assign(proto_am_max(iface->core), 0);
  iface->descs = new DescPool();
  iface->descs->block = sizeof(DescHead) + iface->rx_headroom + iface->scratch.size();
  return 0;
}

void fc_ctrl(SrdIface* iface, uint32_t peer) { proto_credit_maybe(iface->core, peer); }
void fc_handler(SrdIface* iface) { proto_tx_run(iface->core); }

// ---- AM ops ----

ucs_status_t am_send(SrdEp* ep, uint8_t id, const void* a, uint32_t alen, const void* b, uint32_t blen) {
  if (id >= UCT_AM_ID_MAX) return UCS_ERR_INVALID_PARAM;
  if (ep->failed) return ep->fail_status;
  if (!ep->connected) return not_connected_status(ep);
  SrdIface* iface = ep->iface;
  if (!ep->pending.empty() && !ep->dispatching) return UCS_ERR_NO_RESOURCE;
  if (ep->req_due && ep_core_connect(ep) != UCS_OK) return UCS_ERR_NO_RESOURCE;
  const uint32_t max = proto_am_max(iface->core) - 1;
  if (static_cast<uint64_t>(alen) + blen > max) return UCS_ERR_INVALID_PARAM;
  // One buffer for id + a + b: proto_am_send takes two pieces.
  uint8_t* s = iface->scratch.data();
  s[0] = id;
  if (alen) std::memcpy(s + 1, a, alen);
  int rc = proto_am_send(iface->core, ep->peer_idx, kUctAmId, s, 1 + alen, b, blen);
  if (rc == -FI_EAGAIN) {
    ep->core_wait = true;
    return UCS_ERR_NO_RESOURCE;
  }
  if (rc) return UCS_ERR_INVALID_PARAM;
  iface->stats.am_tx++;
  iface->stats.am_copy_bytes += alen;
  return UCS_OK;
}

ucs_status_t am_short(uct_ep_h tl, uint8_t id, uint64_t header, const void* payload, unsigned length) {
  return am_send(ep_of(tl), id, &header, sizeof(header), payload, length);
}

std::vector<uint8_t>& gather_buf() {
  static thread_local std::vector<uint8_t> buf;
  return buf;
}

ucs_status_t am_short_iov(uct_ep_h tl, uint8_t id, const uct_iov_t* iov, size_t iovcnt) {
  SrdEp* ep = ep_of(tl);
  std::vector<uint8_t>& g = gather_buf();
  g.resize(ep->iface->scratch.size());
  size_t len = 0;
  for (size_t i = 0; i < iovcnt; ++i) {
    const size_t count = iov[i].count ? iov[i].count : 1;
    for (size_t k = 0; k < count; ++k) {
      if (len + iov[i].length > g.size() - 1) return UCS_ERR_INVALID_PARAM;
      std::memcpy(g.data() + len, static_cast<const uint8_t*>(iov[i].buffer) + k * iov[i].stride, iov[i].length);
      len += iov[i].length;
    }
  }
  return am_send(ep, id, g.data(), static_cast<uint32_t>(len), nullptr, 0);
}

ssize_t am_bcopy(uct_ep_h tl, uint8_t id, uct_pack_callback_t pack_cb, void* arg, unsigned) {
  SrdEp* ep = ep_of(tl);
  if (pack_cb == nullptr) return UCS_ERR_INVALID_PARAM;
  // Nothing may be packed that cannot be sent now.
  if (ep->connected && !ep->failed && ep->iface->core->tx_free_count <= PROTO_TX_RESERVE) {
    ep->core_wait = true;
    return UCS_ERR_NO_RESOURCE;
  }
  std::vector<uint8_t>& g = gather_buf();
  g.resize(ep->iface->scratch.size());
  const size_t len = pack_cb(g.data(), arg);
  ucs_status_t st = am_send(ep, id, g.data(), static_cast<uint32_t>(len), nullptr, 0);
  return st == UCS_OK ? static_cast<ssize_t>(len) : static_cast<ssize_t>(st);
}

// The core copies the payload into its transmit buffer before returning, so a zcopy AM is
// complete locally at once (UCS_OK, comp untouched).
ucs_status_t am_zcopy(uct_ep_h tl, uint8_t id, const void* header, unsigned header_length, const uct_iov_t* iov,
                      size_t iovcnt, unsigned, uct_completion_t*) {
  SrdEp* ep = ep_of(tl);
  std::vector<uint8_t>& g = gather_buf();
  g.resize(ep->iface->scratch.size());
  if (header_length > g.size() - 1 || (header_length && header == nullptr)) return UCS_ERR_INVALID_PARAM;
  if (header_length) std::memcpy(g.data(), header, header_length);
  size_t len = header_length;
  for (size_t i = 0; i < iovcnt; ++i) {
    const size_t count = iov[i].count ? iov[i].count : 1;
    for (size_t k = 0; k < count; ++k) {
      if (len + iov[i].length > g.size() - 1) return UCS_ERR_INVALID_PARAM;
      std::memcpy(g.data() + len, static_cast<const uint8_t*>(iov[i].buffer) + k * iov[i].stride, iov[i].length);
      len += iov[i].length;
    }
  }
  return am_send(ep, id, g.data(), static_cast<uint32_t>(len), nullptr, 0);
}

}  // namespace

const RcIfaceOps kRcIfaceOps = {init_rx, fc_ctrl, fc_handler};

int ah_get(SrdIface* iface, const uint8_t gid[16], backend::Ah** ah_p) {
  std::vector<uint8_t> key(gid, gid + 16);
  auto it = iface->ahs.find(key);
  if (it != iface->ahs.end()) {
    it->second.refs++;
    *ah_p = it->second.ah;
    return 0;
  }
  SharedDevice* dev = iface->dev;
  std::lock_guard<std::mutex> g(dev->ah_lock);
  auto d = dev->ahs.find(key);
  if (d == dev->ahs.end()) {
    backend::Ah* ah = nullptr;
    int rc = dev->dev->create_ah(dev->pd, gid, &ah);
    if (rc) return rc;
    d = dev->ahs.emplace(key, std::make_pair(ah, 0)).first;
  }
  d->second.second++;
  iface->ahs[key] = AhRef{d->second.first, 1};
  *ah_p = d->second.first;
  return 0;
}

// AHs stay while the core's peer table may name them; they go with the interface.
void ah_put(SrdIface* iface, const uint8_t gid[16]) {
  auto it = iface->ahs.find(std::vector<uint8_t>(gid, gid + 16));
  if (it != iface->ahs.end() && it->second.refs > 0) it->second.refs--;
}

namespace {

void ahs_release(SrdIface* iface) {
  SharedDevice* dev = iface->dev;
  std::lock_guard<std::mutex> g(dev->ah_lock);
  for (auto& kv : iface->ahs) {
    auto d = dev->ahs.find(kv.first);
    if (d == dev->ahs.end() || --d->second.second > 0) continue;
    dev->dev->destroy_ah(d->second.first);
    dev->ahs.erase(d);
  }
  iface->ahs.clear();
}

}  // namespace

int core_peer_add(SrdIface* iface, uint16_t ahn, uint16_t qpn, uint32_t* idx_p) {
  proto_ep* core = iface->core;
  int rc = proto_peer_add(core, ahn, qpn, kQkey, idx_p);
  if (rc != -FI_ENOSPC || core->cfg.max_peers >= iface->peer_limit) return rc;
  // Full: twice the entries (and their receive buffers), up to the limit.
  const uint32_t n = std::min(iface->peer_limit, core->cfg.max_peers * 2);
  std::vector<uint64_t> table(proto_grow_mem_size(&core->cfg, n) / 8 + 1);
  uint32_t rx_lkey = 0;
  rc = iface->core_bounce.register_rx(n, &rx_lkey);
  if (rc) return rc;
  rc = proto_grow_peers(core, n, table.data(), table.size() * 8, rx_lkey);
  if (rc) return rc;
  iface->peer_tables.push_back(std::move(table));
  return proto_peer_add(core, ahn, qpn, kQkey, idx_p);
}

ucs_status_t ep_core_connect(SrdEp* ep) {
  SrdIface* iface = ep->iface;
  if (ep->peer_idx == PROTO_NONE) {
    int rc = core_peer_add(iface, ep->ahn, static_cast<uint16_t>(ep->peer.am_qpn), &ep->peer_idx);
    if (rc) return UCS_ERR_EXCEEDS_LIMIT;
  }
  CtlMsg req{kCtlConnReq, iface->am_qpn};
  int rc = proto_am_send(iface->core, ep->peer_idx, kCtlAmId, &req, sizeof(req), nullptr, 0);
  ep->req_due = rc != 0;
  return rc == 0 ? UCS_OK : UCS_ERR_NO_RESOURCE;
}

int core_setup(SrdIface* iface, const SrdIfaceConfig* cfg) {
  const backend::DeviceAttr& d = iface->dev->attr;
  proto_config_default(&iface->core_cfg);
  uint32_t credits = 2;
  while (credits < cfg->credits) credits <<= 1;
  iface->core_cfg.credits = credits;
  // The receive queue holds the buffers of the most peers the table may grow to, and the CQ
  // their completions with the send queue's (a CQ that overruns stops).
  constexpr uint32_t kSqWr = 256;
  const uint32_t per_peer = credits + PROTO_CTRL_SLACK;
  const uint32_t cq_max = d.max_cq_depth ? d.max_cq_depth : 4096;
  iface->peer_limit = std::max<uint32_t>(1, std::min<uint32_t>(cfg->max_peers ? cfg->max_peers : 1, 0xfffeu));
  iface->peer_limit = std::min<uint32_t>(iface->peer_limit, std::max<uint32_t>(d.max_rq_wr / per_peer, 1));
  if (cq_max > 2 * kSqWr)
    iface->peer_limit = std::min<uint32_t>(iface->peer_limit, std::max<uint32_t>((cq_max - 2 * kSqWr) / per_peer, 1));
  iface->core_cfg.max_peers = std::min(iface->peer_limit, kInitialPeers);
  iface->core_cfg.max_unexp = 0;
  iface->core_cfg.ntx = 128;
  iface->core_cfg.max_ops = 64;
  backend::CqInitAttr ca;
  ca.entries = 4096;
  while (ca.entries < iface->peer_limit * per_peer + 2 * kSqWr && ca.entries * 2 <= cq_max) ca.entries *= 2;
  ca.with_sgid = true;
  ca.with_event_fd = (d.device_caps & backend::kCapCqNotifications) != 0;
  int rc = iface->dev->dev->create_cq(ca, &iface->am_cq);
  if (rc != 0 && ca.with_event_fd) {  // as create_cq of ib_ops.cc: no event fd then
    ca.with_event_fd = false;
    rc = iface->dev->dev->create_cq(ca, &iface->am_cq);
  }
  if (rc) return rc;
  backend::QpInitAttr qa;
  qa.type = backend::QpType::kSrd;
  qa.pd = iface->dev->pd;
  qa.send_cq = iface->am_cq;
  qa.recv_cq = iface->am_cq;
  qa.max_send_wr = kSqWr;
  qa.max_recv_wr = proto_grow_rx_limit(&iface->core_cfg, iface->peer_limit);
  qa.max_send_sge = std::min<uint32_t>(d.max_sq_sge, 2);
  qa.max_recv_sge = 1;
  rc = iface->ib_ops->create_qp(iface, &qa, &iface->am_qp);
  if (rc) return rc;
  backend::QpAttr at;
  at.state = backend::QpState::kInit;
  at.qkey = kQkey;
  rc = iface->am_qp->modify(at, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                                    backend::kQpAttrQkey);
  if (rc == 0) {
    at.state = backend::QpState::kRtr;
    rc = iface->am_qp->modify(at, backend::kQpAttrState);
  }
  if (rc == 0) {
    at.state = backend::QpState::kRts;
    uint32_t mask = backend::kQpAttrState | backend::kQpAttrSqPsn;
    if (d.device_caps & backend::kCapRnrRetry) mask |= backend::kQpAttrRnrRetry;
    rc = iface->am_qp->modify(at, mask);
  }
  uint8_t gid[16];
  uint32_t qkey;
  if (rc == 0) rc = iface->dev->dev->local_address(iface->am_qp, gid, &iface->am_qpn, &qkey);
  if (rc == 0) rc = iface->rc_ops->init_rx(iface);
  if (rc) return rc;
  iface_attach(iface->dev, iface);
  // One fd for UCT: readable when either CQ has an event.
  if (iface->cq->event_fd() >= 0 && iface->am_cq->event_fd() >= 0) {
    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (iface->epfd < 0) return -errno;
    for (int fd : {iface->cq->event_fd(), iface->am_cq->event_fd()}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return -errno;
    }
  }
  return 0;
}

void core_teardown(SrdIface* iface) {
  if (iface->core) iface_detach(iface->dev, iface);
  if (iface->epfd >= 0) ::close(iface->epfd);
  iface->epfd = -1;
  if (iface->am_qp) iface->dev->dev->destroy_qp(iface->am_qp);
  if (iface->am_cq) iface->dev->dev->destroy_cq(iface->am_cq);
  iface->core_bounce.release();
  if (iface->relay) munmap(iface->relay, iface->relay_len);
  iface->relay = nullptr;
  desc_pool_close(iface->descs);
  iface->descs = nullptr;
  iface->peer_tables.clear();
  ahs_release(iface);
  delete iface->core;
  iface->core = nullptr;
  iface->am_qp = nullptr;
  iface->am_cq = nullptr;
}

unsigned core_progress(SrdIface* iface) {
  if (!iface->core) return 0;
  relay_cqes(iface);
  proto_comp comps[16];
  int n = proto_progress(iface->core, comps, 16);
  for (int k = 0; k < n; ++k)
    if (comps[k].flags & FI_ATOMIC) {
      if (iface->amo_outstanding) iface->amo_outstanding--;
      amo_complete(comps[k]);
    }
  for (SrdEp* ep : iface->eps)
    if (ep->req_due) ep_core_connect(ep);
  return n > 0 ? static_cast<unsigned>(n) : 0;
}

bool core_idle(const SrdIface* iface) {
  return iface->core == nullptr || (proto_ep_idle(iface->core) && iface->amo_outstanding == 0);
}

uint64_t desc_allocs(const SrdIface* iface) { return iface->descs ? iface->descs->allocs : 0; }

uint8_t* desc_new(SrdIface* iface) {
  auto* block = static_cast<uint8_t*>(desc_get(iface->descs));
  if (block == nullptr) return nullptr;
  auto* h = reinterpret_cast<DescHead*>(block);
  h->release.cb = desc_release;
  h->pool = iface->descs;
  h->self = &h->release;
  return block + sizeof(DescHead) + iface->rx_headroom;
}

void desc_drop(SrdIface* iface, uint8_t* data) {
  desc_put(iface->descs, data - iface->rx_headroom - sizeof(DescHead));
}

void fill_am_ops(uct_iface_ops_t* o) {
  o->ep_am_short = am_short;
  o->ep_am_short_iov = am_short_iov;
  o->ep_am_bcopy = am_bcopy;
  o->ep_am_zcopy = am_zcopy;
}

}  // namespace uct
}  // namespace xpufab
