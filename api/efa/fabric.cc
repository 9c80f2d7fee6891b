// The fabric "efa-direct": opens domains, the core's EQs and wait sets, and implements
// fi_trywait over the host CQs (the core answers for its own EQs and wait sets).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "api/core/eq.h"
#include "api/core/trywait.h"
#include "api/core/wait_set.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

namespace {

int fabric_close(fid* f) {
  EfaFabric* fab = to_fabric(f);
  if (!fab) return -FI_EINVAL;
  int rc = fab->refs.try_close();
  if (rc) return rc;
  delete fab;
  return 0;
}

int fabric_no_pep(fid_fabric*, fi_info*, fid_pep**, void*) { return -FI_ENOSYS; }
int fabric_eq_open(fid_fabric* f, fi_eq_attr* attr, fid_eq** eq, void* context) {
  EfaFabric* fab = to_fabric(f);
  if (!fab) return -FI_EINVAL;
  return core::eq_open(f, attr, eq, context, &fab->refs);
}
int fabric_wait_open(fid_fabric* f, fi_wait_attr* attr, fid_wait** ws) {
  EfaFabric* fab = to_fabric(f);
  if (!fab) return -FI_EINVAL;
  return core::wait_open(f, attr, ws, &fab->refs);
}
// fi_trywait(3): arms each CQ's event fd (FI_GETWAIT) and returns 0 when blocking on it is
// safe, -FI_EAGAIN when completions are already there to read.
int fabric_trywait(fid_fabric*, fid** fids, int count) {
  if (!fids || count <= 0) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    int core_rc;
    if (core::trywait_core_fid(fids[i], &core_rc)) {
      if (core_rc) return core_rc;
      continue;
    }
    EfaCq* cq = to_cq(fids[i]);
    if (!cq) return -FI_EINVAL;
    if (cq->is_xpu() || cq->wait_obj != FI_WAIT_FD) return -FI_EINVAL;
    const int fd = cq->bcq->event_fd();
    if (fd >= 0) {
      // Acknowledge an earlier event so that the fd reports only the next one.
      pollfd p{fd, POLLIN, 0};
      uint64_t v;
      if (poll(&p, 1, 0) == 1 && read(fd, &v, sizeof(v)) < 0) {
        EFA_INFO(kCq, "event fd read: %d", errno);
      }
    }
    int rc = cq->bcq->arm();
    if (rc) return to_fi_err(rc);
    cq->dom->progress();  // a CQE written before arming would signal nothing
    std::lock_guard<Lock> g(cq->lock);
    if (!cq->staged.empty()) return -FI_EAGAIN;
  }
  return 0;
}
int fabric_domain2(fid_fabric* f, fi_info* info, fid_domain** d, uint64_t flags, void* ctx) {
  if (flags) return -FI_EBADFLAGS;
  return domain_open(f, info, d, ctx);
}

fi_ops g_fabric_fi_ops = {sizeof(fi_ops), fabric_close, fi_no_bind, fi_no_control,
                          fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_fabric g_fabric_ops = {sizeof(fi_ops_fabric), domain_open, fabric_no_pep, fabric_eq_open,
                              fabric_wait_open, fabric_trywait, fabric_domain2};

}  // namespace

int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context) {
  if (!attr || !fabric_p) return -FI_EINVAL;
  if (attr->name && strcmp(attr->name, kFabricName) != 0 &&
      strcmp(attr->name, kDgramFabricName) != 0)
    return -FI_ENODATA;
  auto* fab = new (std::nothrow) EfaFabric();
  if (!fab) return -FI_ENOMEM;
  fab->fabric.fid.fclass = FI_CLASS_FABRIC;
  fab->fabric.fid.context = context;
  fab->fabric.fid.ops = &g_fabric_fi_ops;
  fab->fabric.ops = &g_fabric_ops;
  fab->fabric.api_version = FI_VERSION(2, 7);
  *fabric_p = &fab->fabric;
  return 0;
}

}  // namespace xpufab::efa
