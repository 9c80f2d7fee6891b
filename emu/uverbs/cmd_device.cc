// The device family: GET_CONTEXT (which opens the process's emulated device on first use),
// QUERY_DEVICE (legacy and extended, with the EFA driver's caps), QUERY_PORT, and the live GID
// and node GUID the sysfs tree shows.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"
#include "emu/uverbs/uverbs_server.h"

namespace xpufab {
namespace uverbs {

int open_backend_locked(State& s) {
  if (s.backend) return 0;
  int rc = backend::open_backend("emu", &s.backend);
  if (rc != 0) return rc;
  rc = s.backend->enumerate(&s.infos);
  if (rc != 0 || s.infos.empty()) {
    s.backend.reset();
    return rc != 0 ? rc : -ENODEV;
  }
  return 0;
}

int open_device_locked(State& s) {
  if (s.dev) return 0;
  int rc = open_backend_locked(s);
  if (rc != 0) return rc;
  {
    // The engine thread and the fabric's receive thread start here.
    SignalsBlocked blocked;
    rc = s.backend->open_device(s.infos[0].name, &s.dev);
  }
  if (rc != 0) return rc;
  s.emu = dynamic_cast<emu::EmuDevice*>(s.dev.get());
  rc = s.dev->query(&s.attr);
  if (rc != 0) {
    s.dev.reset();
    s.emu = nullptr;
    return rc;
  }
  s.driven_emu.store(s.emu, std::memory_order_release);
  s.driven.store(s.dev.get(), std::memory_order_release);
  ensure_service_locked(s);
  return 0;
}

namespace {

// Only what the device has: libefa and libfabric decide from these bits whether to ask for a
// feature (libfabric's RDM endpoint sets IBV_QP_RNR_RETRY when RNR_RETRY is here, which a device
// without it refuses).
uint32_t efa_caps(const backend::DeviceAttr& a) {
  uint32_t c = 0;
  if (a.device_caps & backend::kCapRnrRetry) c |= EFA_QUERY_DEVICE_CAPS_RNR_RETRY;
  if (a.device_caps & backend::kCapCqNotifications) c |= EFA_QUERY_DEVICE_CAPS_CQ_NOTIFICATIONS;
  if (a.device_caps & backend::kCapRdmaRead) c |= EFA_QUERY_DEVICE_CAPS_RDMA_READ;
  if (a.device_caps & backend::kCapCqWithSgid) c |= EFA_QUERY_DEVICE_CAPS_CQ_WITH_SGID;
  if (a.device_caps & backend::kCapRdmaWrite) c |= 1u << 5;           // RDMA_WRITE (v47)
  if (a.device_caps & backend::kCapUnsolicitedWriteRecv) c |= 1u << 6;  // (v52)
  return c;
}

void fill_device(const State& s, ib_uverbs_query_device_resp* r) {
  std::memset(r, 0, sizeof(*r));
  const backend::DeviceAttr& a = s.attr;
  r->fw_ver = 0x00000001;  // prints as 1.0.0.0
  uint64_t guid = 0;
  for (int i = 8; i < 16; ++i) guid = (guid << 8) | a.gid[i];
  r->node_guid = __builtin_bswap64(guid);
  r->sys_image_guid = r->node_guid;
  r->max_mr_size = uint64_t{1} << 39;
  r->page_size_cap = ~uint64_t{kPage - 1};
  r->vendor_id = 0x1d0f;
  r->vendor_part_id = a.vendor_part_id;
  r->max_qp = a.max_qp;
  r->max_qp_wr = std::min(a.max_sq_wr, a.max_rq_wr);
  r->max_sge = std::min(a.max_sq_sge, a.max_rq_sge);
  r->max_sge_rd = a.max_rdma_sge;
  r->max_cq = a.max_cq;
  r->max_cqe = a.max_cq_depth;
  r->max_mr = a.max_mr;
  r->max_pd = a.max_pd;
  r->max_ah = a.max_ah;
  r->max_pkeys = 1;
  r->phys_port_cnt = 1;
}

}  // namespace

int cmd_get_context(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_get_context), sizeof(ib_uverbs_get_context_resp));
  if (rc != 0) return rc;
  if (ctx->has_context) return -EINVAL;
  efa_ibv_alloc_ucontext_cmd ucmd{};
  std::memcpy(&ucmd, c.drv, std::min(c.drv_len, sizeof(ucmd)));
  if (c.drv_len > sizeof(ucmd) && !all_zero(c.drv + sizeof(ucmd), c.drv_len - sizeof(ucmd)))
    return -EINVAL;
  rc = open_device_locked(s);
  if (rc != 0) return rc;
  // The device has a TX batch limit and a minimum SQ depth: a library that does not announce it
  // knows them is refused, as the EFA driver does.
  constexpr uint32_t kNeed = EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH | EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR;
  if ((ucmd.comp_mask & kNeed) != kNeed) return -EOPNOTSUPP;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
  ib_uverbs_get_context_resp core{};
  core.async_fd = static_cast<uint32_t>(fds[0]);
  core.num_comp_vectors = 1;
  uint8_t drv[24] = {0};
  efa_ibv_alloc_ucontext_resp r{};
  r.cmds_supp_udata_mask = EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE | EFA_USER_CMDS_SUPP_UDATA_CREATE_AH;
  r.sub_cqs_per_cq = 1;
  r.inline_buf_size = s.attr.inline_buf_size;
  r.max_llq_size = s.attr.max_sq_wr * 64;
  r.max_tx_batch = static_cast<uint16_t>(s.attr.max_tx_batch);
  r.min_sq_wr = static_cast<uint16_t>(s.attr.min_sq_wr);
  std::memcpy(drv, &r, std::min(sizeof(r), sizeof(drv)));
  rc = respond(c, &core, sizeof(core), drv, sizeof(drv));
  if (rc != 0) {
    sys_close(fds[0]);
    sys_close(fds[1]);
    return rc;
  }
  ctx->async_r = fds[0];
  ctx->async_w = fds[1];
  ctx->has_context = true;
  return 0;
}

int cmd_query_device(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_device), sizeof(ib_uverbs_query_device_resp));
  if (rc != 0) return rc;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  ib_uverbs_query_device_resp r;
  fill_device(s, &r);
  return respond(c, &r, sizeof(r), nullptr, 0);
}

int cmd_ex_query_device(State& s, Ctx*, Cmd& c) {
  ib_uverbs_ex_query_device req{};
  if (c.core_len < sizeof(req)) return -EINVAL;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_mask != 0 || req.reserved != 0) return -EINVAL;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  ib_uverbs_ex_query_device_resp r;
  std::memset(&r, 0, sizeof(r));
  fill_device(s, &r.base);
  if (c.out_len < sizeof(r.base) + 8) return -ENOSPC;
  r.response_length = static_cast<uint32_t>(std::min(c.out_len, sizeof(r)));
  efa_ibv_ex_query_device_resp d{};
  d.max_sq_wr = s.attr.max_sq_wr;
  d.max_rq_wr = s.attr.max_rq_wr;
  d.max_sq_sge = s.attr.max_sq_sge;
  d.max_rq_sge = s.attr.max_rq_sge;
  d.max_rdma_size = s.attr.max_rdma_size;
  d.device_caps = efa_caps(s.attr);
  return respond(c, &r, sizeof(r), &d, sizeof(d));
}

int cmd_query_port(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_port), sizeof(ib_uverbs_query_port_resp));
  if (rc != 0) return rc;
  ib_uverbs_query_port req;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.port_num != 1) return -EINVAL;
  ib_uverbs_query_port_resp r;
  std::memset(&r, 0, sizeof(r));
  r.max_msg_sz = s.attr.mtu;
  r.gid_tbl_len = 1;
  r.pkey_tbl_len = 1;
  r.state = IBV_PORT_ACTIVE;
  r.max_mtu = IBV_MTU_4096;
  r.active_mtu = IBV_MTU_4096;
  r.active_width = 2;   // 4X
  r.active_speed = 32;  // EDR
  r.phys_state = 5;     // LinkUp
  r.link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  return respond(c, &r, sizeof(r), nullptr, 0);
}

bool gid_text(int index, char* out, size_t out_len) {
  State& s = st();
  ServerLock lock(s);
  if (open_backend_locked(s) != 0 || index < 0 || static_cast<size_t>(index) >= s.infos.size())
    return false;
  const uint8_t* g = s.infos[index].gid;
  snprintf(out, out_len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
           g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
           g[14], g[15]);
  return true;
}

bool node_guid_text(int index, char* out, size_t out_len) {
  State& s = st();
  ServerLock lock(s);
  if (open_backend_locked(s) != 0 || index < 0 || static_cast<size_t>(index) >= s.infos.size())
    return false;
  // The GID's interface identifier, as QUERY_DEVICE reports the node GUID (fill_device).
  const uint8_t* g = s.infos[index].gid;
  snprintf(out, out_len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x\n", g[8], g[9], g[10], g[11], g[12],
           g[13], g[14], g[15]);
  return true;
}

}  // namespace uverbs
}  // namespace xpufab
