#include "testing/efa_fabric/group.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace xpufab::efa_fabric {

namespace {

bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_blob(int fd, const std::string& s) {
  const auto len = static_cast<uint32_t>(s.size());
  return write_all(fd, &len, sizeof(len)) && write_all(fd, s.data(), s.size());
}

bool read_blob(int fd, std::string* s) {
  uint32_t len = 0;
  if (!read_all(fd, &len, sizeof(len))) return false;
  s->resize(len);
  return read_all(fd, &(*s)[0], len);
}

int exit_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

}  // namespace

void group_check_failed(const char* file, int line, const char* cond) {
  fprintf(stderr, "[pid %d] %s:%d: check failed: %s\n", getpid(), file, line, cond);
  fflush(stderr);
  _exit(1);
}

std::vector<std::string> Member::allgather(const std::string& mine) {
  GROUP_CHECK(write_blob(fd_, mine));
  if (idle_) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) break;
      idle_();
    }
  }
  std::vector<std::string> all(static_cast<size_t>(size_));
  for (auto& s : all) GROUP_CHECK(read_blob(fd_, &s));
  return all;
}

std::vector<int> run_group(int size, int seconds, void (*fn)(Member&, void*), void* arg) {
  std::vector<int> fds(static_cast<size_t>(size), -1);
  std::vector<pid_t> pids(static_cast<size_t>(size), -1);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < size; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) break;
    const pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < r; ++i) close(fds[static_cast<size_t>(i)]);
      close(sv[0]);
      Member m(r, size, sv[1]);
      fn(m, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(0);
    }
    close(sv[1]);
    if (pid < 0) {
      close(sv[0]);
      break;
    }
    fds[static_cast<size_t>(r)] = sv[0];
    pids[static_cast<size_t>(r)] = pid;
  }
  // Relay rounds: one blob from every child, then all of them to every child. A child that
  // ends (or fails) while others wait in a round ends the relay: their reads then fail.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  bool timed_out = false;
  bool relaying = true;
  for (pid_t p : pids) relaying &= p > 0;
  while (relaying) {
    std::vector<std::string> round(static_cast<size_t>(size));
    std::vector<bool> got(static_cast<size_t>(size), false);
    int have = 0;
    while (relaying && have < size) {
      std::vector<pollfd> pf;
      std::vector<int> who;
      for (int r = 0; r < size; ++r) {
        if (got[static_cast<size_t>(r)]) continue;
        pf.push_back(pollfd{fds[static_cast<size_t>(r)], POLLIN, 0});
        who.push_back(r);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) {
        timed_out = true;
        relaying = false;
        break;
      }
      const int n = poll(pf.data(), pf.size(), static_cast<int>(left));
      if (n < 0) continue;
      for (size_t i = 0; i < pf.size() && relaying; ++i) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const auto r = static_cast<size_t>(who[i]);
        if (!read_blob(fds[r], &round[r])) {
          relaying = false;  // a child ended: no round completes any more
          break;
        }
        got[r] = true;
        have++;
      }
    }
    if (!relaying) break;
    for (int r = 0; r < size; ++r)
      for (const auto& s : round) write_blob(fds[static_cast<size_t>(r)], s);
  }
  for (int& fd : fds)
    if (fd >= 0) close(fd);
  std::vector<int> status(static_cast<size_t>(size), -1);
  for (int r = 0; r < size; ++r) {
    const pid_t pid = pids[static_cast<size_t>(r)];
    if (pid <= 0) continue;
    int st = 0;
    for (;;) {
      const pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        status[static_cast<size_t>(r)] = exit_status(st);
        break;
      }
      if (timed_out || std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fprintf(stderr, "group: rank %d outlived the %d s deadline and was killed\n", r, seconds);
        break;
      }
      usleep(2000);
    }
  }
  return status;
}

}  // namespace xpufab::efa_fabric
