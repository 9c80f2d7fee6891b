// Completion queues: CREATE_CQ (legacy and extended), DESTROY_CQ. The ring libefa maps is the
// emulator's own (32-byte CQEs) or, for 16-byte CQEs, a mirror of it (cq_mirror.cc); a CQ with
// a completion channel has its events forwarded by the service thread (comp_channel.cc).
#include <fcntl.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {
namespace {

struct CqReq {
  uint64_t user_handle;
  uint32_t cqe;
  int32_t comp_channel;
};

int create_cq_common(State& s, Ctx* ctx, Cmd& c, const CqReq& req, size_t core_resp_size) {
  efa_ibv_create_cq ucmd{};
  if (c.drv_len < sizeof(ucmd)) return -EINVAL;
  std::memcpy(&ucmd, c.drv, sizeof(ucmd));
  if (!all_zero(c.drv + sizeof(ucmd), c.drv_len - sizeof(ucmd))) return -EINVAL;
  if (ucmd.comp_mask != 0 || !all_zero(ucmd.reserved_58, sizeof(ucmd.reserved_58))) return -EINVAL;
  if (ucmd.num_sub_cqs != 1) return -EINVAL;
  const bool with_sgid = ucmd.flags & EFA_CREATE_CQ_WITH_SGID;
  const bool with_channel = ucmd.flags & EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL;
  if (ucmd.flags & ~uint8_t{EFA_CREATE_CQ_WITH_SGID | EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL})
    return -EINVAL;
  if (ucmd.cq_entry_size != 16 && ucmd.cq_entry_size != 32) return -EINVAL;
  if (with_sgid && ucmd.cq_entry_size != 32) return -EINVAL;
  if (req.cqe == 0 || req.cqe > s.attr.max_cq_depth) return -EINVAL;
  // The kernel looks the channel up by fd: no open file is EBADF, another kind of file EINVAL.
  if (req.comp_channel >= 0 && s.channels.count(req.comp_channel) == 0)
    return fcntl(req.comp_channel, F_GETFD) < 0 ? -EBADF : -EINVAL;
  backend::CqInitAttr a;
  a.entries = req.cqe;
  a.with_sgid = with_sgid;
  a.with_event_fd = with_channel || req.comp_channel >= 0;
  backend::Cq* cq = nullptr;
  int rc = s.dev->create_cq(a, &cq);
  if (rc != 0) return rc;
  backend::CqAttr q{};
  rc = cq->query(&q);
  auto obj = std::make_unique<CqObj>();
  obj->handle = ctx->next_handle;
  obj->cq = cq;
  obj->user_handle = req.user_handle;
  obj->entries = q.num_entries;
  while ((1u << obj->log2_entries) < obj->entries) obj->log2_entries++;
  obj->entry_size = ucmd.cq_entry_size;
  obj->emu_ring = q.buffer;
  obj->db = q.doorbell;
  obj->channel = req.comp_channel;
  if (rc == 0 && a.with_event_fd) {
    obj->efd = cq->event_fd();
    int fl = fcntl(obj->efd, F_GETFL);
    if (obj->efd < 0 || fl < 0 || fcntl(obj->efd, F_SETFL, fl | O_NONBLOCK) < 0) rc = -EIO;
  }
  size_t ring_len = page_align(size_t{obj->entries} * obj->entry_size);
  uint8_t* ring = obj->emu_ring;
  if (rc == 0 && obj->entry_size == 16) {
    obj->ring16 = alloc_mirror_ring(ring_len);
    if (obj->ring16 == nullptr) {
      rc = -ENOMEM;
    } else {
      ring = obj->ring16;
    }
  }
  if (rc != 0) {
    s.dev->destroy_cq(cq);
    return rc;
  }
  uint32_t core[2] = {obj->handle, obj->entries};  // ib_uverbs_create_cq_resp
  efa_ibv_create_cq_resp d{};
  std::vector<uint64_t> keys;
  d.q_mmap_key = add_key(ctx, ring, ring_len);
  d.q_mmap_size = ring_len;
  keys.push_back(d.q_mmap_key);
  d.cq_idx = static_cast<uint16_t>(obj->handle);
  if (obj->db != nullptr) {
    uintptr_t db = reinterpret_cast<uintptr_t>(obj->db);
    uint8_t* page = reinterpret_cast<uint8_t*>(db & ~uintptr_t{kPage - 1});
    d.comp_mask |= EFA_CREATE_CQ_RESP_DB_OFF;
    d.db_off = static_cast<uint32_t>(db & (kPage - 1));
    d.db_mmap_key = add_key(ctx, page, kPage);
    keys.push_back(d.db_mmap_key);
  }
  uint8_t core_buf[16] = {0};
  std::memcpy(core_buf, &core, sizeof(core));
  if (core_resp_size > sizeof(core)) {
    uint32_t len = static_cast<uint32_t>(std::min(c.out_len, core_resp_size));
    std::memcpy(core_buf + 12, &len, 4);  // ex: response_length
  }
  rc = respond(c, core_buf, core_resp_size, &d, sizeof(d));
  if (rc != 0) {
    for (uint64_t k : keys) ctx->keys.erase(k);
    if (obj->ring16 != nullptr) free_owned(obj->ring16, ring_len);
    s.dev->destroy_cq(cq);
    return rc;
  }
  ctx->cq_keys[obj->handle] = keys;
  if (obj->channel >= 0) s.channels[obj->channel].cqs[obj->user_handle] = obj.get();
  if (obj->ring16 != nullptr || obj->efd >= 0) serve_locked(s, obj.get());
  ctx->cqs[ctx->next_handle++] = std::move(obj);
  return 0;
}

}  // namespace

void destroy_cq_locked(State& s, Ctx* ctx, CqObj* c) {
  unserve_locked(s, c);
  detach_cq_from_channel_locked(s, c);
  if (s.dev) s.dev->destroy_cq(c->cq);
  for (uint64_t k : ctx->cq_keys[c->handle]) ctx->keys.erase(k);
  ctx->cq_keys.erase(c->handle);
  release_mirror_ring_locked(s, c);
}

int cmd_create_cq(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_cq), sizeof(ib_uverbs_create_cq_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_cq req;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_vector != 0) return -EINVAL;
  return create_cq_common(s, ctx, c, CqReq{req.user_handle, req.cqe, req.comp_channel},
                          sizeof(ib_uverbs_create_cq_resp));
}

int cmd_ex_create_cq(State& s, Ctx* ctx, Cmd& c) {
  ib_uverbs_ex_create_cq req{};
  if (c.core_len < sizeof(req)) return -EINVAL;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_vector != 0 || req.comp_mask != 0 || req.reserved != 0) return -EINVAL;
  if (req.flags != 0) return -EOPNOTSUPP;
  if (c.out_len < sizeof(ib_uverbs_create_cq_resp)) return -ENOSPC;
  return create_cq_common(s, ctx, c, CqReq{req.user_handle, req.cqe, req.comp_channel},
                          sizeof(ib_uverbs_ex_create_cq_resp));
}

int cmd_destroy_cq(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_cq), sizeof(ib_uverbs_destroy_cq_resp));
  if (rc != 0) return rc;
  ib_uverbs_destroy_cq req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->cqs.find(req.cq_handle);
  if (it == ctx->cqs.end()) return missing_handle_errno(*ctx, req.cq_handle);
  if (it->second->users > 0) return -EBUSY;
  ib_uverbs_destroy_cq_resp r{it->second->comp_reported, 0};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) return rc;
  destroy_cq_locked(s, ctx, it->second.get());
  ctx->cqs.erase(it);
  return 0;
}

}  // namespace uverbs
}  // namespace xpufab
