// Queue pairs (SRD, the EFA driver type, and UD): CREATE_QP hands out mmap keys for the
// emulator's send queue (LLQ descriptors), receive ring and doorbells; QUERY_QP, MODIFY_QP and
// DESTROY_QP map onto the emulated QP.
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {

void destroy_qp_locked(State& s, Ctx* ctx, QpObj* q) {
  if (s.dev) s.dev->destroy_qp(q->qp);
  for (uint64_t k : q->keys) ctx->keys.erase(k);
  auto sc = ctx->cqs.find(q->send_cq);
  if (sc != ctx->cqs.end()) sc->second->users--;
  auto rc = ctx->cqs.find(q->recv_cq);
  if (rc != ctx->cqs.end()) rc->second->users--;
}

int cmd_create_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_qp), sizeof(ib_uverbs_create_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  // Driver part: 16 bytes up to v51, then flags (v52) and sl (v55); unknown tails must be zero.
  uint8_t drv[24] = {0};
  if (c.drv_len < 16) return -EINVAL;
  std::memcpy(drv, c.drv, std::min(c.drv_len, sizeof(drv)));
  if (c.drv_len > sizeof(drv) && !all_zero(c.drv + sizeof(drv), c.drv_len - sizeof(drv)))
    return -EINVAL;
  uint32_t comp_mask, rq_ring_size, sq_ring_size, driver_qp_type;
  std::memcpy(&comp_mask, drv, 4);
  std::memcpy(&rq_ring_size, drv + 4, 4);
  std::memcpy(&sq_ring_size, drv + 8, 4);
  std::memcpy(&driver_qp_type, drv + 12, 4);
  uint16_t flags;
  std::memcpy(&flags, drv + 16, 2);
  uint8_t sl = drv[18];
  if (comp_mask != 0 || !all_zero(drv + 19, 5)) return -EINVAL;
  // The kernel maps UD to the admin UD type (driver_qp_type unused) and DRIVER+SRD to SRD.
  bool ud = req.qp_type == IBV_QPT_UD;
  if (!ud && (req.qp_type != IBV_QPT_DRIVER || driver_qp_type != EFA_QP_DRIVER_TYPE_SRD)) return -EOPNOTSUPP;
  if (req.is_srq) return -EINVAL;
  if (flags & ~1u) return -EOPNOTSUPP;  // only UNSOLICITED_WRITE_RECV
  if (sq_ring_size == 0 || sq_ring_size % 64 != 0) return -EINVAL;
  if (rq_ring_size % 16 != 0) return -EINVAL;
  auto pd = ctx->pds.find(req.pd_handle);
  auto scq = ctx->cqs.find(req.send_cq_handle);
  auto rcq = ctx->cqs.find(req.recv_cq_handle);
  if (pd == ctx->pds.end() || scq == ctx->cqs.end() || rcq == ctx->cqs.end()) return -EINVAL;
  backend::QpInitAttr a;
  a.pd = pd->second;
  a.send_cq = scq->second->cq;
  a.recv_cq = rcq->second->cq;
  a.max_send_wr = sq_ring_size / 64;
  a.max_send_sge = std::max<uint32_t>(req.max_send_sge, 1);
  a.max_recv_sge = std::max<uint32_t>(req.max_recv_sge, 1);
  a.max_recv_wr = rq_ring_size / 16 / a.max_recv_sge;
  a.max_inline_data = 0;  // 64-byte WQEs: what libefa's LLQ layout expects
  a.type = ud ? backend::QpType::kUd : backend::QpType::kSrd;
  a.flags = (flags & 1u) ? uint32_t{backend::kQpUnsolicitedWriteRecv} : 0u;
  a.sl = sl;
  if (req.max_send_sge > s.attr.max_sq_sge || req.max_recv_sge > s.attr.max_rq_sge ||
      req.max_inline_data > s.attr.inline_buf_size) {
    return -EINVAL;
  }
  backend::Qp* qp = nullptr;
  rc = s.dev->create_qp(a, &qp);
  if (rc != 0) return rc;
  auto obj = std::make_unique<QpObj>();
  obj->handle = ctx->next_handle;
  obj->qp = qp;
  obj->pd = req.pd_handle;
  obj->send_cq = req.send_cq_handle;
  obj->recv_cq = req.recv_cq_handle;
  rc = qp->query_wqs(&obj->sq, &obj->rq);
  if (rc == 0 && (size_t{obj->sq.num_entries} * obj->sq.entry_size != sq_ring_size ||
                  size_t{obj->rq.num_entries} * obj->rq.entry_size < rq_ring_size)) {
    rc = -EINVAL;  // the device would size the rings differently from what libefa computed
  }
  if (rc != 0) {
    s.dev->destroy_qp(qp);
    return rc;
  }
  obj->max_send_wr = req.max_send_wr;
  obj->max_recv_wr = req.max_recv_wr;
  obj->max_send_sge = req.max_send_sge;
  obj->max_recv_sge = req.max_recv_sge;
  obj->max_inline = req.max_inline_data;
  obj->sq_sig_all = req.sq_sig_all;
  ib_uverbs_create_qp_resp r{};
  r.qp_handle = obj->handle;
  r.qpn = qp->qpn();
  r.max_send_wr = req.max_send_wr;
  r.max_recv_wr = req.max_recv_wr;
  r.max_send_sge = req.max_send_sge;
  r.max_recv_sge = req.max_recv_sge;
  r.max_inline_data = req.max_inline_data;
  efa_ibv_create_qp_resp d{};
  auto page_of = [](const void* p) {
    return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kPage - 1});
  };
  auto off_of = [](const void* p) {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & (kPage - 1));
  };
  d.sq_db_offset = off_of(obj->sq.doorbell);
  d.sq_db_mmap_key = add_key(ctx, page_of(obj->sq.doorbell), kPage);
  d.llq_desc_offset = off_of(obj->sq.buffer);
  d.llq_desc_mmap_key =
      add_key(ctx, page_of(obj->sq.buffer), page_align(sq_ring_size + d.llq_desc_offset));
  d.rq_db_offset = off_of(obj->rq.doorbell);
  d.rq_db_mmap_key = add_key(ctx, page_of(obj->rq.doorbell), kPage);
  obj->keys = {d.sq_db_mmap_key, d.llq_desc_mmap_key, d.rq_db_mmap_key};
  if (rq_ring_size != 0) {
    d.rq_mmap_size = page_align(rq_ring_size);
    d.rq_mmap_key = add_key(ctx, obj->rq.buffer, d.rq_mmap_size);
    obj->keys.push_back(d.rq_mmap_key);
  }
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    for (uint64_t k : obj->keys) ctx->keys.erase(k);
    s.dev->destroy_qp(qp);
    return rc;
  }
  scq->second->users++;
  rcq->second->users++;
  ctx->qps[ctx->next_handle++] = std::move(obj);
  return 0;
}

int cmd_query_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_qp), sizeof(ib_uverbs_query_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_query_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  QpObj* q = it->second.get();
  uint8_t gid[16];
  uint32_t qpn = 0, qkey = 0;
  rc = s.dev->local_address(q->qp, gid, &qpn, &qkey);
  if (rc != 0) return rc;
  ib_uverbs_query_qp_resp r;
  std::memset(&r, 0, sizeof(r));
  r.max_send_wr = q->max_send_wr;
  r.max_recv_wr = q->max_recv_wr;
  r.max_send_sge = q->max_send_sge;
  r.max_recv_sge = q->max_recv_sge;
  r.max_inline_data = q->max_inline;
  r.qkey = qkey;
  r.sq_psn = q->sq_psn;
  r.qp_state = static_cast<uint8_t>(q->qp->state());
  r.cur_qp_state = r.qp_state;
  r.port_num = 1;
  r.rnr_retry = q->rnr_retry;
  r.sq_draining = 0;
  return respond(c, &r, sizeof(r), nullptr, 0);
}

int cmd_modify_qp(State&, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_modify_qp), 0);
  if (rc != 0) return rc;
  ib_uverbs_modify_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  constexpr uint32_t kKnown = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                              IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN;
  if (req.attr_mask & ~kKnown) return -EINVAL;
  if (req.qp_state > IBV_QPS_ERR || req.cur_qp_state > IBV_QPS_ERR) return -EINVAL;
  backend::QpAttr a;
  uint32_t m = 0;
  if (req.attr_mask & IBV_QP_STATE) m |= backend::kQpAttrState;
  if (req.attr_mask & IBV_QP_CUR_STATE) m |= backend::kQpAttrCurState;
  if (req.attr_mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) m |= backend::kQpAttrEnSqdAsyncNotify;
  if (req.attr_mask & IBV_QP_PKEY_INDEX) m |= backend::kQpAttrPkeyIndex;
  if (req.attr_mask & IBV_QP_PORT) m |= backend::kQpAttrPort;
  if (req.attr_mask & IBV_QP_QKEY) m |= backend::kQpAttrQkey;
  if (req.attr_mask & IBV_QP_RNR_RETRY) m |= backend::kQpAttrRnrRetry;
  if (req.attr_mask & IBV_QP_SQ_PSN) m |= backend::kQpAttrSqPsn;
  a.state = static_cast<backend::QpState>(req.qp_state);
  a.cur_state = static_cast<backend::QpState>(req.cur_qp_state);
  a.pkey_index = req.pkey_index;
  a.port = req.port_num;
  a.qkey = req.qkey;
  a.sq_psn = req.sq_psn;
  a.rnr_retry = req.rnr_retry;
  a.en_sqd_async_notify = req.en_sqd_async_notify != 0;
  rc = it->second->qp->modify(a, m);
  if (rc != 0) return rc;
  if (m & backend::kQpAttrSqPsn) it->second->sq_psn = req.sq_psn;
  if (m & backend::kQpAttrRnrRetry) it->second->rnr_retry = req.rnr_retry;
  return 0;
}

int cmd_destroy_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_qp), sizeof(ib_uverbs_destroy_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_destroy_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  ib_uverbs_destroy_qp_resp r{0};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) return rc;
  destroy_qp_locked(s, ctx, it->second.get());
  ctx->qps.erase(it);
  return 0;
}

}  // namespace uverbs
}  // namespace xpufab
