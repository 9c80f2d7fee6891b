#include "api/core/poll_set.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "api/core/pollable.h"

namespace xpufab::core {
namespace {

class PollSet;

struct PollFid {
  fid_poll poll;  // first: the C handle
  PollSet* self;
};

class PollSet {
 public:
  explicit PollSet(FidRefs* parent) : parent_(parent) {}

  int add(fid* f, uint64_t flags) {
    if (!f) return -FI_EINVAL;
    if (flags) return -FI_EBADFLAGS;
    std::lock_guard<std::mutex> g(mu_);
    for (Pollable* m : members_)
      if (m->pollable_fid() == f) return -FI_EALREADY;
    int rc = refs.acquire();
    if (rc) return rc;
    Pollable* p = nullptr;
    rc = acquire_pollable(f, &p);
    if (rc) {
      refs.release();
      return rc;
    }
    members_.push_back(p);
    return 0;
  }

  int del(fid* f, uint64_t flags) {
    if (!f) return -FI_EINVAL;
    if (flags) return -FI_EBADFLAGS;
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find_if(members_.begin(), members_.end(),
                           [f](Pollable* m) { return m->pollable_fid() == f; });
    if (it == members_.end()) return -FI_ENOENT;
    (*it)->pollable_refs().release();
    members_.erase(it);
    refs.release();
    return 0;
  }

  int poll(void** context, int count) {
    if (!context || count < 0) return -FI_EINVAL;
    // Members hold references taken in add(), so they stay alive while mu_
    // keeps del() out.
    std::lock_guard<std::mutex> g(mu_);
    int n = 0;
    for (Pollable* m : members_) {
      if (n == count) break;
      if (m->has_event()) context[n++] = m->pollable_fid()->context;
    }
    return n;
  }

  int close_set() {
    int rc = refs.try_close();
    if (rc) return rc;
    if (parent_) parent_->release();
    return 0;
  }

  PollFid handle{};
  FidRefs refs;  // one per member

 private:
  FidRefs* parent_;
  std::mutex mu_;
  std::vector<Pollable*> members_;  // each holds a reference; guarded by mu_
};

PollSet* from_fid(const fid* f);

int ps_close(fid* f) {
  PollSet* ps = from_fid(f);
  if (!ps) return -FI_EINVAL;
  int rc = ps->close_set();
  if (rc) return rc;
  delete ps;
  return 0;
}
int ps_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int ps_no_control(fid*, int, void*) { return -FI_ENOSYS; }
int ps_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int ps_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int ps_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

int ps_poll(fid_poll* p, void** context, int count) {
  PollSet* ps = from_fid(p ? &p->fid : nullptr);
  return ps ? ps->poll(context, count) : -FI_EINVAL;
}
int ps_add(fid_poll* p, fid* f, uint64_t flags) {
  PollSet* ps = from_fid(p ? &p->fid : nullptr);
  return ps ? ps->add(f, flags) : -FI_EINVAL;
}
int ps_del(fid_poll* p, fid* f, uint64_t flags) {
  PollSet* ps = from_fid(p ? &p->fid : nullptr);
  return ps ? ps->del(f, flags) : -FI_EINVAL;
}

fi_ops g_poll_fi_ops = {sizeof(fi_ops), ps_close,    ps_no_bind,   ps_no_control,
                        ps_no_ops_open, ps_no_tostr, ps_no_ops_set};
fi_ops_poll g_poll_ops = {sizeof(fi_ops_poll), ps_poll, ps_add, ps_del};

PollSet* from_fid(const fid* f) {
  if (!f || f->fclass != FI_CLASS_POLL || f->ops != &g_poll_fi_ops) return nullptr;
  return reinterpret_cast<const PollFid*>(f)->self;
}

}  // namespace

int poll_open(fid_domain* domain, fi_poll_attr* attr, fid_poll** pollset, FidRefs* parent) {
  if (!domain || !attr || !pollset) return -FI_EINVAL;
  if (attr->flags) return -FI_EBADFLAGS;
  auto* ps = new (std::nothrow) PollSet(parent);
  if (!ps) return -FI_ENOMEM;
  if (parent) {
    int rc = parent->acquire();
    if (rc) {
      delete ps;
      return rc;
    }
  }
  ps->handle.self = ps;
  ps->handle.poll.fid.fclass = FI_CLASS_POLL;
  ps->handle.poll.fid.ops = &g_poll_fi_ops;
  ps->handle.poll.ops = &g_poll_ops;
  *pollset = &ps->handle.poll;
  return 0;
}

}  // namespace xpufab::core
