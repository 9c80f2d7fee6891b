// Protection domains, memory regions and address handles: each maps one to one onto the
// emulated device's object, named to the caller by a per-context handle.
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <sys/mman.h>

#include <algorithm>
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
  if (it == ctx->pds.end()) return missing_handle_errno(*ctx, req.pd_handle);
  rc = s.dev->dealloc_pd(it->second);
  if (rc != 0) return rc;
  ctx->pds.erase(it);
  return 0;
}

namespace {

// The kernel core's checks on the access flags (ib_check_mr_access), before the driver sees
// them: unknown bits are EINVAL, features the device lacks are EOPNOTSUPP.
int check_mr_access(uint32_t access) {
  constexpr uint32_t kOptional = ((1u << 29) << 1) - (1u << 20);  // IB_ACCESS_OPTIONAL range
  constexpr uint32_t kFlushPersistent = 1u << 9;                   // the highest defined bit
  constexpr uint32_t kFlushGlobal = 1u << 8;
  constexpr uint32_t kKnown = ((kFlushPersistent << 1) - 1) | kOptional;
  // Remote write or atomic access needs local write: the remote side could otherwise change
  // memory the local process itself may not write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return -EINVAL;
  if (access & ~kKnown) return -EINVAL;
  if (access & IBV_ACCESS_ON_DEMAND) return -EOPNOTSUPP;  // EFA has no ODP
  if (access & (kFlushGlobal | kFlushPersistent)) return -EOPNOTSUPP;
  return 0;
}

// Whether every page of [start, start + len) is mapped, as pinning them requires; mincore
// fails with ENOMEM on a hole. Checked in chunks so the residency vector stays small.
bool all_mapped(uint64_t start, uint64_t len) {
  constexpr uint64_t kChunkPages = 16384;
  static thread_local unsigned char vec[kChunkPages];
  uint64_t first = start & ~uint64_t{kPage - 1};
  uint64_t end = start + len;
  for (uint64_t at = first; at < end; at += kChunkPages * kPage) {
    uint64_t n = std::min<uint64_t>(end - at, kChunkPages * kPage);
    if (mincore(reinterpret_cast<void*>(at), n, vec) != 0) return false;
  }
  return true;
}

}  // namespace

int cmd_reg_mr(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_reg_mr), sizeof(ib_uverbs_reg_mr_resp));
  if (rc != 0) return rc;
  ib_uverbs_reg_mr req;
  std::memcpy(&req, c.core, sizeof(req));
  // The core pins whole pages and maps start's page at hca_va's: both need one page offset.
  if ((req.start & (kPage - 1)) != (req.hca_va & (kPage - 1))) return -EINVAL;
  rc = check_mr_access(req.access_flags);
  if (rc != 0) return rc;
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  // What the EFA driver then refuses: a non-zero driver request, and the optional bits aside
  // (a device may ignore them), any access the generation does not support.
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  uint32_t access = req.access_flags & ((1u << 20) - 1);
  uint32_t supported = IBV_ACCESS_LOCAL_WRITE;
  if (s.attr.device_caps & backend::kCapRdmaRead) supported |= IBV_ACCESS_REMOTE_READ;
  if (s.attr.device_caps & backend::kCapRdmaWrite) supported |= IBV_ACCESS_REMOTE_WRITE;
  if (access & ~supported) return -EOPNOTSUPP;
  // Pinning: an empty or wrapping range is EINVAL, memory that is not mapped EFAULT.
  if (req.length == 0 || req.start + req.length < req.start) return -EINVAL;
  if (!all_mapped(req.start, req.length)) return -EFAULT;
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
  if (it == ctx->mrs.end()) return missing_handle_errno(*ctx, req.mr_handle);
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
  if (req.attr.port_num != 1) return -EINVAL;
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  // The port has one GID: a global route naming another source GID does not resolve.
  if (req.attr.is_global && req.attr.grh.sgid_index != 0) return -EINVAL;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  // Without a global route the core leaves the GRH zeroed and the EFA driver takes its dgid
  // as it is: the AH is created for the all-zero GID (a peer no one has).
  uint8_t dgid[16] = {0};
  if (req.attr.is_global) std::memcpy(dgid, req.attr.grh.dgid, sizeof(dgid));
  backend::Ah* ah = nullptr;
  rc = s.dev->create_ah(it->second, dgid, &ah);
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
  if (it == ctx->ahs.end()) return missing_handle_errno(*ctx, req.ah_handle);
  rc = s.dev->destroy_ah(it->second);
  if (rc != 0) return rc;
  ctx->ahs.erase(it);
  return 0;
}

}  // namespace uverbs
}  // namespace xpufab
