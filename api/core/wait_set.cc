#include "api/core/wait_set.h"

#include <rdma/fi_errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "api/core/event_fd.h"
#include "api/core/log.h"

namespace xpufab::core {
namespace {

class WaitSet;

struct WaitFid {
  fid_wait wait;  // first: the C handle
  WaitSet* self;
};

class WaitSet : public Watcher {
 public:
  explicit WaitSet(FidRefs* parent) : parent_(parent) {}
  ~WaitSet() override {
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  int init();
  void wake() override {
    std::lock_guard<std::mutex> g(mu_);
    signal_.set();
  }
  int attach(Pollable* m);
  void detach(Pollable* m);
  int wait(int timeout_ms);
  int trywait();
  int close_set();
  int epoll_fd() const { return epoll_fd_; }

  WaitFid handle{};
  FidRefs refs;  // one per attached member

 private:
  // Clears the self-signal, then asks every member; true when one has an
  // event.  has_event() runs without mu_ held (it may drive progress).
  bool any_member_event();

  FidRefs* parent_;
  // Lock order: members_mu_, then a member's watcher lock, then mu_.
  // members_mu_ is held across has_event() so that a member cannot detach
  // (and be freed) while it is being asked.
  std::mutex members_mu_;
  std::vector<Pollable*> members_;  // guarded by members_mu_
  std::mutex mu_;
  EventFd signal_;  // guarded by mu_
  int epoll_fd_ = -1;
};

int WaitSet::init() {
  int rc = signal_.open();
  if (rc) return rc;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return -errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, signal_.fd(), &ev) < 0) return -errno;
  return 0;
}

int WaitSet::attach(Pollable* m) {
  if (!m) return -FI_EINVAL;
  std::lock_guard<std::mutex> g(members_mu_);
  if (std::find(members_.begin(), members_.end(), m) != members_.end()) return -FI_EALREADY;
  int rc = refs.acquire();
  if (rc) return rc;
  const int mfd = m->pollable_fd();
  if (mfd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, mfd, &ev) < 0) {
      rc = -errno;
      refs.release();
      return rc;
    }
  }
  members_.push_back(m);
  m->add_watcher(this);
  // The member may already hold events that will never wake us again.
  wake();
  return 0;
}

void WaitSet::detach(Pollable* m) {
  std::lock_guard<std::mutex> g(members_mu_);
  auto it = std::find(members_.begin(), members_.end(), m);
  if (it == members_.end()) return;
  m->remove_watcher(this);
  const int mfd = m->pollable_fd();
  if (mfd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, mfd, nullptr);
  members_.erase(it);
  refs.release();
}

bool WaitSet::any_member_event() {
  {
    // Cleared before asking: an event added after this point sets it again.
    std::lock_guard<std::mutex> g(mu_);
    signal_.clear();
  }
  std::lock_guard<std::mutex> g(members_mu_);
  for (Pollable* m : members_)
    if (m->has_event()) return true;
  return false;
}

int WaitSet::wait(int timeout_ms) {
  if (any_member_event()) return 0;
  const int fds[] = {epoll_fd_};
  int rc = wait_fds_readable(fds, 1, timeout_ms);
  if (rc < 0) return rc;
  return rc > 0 ? 0 : -FI_ETIMEDOUT;
}

int WaitSet::trywait() { return any_member_event() ? -FI_EAGAIN : 0; }

int WaitSet::close_set() {
  int rc = refs.try_close();
  if (rc) return rc;
  if (parent_) parent_->release();
  return 0;
}

WaitSet* from_fid(const fid* f);

int ws_close(fid* f) {
  WaitSet* ws = from_fid(f);
  if (!ws) return -FI_EINVAL;
  int rc = ws->close_set();
  if (rc) return rc;
  delete ws;
  return 0;
}

int ws_control(fid* f, int command, void* arg) {
  WaitSet* ws = from_fid(f);
  if (!ws) return -FI_EINVAL;
  switch (command) {
    case FI_GETWAIT:
      if (!arg) return -FI_EINVAL;
      *static_cast<int*>(arg) = ws->epoll_fd();
      return 0;
    case FI_GETWAITOBJ:
      if (!arg) return -FI_EINVAL;
      *static_cast<fi_wait_obj*>(arg) = FI_WAIT_FD;
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

int ws_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int ws_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int ws_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int ws_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

int ws_wait(fid_wait* w, int timeout) {
  WaitSet* ws = from_fid(w ? &w->fid : nullptr);
  if (!ws) return -FI_EINVAL;
  return ws->wait(timeout);
}

fi_ops g_wait_fi_ops = {sizeof(fi_ops), ws_close,     ws_no_bind,   ws_control,
                        ws_no_ops_open, ws_no_tostr, ws_no_ops_set};
fi_ops_wait g_wait_ops = {sizeof(fi_ops_wait), ws_wait};

WaitSet* from_fid(const fid* f) {
  if (!f || f->fclass != FI_CLASS_WAIT || f->ops != &g_wait_fi_ops) return nullptr;
  return reinterpret_cast<const WaitFid*>(f)->self;
}

}  // namespace

int wait_open(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** waitset, FidRefs* parent) {
  if (!fabric || !attr || !waitset) return -FI_EINVAL;
  if (attr->flags) return -FI_EBADFLAGS;
  if (attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD) {
    XPUFAB_INFO("core", LogSubsys::kEq, "wait set: wait object %d not supported",
                static_cast<int>(attr->wait_obj));
    return -FI_ENOSYS;
  }
  auto* ws = new (std::nothrow) WaitSet(parent);
  if (!ws) return -FI_ENOMEM;
  int rc = ws->init();
  if (rc == 0 && parent) rc = parent->acquire();
  if (rc) {
    delete ws;
    return rc;
  }
  ws->handle.self = ws;
  ws->handle.wait.fid.fclass = FI_CLASS_WAIT;
  ws->handle.wait.fid.context = nullptr;
  ws->handle.wait.fid.ops = &g_wait_fi_ops;
  ws->handle.wait.ops = &g_wait_ops;
  *waitset = &ws->handle.wait;
  return 0;
}

int wait_set_attach(fid_wait* waitset, Pollable* member) {
  WaitSet* ws = from_fid(waitset ? &waitset->fid : nullptr);
  if (!ws) return -FI_EINVAL;
  return ws->attach(member);
}

void wait_set_detach(fid_wait* waitset, Pollable* member) {
  WaitSet* ws = from_fid(waitset ? &waitset->fid : nullptr);
  if (ws) ws->detach(member);
}

int wait_set_trywait(fid* f) {
  WaitSet* ws = from_fid(f);
  if (!ws) return -FI_EINVAL;
  return ws->trywait();
}

bool is_wait_set(const fid* f) { return from_fid(f) != nullptr; }

}  // namespace xpufab::core
