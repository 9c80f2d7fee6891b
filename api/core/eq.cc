#include "api/core/eq.h"

#include <rdma/fi_errno.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <vector>

#include "api/core/event_fd.h"
#include "api/core/log.h"
#include "api/core/pollable.h"
#include "api/core/wait_set.h"

namespace xpufab::core {
namespace {

class Eq;

struct EqFid {
  fid_eq eq;  // first: the C handle
  Eq* self;
};

struct Event {
  uint32_t event = 0;
  bool is_error = false;
  std::vector<uint8_t> bytes;     // a normal event's payload, as written
  fi_eq_err_entry err{};          // an error; err.err_data is not used
  std::vector<uint8_t> err_data;  // the error's err_data, copied
};

class Eq : public Pollable {
 public:
  Eq(FidRefs* parent, fi_wait_obj wait_obj, fid_wait* wait_set, size_t capacity,
     uint32_t api_version)
      : parent_(parent),
        wait_obj_(wait_obj),
        wait_set_(wait_set),
        capacity_(capacity),
        api_version_(api_version) {}

  int init() { return wait_obj_ == FI_WAIT_FD ? fd_.open() : 0; }

  fid* pollable_fid() override { return &handle.eq.fid; }
  FidRefs& pollable_refs() override { return refs; }
  bool has_event() override {
    std::lock_guard<std::mutex> g(mu_);
    return !queue_.empty();
  }

  ssize_t read(uint32_t* event, void* buf, size_t len, uint64_t flags);
  ssize_t readerr(fi_eq_err_entry* buf, uint64_t flags);
  ssize_t sread(uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags);
  ssize_t push(Event&& ev, bool bounded);
  int control(int command, void* arg);
  int trywait();
  int close_eq();
  fi_wait_obj wait_obj() const { return wait_obj_; }
  fid_wait* wait_set() const { return wait_set_; }

  EqFid handle{};
  FidRefs refs;  // bound objects, poll sets, wait sets

 private:
  // Both with mu_ held.
  ssize_t read_locked(uint32_t* event, void* buf, size_t len, uint64_t flags);
  void pop_locked();

  FidRefs* parent_;
  const fi_wait_obj wait_obj_;  // FI_WAIT_UNSPEC is resolved to FI_WAIT_FD
  fid_wait* const wait_set_;
  const size_t capacity_;
  const uint32_t api_version_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> queue_;              // guarded by mu_
  std::vector<uint8_t> saved_err_data_;  // what readerr last lent out; guarded by mu_
  EventFd fd_;                           // readable while queue_ is not empty
};

ssize_t Eq::read_locked(uint32_t* event, void* buf, size_t len, uint64_t flags) {
  if (queue_.empty()) return -FI_EAGAIN;
  const Event& head = queue_.front();
  if (head.is_error) return -FI_EAVAIL;
  const size_t size = head.bytes.size();
  if (len < size) return -FI_ETOOSMALL;
  if (size) memcpy(buf, head.bytes.data(), size);
  *event = head.event;
  if (!(flags & FI_PEEK)) pop_locked();
  return static_cast<ssize_t>(size);
}

void Eq::pop_locked() {
  queue_.pop_front();
  if (queue_.empty()) fd_.clear();
}

ssize_t Eq::read(uint32_t* event, void* buf, size_t len, uint64_t flags) {
  if (!event || (!buf && len)) return -FI_EINVAL;
  if (flags & ~FI_PEEK) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> g(mu_);
  return read_locked(event, buf, len, flags);
}

ssize_t Eq::sread(uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags) {
  if (!event || (!buf && len)) return -FI_EINVAL;
  if (flags & ~FI_PEEK) return -FI_EBADFLAGS;
  // fi_eq(3): sread is invalid on EQs without a wait object of their own.
  if (wait_obj_ == FI_WAIT_NONE || wait_obj_ == FI_WAIT_SET) return -FI_EINVAL;
  std::unique_lock<std::mutex> g(mu_);
  auto ready = [this] { return !queue_.empty(); };
  if (timeout < 0) {
    cv_.wait(g, ready);
  } else if (!cv_.wait_for(g, std::chrono::milliseconds(timeout), ready)) {
    return -FI_EAGAIN;
  }
  return read_locked(event, buf, len, flags);
}

ssize_t Eq::readerr(fi_eq_err_entry* buf, uint64_t flags) {
  if (!buf) return -FI_EINVAL;
  if (flags & ~FI_PEEK) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> g(mu_);
  if (queue_.empty() || !queue_.front().is_error) return -FI_EAGAIN;
  Event& head = queue_.front();
  void* const user_data = buf->err_data;
  const size_t user_size = buf->err_data_size;
  *buf = head.err;
  if (api_version_ >= FI_VERSION(1, 5) && user_data && user_size) {
    const size_t n = user_size < head.err_data.size() ? user_size : head.err_data.size();
    if (n) memcpy(user_data, head.err_data.data(), n);
    buf->err_data = user_data;
    buf->err_data_size = n;
  } else if (head.err_data.empty()) {
    buf->err_data = nullptr;
    buf->err_data_size = 0;
  } else if (flags & FI_PEEK) {
    // Lent from the queued entry itself: valid until the next read.
    buf->err_data = head.err_data.data();
    buf->err_data_size = head.err_data.size();
  } else {
    saved_err_data_ = std::move(head.err_data);
    buf->err_data = saved_err_data_.data();
    buf->err_data_size = saved_err_data_.size();
  }
  if (!(flags & FI_PEEK)) pop_locked();
  return static_cast<ssize_t>(sizeof(fi_eq_err_entry));
}

ssize_t Eq::push(Event&& ev, bool bounded) {
  const ssize_t size = static_cast<ssize_t>(ev.is_error ? sizeof(fi_eq_err_entry)
                                                        : ev.bytes.size());
  {
    std::lock_guard<std::mutex> g(mu_);
    if (bounded && queue_.size() >= capacity_) return -FI_EAGAIN;
    queue_.push_back(std::move(ev));
    fd_.set();
  }
  cv_.notify_all();
  wake_watchers();
  return size;
}

int Eq::control(int command, void* arg) {
  switch (command) {
    case FI_GETWAIT:
      if (!arg) return -FI_EINVAL;
      if (wait_obj_ == FI_WAIT_FD) {
        *static_cast<int*>(arg) = fd_.fd();
        return 0;
      }
      if (wait_obj_ == FI_WAIT_SET) return fi_control(&wait_set_->fid, FI_GETWAIT, arg);
      return -FI_ENODATA;
    case FI_GETWAITOBJ:
      if (!arg) return -FI_EINVAL;
      *static_cast<fi_wait_obj*>(arg) = wait_obj_;
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

int Eq::trywait() {
  if (wait_obj_ == FI_WAIT_NONE) return -FI_EINVAL;
  return has_event() ? -FI_EAGAIN : 0;
}

int Eq::close_eq() {
  int rc = refs.try_close();
  if (rc) return rc;
  unregister_pollable(this);
  if (wait_set_) wait_set_detach(wait_set_, this);
  if (parent_) parent_->release();
  return 0;
}

Eq* from_fid(const fid* f);

Eq* from_eq(fid_eq* e) { return from_fid(e ? &e->fid : nullptr); }

int eq_close(fid* f) {
  Eq* eq = from_fid(f);
  if (!eq) return -FI_EINVAL;
  int rc = eq->close_eq();
  if (rc) return rc;
  delete eq;
  return 0;
}
int eq_control(fid* f, int command, void* arg) {
  Eq* eq = from_fid(f);
  return eq ? eq->control(command, arg) : -FI_EINVAL;
}
int eq_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int eq_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int eq_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int eq_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

ssize_t eq_read(fid_eq* e, uint32_t* event, void* buf, size_t len, uint64_t flags) {
  Eq* eq = from_eq(e);
  return eq ? eq->read(event, buf, len, flags) : -FI_EINVAL;
}
ssize_t eq_readerr(fid_eq* e, fi_eq_err_entry* buf, uint64_t flags) {
  Eq* eq = from_eq(e);
  return eq ? eq->readerr(buf, flags) : -FI_EINVAL;
}
ssize_t eq_sread(fid_eq* e, uint32_t* event, void* buf, size_t len, int timeout,
                 uint64_t flags) {
  Eq* eq = from_eq(e);
  return eq ? eq->sread(event, buf, len, timeout, flags) : -FI_EINVAL;
}

// Builds an error event from `err`, copying its err_data.
Event error_event(const fi_eq_err_entry* err) {
  Event ev;
  ev.is_error = true;
  ev.err = *err;
  ev.err.err_data = nullptr;
  ev.err.err_data_size = 0;
  if (err->err_data && err->err_data_size) {
    const auto* p = static_cast<const uint8_t*>(err->err_data);
    ev.err_data.assign(p, p + err->err_data_size);
  }
  return ev;
}

ssize_t eq_write(fid_eq* e, uint32_t event, const void* buf, size_t len, uint64_t flags) {
  Eq* eq = from_eq(e);
  if (!eq || (!buf && len)) return -FI_EINVAL;
  if (flags & ~kEqWriteError) return -FI_EBADFLAGS;
  try {
    if (flags & kEqWriteError) {
      if (len != sizeof(fi_eq_err_entry)) return -FI_EINVAL;
      Event ev = error_event(static_cast<const fi_eq_err_entry*>(buf));
      ev.event = event;
      ssize_t rc = eq->push(std::move(ev), true);
      return rc < 0 ? rc : static_cast<ssize_t>(len);
    }
    Event ev;
    ev.event = event;
    const auto* p = static_cast<const uint8_t*>(buf);
    if (len) ev.bytes.assign(p, p + len);
    return eq->push(std::move(ev), true);
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
}

const char* eq_strerror(fid_eq*, int prov_errno, const void*, char* buf, size_t len) {
  const char* text = fi_strerror(prov_errno);
  if (!buf || !len) return text;
  snprintf(buf, len, "%s", text);
  return buf;
}

fi_ops g_eq_fi_ops = {sizeof(fi_ops), eq_close,    eq_no_bind,   eq_control,
                      eq_no_ops_open, eq_no_tostr, eq_no_ops_set};
fi_ops_eq g_eq_ops = {sizeof(fi_ops_eq), eq_read,  eq_readerr,
                      eq_write,          eq_sread, eq_strerror};

Eq* from_fid(const fid* f) {
  if (!f || f->fclass != FI_CLASS_EQ || f->ops != &g_eq_fi_ops) return nullptr;
  return reinterpret_cast<const EqFid*>(f)->self;
}

}  // namespace

int eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq_p, void* context,
            FidRefs* parent) {
  if (!fabric || !attr || !eq_p) return -FI_EINVAL;
  if (attr->flags & ~(FI_WRITE | FI_AFFINITY)) return -FI_EBADFLAGS;
  fi_wait_obj wait_obj = attr->wait_obj;
  fid_wait* wait_set = nullptr;
  switch (wait_obj) {
    case FI_WAIT_NONE:
    case FI_WAIT_FD:
      break;
    case FI_WAIT_UNSPEC:
      wait_obj = FI_WAIT_FD;
      break;
    case FI_WAIT_SET:
      if (!is_wait_set(attr->wait_set ? &attr->wait_set->fid : nullptr)) return -FI_EINVAL;
      wait_set = attr->wait_set;
      break;
    default:
      XPUFAB_INFO("core", LogSubsys::kEq, "EQ wait object %d not supported",
                  static_cast<int>(wait_obj));
      return -FI_ENOSYS;
  }
  const size_t capacity = attr->size ? attr->size : kEqDefaultSize;
  auto* eq = new (std::nothrow) Eq(parent, wait_obj, wait_set, capacity, fabric->api_version);
  if (!eq) return -FI_ENOMEM;
  eq->handle.self = eq;
  eq->handle.eq.fid.fclass = FI_CLASS_EQ;
  eq->handle.eq.fid.context = context;
  eq->handle.eq.fid.ops = &g_eq_fi_ops;
  eq->handle.eq.ops = &g_eq_ops;
  int rc = eq->init();
  if (rc) {
    delete eq;
    return rc;
  }
  if (parent && (rc = parent->acquire()) != 0) {
    delete eq;
    return rc;
  }
  if (wait_set && (rc = wait_set_attach(wait_set, eq)) != 0) {
    if (parent) parent->release();
    delete eq;
    return rc;
  }
  if ((rc = register_pollable(eq)) != 0) {
    if (wait_set) wait_set_detach(wait_set, eq);
    if (parent) parent->release();
    delete eq;
    return rc;
  }
  *eq_p = &eq->handle.eq;
  return 0;
}

bool is_eq(const fid* f) { return from_fid(f) != nullptr; }

int eq_bind_acquire(fid* f) {
  Eq* eq = from_fid(f);
  return eq ? eq->refs.acquire() : -FI_EINVAL;
}

void eq_bind_release(fid* f) {
  Eq* eq = from_fid(f);
  if (eq) eq->refs.release();
}

ssize_t eq_post(fid_eq* e, uint32_t event, const void* buf, size_t len) {
  Eq* eq = from_eq(e);
  if (!eq || (!buf && len)) return -FI_EINVAL;
  try {
    Event ev;
    ev.event = event;
    const auto* p = static_cast<const uint8_t*>(buf);
    if (len) ev.bytes.assign(p, p + len);
    return eq->push(std::move(ev), false);
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
}

ssize_t eq_post_error(fid_eq* e, const fi_eq_err_entry* err) {
  Eq* eq = from_eq(e);
  if (!eq || !err) return -FI_EINVAL;
  try {
    return eq->push(error_event(err), false);
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
}

int eq_trywait(fid* f) {
  Eq* eq = from_fid(f);
  return eq ? eq->trywait() : -FI_EINVAL;
}

}  // namespace xpufab::core
