// Completion channels. A channel is an eventfd (EFD_SEMAPHORE) whose count is the number of
// queued 8-byte records (the user_handle of the CQ that fired), so read() returns exactly the
// record ibv_get_cq_event expects and DESTROY_CQ can report exact event counts. The emulator
// signals each CQ on an event fd of its own; the service thread (or a caller's pass, or the
// blocked reader itself) forwards those signals here.
#include <fcntl.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "emu/uverbs/caller_progress.h"
#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"
#include "emu/uverbs/uverbs_server.h"

namespace xpufab {
namespace uverbs {
namespace {

thread_local int t_new_channel = -1;

}  // namespace

uint64_t take_cq_events(CqObj* c) {
  if (c->efd < 0) return 0;
  uint64_t v = 0;
  return sys_read(c->efd, &v, sizeof(v)) == sizeof(v) ? v : 0;
}

void forward_cq_events_locked(State& s, CqObj* c, uint64_t events) {
  auto it = s.channels.find(c->channel);
  if (it == s.channels.end()) return;
  for (uint64_t i = 0; i < events; ++i) it->second.records.push_back(c->user_handle);
  uint64_t n = events;
  (void)sys_write(c->channel, &n, sizeof(n));
}

void arm_cq_exactly(int cmd_fd, uint32_t handle) {
  State& s = st();
  if (in_server_now()) return;
  ServerLock lock(s);
  auto ctx = s.ctxs.find(cmd_fd);
  if (ctx == s.ctxs.end()) return;
  auto c = ctx->second->cqs.find(handle);
  if (c == ctx->second->cqs.end() || c->second->efd < 0) return;
  (void)c->second->cq->arm();
}

void detach_cq_from_channel_locked(State& s, CqObj* c) {
  if (c->channel < 0) return;
  auto it = s.channels.find(c->channel);
  if (it == s.channels.end()) return;
  Channel& ch = it->second;
  size_t before = ch.records.size();
  ch.records.erase(std::remove(ch.records.begin(), ch.records.end(), c->user_handle),
                   ch.records.end());
  // Take one token per dropped record so the count still equals the queue length.
  for (size_t i = ch.records.size(); i < before; ++i) {
    uint64_t v;
    if (sys_read(c->channel, &v, sizeof(v)) != sizeof(v)) break;
  }
  ch.cqs.erase(c->user_handle);
}

int cmd_create_comp_channel(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_comp_channel),
                        sizeof(ib_uverbs_create_comp_channel_resp));
  if (rc != 0) return rc;
  int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return -errno;
  ib_uverbs_create_comp_channel_resp r{static_cast<uint32_t>(fd)};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) {
    sys_close(fd);
    return rc;
  }
  s.channels[fd] = Channel{};
  t_new_channel = fd;
  return 0;
}

int take_new_channel() {
  int fd = t_new_channel;
  t_new_channel = -1;
  return fd;
}

bool close_channel(int fd) {
  State& s = st();
  if (in_server_now()) return true;
  ServerLock lock(s);
  auto it = s.channels.find(fd);
  if (it == s.channels.end()) return false;
  for (auto& kv : it->second.cqs) kv.second->channel = -1;
  s.channels.erase(it);
  return true;
}

ssize_t channel_read(int fd, void* buf, size_t count, bool nonblocking) {
  State& s = st();
  if (count < 8) return -EINVAL;
  if (in_server_now()) return -EIO;
  // A blocked reader forwards its CQs' events itself and drives the NIC between waits, so an
  // armed CQ's event arrives whether the service thread, the engine thread or nobody else runs.
  // Its wait watches the channel and those CQs' event fds; the timeout (doubling while nothing
  // happens) bounds how long a NIC that only this thread drives stands still.
  std::vector<pollfd> fds;
  int wait_ms = 1;
  for (;;) {
    fds.assign(1, pollfd{fd, POLLIN, 0});
    {
      ServerLock lock(s);
      auto it = s.channels.find(fd);
      if (it == s.channels.end()) return -EBADF;
      Channel& ch = it->second;
      for (auto& kv : ch.cqs) {
        CqObj* c = kv.second;
        uint64_t events = take_cq_events(c);
        if (c->ring16 != nullptr) mirror_cqes(c);
        if (events != 0) forward_cq_events_locked(s, c, events);
        if (c->efd >= 0) fds.push_back(pollfd{c->efd, POLLIN, 0});
      }
      if (!ch.records.empty()) {
        uint64_t token;
        if (sys_read(fd, &token, 8) == 8) {
          uint64_t rec = ch.records.front();
          ch.records.pop_front();
          auto cq = ch.cqs.find(rec);
          if (cq != ch.cqs.end()) cq->second->comp_reported++;
          if (!copy_out(reinterpret_cast<uint64_t>(buf), &rec, 8)) return -EFAULT;
          return 8;
        }
      }
    }
    if (nonblocking) return -EAGAIN;
    if (caller_drive() > 0) {
      wait_ms = 1;
      continue;
    }
    // Wait for a token or a CQ event without taking it, then look again under the lock.
    syscall(SYS_poll, fds.data(), fds.size(), wait_ms);
    wait_ms = std::min(wait_ms * 2, 64);
  }
}

}  // namespace uverbs
}  // namespace xpufab
