#include "testing/support/process_util.h"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

extern char** environ;

namespace xpufab::testing {

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof(sa);
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sl) == 0) {
    port = ntohs(sa.sin_port);
  }
  close(fd);
  return port;
}

std::string tmpdir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) return -1;
  std::vector<std::string> e;
  for (char** p = environ; *p; ++p) e.push_back(*p);
  for (const auto& s : env) e.push_back(s);
  std::vector<char*> a, ev;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (auto& s : e) ev.push_back(const_cast<char*>(s.c_str()));
  ev.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), ev.data()) != 0) return -1;
  return pid;
}

pid_t spawn_self(const char* name, const char* flag, int* fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    close(sv[0]);
    const std::string arg = std::to_string(sv[1]);
    execl("/proc/self/exe", name, flag, arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  *fd = sv[0];
  return pid;
}

int wait_exit(pid_t pid, int seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace xpufab::testing
