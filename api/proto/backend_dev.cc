#include "api/proto/backend_dev.h"

namespace xpufab::proto {

int dev_of(backend::Qp* qp, backend::Cq* cq, const backend::DeviceAttr& at, bool cq_with_sgid,
           proto_dev* d) {
  backend::WqAttr sq{}, rq{};
  backend::CqAttr ca{};
  int rc = qp->query_wqs(&sq, &rq);
  if (rc == 0) rc = cq->query(&ca);
  if (rc) return rc;
  *d = proto_dev{};
  d->sq = {sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  d->rq = {rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
  d->cq = {ca.buffer, ca.entry_size, ca.num_entries, ca.doorbell};
  d->max_sq_sge = at.max_sq_sge;
  d->max_rq_sge = 1;
  d->mtu = at.mtu;
  d->max_rdma_size = at.max_rdma_size;
  d->caps = ((at.device_caps & backend::kCapRdmaRead) ? PROTO_DEV_RDMA_READ : 0u) |
            ((at.device_caps & backend::kCapRdmaWrite) ? PROTO_DEV_RDMA_WRITE : 0u) |
            (cq_with_sgid ? PROTO_DEV_CQ_SGID : 0u);
  return 0;
}

}  // namespace xpufab::proto
