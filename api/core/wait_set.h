/*
 * api/core/wait_set.h - the core's wait sets (fi_wait_open, fi_wait).
 *
 * A wait set is one fd (FI_WAIT_UNSPEC and FI_WAIT_FD both get an epoll fd)
 * that becomes readable when one of its members may have an event: members
 * either call Pollable::wake_watchers() (which signals the set's own
 * eventfd, inside the epoll set) or offer a pollable_fd() that is added to
 * the epoll set.  fi_wait() returns 0 as soon as a member has an event or
 * the fd is readable (false positives are allowed, as in libfabric), and
 * -FI_ETIMEDOUT when `timeout` milliseconds pass first (negative: forever).
 *
 * Provider wiring: the fabric's wait_open op calls core::wait_open(); a CQ or
 * counter opened with wait_obj FI_WAIT_SET calls wait_set_attach() with its
 * attr->wait_set and wait_set_detach() when it closes.  fi_close() of the
 * set fails with -FI_EBUSY while members are attached.
 *
 * Thread-safety: all operations may be called concurrently.
 */
#ifndef XPUFAB_API_CORE_WAIT_SET_H_
#define XPUFAB_API_CORE_WAIT_SET_H_

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include "api/core/fid.h"
#include "api/core/pollable.h"

namespace xpufab::core {

// fi_wait_open for any provider.  `parent` (may be null) is the fabric's
// reference count: the set holds a reference until it is closed.  Returns 0,
// -FI_EINVAL (null arguments), -FI_EBADFLAGS (attr->flags), -FI_ENOSYS (a
// wait object other than FI_WAIT_UNSPEC/FI_WAIT_FD) or -FI_ENOMEM.
int wait_open(struct fid_fabric* fabric, struct fi_wait_attr* attr,
              struct fid_wait** waitset, FidRefs* parent);

// Makes `member` a member of `waitset`.  Returns 0, -FI_EINVAL when
// `waitset` is not a core wait set, -FI_EOPBADSTATE when it is closing, or
// -FI_EALREADY when `member` is already in it.
int wait_set_attach(struct fid_wait* waitset, Pollable* member);
// Undoes wait_set_attach (no-op if `member` is not in the set).
void wait_set_detach(struct fid_wait* waitset, Pollable* member);

// fi_trywait for a wait set: 0 when no member has an event (the set's fd is
// then unreadable until one does), -FI_EAGAIN otherwise, -FI_EINVAL when
// `f` is not a core wait set.
int wait_set_trywait(struct fid* f);

// True when `f` is a wait set opened by wait_open().
bool is_wait_set(const struct fid* f);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_WAIT_SET_H_
