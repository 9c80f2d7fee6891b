// srd endpoints: connection (to an iface or to an ep: both are the peer's QP), put/get in the
// short, bcopy and zcopy flavours as RDMA write/read through device/efa_sq.h, flush and fence by
// posting order, pending requests, and the keep-alive ep_check.
#include <cerrno>
#include <algorithm>
#include <cstring>
#include <iterator>

#include "api/backend/backend.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

bool fenced(bool* fence, uint64_t upto, const std::set<uint64_t>& outstanding) {
  if (!*fence) return false;
  if (outstanding.empty() || *outstanding.begin() >= upto) {
    *fence = false;
    return false;
  }
  return true;
}

// Everything but the pending queue: whether one more WQE may go out now.
bool resources_free(SrdEp* ep) {
  SrdIface* iface = ep->iface;
  if (!ep->connected || ep->failed || iface->free_ops.empty()) return false;
  // RDMA needs an AH for us at the peer: the handshake's answer says it has one.
  if (!ep->acked || ep->write_wait || !ep->chunk_queue.empty()) return false;
  if (ep->fence_deferred || iface->fence_deferred) return false;
  if (fenced(&ep->fence, ep->fence_upto, ep->outstanding)) return false;
  if (fenced(&iface->fence, iface->fence_upto, iface->outstanding)) return false;
  return true;
}

uint8_t* bounce_of(SrdIface* iface, uint32_t idx) { return iface->bounce + size_t{idx} * iface->seg_size; }

ucs_status_t unusable(const SrdEp* ep) {
  if (ep->failed) return ep->fail_status;
  if (!ep->connected) return not_connected_status(ep);
  return UCS_OK;
}

// Takes an op slot for a post, or says why not (ep unusable, no resource).
ucs_status_t reserve(SrdEp* ep, uint32_t* idx_p) {
  ucs_status_t st = unusable(ep);
  if (st != UCS_OK) return st;
  if (!ep_can_post(ep)) return UCS_ERR_NO_RESOURCE;
  *idx_p = ep->iface->free_ops.back();
  ep->iface->free_ops.pop_back();
  return UCS_OK;
}

void unreserve(SrdIface* iface, uint32_t idx) {
  iface->ops[idx] = Op{};
  iface->free_ops.push_back(idx);
}

bool write_overlaps(SrdEp* ep, uint64_t raddr, uint32_t len) {
  if (ep->writes == 0) return false;
  for (const Op& o : ep->iface->ops) {
    if (o.ep == ep && o.rlen && raddr < o.raddr + o.rlen && o.raddr < raddr + len) {
      ep->write_wait = true;  // pending_add now queues instead of answering BUSY
      return true;
    }
  }
  return false;
}

// Posts an RDMA op on the reserved slot; the op's fields other than kind/ep/seq are the caller's.
ucs_status_t post_rdma(SrdEp* ep, uint32_t idx, OpKind kind, uint32_t efa_op, uint64_t laddr,
                       uint32_t len, uint32_t lkey, uint64_t raddr, uct_rkey_t rkey, bool inl) {
  SrdIface* iface = ep->iface;
  const uint32_t need = efa_op == EFA_DP_OP_RDMA_READ ? backend::kCapRdmaRead : backend::kCapRdmaWrite;
  if (!(iface->dev->attr.device_caps & need)) {  // the row is not advertised on this device
    unreserve(iface, idx);
    return UCS_ERR_UNSUPPORTED;
  }
  efa_dp_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.op = efa_op;
  wr.flags = inl ? EFA_DP_WR_INLINE : 0;
  wr.ah = ep->ahn;
  wr.dest_qpn = static_cast<uint16_t>(ep->peer.qpn);
  wr.qkey = ep->peer.qkey;
  wr.num_sge = 1;
  wr.sge[0] = efa_dp_sge{laddr, len, lkey};
  wr.remote_addr = raddr;
  wr.rkey = static_cast<uint32_t>(rkey);
  wr.context = idx;
  Op& op = iface->ops[idx];
  // SRD delivers writes in any order: a write that overlaps one still outstanding waits for it,
  // so that the last write to a location is the one that stays (ordered RMA semantics).
  if (efa_op == EFA_DP_OP_RDMA_WRITE && write_overlaps(ep, raddr, len)) {
    unreserve(iface, idx);
    return UCS_ERR_NO_RESOURCE;
  }
  op.kind = kind;
  op.ep = ep;
  op.seq = iface->next_seq;
  if (efa_op == EFA_DP_OP_RDMA_WRITE) {
    op.raddr = raddr;
    op.rlen = len;
  }
  int rc = efa_sq_post(&iface->sq, &wr);
  if (rc) {
    unreserve(iface, idx);
    return rc == -FI_EAGAIN ? UCS_ERR_NO_RESOURCE : UCS_ERR_INVALID_PARAM;
  }
  ++iface->next_seq;
  iface->stats.rdma_wqes++;
  if (op.rlen) ++ep->writes;
  iface->outstanding.insert(op.seq);
  ep->outstanding.insert(op.seq);
  return UCS_OK;
}

// ---- RMA ----

ucs_status_t put_short(uct_ep_h tl, const void* buffer, unsigned length, uint64_t raddr,
                       uct_rkey_t rkey) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  const size_t max = iface->inline_write ? iface->inline_max : 64;
  if (length > max || (length && buffer == nullptr)) return UCS_ERR_INVALID_PARAM;
  uint32_t idx;
  ucs_status_t st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  if (length == 0) {
    unreserve(iface, idx);
    return UCS_OK;
  }
  if (iface->inline_write)
    return post_rdma(ep, idx, OpKind::kPutShort, EFA_DP_OP_RDMA_WRITE,
                     reinterpret_cast<uintptr_t>(buffer), length, 0, raddr, rkey, true);
  // Without the 128-byte WQE the bytes go through a bounce slot: the caller's buffer is free
  // on return either way.
  uint8_t* b = bounce_of(iface, idx);
  std::memcpy(b, buffer, length);
  return post_rdma(ep, idx, OpKind::kPutShort, EFA_DP_OP_RDMA_WRITE, reinterpret_cast<uintptr_t>(b),
                   length, iface->bounce_mr->lkey(), raddr, rkey, false);
}

ssize_t put_bcopy(uct_ep_h tl, uct_pack_callback_t pack_cb, void* arg, uint64_t raddr,
                  uct_rkey_t rkey) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  if (pack_cb == nullptr) return UCS_ERR_INVALID_PARAM;
  if (write_overlaps(ep, raddr, 1)) return UCS_ERR_NO_RESOURCE;  // before packing anything
  uint32_t idx;
  ucs_status_t st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  uint8_t* b = bounce_of(iface, idx);
  const size_t len = pack_cb(b, arg);
  if (len > iface->seg_size) {
    unreserve(iface, idx);
    return UCS_ERR_EXCEEDS_LIMIT;
  }
  if (len == 0) {
    unreserve(iface, idx);
    return 0;
  }
  st = post_rdma(ep, idx, OpKind::kPutBcopy, EFA_DP_OP_RDMA_WRITE, reinterpret_cast<uintptr_t>(b),
                 static_cast<uint32_t>(len), iface->bounce_mr->lkey(), raddr, rkey, false);
  return st == UCS_OK ? static_cast<ssize_t>(len) : static_cast<ssize_t>(st);
}

// The one contiguous buffer of a zcopy iov (addr, len, lkey), or the pieces of one with several
// entries or a stride (*pieces_p, with len their total): an RDMA WQE has one local SGE, so each
// piece becomes a WQE of its own.
ucs_status_t zcopy_buffer(SrdIface* iface, const uct_iov_t* iov, size_t iovcnt, uint64_t* addr_p,
                          uint32_t* len_p, uint32_t* lkey_p, std::vector<RmaPiece>* pieces_p) {
  if (iovcnt == 0 || iovcnt > kMaxRmaIov || iov == nullptr) return UCS_ERR_INVALID_PARAM;
  const bool one = iovcnt == 1 && (iov->count <= 1 || iov->stride == iov->length);
  if (one) {
    const size_t len = iov->length * (iov->count ? iov->count : 0);
    if (len > iface->dev->attr.max_rdma_size) return UCS_ERR_INVALID_PARAM;
    if (len && iov->memh == nullptr) return UCS_ERR_INVALID_PARAM;
    *addr_p = reinterpret_cast<uintptr_t>(iov->buffer);
    *len_p = static_cast<uint32_t>(len);
    *lkey_p = len ? static_cast<SrdMemh*>(iov->memh)->mr->lkey() : 0;
    return UCS_OK;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < iovcnt; ++i) {
    const uct_iov_t& v = iov[i];
    if (v.length == 0 || v.count == 0) continue;
    if (v.memh == nullptr || v.buffer == nullptr) return UCS_ERR_INVALID_PARAM;
    if (v.count > 1 && v.stride < v.length) return UCS_ERR_INVALID_PARAM;  // repeats would overlap
    if (v.count > iface->dev->attr.max_rdma_size || v.length > iface->dev->attr.max_rdma_size)
      return UCS_ERR_INVALID_PARAM;
    total += v.length * v.count;
    if (total > iface->dev->attr.max_rdma_size) return UCS_ERR_INVALID_PARAM;
  }
  *addr_p = 0;
  *len_p = static_cast<uint32_t>(total);
  *lkey_p = 0;
  for (size_t i = 0; i < iovcnt; ++i) {
    const uct_iov_t& v = iov[i];
    if (v.length == 0 || v.count == 0) continue;
    const uint32_t lkey = static_cast<SrdMemh*>(v.memh)->mr->lkey();
    const auto base = reinterpret_cast<uintptr_t>(v.buffer);
    for (size_t k = 0; k < v.count; ++k) {
      const uint64_t a = base + k * v.stride;
      if (!pieces_p->empty() && pieces_p->back().lkey == lkey &&
          pieces_p->back().laddr + pieces_p->back().len == a)
        pieces_p->back().len += v.length;  // adjacent: one WQE
      else
        pieces_p->push_back(RmaPiece{a, v.length, lkey});
    }
  }
  return UCS_OK;
}

// Posts what it can of a chunked RMA; true once every chunk is posted (or it was aborted).
bool chunk_post_some(Chunked* c) {
  SrdEp* ep = c->ep;
  SrdIface* iface = ep->iface;
  while (c->next < c->len) {
    if (!ep->connected || ep->failed || iface->free_ops.empty()) return false;
    if (fenced(&ep->fence, ep->fence_upto, ep->outstanding) ||
        fenced(&iface->fence, iface->fence_upto, iface->outstanding))
      return false;
    uint64_t laddr = c->laddr + c->next, left = c->len - c->next;
    uint32_t lkey = c->lkey;
    if (!c->pieces.empty()) {
      while (c->next - c->piece_start >= c->pieces[c->piece].len) c->piece_start += c->pieces[c->piece++].len;
      const RmaPiece& pc = c->pieces[c->piece];
      laddr = pc.laddr + (c->next - c->piece_start);
      left = pc.len - (c->next - c->piece_start);
      lkey = pc.lkey;
    }
    const uint32_t clen = static_cast<uint32_t>(std::min<uint64_t>(iface->rma_chunk, left));
    const uint32_t idx = iface->free_ops.back();
    iface->free_ops.pop_back();
    iface->ops[idx].chunked = c;
    ucs_status_t st = post_rdma(ep, idx, c->kind, c->efa_op, laddr, clen, lkey, c->raddr + c->next,
                                c->rkey, false);
    if (st == UCS_ERR_NO_RESOURCE) return false;
    if (st != UCS_OK) {  // nothing more goes out; what is outstanding finishes it
      if (c->status == UCS_OK) c->status = st;
      c->next = c->len;
      return true;
    }
    c->next += clen;
    c->outstanding++;
  }
  return true;
}

void chunked_finish(SrdIface* iface, Chunked* c) {
  if (!c->dead) invoke_completion(c->comp, c->status);
  for (auto it = iface->chunked.begin(); it != iface->chunked.end(); ++it)
    if (&*it == c) {
      iface->chunked.erase(it);
      break;
    }
}

ucs_status_t rdma_zcopy(uct_ep_h tl, OpKind kind, uint32_t efa_op, const uct_iov_t* iov,
                        size_t iovcnt, uint64_t raddr, uct_rkey_t rkey, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  uint64_t addr;
  uint32_t len, lkey;
  std::vector<RmaPiece> pieces;
  ucs_status_t st = zcopy_buffer(iface, iov, iovcnt, &addr, &len, &lkey, &pieces);
  if (st != UCS_OK) return st;
  if (pieces.size() == 1) {  // several entries that are one buffer after all
    addr = pieces[0].laddr;
    lkey = pieces[0].lkey;
    pieces.clear();
  }
  if (len > iface->rma_chunk || !pieces.empty()) {
    st = unusable(ep);
    if (st != UCS_OK) return st;
    if (!ep_can_post(ep)) return UCS_ERR_NO_RESOURCE;
    const uint32_t need = efa_op == EFA_DP_OP_RDMA_READ ? backend::kCapRdmaRead : backend::kCapRdmaWrite;
    if (!(iface->dev->attr.device_caps & need)) return UCS_ERR_UNSUPPORTED;
    iface->chunked.emplace_back();
    Chunked* c = &iface->chunked.back();
    c->ep = ep;
    c->kind = kind;
    c->efa_op = efa_op;
    c->laddr = addr;
    c->raddr = raddr;
    c->len = len;
    c->lkey = lkey;
    c->rkey = rkey;
    c->comp = comp;
    c->pieces.swap(pieces);
    const bool all = chunk_post_some(c);
    if (c->outstanding == 0) {  // nothing started: the caller retries (or gets the error)
      st = c->status == UCS_OK ? UCS_ERR_NO_RESOURCE : c->status;
      iface->chunked.pop_back();
      return st;
    }
    if (!all) ep->chunk_queue.push_back(c);
    iface->stats.rma_ops++;
    return UCS_INPROGRESS;
  }
  uint32_t idx;
  st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  if (len == 0) {
    unreserve(iface, idx);
    return UCS_OK;
  }
  iface->ops[idx].comp = comp;
  st = post_rdma(ep, idx, kind, efa_op, addr, len, lkey, raddr, rkey, false);
  if (st != UCS_OK) return st;
  iface->stats.rma_ops++;
  return UCS_INPROGRESS;
}

ucs_status_t put_zcopy(uct_ep_h tl, const uct_iov_t* iov, size_t iovcnt, uint64_t raddr,
                       uct_rkey_t rkey, uct_completion_t* comp) {
  return rdma_zcopy(tl, OpKind::kPutZcopy, EFA_DP_OP_RDMA_WRITE, iov, iovcnt, raddr, rkey, comp);
}

ucs_status_t get_zcopy(uct_ep_h tl, const uct_iov_t* iov, size_t iovcnt, uint64_t raddr,
                       uct_rkey_t rkey, uct_completion_t* comp) {
  return rdma_zcopy(tl, OpKind::kGetZcopy, EFA_DP_OP_RDMA_READ, iov, iovcnt, raddr, rkey, comp);
}

ucs_status_t get_bcopy(uct_ep_h tl, uct_unpack_callback_t unpack_cb, void* arg, size_t length,
                       uint64_t raddr, uct_rkey_t rkey, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  if (unpack_cb == nullptr || length > iface->seg_size) return UCS_ERR_INVALID_PARAM;
  uint32_t idx;
  ucs_status_t st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  if (length == 0) {
    unreserve(iface, idx);
    unpack_cb(arg, bounce_of(iface, idx), 0);
    return UCS_OK;
  }
  Op& op = iface->ops[idx];
  op.comp = comp;
  op.unpack = unpack_cb;
  op.arg = arg;
  op.length = length;
  uint8_t* b = bounce_of(iface, idx);
  st = post_rdma(ep, idx, OpKind::kGetBcopy, EFA_DP_OP_RDMA_READ, reinterpret_cast<uintptr_t>(b),
                 static_cast<uint32_t>(length), iface->bounce_mr->lkey(), raddr, rkey, false);
  return st == UCS_OK ? UCS_INPROGRESS : st;
}

// Synchronous: the read is posted and progressed here until it completes (or fails).
ucs_status_t get_short(uct_ep_h tl, void* buffer, unsigned length, uint64_t raddr,
                       uct_rkey_t rkey) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  if (length > iface->seg_size || (length && buffer == nullptr)) return UCS_ERR_INVALID_PARAM;
  uint32_t idx;
  ucs_status_t st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  if (length == 0) {
    unreserve(iface, idx);
    return UCS_OK;
  }
  int done = 0;
  ucs_status_t result = UCS_OK;
  Op& op = iface->ops[idx];
  op.done = &done;
  op.status = &result;
  op.length = length;
  uint8_t* b = bounce_of(iface, idx);
  st = post_rdma(ep, idx, OpKind::kGetShort, EFA_DP_OP_RDMA_READ, reinterpret_cast<uintptr_t>(b),
                 length, iface->bounce_mr->lkey(), raddr, rkey, false);
  if (st != UCS_OK) return st;
  while (!done) iface_progress(&iface->super.super);
  if (result == UCS_OK) std::memcpy(buffer, b, length);
  return result;
}

// ---- flush, fence, pending ----

ucs_status_t ep_flush(uct_ep_h tl, unsigned flags, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  if (ep->failed) return ep->fail_status;
  if (flags & UCT_FLUSH_FLAG_CANCEL) {
    // Nothing on the wire can be recalled: what is outstanding completes as canceled, what is
    // pending is the caller's to purge.
    ep->canceled = true;
  }
  const bool pending = !ep->pending.empty() || !ep->chunk_queue.empty();
  if (!pending && ep->outstanding.empty() && core_idle(ep->iface) && tag_idle(ep->iface)) return UCS_OK;
  // Pending requests are covered too: the flush arms when the last one queued now has gone out.
  if (comp) ep->flushes.push_back({ep->iface->next_seq, comp, !pending, ep->pending_done + ep->pending.size()});
  return UCS_INPROGRESS;
}

ucs_status_t ep_fence(uct_ep_h tl, unsigned) {
  SrdEp* ep = ep_of(tl);
  if (!ep->chunk_queue.empty()) {  // the chunks still to post belong before the fence
    ep->fence_deferred = true;
    ep->iface->ep_fence_deferred = true;
    return UCS_OK;
  }
  ep->fence = true;
  ep->fence_upto = ep->iface->next_seq;
  return UCS_OK;
}

ucs_status_t pending_add(uct_ep_h tl, uct_pending_req_t* req, unsigned) {
  SrdEp* ep = ep_of(tl);
  if (req == nullptr) return UCS_ERR_INVALID_PARAM;
  if (ep->pending.empty() && !ep->core_wait && resources_free(ep)) return UCS_ERR_BUSY;
  ep->pending.push_back(req);
  ep->iface->pending_reqs++;
  return UCS_OK;
}

void pending_purge(uct_ep_h tl, uct_pending_purge_callback_t cb, void* arg) {
  SrdEp* ep = ep_of(tl);
  std::deque<uct_pending_req_t*> q;
  q.swap(ep->pending);
  ep->pending_done += q.size();
  ep->iface->pending_reqs -= static_cast<uint32_t>(q.size());
  for (uct_pending_req_t* r : q)
    if (cb) cb(r, arg);
}

// ---- keep-alive ----

// Reads the peer's keep-alive word: a dead peer fails the read, and the failure reaches the
// interface's error handler like any other.
ucs_status_t ep_check(uct_ep_h tl, unsigned flags, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  if (flags != 0 || comp != nullptr) return UCS_ERR_INVALID_PARAM;
  if (!(iface->dev->attr.device_caps & backend::kCapRdmaRead)) return UCS_ERR_UNSUPPORTED;
  if (ep->failed) return UCS_OK;  // already reported
  uint32_t idx;
  ucs_status_t st = reserve(ep, &idx);
  if (st != UCS_OK) return st;
  uint8_t* b = bounce_of(iface, idx);
  return post_rdma(ep, idx, OpKind::kKeepAlive, EFA_DP_OP_RDMA_READ, reinterpret_cast<uintptr_t>(b),
                   sizeof(uint64_t), iface->bounce_mr->lkey(), ep->peer.ka_addr, ep->peer.ka_rkey,
                   false);
}

// ---- connection ----

ucs_status_t connect(SrdEp* ep, const uct_device_addr_t* dev_addr, const void* addr) {
  if (dev_addr == nullptr || addr == nullptr) return UCS_ERR_INVALID_PARAM;
  IfaceAddr a;
  std::memcpy(&a, addr, sizeof(a));
  if (a.magic != kAddrMagic) return UCS_ERR_INVALID_ADDR;
  if (ep->connected) return UCS_ERR_ALREADY_EXISTS;
  SrdIface* iface = ep->iface;
  std::memcpy(ep->peer_gid, dev_addr, sizeof(ep->peer_gid));
  backend::Ah* ah = nullptr;
  int rc = ah_get(iface, ep->peer_gid, &ah);
  if (rc) return rc == -EINVAL ? UCS_ERR_INVALID_ADDR : UCS_ERR_UNREACHABLE;
  ep->ah = ah;
  ep->ahn = ah->ahn();
  ep->peer = a;
  ep->connected = true;
  ucs_status_t st = ep_core_connect(ep);
  // A full transmit pool only delays the request (progress sends it).
  return st == UCS_ERR_NO_RESOURCE ? UCS_OK : st;
}

ucs_status_t ep_create(const uct_ep_params_t* params, uct_ep_h* ep_p) {
  if (!(params->field_mask & UCT_EP_PARAM_FIELD_IFACE)) return UCS_ERR_INVALID_PARAM;
  SrdIface* iface = iface_of(params->iface);
  const bool to_iface = (params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR) &&
                        (params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR);
  if (params->field_mask & UCT_EP_PARAM_FIELD_CM) return UCS_ERR_UNSUPPORTED;  // no uct_cm here
  const bool to_sockaddr = (params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR) != 0;
  if (to_sockaddr && to_iface) return UCS_ERR_INVALID_PARAM;
  auto* ep = new SrdEp();
  int count = 1;
  ucs_status_t st = uct_base_ep_t_init(&ep->super, &uct_base_ep_t_class, &count, &iface->super);
  if (st != UCS_OK) {
    delete ep;
    return st;
  }
  ep->iface = iface;
  if (to_iface) st = connect(ep, params->dev_addr, params->iface_addr);
  if (to_sockaddr) st = sockaddr_ep_start(ep, params);
  if (st != UCS_OK) {
    ucs_class_call_cleanup_chain(&uct_base_ep_t_class, &ep->super, -1);
    delete ep;
    return st;
  }
  iface->eps.push_back(ep);
  *ep_p = &ep->super.super;
  return UCS_OK;
}

void ep_destroy(uct_ep_h tl) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  // Outstanding work finishes without it: no completion reaches the caller after destroy.
  for (Op& op : iface->ops) {
    if (op.ep != ep) continue;
    op.ep = nullptr;
    op.comp = nullptr;
    op.unpack = nullptr;
  }
  for (auto it = iface->chunked.begin(); it != iface->chunked.end();) {
    Chunked& c = *it;
    if (c.ep != ep) {
      ++it;
      continue;
    }
    c.dead = true;
    c.next = c.len;
    it = c.outstanding == 0 ? iface->chunked.erase(it) : std::next(it);
  }
  ep->chunk_queue.clear();
  iface->pending_reqs -= static_cast<uint32_t>(ep->pending.size());  // dropped with it
  iface->eps.remove(ep);
  tag_ep_gone(iface, ep);
  sockaddr_ep_gone(ep);
  for (auto it = iface->failed.begin(); it != iface->failed.end();)
    it = *it == ep ? iface->failed.erase(it) : it + 1;
  if (ep->ah) ah_put(iface, ep->peer_gid);
  ucs_class_call_cleanup_chain(&uct_base_ep_t_class, &ep->super, -1);
  delete ep;
}

// SRD needs no per-connection state at the peer: an endpoint's address is its interface's.
ucs_status_t ep_get_address(uct_ep_h tl, uct_ep_addr_t* addr) {
  SrdIface* iface = ep_of(tl)->iface;
  return iface->super.super.ops.iface_get_address(&iface->super.super,
                                                  reinterpret_cast<uct_iface_addr_t*>(addr));
}

ucs_status_t ep_connect_to_ep(uct_ep_h tl, const uct_device_addr_t* dev_addr,
                              const uct_ep_addr_t* ep_addr) {
  return connect(ep_of(tl), dev_addr, ep_addr);
}

}  // namespace

ucs_status_t ep_connect_addr(SrdEp* ep, const uct_device_addr_t* dev_addr, const void* iface_addr) {
  return connect(ep, dev_addr, iface_addr);
}

bool ep_can_post(const SrdEp* cep) {
  auto* ep = const_cast<SrdEp*>(cep);
  if (!ep->pending.empty() && !ep->dispatching) return false;  // keep the pending order
  return resources_free(ep);
}

void ep_fail(SrdIface* iface, SrdEp* ep, ucs_status_t status) {
  if (ep->failed) return;
  ep->failed = true;
  ep->fail_status = status;
  std::deque<Chunked*> q;
  q.swap(ep->chunk_queue);
  for (Chunked* c : q) {
    c->next = c->len;
    if (c->status == UCS_OK) c->status = status;
    if (c->outstanding == 0) chunked_finish(iface, c);
  }
  while (!ep->flushes.empty()) {
    uct_completion_t* c = ep->flushes.front().comp;
    ep->flushes.pop_front();
    invoke_completion(c, status);
  }
  iface->failed.push_back(ep);
}

void complete_op(SrdIface* iface, uint32_t idx, ucs_status_t st) {
  Op op = iface->ops[idx];
  SrdEp* ep = op.ep;
  if (ep && ep->canceled && st == UCS_OK) st = UCS_ERR_CANCELED;
  if (op.kind == OpKind::kGetBcopy && st == UCS_OK && op.unpack)
    op.unpack(op.arg, bounce_of(iface, idx), op.length);
  if (op.kind == OpKind::kGetShort) {
    *op.status = st;
    *op.done = 1;
  }
  iface->outstanding.erase(op.seq);
  unreserve(iface, idx);
  if (op.kind == OpKind::kTagRead) tag_op_done(iface, idx, st);
  if (op.chunked) {
    Chunked* c = op.chunked;
    c->outstanding--;
    if (st != UCS_OK && c->status == UCS_OK) c->status = st;
    if (c->outstanding == 0 && c->next >= c->len) {
      if (ep) {
        for (auto it = ep->chunk_queue.begin(); it != ep->chunk_queue.end(); ++it)
          if (*it == c) {
            ep->chunk_queue.erase(it);
            break;
          }
      }
      chunked_finish(iface, c);
    }
  }
  if (ep) {
    if (op.rlen) {
      --ep->writes;
      ep->write_wait = false;
    }
    ep->outstanding.erase(op.seq);
    if (op.comp) invoke_completion(op.comp, st);
    ep_flushes_progress(ep);
  }
  iface_flushes_progress(iface);
}

bool any_chunk_queued(const SrdIface* iface) {
  for (const SrdEp* ep : iface->eps)
    if (!ep->chunk_queue.empty()) return true;
  return false;
}

unsigned chunks_progress(SrdIface* iface) {
  if (iface->chunked.empty() && !iface->fence_deferred && !iface->ep_fence_deferred) return 0;
  unsigned n = 0;
  bool deferred = false;
  for (SrdEp* ep : iface->eps) {
    while (!ep->chunk_queue.empty() && chunk_post_some(ep->chunk_queue.front())) {
      ep->chunk_queue.pop_front();
      ++n;
    }
    if (ep->chunk_queue.empty() && ep->fence_deferred) {
      ep->fence_deferred = false;
      ep->fence = true;
      ep->fence_upto = iface->next_seq;
    }
    deferred |= ep->fence_deferred;
  }
  iface->ep_fence_deferred = deferred;
  if (iface->fence_deferred && !any_chunk_queued(iface)) {
    iface->fence_deferred = false;
    iface->fence = true;
    iface->fence_upto = iface->next_seq;
  }
  return n;
}

void dispatch_pending(SrdIface* iface) {
  // A core_wait left set by a request that was never queued only makes the next pending_add
  // queue (dispatched by the next progress) rather than answer BUSY.
  if (iface->pending_reqs == 0) return;
  for (SrdEp* ep : iface->eps) {
    ep->core_wait = false;  // progress may have freed transmit buffers: let the requests try
    ep->dispatching = true;
    while (!ep->pending.empty() && resources_free(ep)) {
      uct_pending_req_t* r = ep->pending.front();
      ucs_status_t st = r->func(r);
      if (st != UCS_OK) break;  // kept: retried on the next progress
      if (!ep->pending.empty() && ep->pending.front() == r) {
        ep->pending.pop_front();
        ++ep->pending_done;
        --iface->pending_reqs;
      }
    }
    ep->dispatching = false;
  }
}

void fill_ep_ops(uct_iface_ops_t* o) {
  o->ep_put_short = put_short;
  o->ep_put_bcopy = put_bcopy;
  o->ep_put_zcopy = put_zcopy;
  o->ep_get_short = get_short;
  o->ep_get_bcopy = get_bcopy;
  o->ep_get_zcopy = get_zcopy;
  o->ep_pending_add = pending_add;
  o->ep_pending_purge = pending_purge;
  o->ep_flush = ep_flush;
  o->ep_fence = ep_fence;
  o->ep_check = ep_check;
  o->ep_create = ep_create;
  o->ep_destroy = ep_destroy;
  o->ep_get_address = ep_get_address;
  o->ep_connect_to_ep = ep_connect_to_ep;
}

}  // namespace uct
}  // namespace xpufab
