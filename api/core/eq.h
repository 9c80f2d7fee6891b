/*
 * api/core/eq.h - the core's event queues, which every provider's fabric
 * offers as its eq_open op (libfabric keeps EQs in its common code too).
 *
 * Semantics follow fi_eq(3):
 *   - fi_eq_read copies the head event (fi_eq_entry, fi_eq_cm_entry or any
 *     user payload, as written) and returns its size; -FI_EAGAIN when empty,
 *     -FI_EAVAIL when the head is an error, -FI_ETOOSMALL (event kept) when
 *     `len` is below the event's size.  FI_PEEK leaves it queued.
 *   - fi_eq_readerr returns the head error as fi_eq_err_entry.  With
 *     err_data_size > 0 on input (and a fabric of API >= 1.5) err_data is
 *     copied into the caller's buffer, truncated, and err_data_size set to
 *     the bytes copied; otherwise err_data points to a buffer the EQ owns
 *     until the next read.  -FI_EAGAIN when the head is not an error.
 *   - fi_eq_sread blocks up to `timeout` ms (negative: forever); -FI_EAGAIN
 *     on timeout; -FI_EINVAL for FI_WAIT_NONE and FI_WAIT_SET EQs.
 *   - fi_eq_write queues a copy of `buf` (`len` bytes) and returns `len`;
 *     with kEqWriteError in `flags`, `buf` is a fi_eq_err_entry (and its
 *     err_data is copied) that goes to the error side.  -FI_EAGAIN when
 *     attr->size events are already queued.
 *   - Events and errors keep their relative order: an error behind a normal
 *     event is reported (-FI_EAVAIL) once that event has been read.
 *   - FI_WAIT_FD and FI_WAIT_UNSPEC give an eventfd (fi_control FI_GETWAIT)
 *     that poll() reports readable exactly while an event or error is queued.
 *     FI_WAIT_SET attaches the EQ to attr->wait_set.
 *   - fi_close returns -FI_EBUSY while bound objects (eq_bind_acquire), poll
 *     sets or wait sets hold the EQ.
 *
 * Provider wiring (a few lines each in the provider):
 *   fabric eq_open op:     return core::eq_open(fabric, attr, eq, context, &fab->refs);
 *   fi_ep_bind / fi_av_bind with an EQ fid:
 *                          int rc = core::eq_bind_acquire(bfid); if (rc) return rc;
 *                          obj->eq = reinterpret_cast<fid_eq*>(bfid);
 *   the bound object's close: core::eq_bind_release(&obj->eq->fid);
 *   AV with FI_EVENT:      fi_eq_entry e{&av->fid, context, count};
 *                          core::eq_post(av->eq, FI_AV_COMPLETE, &e, sizeof(e));
 *   an asynchronous error: core::eq_post_error(eq, &err_entry);
 *   fi_trywait:            see trywait.h.
 *
 * Thread-safety: every operation may be called from any thread.
 */
#ifndef XPUFAB_API_CORE_EQ_H_
#define XPUFAB_API_CORE_EQ_H_

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/types.h>

#include <cstdint>

#include "api/core/fid.h"

namespace xpufab::core {

// fi_eq_write flag: `buf` is a struct fi_eq_err_entry for the error side.
// libfabric has no public name for it; its common code uses this bit
// (UTIL_FLAG_ERROR) for the same purpose, so providers written against it
// behave the same here.
inline constexpr uint64_t kEqWriteError = 1ULL << 60;

// Default number of queued events when attr->size is 0.
inline constexpr size_t kEqDefaultSize = 1024;

// fi_eq_open for any provider.  `parent` (may be null) is the fabric's
// reference count, held until the EQ closes.  Returns 0, -FI_EINVAL (null
// arguments, FI_WAIT_SET without a core wait set), -FI_EBADFLAGS (flags
// other than FI_WRITE/FI_AFFINITY), -FI_ENOSYS (FI_WAIT_MUTEX_COND,
// FI_WAIT_YIELD, FI_WAIT_POLLFD) or -FI_ENOMEM.
int eq_open(struct fid_fabric* fabric, struct fi_eq_attr* attr, struct fid_eq** eq,
            void* context, FidRefs* parent);

// True when `f` is an EQ opened by eq_open().
bool is_eq(const struct fid* f);

// A provider object binds to an EQ: takes a reference so that closing the EQ
// fails with -FI_EBUSY until eq_bind_release().  Returns 0, -FI_EINVAL when
// `f` is not a core EQ, -FI_EOPBADSTATE when it is closing.
int eq_bind_acquire(struct fid* f);
void eq_bind_release(struct fid* f);

// Provider events.  Unlike fi_eq_write they are never refused for a full
// queue (an asynchronous event cannot be retried).  Return the bytes queued
// or -FI_EINVAL / -FI_ENOMEM.
ssize_t eq_post(struct fid_eq* eq, uint32_t event, const void* buf, size_t len);
ssize_t eq_post_error(struct fid_eq* eq, const struct fi_eq_err_entry* err);

// fi_trywait for an EQ: 0 when nothing is queued, -FI_EAGAIN when something
// is, -FI_EINVAL when `f` is not a core EQ or has FI_WAIT_NONE.
int eq_trywait(struct fid* f);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_EQ_H_
