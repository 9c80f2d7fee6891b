// The interface's device steps in the role UCX gives uct_ib_iface_ops (the v1.6 table: create_cq,
// arm_cq, event_cq, handle_failure, set_ep_failed, create_qp, init/cleanup_res_domain), each one
// a call on the backend interface, so the same transport runs on the emulator and on rdma-core.
#include <unistd.h>

#include <cerrno>

#include "api/backend/backend.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

// The RDMA QP's CQ (its QP has no receive queue).
int create_cq(SrdIface* iface, Dir, uint32_t entries, backend::Cq** cq_p) {
  backend::CqInitAttr a;
  a.entries = entries;
  a.with_event_fd = (iface->dev->attr.device_caps & backend::kCapCqNotifications) != 0;
  int rc = iface->dev->dev->create_cq(a, cq_p);
  // No completion channel here (a device without one): the interface then offers no event fd.
  if (rc != 0 && a.with_event_fd) {
    a.with_event_fd = false;
    rc = iface->dev->dev->create_cq(a, cq_p);
  }
  return rc;
}

// TX: the RDMA QP's CQ; RX: the core's CQ (active messages in, their sends completing).
int arm_cq(SrdIface* iface, Dir dir, int) {
  // EFA has no solicited-only notification: every CQE of an armed CQ wakes the fd.
  backend::Cq* cq = dir == Dir::kTx ? iface->cq : iface->am_cq;
  return cq ? cq->arm() : -EINVAL;
}

// Acknowledges the events the fd counted (an eventfd: one read clears it), as UCX's verbs
// event_cq acknowledges ibv_get_cq_event before re-arming.
void event_cq(SrdIface* iface, Dir dir) {
  backend::Cq* cq = dir == Dir::kTx ? iface->cq : iface->am_cq;
  efa_cq* pcq = dir == Dir::kTx ? &iface->pcq : &iface->am_pcq;
  if (!cq || !pcq) return;
  int fd = cq->event_fd();
  if (fd < 0) return;
  uint64_t n;
  while (read(fd, &n, sizeof(n)) == sizeof(n)) efa_cq_ack_event(pcq);
}

// A failed completion: the endpoint that posted it fails, once.
void handle_failure(SrdIface* iface, Op* op, ucs_status_t status) {
  if (op->ep && !op->ep->failed) iface->ib_ops->set_ep_failed(iface, op->ep, status);
}

void set_ep_failed(SrdIface* iface, SrdEp* ep, ucs_status_t status) { ep_fail(iface, ep, status); }

int create_qp(SrdIface* iface, backend::QpInitAttr* attr, backend::Qp** qp_p) {
  return iface->dev->dev->create_qp(*attr, qp_p);
}

// EFA QPs need no resource (thread) domain; the backend serializes control calls itself.
int init_res_domain(SrdIface*) { return 0; }
void cleanup_res_domain(SrdIface*) {}

}  // namespace

const IbIfaceOps kIbIfaceOps = {
    create_cq, arm_cq, event_cq, handle_failure, set_ep_failed, create_qp, init_res_domain,
    cleanup_res_domain,
};

}  // namespace uct
}  // namespace xpufab
