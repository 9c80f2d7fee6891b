/*
 * api/core/no_ops.h - ops tables whose every operation fails with
 * -FI_ENOSYS, for providers that point an object's op group at a table
 * instead of leaving it NULL (libfabric's fi_no_* convention).  The public
 * wrappers of <rdma/fi_collective.h> also return -FI_ENOSYS for a NULL
 * table, so either choice makes unsupported calls fail cleanly.
 */
#ifndef XPUFAB_API_CORE_NO_OPS_H_
#define XPUFAB_API_CORE_NO_OPS_H_

#include <rdma/fi_collective.h>

namespace xpufab::core {

// For fid_ep.collective of endpoints without collectives.
struct fi_ops_collective* no_collective_ops();
// For fid_av_set.ops of AV sets that support no set operations.
struct fi_ops_av_set* no_av_set_ops();

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_NO_OPS_H_
