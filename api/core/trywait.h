/*
 * api/core/trywait.h - fi_trywait for the objects the core owns (EQs, wait
 * sets).
 *
 * fi_trywait is a fabric op, so the provider's op sees every fid the
 * application passes.  It hands the core's fids to trywait_core_fid() and
 * handles its own (CQs, counters) as before:
 *
 *   for (int i = 0; i < count; ++i) {
 *     int rc;
 *     if (core::trywait_core_fid(fids[i], &rc)) { if (rc) return rc; continue; }
 *     ... the provider's own objects ...
 *   }
 *
 * A provider with no waitable objects of its own may point its fabric op at
 * core::trywait directly.
 */
#ifndef XPUFAB_API_CORE_TRYWAIT_H_
#define XPUFAB_API_CORE_TRYWAIT_H_

#include <rdma/fabric.h>

namespace xpufab::core {

// True when `f` is a core EQ or wait set; *rc is then 0 (safe to block),
// -FI_EAGAIN (events are queued) or -FI_EINVAL (an EQ without a wait object).
bool trywait_core_fid(struct fid* f, int* rc);

// fi_trywait over core objects only: -FI_EINVAL for an empty list or a fid
// the core does not own.
int trywait(struct fid_fabric* fabric, struct fid** fids, int count);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_TRYWAIT_H_
