#include "api/core/event_fd.h"

#include <poll.h>
#include <rdma/fi_errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace xpufab::core {

EventFd::~EventFd() {
  if (fd_ >= 0) close(fd_);
}

int EventFd::open() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return fd_ < 0 ? -errno : 0;
}

void EventFd::set() {
  if (fd_ < 0 || set_) return;
  const uint64_t one = 1;
  // The counter cannot overflow: it only ever holds 0 or 1.
  if (write(fd_, &one, sizeof(one)) == sizeof(one)) set_ = true;
}

void EventFd::clear() {
  if (fd_ < 0 || !set_) return;
  uint64_t v;
  if (read(fd_, &v, sizeof(v)) == sizeof(v) || errno == EAGAIN) set_ = false;
}

int wait_fds_readable(const int* fds, int nfds, int timeout_ms) {
  std::vector<pollfd> p;
  p.reserve(static_cast<size_t>(nfds));
  for (int i = 0; i < nfds; ++i)
    if (fds[i] >= 0) p.push_back(pollfd{fds[i], POLLIN, 0});
  const int rc = poll(p.data(), p.size(), timeout_ms < 0 ? -1 : timeout_ms);
  if (rc < 0) return errno == EINTR ? 1 : -errno;
  return rc;
}

}  // namespace xpufab::core
