/*
 * api/core/pollable.h - what poll sets and wait sets need from the objects
 * they watch.
 *
 * fi_poll_add() and a CQ/counter/EQ opened with FI_WAIT_SET hand the core a
 * plain `struct fid *`.  Objects that can be watched (the core's EQs, a
 * provider's CQs and counters) therefore derive from Pollable and register
 * themselves under their fid while open.  Pollable is polymorphic, so an
 * object whose C handle must stay at offset 0 holds it as a member:
 *
 *   struct EfaCq;
 *   struct CqPollable : core::Pollable {
 *     EfaCq* cq;
 *     fid* pollable_fid() override { return &cq->cq.fid; }
 *     FidRefs& pollable_refs() override { return cq->refs; }
 *     bool has_event() override;      // progress, then "anything staged?"
 *     int pollable_fd() override;     // the backend CQ's event fd, or -1
 *   };
 *   open:  core::register_pollable(&cq->pollable);
 *   close: refs.try_close() first (a set holding the CQ makes it -FI_EBUSY),
 *          then core::unregister_pollable(&cq->pollable);
 *   on each new entry the object itself produces: pollable.wake_watchers();
 *
 * A watcher (a wait set) blocks until one of three things happens: a member
 * calls wake_watchers(), a member's pollable_fd() becomes readable, or the
 * timeout expires.  An object whose events appear without any code of its own
 * running (a NIC writing completions) must offer a pollable_fd() that the NIC
 * signals (and keep it armed: a has_event() that answers false is the place
 * to re-arm it); the others call wake_watchers() when they add an event.
 *
 * Thread-safety: every function may be called from any thread.  Sets call
 * has_event() with their own lock held, so it must not add or remove members
 * of a set; calling wake_watchers() from it is fine.
 */
#ifndef XPUFAB_API_CORE_POLLABLE_H_
#define XPUFAB_API_CORE_POLLABLE_H_

#include <rdma/fabric.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "api/core/fid.h"

namespace xpufab::core {

// Something woken when a watched object gains an event.
class Watcher {
 public:
  virtual ~Watcher() = default;
  virtual void wake() = 0;
};

class Pollable {
 public:
  Pollable() = default;
  Pollable(const Pollable&) = delete;
  Pollable& operator=(const Pollable&) = delete;
  virtual ~Pollable() = default;

  // The object's fid; fi_poll reports pollable_fid()->context.
  virtual fid* pollable_fid() = 0;
  // A set that watches the object holds a reference here, so that closing
  // the object fails with -FI_EBUSY until it leaves the set.
  virtual FidRefs& pollable_refs() = 0;
  // True when reading the object would return something (an entry, an
  // error, or for counters a value changed since the last fi_poll).  May
  // drive progress.
  virtual bool has_event() = 0;
  // An fd that becomes readable when the object may have gained an event,
  // or -1 when the object calls wake_watchers() itself.
  virtual int pollable_fd() { return -1; }

  // Wakes every watcher; call after adding an event. Without watchers, a load and no lock.
  void wake_watchers();
  void add_watcher(Watcher* w);
  void remove_watcher(Watcher* w);

 private:
  std::mutex watchers_mu_;
  std::vector<Watcher*> watchers_;
  // watchers_.size(), stored and loaded seq_cst: a waker that adds its event (a seq_cst RMW, or
  // under a lock the watcher's has_event() takes) and then finds no watcher, and a watcher that
  // joins and then looks for events, cannot both miss each other.
  std::atomic<size_t> watching_{0};
};

// Makes `p` findable under p->pollable_fid().  Returns 0, -FI_EINVAL (null
// or no fid) or -FI_EALREADY when that fid is already registered.
int register_pollable(Pollable* p);
// Forgets `p` (no-op if absent).  Call after a successful try_close().
void unregister_pollable(Pollable* p);
// Finds the pollable registered under `f` and takes a reference on it
// (pollable_refs().acquire()).  Returns 0, -FI_EINVAL when `f` is not a
// pollable object, or -FI_EOPBADSTATE when it is closing.  The caller drops
// the reference with (*p)->pollable_refs().release().
int acquire_pollable(const fid* f, Pollable** p);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_POLLABLE_H_
