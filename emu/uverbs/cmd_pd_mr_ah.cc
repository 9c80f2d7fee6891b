// Protection domains, memory regions and address handles: each maps one to one onto the
// emulated device's object, named to the caller by a per-context handle.
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>

#include <cerrno>
#include <cstring>

#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {

int cmd_alloc_pd(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_alloc_pd), sizeof(ib_uverbs_alloc_pd_resp));
  if (rc != 0) return rc;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  backend::Pd* pd = nullptr;
  rc = s.dev->alloc_pd(&pd);
  if (rc != 0) return rc;
  ib_uverbs_alloc_pd_resp r{ctx->next_handle};
  efa_ibv_alloc_pd_resp d{};
  d.pdn = static_cast<uint16_t>(pd->handle());
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    s.dev->dealloc_pd(pd);
    return rc;
  }
  ctx->pds[ctx->next_handle++] = pd;
  return 0;
}

int cmd_dealloc_pd(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_dealloc_pd), 0);
  if (rc != 0) return rc;
  ib_uverbs_dealloc_pd req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  rc = s.dev->dealloc_pd(it->second);
  if (rc != 0) return rc;
  ctx->pds.erase(it);
  return 0;
}

int cmd_reg_mr(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_reg_mr), sizeof(ib_uverbs_reg_mr_resp));
  if (rc != 0) return rc;
  ib_uverbs_reg_mr req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  // Bits 20 and up are IB_ACCESS_OPTIONAL: a device may ignore them.
  uint32_t access = req.access_flags & ((1u << 20) - 1);
  uint32_t supported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  if (s.attr.device_caps & backend::kCapRdmaWrite) supported |= IBV_ACCESS_REMOTE_WRITE;
  if (access & ~supported) return -EOPNOTSUPP;
  if (req.length == 0) return -EINVAL;
  backend::MrInitAttr a;
  a.addr = reinterpret_cast<void*>(req.start);
  a.length = req.length;
  a.iova = req.hca_va;
  a.access = access;
  backend::Mr* mr = nullptr;
  rc = s.dev->reg_mr(it->second, a, &mr);
  if (rc != 0) return rc;
  ib_uverbs_reg_mr_resp r{ctx->next_handle, mr->lkey(), mr->rkey()};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) {
    s.dev->dereg_mr(mr);
    return rc;
  }
  ctx->mrs[ctx->next_handle++] = mr;
  return 0;
}

int cmd_dereg_mr(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_dereg_mr), 0);
  if (rc != 0) return rc;
  ib_uverbs_dereg_mr req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->mrs.find(req.mr_handle);
  if (it == ctx->mrs.end()) return -EINVAL;
  rc = s.dev->dereg_mr(it->second);
  if (rc != 0) return rc;
  ctx->mrs.erase(it);
  return 0;
}

int cmd_create_ah(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_ah), sizeof(ib_uverbs_create_ah_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_ah req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  if (!req.attr.is_global) return -EINVAL;  // EFA addresses are GIDs
  backend::Ah* ah = nullptr;
  rc = s.dev->create_ah(it->second, req.attr.grh.dgid, &ah);
  if (rc != 0) return rc;
  uint32_t r = ctx->next_handle;  // ib_uverbs_create_ah_resp.ah_handle
  efa_ibv_create_ah_resp d{};
  d.efa_address_handle = ah->ahn();
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    s.dev->destroy_ah(ah);
    return rc;
  }
  ctx->ahs[ctx->next_handle++] = ah;
  return 0;
}

int cmd_destroy_ah(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_ah), 0);
  if (rc != 0) return rc;
  ib_uverbs_destroy_ah req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->ahs.find(req.ah_handle);
  if (it == ctx->ahs.end()) return -EINVAL;
  rc = s.dev->destroy_ah(it->second);
  if (rc != 0) return rc;
  ctx->ahs.erase(it);
  return 0;
}

}  // namespace uverbs
}  // namespace xpufab
