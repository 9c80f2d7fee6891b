/*
 * api/core/poll_set.h - the core's poll sets (fi_poll_open, fi_poll_add,
 * fi_poll_del, fi_poll).
 *
 * A poll set holds Pollable objects (the core's EQs, a provider's CQs and
 * counters; see pollable.h).  fi_poll() asks each member has_event() in the
 * order they were added and writes the fid contexts of those that answer
 * true, at most `count` of them; it returns how many it wrote (0: none).
 *
 * Each member holds a reference on the set and the set holds one on each
 * member: fi_close() of either fails with -FI_EBUSY until fi_poll_del().
 *
 * Provider wiring: the domain's poll_open op calls core::poll_open() with the
 * domain's reference count.
 *
 * Thread-safety: all operations may be called concurrently.
 */
#ifndef XPUFAB_API_CORE_POLL_SET_H_
#define XPUFAB_API_CORE_POLL_SET_H_

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include "api/core/fid.h"

namespace xpufab::core {

// fi_poll_open for any provider.  `parent` (may be null) is the domain's
// reference count, held until the set closes.  Returns 0, -FI_EINVAL (null
// arguments), -FI_EBADFLAGS (attr->flags set) or -FI_ENOMEM.
int poll_open(struct fid_domain* domain, struct fi_poll_attr* attr, struct fid_poll** pollset,
              FidRefs* parent);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_POLL_SET_H_
