// Tag matching in the transport, in the role UCT gives hardware tag offload (the TAG_* rows):
// receives posted with uct_iface_tag_recv_zcopy are matched here in software (api/proto/match.h)
// against eager messages and rendezvous requests that travel as core AMs on id kTagAmId, in the
// order the core delivers them. A matched rendezvous is fetched by an RDMA read of the sender's
// buffer into the posted one, then a FIN message completes the sender's operation; what matches
// no posted receive goes to the interface's unexpected callbacks (UCP's software matching).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>

#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

enum : uint8_t { kTagEager = 1, kTagRndv = 2, kTagSwRndv = 3, kTagFin = 4 };

struct __attribute__((packed)) TagHdr {
  uint8_t type;
  uint64_t tag;
  uint64_t imm;  // eager: the sender's imm; rendezvous and FIN: the sender's operation id
};

// What a hardware rendezvous request adds before the user header.
struct __attribute__((packed)) RndvInfo {
  uint64_t raddr;
  uint64_t length;
  PackedRkey rkey;
  uint32_t qpn;  // the sender's RDMA QP: the reader's destination
  uint32_t qkey;
};

struct __attribute__((packed)) FinInfo {
  int8_t status;
};

constexpr uint32_t kMaxTagIov = 16;

// The posted receive of a context: its slot is kept in ctx->priv with a generation, so that a
// stale or foreign context is recognized by cancel.
struct CtxPriv {
  uint32_t slot;
  uint32_t gen;
};

void ctx_set(uct_tag_context_t* ctx, uint32_t slot, uint32_t gen) {
  CtxPriv p{slot, gen};
  std::memcpy(ctx->priv, &p, sizeof(p));
}

TagRecv* recv_of(SrdIface* iface, uct_tag_context_t* ctx, uint32_t* slot_p) {
  CtxPriv p;
  std::memcpy(&p, ctx->priv, sizeof(p));
  TagState& t = iface->tag;
  if (p.slot >= t.recvs.size()) return nullptr;
  TagRecv& r = t.recvs[p.slot];
  if (r.ctx != ctx || r.gen != p.gen) return nullptr;
  *slot_p = p.slot;
  return &r;
}

void recv_free(SrdIface* iface, uint32_t slot) {
  TagState& t = iface->tag;
  TagRecv& r = t.recvs[slot];
  r.ctx = nullptr;
  r.busy = false;
  r.forced = false;
  ++r.gen;
  t.free_slots.push_back(slot);
}

// The posted receive a message with `tag` takes (removed from the posted list), or NIL.
uint32_t take_posted(SrdIface* iface, uint64_t tag) {
  TagState& t = iface->tag;
  const uint32_t e = proto_match_find_posted(&t.match, tag, 0);
  if (e == PROTO_MATCH_NIL) return PROTO_MATCH_NIL;
  proto_match_hit hit;
  proto_match_remove(&t.match, e, &hit);
  return static_cast<uint32_t>(hit.cookie);
}

int fin_send(SrdIface* iface, uint32_t peer, uint64_t op_id, ucs_status_t st) {
  TagHdr h{kTagFin, 0, op_id};
  FinInfo f{static_cast<int8_t>(st)};
  return proto_am_send(iface->core, peer, kTagAmId, &h, sizeof(h), &f, sizeof(f));
}

void fin_queue(SrdIface* iface, uint32_t peer, uint64_t op_id, ucs_status_t st) {
  if (fin_send(iface, peer, op_id, st) != 0) iface->tag.fins.push_back({peer, op_id, st});
}

// Posts what it can of the RDMA read of a matched rendezvous, in chunks of RMA_CHUNK as zcopy
// gets go; true once it is all posted.
bool read_post(SrdIface* iface, TagRead* rd) {
  const TagRecv& r = iface->tag.recvs[rd->slot];
  while (rd->posted < rd->length) {
    if (iface->free_ops.empty()) return false;
    const uint32_t idx = iface->free_ops.back();
    const uint32_t clen = static_cast<uint32_t>(std::min<uint64_t>(iface->rma_chunk, rd->length - rd->posted));
    efa_dp_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.op = EFA_DP_OP_RDMA_READ;
    wr.ah = iface->core->peers[rd->peer].ahn;
    wr.dest_qpn = static_cast<uint16_t>(rd->qpn);
    wr.qkey = rd->qkey;
    wr.num_sge = 1;
    wr.sge[0] = efa_dp_sge{reinterpret_cast<uintptr_t>(r.buffer) + rd->posted, clen, r.lkey};
    wr.remote_addr = rd->raddr + rd->posted;
    wr.rkey = rd->rkey;
    wr.context = idx;
    const int rc = efa_sq_post(&iface->sq, &wr);
    if (rc == -FI_EAGAIN) return false;
    if (rc != 0) {  // what is outstanding finishes it, with the error
      if (rd->status == UCS_OK) rd->status = UCS_ERR_INVALID_PARAM;
      rd->posted = rd->length;
      break;
    }
    iface->free_ops.pop_back();
    Op& op = iface->ops[idx];
    op = Op{};
    op.kind = OpKind::kTagRead;
    op.seq = iface->next_seq++;
    op.length = clen;
    iface->tag.op_reads[idx] = rd;
    iface->outstanding.insert(op.seq);
    rd->posted += clen;
    rd->outstanding++;
    ++iface->tag.stats.rdma_reads;
  }
  return true;
}

void read_finish(SrdIface* iface, TagRead* rd) {
  const TagRead done = *rd;
  TagState& t = iface->tag;
  for (auto it = t.active.begin(); it != t.active.end(); ++it)
    if (&*it == rd) {
      t.active.erase(it);
      break;
    }
  tag_read_done(iface, done, done.status);
}

void read_start(SrdIface* iface, const TagRead& rd) {
  TagState& t = iface->tag;
  t.active.push_back(rd);
  TagRead* a = &t.active.back();
  if (!t.reads.empty() || !read_post(iface, a)) {
    t.reads.push_back(a);
    return;
  }
  if (a->outstanding == 0) read_finish(iface, a);  // failed before anything went out
}

void deliver_eager(SrdIface* iface, uint32_t slot, const TagHdr& h, const uint8_t* data, uint32_t n) {
  TagRecv& r = iface->tag.recvs[slot];
  uct_tag_context_t* ctx = r.ctx;
  const size_t copy = n < r.length ? n : r.length;
  if (copy) std::memcpy(r.buffer, data, copy);
  recv_free(iface, slot);
  ++iface->tag.stats.matched_eager;
  iface->stats.tag_rx++;
  ctx->tag_consumed_cb(ctx);
  ctx->completed_cb(ctx, h.tag, h.imm, n, nullptr, n > copy ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK);
}

int on_tag(void* arg, uint32_t src, const void* payload, uint32_t len) {
  auto* iface = static_cast<SrdIface*>(arg);
  TagState& t = iface->tag;
  TagHdr h;
  if (len < sizeof(h)) return 0;
  std::memcpy(&h, payload, sizeof(h));
  const uint8_t* body = static_cast<const uint8_t*>(payload) + sizeof(h);
  const uint32_t blen = len - static_cast<uint32_t>(sizeof(h));
  if (h.type == kTagFin) {
    FinInfo f{0};
    if (blen >= sizeof(f)) std::memcpy(&f, body, sizeof(f));
    auto it = t.sends.find(h.imm);
    if (it == t.sends.end()) return 0;  // canceled by the sender meanwhile
    TagSend* s = it->second;
    t.sends.erase(it);
    invoke_completion(s->comp, static_cast<ucs_status_t>(f.status));
    delete s;
    return 0;
  }
  if (h.type == kTagEager) {
    const uint32_t slot = take_posted(iface, h.tag);
    if (slot != PROTO_MATCH_NIL) {
      deliver_eager(iface, slot, h, body, blen);
      return 0;
    }
    ++t.stats.unexp_eager;
    // The descriptor an unexpected eager message is handed in (UCT_CB_PARAM_FLAG_DESC), as AMs'.
    uint8_t* data = desc_new(iface);
    if (data == nullptr) return -FI_EAGAIN;
    if (blen) std::memcpy(data, body, blen);
    iface->stats.tag_rx++;
    void* context = nullptr;
    ucs_status_t st = t.eager_cb(t.eager_arg, data, blen, UCT_CB_PARAM_FLAG_DESC | UCT_CB_PARAM_FLAG_FIRST, h.tag,
                                 h.imm, &context);
    if (st != UCS_INPROGRESS) desc_drop(iface, data);
    return 0;
  }
  if (h.type == kTagRndv) {
    RndvInfo ri;
    if (blen < sizeof(ri)) return 0;
    std::memcpy(&ri, body, sizeof(ri));
    const uint8_t* uhdr = body + sizeof(ri);
    const uint32_t uhlen = blen - static_cast<uint32_t>(sizeof(ri));
    const uint32_t slot = take_posted(iface, h.tag);
    if (slot == PROTO_MATCH_NIL) {
      ++t.stats.unexp_rndv;
      t.rndv_cb(t.rndv_arg, 0, h.tag, uhdr, uhlen, ri.raddr, ri.length, &ri.rkey);
      return 0;
    }
    TagRecv& r = t.recvs[slot];
    ++t.stats.matched_rndv;
    r.ctx->tag_consumed_cb(r.ctx);
    r.busy = true;
    TagRead rd{};
    rd.slot = slot;
    rd.peer = src;
    rd.op_id = h.imm;
    rd.tag = h.tag;
    rd.raddr = ri.raddr;
    rd.msg_length = ri.length;
    rd.length = static_cast<uint32_t>(ri.length < r.length ? ri.length : r.length);
    rd.rkey = ri.rkey.rkey;
    rd.qpn = ri.qpn;
    rd.qkey = ri.qkey;
    if (rd.length == 0) {
      tag_read_done(iface, rd, UCS_OK);
      return 0;
    }
    read_start(iface, rd);
    return 0;
  }
  if (h.type == kTagSwRndv) {
    const uint32_t slot = take_posted(iface, h.tag);
    if (slot == PROTO_MATCH_NIL) {
      ++t.stats.unexp_rndv;
      t.rndv_cb(t.rndv_arg, 0, h.tag, body, blen, 0, 0, nullptr);
      return 0;
    }
    uct_tag_context_t* ctx = t.recvs[slot].ctx;
    recv_free(iface, slot);
    ++t.stats.matched_sw_rndv;
    ctx->tag_consumed_cb(ctx);
    ctx->rndv_cb(ctx, h.tag, body, blen, UCS_OK, UCT_TAG_RECV_CB_INLINE_DATA);
  }
  return 0;
}

// ---- sender ops ----

ucs_status_t tag_usable(SrdEp* ep) {
  if (ep->failed) return ep->fail_status;
  if (!ep->connected) return not_connected_status(ep);
  if (!ep->iface->tag.enabled) return UCS_ERR_UNSUPPORTED;
  if (!ep->pending.empty() && !ep->dispatching) return UCS_ERR_NO_RESOURCE;
  if (ep->req_due && ep_core_connect(ep) != UCS_OK) return UCS_ERR_NO_RESOURCE;
  return UCS_OK;
}

ucs_status_t tag_send(SrdEp* ep, const void* a, uint32_t alen, const void* b, uint32_t blen) {
  int rc = proto_am_send(ep->iface->core, ep->peer_idx, kTagAmId, a, alen, b, blen);
  if (rc == -FI_EAGAIN) {
    ep->core_wait = true;
    return UCS_ERR_NO_RESOURCE;
  }
  return rc == 0 ? UCS_OK : UCS_ERR_INVALID_PARAM;
}

uint32_t eager_max(const SrdIface* iface) { return proto_am_max(iface->core) - static_cast<uint32_t>(sizeof(TagHdr)); }
uint32_t rndv_hdr_max(const SrdIface* iface) {
  return proto_am_max(iface->core) - static_cast<uint32_t>(sizeof(TagHdr) + sizeof(RndvInfo));
}

// Gathers iovs into the interface's scratch buffer after `off` bytes already there.
ucs_status_t gather(SrdIface* iface, size_t off, const uct_iov_t* iov, size_t iovcnt, size_t max, size_t* len_p) {
  if (iovcnt > kMaxTagIov || (iovcnt && iov == nullptr)) return UCS_ERR_INVALID_PARAM;
  uint8_t* g = iface->scratch.data();
  size_t len = off;
  for (size_t i = 0; i < iovcnt; ++i) {
    const size_t count = iov[i].count ? iov[i].count : 1;
    for (size_t k = 0; k < count; ++k) {
      if (len - off + iov[i].length > max) return UCS_ERR_INVALID_PARAM;
      std::memcpy(g + len, static_cast<const uint8_t*>(iov[i].buffer) + k * iov[i].stride, iov[i].length);
      len += iov[i].length;
    }
  }
  *len_p = len - off;
  return UCS_OK;
}

ucs_status_t eager_short(uct_ep_h tl, uct_tag_t tag, const void* data, size_t length) {
  SrdEp* ep = ep_of(tl);
  ucs_status_t st = tag_usable(ep);
  if (st != UCS_OK) return st;
  if (length > eager_max(ep->iface) || (length && data == nullptr)) return UCS_ERR_INVALID_PARAM;
  TagHdr h{kTagEager, tag, 0};
  st = tag_send(ep, &h, sizeof(h), data, static_cast<uint32_t>(length));
  if (st == UCS_OK) ++ep->iface->tag.stats.eager_tx;
  return st;
}

ssize_t eager_bcopy(uct_ep_h tl, uct_tag_t tag, uint64_t imm, uct_pack_callback_t pack_cb, void* arg, unsigned) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  if (pack_cb == nullptr) return UCS_ERR_INVALID_PARAM;
  ucs_status_t st = tag_usable(ep);
  if (st != UCS_OK) return st;
  // Nothing may be packed that cannot be sent now.
  if (iface->core->tx_free_count <= PROTO_TX_RESERVE) {
    ep->core_wait = true;
    return UCS_ERR_NO_RESOURCE;
  }
  std::vector<uint8_t>& g = iface->tag.pack;
  g.resize(proto_am_max(iface->core));
  const size_t len = pack_cb(g.data(), arg);
  if (len > eager_max(iface)) return UCS_ERR_EXCEEDS_LIMIT;
  TagHdr h{kTagEager, tag, imm};
  st = tag_send(ep, &h, sizeof(h), g.data(), static_cast<uint32_t>(len));
  if (st != UCS_OK) return st;
  ++iface->tag.stats.eager_tx;
  return static_cast<ssize_t>(len);
}

// The core copies the payload before returning: complete locally at once (UCS_OK).
ucs_status_t eager_zcopy(uct_ep_h tl, uct_tag_t tag, uint64_t imm, const uct_iov_t* iov, size_t iovcnt, unsigned,
                         uct_completion_t*) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  ucs_status_t st = tag_usable(ep);
  if (st != UCS_OK) return st;
  size_t len;
  st = gather(iface, 0, iov, iovcnt, eager_max(iface), &len);
  if (st != UCS_OK) return st;
  TagHdr h{kTagEager, tag, imm};
  st = tag_send(ep, &h, sizeof(h), iface->scratch.data(), static_cast<uint32_t>(len));
  if (st == UCS_OK) ++iface->tag.stats.eager_tx;
  return st;
}

ucs_status_ptr_t rndv_zcopy(uct_ep_h tl, uct_tag_t tag, const void* header, unsigned header_length,
                            const uct_iov_t* iov, size_t iovcnt, unsigned, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  SrdIface* iface = ep->iface;
  ucs_status_t st = tag_usable(ep);
  if (st != UCS_OK) return UCS_STATUS_PTR(st);
  if (!(iface->dev->attr.device_caps & backend::kCapRdmaRead)) return UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);
  if (header_length > rndv_hdr_max(iface) || (header_length && header == nullptr) || iovcnt != 1 ||
      iov == nullptr || (iov->count > 1 && iov->stride != iov->length))
    return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
  const uint64_t len = static_cast<uint64_t>(iov->length) * (iov->count ? iov->count : 0);
  if (len > iface->dev->attr.max_rdma_size || (len && iov->memh == nullptr))
    return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
  TagState& t = iface->tag;
  const uint64_t id = t.next_send_id++;
  TagHdr h{kTagRndv, tag, id};
  RndvInfo ri{reinterpret_cast<uintptr_t>(iov->buffer), len,
              PackedRkey{kRkeyMagic, len ? static_cast<SrdMemh*>(iov->memh)->mr->rkey() : 0}, iface->qpn,
              iface->qkey};
  uint8_t* g = iface->scratch.data();
  std::memcpy(g, &h, sizeof(h));
  std::memcpy(g + sizeof(h), &ri, sizeof(ri));
  const uint32_t head = static_cast<uint32_t>(sizeof(h) + sizeof(ri));
  st = tag_send(ep, g, head, header, header_length);
  if (st != UCS_OK) return UCS_STATUS_PTR(st);
  auto* s = new TagSend{id, ep, comp};
  t.sends[id] = s;
  ++t.stats.rndv_tx;
  return s;
}

ucs_status_t rndv_cancel(uct_ep_h tl, void* op) {
  SrdIface* iface = ep_of(tl)->iface;
  auto* s = static_cast<TagSend*>(op);
  if (s == nullptr) return UCS_ERR_INVALID_PARAM;
  auto it = iface->tag.sends.find(s->id);
  if (it == iface->tag.sends.end() || it->second != s) return UCS_ERR_INVALID_PARAM;
  iface->tag.sends.erase(it);
  delete s;
  return UCS_OK;
}

ucs_status_t rndv_request(uct_ep_h tl, uct_tag_t tag, const void* header, unsigned header_length, unsigned) {
  SrdEp* ep = ep_of(tl);
  ucs_status_t st = tag_usable(ep);
  if (st != UCS_OK) return st;
  if (header_length > eager_max(ep->iface) || (header_length && header == nullptr)) return UCS_ERR_INVALID_PARAM;
  TagHdr h{kTagSwRndv, tag, 0};
  st = tag_send(ep, &h, sizeof(h), header, header_length);
  if (st == UCS_OK) ++ep->iface->tag.stats.sw_rndv_tx;
  return st;
}

// ---- receiver ops ----

ucs_status_t recv_zcopy(uct_iface_h tl, uct_tag_t tag, uct_tag_t tag_mask, const uct_iov_t* iov, size_t iovcnt,
                        uct_tag_context_t* ctx) {
  SrdIface* iface = iface_of(tl);
  TagState& t = iface->tag;
  if (!t.enabled) return UCS_ERR_UNSUPPORTED;
  if (ctx == nullptr || iovcnt != 1 || iov == nullptr || (iov->count > 1 && iov->stride != iov->length))
    return UCS_ERR_INVALID_PARAM;
  const uint64_t len = static_cast<uint64_t>(iov->length) * (iov->count ? iov->count : 0);
  if (len > iface->dev->attr.max_rdma_size || (len && (iov->memh == nullptr || iov->buffer == nullptr)))
    return UCS_ERR_INVALID_PARAM;
  if (t.free_slots.empty()) return UCS_ERR_EXCEEDS_LIMIT;
  const uint32_t slot = t.free_slots.back();
  if (proto_match_post_recv(&t.match, tag, ~tag_mask, PROTO_ADDR_ANY, slot, nullptr) != 0)
    return UCS_ERR_EXCEEDS_LIMIT;
  t.free_slots.pop_back();
  TagRecv& r = t.recvs[slot];
  r.ctx = ctx;
  r.buffer = iov->buffer;
  r.length = len;
  r.lkey = len ? static_cast<SrdMemh*>(iov->memh)->mr->lkey() : 0;
  ctx_set(ctx, slot, r.gen);
  ++t.stats.posted;
  return UCS_OK;
}

ucs_status_t recv_cancel(uct_iface_h tl, uct_tag_context_t* ctx, int force) {
  SrdIface* iface = iface_of(tl);
  TagState& t = iface->tag;
  if (ctx == nullptr) return UCS_ERR_INVALID_PARAM;
  uint32_t slot;
  TagRecv* r = recv_of(iface, ctx, &slot);
  if (r == nullptr) return UCS_ERR_NO_ELEM;
  ++t.stats.canceled;
  if (r->busy) {
    // Matched and being read: it completes as received, or silently when forced.
    r->forced = force != 0;
    return UCS_OK;
  }
  proto_match_cancel(&t.match, slot, nullptr);
  recv_free(iface, slot);
  if (!force) t.canceled.push_back(ctx);
  return UCS_OK;
}

}  // namespace

void tag_read_done(SrdIface* iface, const TagRead& rd, ucs_status_t st) {
  TagRecv& r = iface->tag.recvs[rd.slot];
  uct_tag_context_t* ctx = r.ctx;
  const bool forced = r.forced;
  recv_free(iface, rd.slot);
  fin_queue(iface, rd.peer, rd.op_id, st);
  if (st == UCS_OK && rd.msg_length > rd.length) st = UCS_ERR_MESSAGE_TRUNCATED;
  if (!forced) ctx->completed_cb(ctx, rd.tag, 0, rd.msg_length, nullptr, st);
}

void tag_op_done(SrdIface* iface, uint32_t idx, ucs_status_t st) {
  TagRead* rd = iface->tag.op_reads[idx];
  iface->tag.op_reads[idx] = nullptr;
  if (rd == nullptr) return;
  rd->outstanding--;
  if (st != UCS_OK && rd->status == UCS_OK) rd->status = st;
  if (st != UCS_OK) rd->posted = rd->length;  // post no more of it
  if (rd->outstanding == 0 && rd->posted >= rd->length) {
    for (auto it = iface->tag.reads.begin(); it != iface->tag.reads.end(); ++it)
      if (*it == rd) {
        iface->tag.reads.erase(it);
        break;
      }
    read_finish(iface, rd);
  }
}

int tag_setup(SrdIface* iface, const uct_iface_params_t* params, const SrdIfaceConfig* cfg) {
  TagState& t = iface->tag;
  const uint64_t need = UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB | UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB;
  t.enabled = cfg->tm_enable && (params->field_mask & need) == need && params->eager_cb && params->rndv_cb &&
              (iface->dev->attr.device_caps & backend::kCapRdmaRead);
  t.stats_on = std::getenv("XPUFAB_UCT_TAG_STATS") != nullptr;
  if (!t.enabled) return 0;
  t.eager_cb = params->eager_cb;
  t.rndv_cb = params->rndv_cb;
  t.eager_arg = (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG) ? params->eager_arg : nullptr;
  t.rndv_arg = (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG) ? params->rndv_arg : nullptr;
  const uint32_t n = cfg->tm_list_size ? cfg->tm_list_size : 1;
  t.pool.assign(n, proto_match_entry{});
  if (proto_match_init(&t.match, t.pool.data(), n) != 0) return -EINVAL;
  t.recvs.assign(n, TagRecv{});
  t.free_slots.clear();
  for (uint32_t i = n; i-- > 0;) t.free_slots.push_back(i);
  t.op_reads.assign(iface->ops.size(), nullptr);
  proto_am_set_handler(iface->core, kTagAmId, on_tag, iface);
  return 0;
}

void tag_query(const SrdIface* iface, uct_iface_attr_t* attr) {
  const TagState& t = iface->tag;
  if (!t.enabled) return;
  attr->cap.flags |= UCT_IFACE_FLAG_TAG_EAGER_SHORT | UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                     UCT_IFACE_FLAG_TAG_EAGER_ZCOPY | UCT_IFACE_FLAG_TAG_RNDV_ZCOPY;
  const size_t em = eager_max(iface);
  attr->cap.tag.eager.max_short = em;
  attr->cap.tag.eager.max_bcopy = em;
  attr->cap.tag.eager.max_zcopy = em;
  attr->cap.tag.eager.max_iov = kMaxTagIov;
  attr->cap.tag.rndv.max_zcopy = iface->dev->attr.max_rdma_size;
  attr->cap.tag.rndv.max_hdr = rndv_hdr_max(iface);
  attr->cap.tag.rndv.max_iov = 1;
  attr->cap.tag.recv.min_recv = 0;
  attr->cap.tag.recv.max_zcopy = iface->dev->attr.max_rdma_size;
  attr->cap.tag.recv.max_iov = 1;
  attr->cap.tag.recv.max_outstanding = t.recvs.size();
}

unsigned tag_progress(SrdIface* iface) {
  TagState& t = iface->tag;
  unsigned n = 0;
  while (!t.reads.empty()) {
    TagRead* rd = t.reads.front();
    if (!read_post(iface, rd)) break;
    t.reads.pop_front();
    if (rd->outstanding == 0) read_finish(iface, rd);
    ++n;
  }
  while (!t.fins.empty() && fin_send(iface, t.fins.front().peer, t.fins.front().op_id, t.fins.front().status) == 0) {
    t.fins.pop_front();
    ++n;
  }
  while (!t.canceled.empty()) {
    uct_tag_context_t* ctx = t.canceled.front();
    t.canceled.pop_front();
    ctx->completed_cb(ctx, 0, 0, 0, nullptr, UCS_ERR_CANCELED);
    ++n;
  }
  return n;
}

bool tag_idle(const SrdIface* iface) { return iface->tag.reads.empty() && iface->tag.fins.empty(); }

void tag_ep_gone(SrdIface* iface, SrdEp* ep) {
  TagState& t = iface->tag;
  for (auto it = t.sends.begin(); it != t.sends.end();) {
    if (it->second->ep == ep) {
      delete it->second;
      it = t.sends.erase(it);
    } else {
      ++it;
    }
  }
}

void tag_teardown(SrdIface* iface) {
  TagState& t = iface->tag;
  if (t.stats_on) {
    const TagStats& s = t.stats;
    std::fprintf(stderr,
                 "xpufab srd tag offload: enabled %d eager_tx %llu rndv_tx %llu sw_rndv_tx %llu posted %llu "
                 "matched_eager %llu matched_rndv %llu matched_sw_rndv %llu unexp_eager %llu unexp_rndv %llu "
                 "rdma_reads %llu canceled %llu\n",
                 t.enabled ? 1 : 0, static_cast<unsigned long long>(s.eager_tx),
                 static_cast<unsigned long long>(s.rndv_tx), static_cast<unsigned long long>(s.sw_rndv_tx),
                 static_cast<unsigned long long>(s.posted), static_cast<unsigned long long>(s.matched_eager),
                 static_cast<unsigned long long>(s.matched_rndv), static_cast<unsigned long long>(s.matched_sw_rndv),
                 static_cast<unsigned long long>(s.unexp_eager), static_cast<unsigned long long>(s.unexp_rndv),
                 static_cast<unsigned long long>(s.rdma_reads), static_cast<unsigned long long>(s.canceled));
  }
  for (auto& kv : t.sends) delete kv.second;
  t.sends.clear();
}

void fill_tag_ops(uct_iface_ops_t* o) {
  o->ep_tag_eager_short = eager_short;
  o->ep_tag_eager_bcopy = eager_bcopy;
  o->ep_tag_eager_zcopy = eager_zcopy;
  o->ep_tag_rndv_zcopy = rndv_zcopy;
  o->ep_tag_rndv_cancel = rndv_cancel;
  o->ep_tag_rndv_request = rndv_request;
  o->iface_tag_recv_zcopy = recv_zcopy;
  o->iface_tag_recv_cancel = recv_cancel;
}

}  // namespace uct
}  // namespace xpufab
