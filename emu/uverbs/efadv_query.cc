// The v59 efadv queries (efadv_query_qp_wqs, efadv_query_cq) that Debian's older libefa lacks,
// answered from what this library knows of each queue's rings and doorbells. The ibv_qp/ibv_cq
// name the context by its command fd and the object by the handle CREATE_* returned.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "emu/uverbs/server_state.h"
#include "emu/uverbs/uverbs_server.h"

namespace xpufab {
namespace uverbs {

int query_qp_wqs(const void* ibv_qp_p, efadv_compat_wq_attr* sq, efadv_compat_wq_attr* rq,
                 uint32_t inlen) {
  if (ibv_qp_p == nullptr || sq == nullptr || rq == nullptr) return EINVAL;
  if (inlen < EFADV_COMPAT_WQ_ATTR_MIN_INLEN) return EINVAL;
  const ibv_qp* qp = static_cast<const ibv_qp*>(ibv_qp_p);
  if (qp->context == nullptr) return EINVAL;
  State& s = st();
  ServerLock lock(s);
  auto it = s.ctxs.find(qp->context->cmd_fd);
  if (it == s.ctxs.end()) return EOPNOTSUPP;  // not a device this library serves
  auto q = it->second->qps.find(qp->handle);
  if (q == it->second->qps.end()) return EINVAL;
  const QpObj& o = *q->second;
  efadv_compat_wq_attr a{};
  a.buffer = o.sq.buffer;
  a.entry_size = o.sq.entry_size;
  a.num_entries = o.sq.num_entries;
  a.doorbell = o.sq.doorbell;
  a.max_batch = o.sq.max_batch;
  efadv_compat_wq_attr b{};
  b.buffer = o.rq.buffer;
  b.entry_size = o.rq.entry_size;
  b.num_entries = o.rq.num_entries;
  b.doorbell = o.rq.doorbell;
  b.max_batch = o.rq.max_batch;
  size_t n = std::min<size_t>(inlen, sizeof(a));
  std::memset(sq, 0, inlen);
  std::memset(rq, 0, inlen);
  std::memcpy(sq, &a, n);
  std::memcpy(rq, &b, n);
  return 0;
}

int query_cq(const void* ibv_cq_p, efadv_compat_cq_attr* attr, uint32_t inlen) {
  if (ibv_cq_p == nullptr || attr == nullptr) return EINVAL;
  if (inlen < offsetof(efadv_compat_cq_attr, doorbell)) return EINVAL;
  const ibv_cq* cq = static_cast<const ibv_cq*>(ibv_cq_p);
  if (cq->context == nullptr) return EINVAL;
  State& s = st();
  ServerLock lock(s);
  auto it = s.ctxs.find(cq->context->cmd_fd);
  if (it == s.ctxs.end()) return EOPNOTSUPP;
  auto c = it->second->cqs.find(cq->handle);
  if (c == it->second->cqs.end()) return EINVAL;
  const CqObj& o = *c->second;
  // The NIC's native ring (32-byte CQEs) even when libefa polls a 16-byte view of it: a v59+
  // libefa would have created the CQ with 32-byte entries, and the same indices and phases
  // hold in both views.
  efadv_compat_cq_attr a{};
  a.buffer = o.emu_ring;
  a.entry_size = 32;
  a.num_entries = o.entries;
  a.doorbell = o.db;
  size_t n = std::min<size_t>(inlen, sizeof(a));
  std::memset(attr, 0, n);
  std::memcpy(attr, &a, n);
  return 0;
}

}  // namespace uverbs
}  // namespace xpufab
