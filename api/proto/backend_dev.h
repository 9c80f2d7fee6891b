// The protocol core's view of a backend endpoint (proto_dev): the SRD QP's queues, the one CQ it
// uses for both directions, and the device's limits, for host consumers that build the QP with
// one receive SGE (the provider's efa fabric, the protocol tests' harness).
#ifndef XPUFAB_API_PROTO_BACKEND_DEV_H_
#define XPUFAB_API_PROTO_BACKEND_DEV_H_

#include "api/backend/backend.h"
#include "api/proto/ep.h"

namespace xpufab::proto {

// Fills *d from the queues of `qp` and `cq` and from `at`; `cq_with_sgid` as the CQ was created.
// 0, or the query's error.
int dev_of(backend::Qp* qp, backend::Cq* cq, const backend::DeviceAttr& at, bool cq_with_sgid,
           proto_dev* d);

}  // namespace xpufab::proto

#endif  // XPUFAB_API_PROTO_BACKEND_DEV_H_
