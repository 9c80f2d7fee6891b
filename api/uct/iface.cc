// The srd interface: one SRD QP and one CQ on a backend device, the bounce buffers and
// keep-alive word peers read, the ops table, caps, addresses, progress, events and iface flush.
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/backend/backend.h"
#include "api/uct/srd.h"
#include "device/efa_io_status.h"

namespace xpufab {
namespace uct {

ucs_config_field_t g_iface_config_table[] = {
    // The MD's own allocation first: peers on the emulator copy out of its memory by mapping it.
    {"", "ALLOC=md,huge,thp,mmap,heap", nullptr, offsetof(SrdIfaceConfig, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    {"TX_QUEUE_LEN", "256", "Send queue length (work requests outstanding per interface).",
     offsetof(SrdIfaceConfig, tx_queue_len), UCS_CONFIG_TYPE_UINT},
    {"SEG_SIZE", "8192", "Bounce buffer size: the largest short/bcopy transfer.",
     offsetof(SrdIfaceConfig, seg_size), UCS_CONFIG_TYPE_MEMUNITS},
    {"RMA_CHUNK", "inf", "Zcopy puts and gets (and rendezvous reads) larger than this go as several RDMA\n"
     "requests of this size in flight together; inf: one request each, up to the device's largest\n"
     "RDMA (the device moves a large request in one piece, and each request costs it a round trip).",
     offsetof(SrdIfaceConfig, rma_chunk), UCS_CONFIG_TYPE_MEMUNITS},
    {"MAX_PEERS", "1024", "The most peers one interface exchanges messages with: UCP's endpoints to\n"
     "distinct processes plus those connecting to us. The peer table and its receive buffers\n"
     "(CREDITS + 2 per peer) start small and grow as peers come; the device's receive queue\n"
     "length may lower the limit, which iface attr max_num_eps reports.",
     offsetof(SrdIfaceConfig, max_peers), UCS_CONFIG_TYPE_UINT},
    {"CREDITS", "32", "Active messages a peer may have in flight to us (rounded up to a power of 2).",
     offsetof(SrdIfaceConfig, credits), UCS_CONFIG_TYPE_UINT},
    {"TM_ENABLE", "y", "Match tagged messages in the transport (the TAG_* offload rows) when the user\n"
     "gives unexpected-message callbacks, as UCP does.", offsetof(SrdIfaceConfig, tm_enable),
     UCS_CONFIG_TYPE_BOOL},
    {"TM_LIST_SIZE", "1024", "Tagged receives that may be posted to the transport at once.",
     offsetof(SrdIfaceConfig, tm_list_size), UCS_CONFIG_TYPE_UINT},
    {nullptr, nullptr, nullptr, 0, {}},
};

namespace {

uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

ucs_status_t status_of_errno(int rc) {
  if (rc == -ENOMEM) return UCS_ERR_NO_MEMORY;
  if (rc == -EOPNOTSUPP) return UCS_ERR_UNSUPPORTED;
  if (rc == -EINVAL) return UCS_ERR_INVALID_PARAM;
  return UCS_ERR_IO_ERROR;
}

bool has_read(const SrdIface* i) { return (i->dev->attr.device_caps & backend::kCapRdmaRead) != 0; }
bool has_write(const SrdIface* i) { return (i->dev->attr.device_caps & backend::kCapRdmaWrite) != 0; }

// Whether a CQE is waiting to be polled (without consuming it).
bool cq_has_entry(SrdIface*, efa_cq* cq) {
  const uint32_t c = efa_cq_consumed(cq);
  const uint8_t* slot = cq->buf + static_cast<size_t>(c & cq->mask) * EFA_IO_CQE_SIZE;
  const uint32_t w0 = xpu_load_acquire_u32(reinterpret_cast<const uint32_t*>(slot));
  return ((w0 >> 24) & 1u) == efa_dp_cq_phase(c, cq->log2_entries);
}

void complete_flushes(SrdIface* iface, std::deque<FlushReq>* q, const std::set<uint64_t>& outstanding) {
  while (!q->empty() && q->front().armed && core_idle(iface) && tag_idle(iface) &&
         (outstanding.empty() || *outstanding.begin() >= q->front().upto)) {
    uct_completion_t* comp = q->front().comp;
    q->pop_front();
    invoke_completion(comp, UCS_OK);
  }
}

bool any_pending(const SrdIface* iface) { return iface->pending_reqs != 0; }

void iface_teardown(SrdIface* iface) {
  tag_teardown(iface);
  core_teardown(iface);
  if (iface->qp) iface->dev->dev->destroy_qp(iface->qp);
  if (iface->cq) iface->dev->dev->destroy_cq(iface->cq);
  if (iface->bounce_mr) iface->dev->dev->dereg_mr(iface->bounce_mr);
  if (iface->bounce) munmap(iface->bounce, iface->bounce_len);
  iface->bounce = nullptr;
  iface->ib_ops->cleanup_res_domain(iface);
  iface->qp = nullptr;
  iface->cq = nullptr;
  iface->bounce_mr = nullptr;
}

// ---- iface ops ----

void print_stats(const SrdIface* iface) {
  const IfaceStats& s = iface->stats;
  const proto_stats& c = iface->core->stats;
  std::fprintf(stderr,
               "xpufab srd stats: progress %llu idle %llu rma_ops %llu rdma_wqes %llu rdma_cqes %llu am_tx %llu "
               "am_rx %llu tag_rx %llu am_copy_bytes %llu desc_allocs %llu core_tx_packets %llu "
               "core_rx_packets %llu credit_packets %llu credit_stalls %llu peers %u\n",
               static_cast<unsigned long long>(s.progress), static_cast<unsigned long long>(s.progress_idle),
               static_cast<unsigned long long>(s.rma_ops),
               static_cast<unsigned long long>(s.rdma_wqes), static_cast<unsigned long long>(s.rdma_cqes),
               static_cast<unsigned long long>(s.am_tx), static_cast<unsigned long long>(s.am_rx),
               static_cast<unsigned long long>(s.tag_rx),
               static_cast<unsigned long long>(s.am_copy_bytes), static_cast<unsigned long long>(desc_allocs(iface)),
               static_cast<unsigned long long>(c.tx_packets), static_cast<unsigned long long>(c.rx_packets),
               static_cast<unsigned long long>(c.credit_packets), static_cast<unsigned long long>(c.credit_stalls),
               iface->core->cfg.max_peers);
}

void iface_close(uct_iface_h tl) {
  SrdIface* iface = iface_of(tl);
  if (iface->stats_on && iface->core) print_stats(iface);
  uct_base_iface_progress_disable(tl, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
  // Endpoints left open are released with their interface.
  while (!iface->eps.empty()) tl->ops.ep_destroy(&iface->eps.front()->super.super);
  iface_teardown(iface);
  SharedDevice* dev = iface->dev;
  ucs_class_call_cleanup_chain(&uct_base_iface_t_class, &iface->super, -1);
  delete iface;
  release_device(dev);
}

ucs_status_t iface_query(uct_iface_h tl, uct_iface_attr_t* attr) {
  SrdIface* iface = iface_of(tl);
  const backend::DeviceAttr& d = iface->dev->attr;
  uct_base_iface_query(&iface->super, attr);
  uint64_t flags = UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                   UCT_IFACE_FLAG_CONNECT_TO_EP | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
  const size_t seg = iface->seg_size;
  const size_t am_max = iface->scratch.size() - 1;  // less the UCT AM id byte
  flags |= UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY |
           UCT_IFACE_FLAG_CB_SYNC;
  attr->cap.am.max_short = am_max;
  attr->cap.am.max_bcopy = am_max;
  attr->cap.am.min_zcopy = 0;
  attr->cap.am.max_zcopy = am_max;
  attr->cap.am.opt_zcopy_align = 1;
  attr->cap.am.align_mtu = 1;
  attr->cap.am.max_hdr = am_max;
  attr->cap.am.max_iov = 16;
  flags |= UCT_IFACE_FLAG_ATOMIC_CPU;
  const uint64_t post = UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) | UCS_BIT(UCT_ATOMIC_OP_OR) |
                        UCS_BIT(UCT_ATOMIC_OP_XOR);
  const uint64_t fetch = post | UCS_BIT(UCT_ATOMIC_OP_SWAP) | UCS_BIT(UCT_ATOMIC_OP_CSWAP);
  attr->cap.atomic32.op_flags = attr->cap.atomic64.op_flags = post;
  attr->cap.atomic32.fop_flags = attr->cap.atomic64.fop_flags = fetch;
  if (has_write(iface)) {
    flags |= UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY;
    attr->cap.put.max_short = iface->inline_write ? iface->inline_max : 64;
    attr->cap.put.max_bcopy = seg;
    attr->cap.put.min_zcopy = 0;
    attr->cap.put.max_zcopy = d.max_rdma_size;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu = 1;
    attr->cap.put.max_iov = kMaxRmaIov;
  }
  if (has_read(iface)) {
    flags |= UCT_IFACE_FLAG_GET_SHORT | UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
             UCT_IFACE_FLAG_EP_CHECK;
    attr->cap.get.max_short = seg;
    attr->cap.get.max_bcopy = seg;
    attr->cap.get.min_zcopy = 0;
    attr->cap.get.max_zcopy = d.max_rdma_size;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu = 1;
    attr->cap.get.max_iov = kMaxRmaIov;
  }
  attr->cap.flags = flags;
  tag_query(iface, attr);
  sockaddr_query(iface, attr);
  attr->cap.event_flags = 0;
  if (iface->epfd >= 0)
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;
  attr->device_addr_len = sizeof(iface->gid);
  attr->iface_addr_len = sizeof(IfaceAddr);
  attr->ep_addr_len = sizeof(IfaceAddr);
  attr->overhead = 75e-9;
  attr->bandwidth.dedicated = 0;
  attr->bandwidth.shared = d.link_speed_gbps ? d.link_speed_gbps * 1e9 / 8 : 12.5e9;
  attr->latency.c = 1e-6;
  attr->latency.m = 0;
  attr->priority = 0;
  attr->dev_num_paths = 1;
  attr->max_num_eps = iface->peer_limit;
  return UCS_OK;
}

ucs_status_t iface_get_device_address(uct_iface_h tl, uct_device_addr_t* addr) {
  std::memcpy(addr, iface_of(tl)->gid, sizeof(iface_of(tl)->gid));
  return UCS_OK;
}

ucs_status_t iface_get_address(uct_iface_h tl, uct_iface_addr_t* addr) {
  SrdIface* iface = iface_of(tl);
  IfaceAddr a{kAddrMagic, iface->qpn, iface->am_qpn, iface->qkey, iface->bounce_mr->rkey(),
              reinterpret_cast<uintptr_t>(iface->ka_word)};
  std::memcpy(addr, &a, sizeof(a));
  return UCS_OK;
}

int iface_is_reachable(const uct_iface_h, const uct_device_addr_t* dev_addr,
                       const uct_iface_addr_t* iface_addr) {
  if (dev_addr == nullptr) return 0;
  if (iface_addr == nullptr) return 1;  // UCP asks about the device alone first
  IfaceAddr a;
  std::memcpy(&a, iface_addr, sizeof(a));
  return a.magic == kAddrMagic && (a.qkey & 0x80000000u) == 0;
}

ucs_status_t iface_flush(uct_iface_h tl, unsigned flags, uct_completion_t* comp) {
  SrdIface* iface = iface_of(tl);
  if (flags & UCT_FLUSH_FLAG_CANCEL) return UCS_ERR_UNSUPPORTED;
  const bool pending = any_pending(iface) || any_chunk_queued(iface);
  if (!pending && iface->outstanding.empty() && core_idle(iface) && tag_idle(iface)) return UCS_OK;
  // What is pending is covered too: the flush arms when the last pending request has gone out.
  if (comp) iface->flushes.push_back({iface->next_seq, comp, !pending, 0});
  return UCS_INPROGRESS;
}

ucs_status_t iface_fence(uct_iface_h tl, unsigned) {
  SrdIface* iface = iface_of(tl);
  if (any_chunk_queued(iface)) {
    iface->fence_deferred = true;
    return UCS_OK;
  }
  iface->fence = true;
  iface->fence_upto = iface->next_seq;
  return UCS_OK;
}

ucs_status_t iface_event_fd_get(uct_iface_h tl, int* fd_p) {
  int fd = iface_of(tl)->epfd;
  if (fd < 0) return UCS_ERR_UNSUPPORTED;
  *fd_p = fd;
  return UCS_OK;
}

ucs_status_t iface_event_arm(uct_iface_h tl, unsigned events) {
  SrdIface* iface = iface_of(tl);
  if (iface->epfd < 0) return UCS_ERR_UNSUPPORTED;
  if (events & ~static_cast<unsigned>(UCT_EVENT_SEND_COMP | UCT_EVENT_RECV))
    return UCS_ERR_UNSUPPORTED;
  iface->ib_ops->event_cq(iface, Dir::kTx);
  iface->ib_ops->event_cq(iface, Dir::kRx);
  if (cq_has_entry(iface, &iface->pcq) || cq_has_entry(iface, &iface->am_pcq) || cq_has_entry(iface, &iface->core->cq) ||
      !iface->failed.empty() ||
      iface->core->stalled || iface->core->txq.count)
    return UCS_ERR_BUSY;
  int rc = iface->ib_ops->arm_cq(iface, Dir::kTx, 0);
  if (rc == 0) rc = iface->ib_ops->arm_cq(iface, Dir::kRx, 0);
  if (rc) return status_of_errno(rc);
  // A CQE written between the check and the arm raised no event: report it now.
  if (cq_has_entry(iface, &iface->pcq) || cq_has_entry(iface, &iface->am_pcq)) return UCS_ERR_BUSY;
  return UCS_OK;
}

void fill_iface_ops(uct_iface_ops_t* o) {
  o->iface_flush = iface_flush;
  o->iface_fence = iface_fence;
  o->iface_progress_enable = uct_base_iface_progress_enable;
  o->iface_progress_disable = uct_base_iface_progress_disable;
  o->iface_progress = iface_progress;
  o->iface_event_fd_get = iface_event_fd_get;
  o->iface_event_arm = iface_event_arm;
  o->iface_close = iface_close;
  o->iface_query = iface_query;
  o->iface_get_device_address = iface_get_device_address;
  o->iface_get_address = iface_get_address;
  o->iface_is_reachable = iface_is_reachable;
}

uct_iface_ops_t make_ops() {
  uct_iface_ops_t o;
  std::memset(&o, 0, sizeof(o));
  fill_iface_ops(&o);
  fill_ep_ops(&o);
  fill_am_ops(&o);
  fill_amo_ops(&o);
  fill_tag_ops(&o);
  fill_sockaddr_ops(&o);
  return o;
}

uct_iface_ops_t g_ops = make_ops();

int setup(SrdIface* iface, const SrdIfaceConfig* cfg) {
  const backend::DeviceAttr& d = iface->dev->attr;
  int rc = iface->ib_ops->init_res_domain(iface);
  if (rc) return rc;
  const uint32_t depth = pow2_at_least(std::max(std::min(cfg->tx_queue_len, d.max_sq_wr), 2u));
  iface->inline_write = (d.device_caps & backend::kCapInlineWrite) && d.inline_buf_size_ex > 0;
  iface->seg_size = std::max<size_t>(64, std::min<size_t>(cfg->seg_size, d.max_rdma_size));
  iface->rma_chunk = std::max<size_t>(4096, std::min<size_t>(cfg->rma_chunk, d.max_rdma_size));
  rc = iface->ib_ops->create_cq(iface, Dir::kTx, depth * 2, &iface->cq);
  if (rc) return rc;
  backend::QpInitAttr qa;
  qa.type = backend::QpType::kSrd;
  qa.pd = iface->dev->pd;
  qa.send_cq = iface->cq;
  qa.recv_cq = iface->cq;
  qa.max_send_wr = depth;
  qa.max_recv_wr = 0;
  qa.max_send_sge = std::min<uint32_t>(d.max_sq_sge, 2);
  qa.max_recv_sge = 1;
  if (iface->inline_write) {
    qa.flags |= backend::kQpInlineWrite;
    qa.max_inline_data = d.inline_buf_size_ex;
  }
  rc = iface->ib_ops->create_qp(iface, &qa, &iface->qp);
  if (rc) return rc;
  backend::QpAttr at;
  at.state = backend::QpState::kInit;
  at.qkey = kQkey;
  rc = iface->qp->modify(at, backend::kQpAttrState | backend::kQpAttrPkeyIndex |
                                 backend::kQpAttrPort | backend::kQpAttrQkey);
  if (rc == 0) {
    at.state = backend::QpState::kRtr;
    rc = iface->qp->modify(at, backend::kQpAttrState);
  }
  if (rc == 0) {
    at.state = backend::QpState::kRts;
    at.rnr_retry = 7;
    uint32_t mask = backend::kQpAttrState | backend::kQpAttrSqPsn;
    if (d.device_caps & backend::kCapRnrRetry) mask |= backend::kQpAttrRnrRetry;
    rc = iface->qp->modify(at, mask);
  }
  if (rc == 0) rc = iface->dev->dev->local_address(iface->qp, iface->gid, &iface->qpn, &iface->qkey);
  backend::WqAttr sq{}, rq{};
  if (rc == 0) rc = iface->qp->query_wqs(&sq, &rq);
  if (rc) return rc;
  efa_dp_wq_attr s{sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  iface->sq_scratch.assign(efa_sq_scratch_size(sq.num_entries) / 8 + 1, 0);
  rc = efa_sq_init(&iface->sq, &s, qa.max_send_sge, iface->sq_scratch.data(),
                   iface->sq_scratch.size() * 8);
  if (rc) return -EINVAL;
  iface->inline_max = iface->inline_write ? iface->sq.inline_max : 0;
  iface->sq_depth = sq.num_entries;
  backend::CqAttr ca{};
  rc = iface->cq->query(&ca);
  if (rc) return rc;
  efa_dp_cq_attr pa{ca.buffer, ca.entry_size, ca.num_entries, ca.doorbell};
  if (efa_cq_init(&iface->pcq, &pa)) return -EINVAL;
  // Bounce slots, then the keep-alive word, in one page-aligned registration. Mapped, not
  // filled: a slot's pages are committed when first used, and free slots are reused last
  // freed first, so an interface that moves little through them costs little.
  const size_t bytes = iface->seg_size * iface->sq_depth + 64;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -ENOMEM;
  iface->bounce = static_cast<uint8_t*>(m);
  iface->bounce_len = bytes;
  iface->ka_word = reinterpret_cast<uint64_t*>(iface->bounce + iface->seg_size * iface->sq_depth);
  *iface->ka_word = 0x6b61u;
  backend::MrInitAttr ma;
  ma.addr = iface->bounce;
  ma.length = bytes;
  // Peers read bounce slots and the keep-alive word where the device has RDMA read.
  ma.access = backend::served_access(backend::kAccessLocalWrite | backend::kAccessRemoteRead,
                                     d.device_caps);
  rc = iface->dev->dev->reg_mr(iface->dev->pd, ma, &iface->bounce_mr);
  if (rc) return rc;
  iface->ops.assign(iface->sq_depth, Op{});
  iface->free_ops.clear();
  for (uint32_t i = iface->sq_depth; i-- > 0;) iface->free_ops.push_back(i);
  return core_setup(iface, cfg);
}

}  // namespace

const uct_iface_ops_t& srd_iface_ops() { return g_ops; }

void invoke_completion(uct_completion_t* comp, ucs_status_t status) {
  if (comp == nullptr) return;
  uct_completion_update_status(comp, status);
  if (--comp->count == 0) comp->func(comp);
}

ucs_status_t status_of(uint8_t s) {
  switch (s) {
    case EFA_IO_COMP_STATUS_OK:
      return UCS_OK;
    case EFA_IO_COMP_STATUS_FLUSHED:
      return UCS_ERR_CANCELED;
    case EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH:
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH:
      return UCS_ERR_MESSAGE_TRUNCATED;
    case EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE:
    case EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE:
      return UCS_ERR_ENDPOINT_TIMEOUT;
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT:
      return UCS_ERR_CONNECTION_RESET;
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN:
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER:
      return UCS_ERR_UNREACHABLE;
    default:
      return UCS_ERR_IO_ERROR;
  }
}

bool is_peer_failure(uint8_t s) {
  switch (s) {
    case EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE:
    case EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE:
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT:
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN:
    case EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER:
      return true;
    default:
      return false;
  }
}

unsigned iface_progress(uct_iface_h tl) {
  SrdIface* iface = iface_of(tl);
  iface->dev->dev->progress(64);
  unsigned n = 0;
  efa_dp_cqe c;
  iface->stats.progress++;
  const uint64_t rx = iface->stats.am_rx + iface->stats.tag_rx;
  // The RDMA QP's CQ holds completions of posted work only: nothing outstanding, nothing there.
  while (n < 64 && !iface->outstanding.empty() && efa_cq_poll(&iface->pcq, &c) == 0) {
    ++n;
    iface->stats.rdma_cqes++;
    if (c.q_type != EFA_IO_SEND_QUEUE || c.qp_num != (iface->qpn & 0xffffu)) continue;
    uint64_t idx = 0;
    if (efa_sq_complete(&iface->sq, c.req_id, &idx) != 0 || idx >= iface->ops.size()) continue;
    Op& op = iface->ops[idx];
    const ucs_status_t st = status_of(c.status);
    if (st != UCS_OK && op.ep && !op.ep->failed && (op.comp == nullptr || is_peer_failure(c.status)))
      iface->ib_ops->handle_failure(iface, &op, st);
    complete_op(iface, static_cast<uint32_t>(idx), st);
  }
  n += core_progress(iface);
  n += tag_progress(iface);
  n += static_cast<unsigned>(iface->stats.am_rx + iface->stats.tag_rx - rx);  // messages the core delivered
  n += sockaddr_progress(iface);
  n += chunks_progress(iface);
  for (SrdEp* ep : iface->eps) ep_flushes_progress(ep);
  iface_flushes_progress(iface);
  // Error handlers may destroy their endpoint: each one runs once, after polling, and nothing
  // here touches the endpoint afterwards.
  while (!iface->failed.empty()) {
    SrdEp* ep = iface->failed.front();
    iface->failed.erase(iface->failed.begin());
    uct_iface_handle_ep_err(tl, &ep->super.super, ep->fail_status);
    ++n;
  }
  dispatch_pending(iface);
  // Flushes that were waiting for pending requests arm now that those went out.
  for (SrdEp* ep : iface->eps) ep_flushes_progress(ep);
  iface_flushes_progress(iface);
  if (n == 0) iface->stats.progress_idle++;
  return n;
}

// Called by every ep completion; keeps the iface-level flush queue moving too.
void iface_flushes_progress(SrdIface* iface) {
  if (iface->flushes.empty()) return;
  if (!any_pending(iface) && !any_chunk_queued(iface))
    for (FlushReq& f : iface->flushes)
      if (!f.armed) {
        f.armed = true;
        f.upto = iface->next_seq;
      }
  complete_flushes(iface, &iface->flushes, iface->outstanding);
}
void ep_flushes_progress(SrdEp* ep) {
  if (ep->flushes.empty()) return;
  for (FlushReq& f : ep->flushes)
    if (!f.armed && ep->pending_done >= f.pending_target && ep->chunk_queue.empty()) {
      f.armed = true;
      f.upto = ep->iface->next_seq;
    }
  complete_flushes(ep->iface, &ep->flushes, ep->outstanding);
}

ucs_status_t query_devices(uct_md_h tl, uct_tl_device_resource_t** devices_p, unsigned* num_p) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  return uct_single_device_resource(tl, md->dev->name.c_str(), UCT_DEVICE_TYPE_NET,
                                    UCS_SYS_DEVICE_ID_UNKNOWN, devices_p, num_p);
}

ucs_status_t iface_open(uct_md_h tl_md, uct_worker_h worker, const uct_iface_params_t* params,
                        const uct_iface_config_t* tl_config, uct_iface_h* iface_p) {
  auto* md = reinterpret_cast<SrdMd*>(tl_md);
  if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE)) return UCS_ERR_INVALID_PARAM;
  if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) return UCS_ERR_UNSUPPORTED;
  if (params->mode.device.dev_name == nullptr) return UCS_ERR_INVALID_PARAM;
  if (std::strcmp(params->mode.device.dev_name, md->dev->name.c_str()) != 0) return UCS_ERR_NO_DEVICE;
  const auto* cfg = reinterpret_cast<const SrdIfaceConfig*>(tl_config);
  SharedDevice* dev = nullptr;
  if (acquire_device(md->dev->name, &dev) != 0) return UCS_ERR_NO_DEVICE;
  auto* iface = new SrdIface();
  iface->md = md;
  iface->dev = dev;
  iface->stats_on = std::getenv("XPUFAB_UCT_STATS") != nullptr;
  if (params->field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM) iface->rx_headroom = params->rx_headroom;
  int count = 1;
  ucs_status_t st = uct_base_iface_t_init(&iface->super, &uct_base_iface_t_class, &count, &g_ops,
                                          &uct_base_iface_internal_ops, tl_md, worker, params,
                                          tl_config);
  if (st != UCS_OK) {
    ucs_class_call_cleanup_chain(&uct_base_iface_t_class, &iface->super, count);
    delete iface;
    release_device(dev);
    return st;
  }
  int rc = setup(iface, cfg);
  if (rc == 0) rc = tag_setup(iface, params, cfg);
  if (rc) {
    // UCX reports only "failed to open interface"; say which device step refused.
    std::fprintf(stderr, "xpufab srd: opening an interface on %s failed: %s (%d)\n", dev->name.c_str(),
                 std::strerror(-rc), rc);
    iface_teardown(iface);
    ucs_class_call_cleanup_chain(&uct_base_iface_t_class, &iface->super, -1);
    delete iface;
    release_device(dev);
    return status_of_errno(rc);
  }
  *iface_p = &iface->super.super;
  return UCS_OK;
}

}  // namespace uct
}  // namespace xpufab
