/*
 * api/core/event_fd.h - a level-triggered readiness flag backed by an eventfd.
 *
 * FI_WAIT_FD objects hand their fd to the application, which poll()s it and
 * then reads the object.  poll() must keep reporting the fd readable for as
 * long as the object holds something, and stop once it has been drained, so
 * the owner sets the flag when it becomes non-empty and clears it when it
 * becomes empty (both under the owner's own lock).
 *
 * Thread-safety: set()/clear() are safe from any thread; the owner serializes
 * them with its state changes so the flag never disagrees with the state.
 */
#ifndef XPUFAB_API_CORE_EVENT_FD_H_
#define XPUFAB_API_CORE_EVENT_FD_H_

namespace xpufab::core {

class EventFd {
 public:
  EventFd() = default;
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  // Creates the eventfd.  Returns 0 or a negative FI_E* code.
  int open();
  // Makes the fd readable (idempotent).
  void set();
  // Makes the fd unreadable (idempotent).
  void clear();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool set_ = false;
};

// poll()s `fds` (may include -1 entries, which are skipped) for readability
// for at most `timeout_ms` (negative: forever).  Returns >0 when one is
// readable, 0 on timeout, or a negative FI_E* code; EINTR counts as a wakeup.
int wait_fds_readable(const int* fds, int nfds, int timeout_ms);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_EVENT_FD_H_
