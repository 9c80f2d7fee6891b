#include "tools/oob/oob.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace xpufab {
namespace oob {
namespace {

constexpr uint32_t kMaxBlob = 1u << 20;

using Clock = std::chrono::steady_clock;

int wait_fd(int fd, short ev, Clock::time_point end) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return -ETIMEDOUT;
    pollfd p{fd, ev, 0};
    int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -errno;
  }
}

int io_all(int fd, void* buf, size_t n, bool wr, Clock::time_point end) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    int rc = wait_fd(fd, wr ? POLLOUT : POLLIN, end);
    if (rc != 0) return rc;
    ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0) return -ECONNRESET;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -errno;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 0;
}

int send_blob(int fd, const std::string& s, Clock::time_point end) {
  uint32_t n = static_cast<uint32_t>(s.size());
  int rc = io_all(fd, &n, 4, true, end);
  return rc ? rc : io_all(fd, const_cast<char*>(s.data()), s.size(), true, end);
}

int recv_blob(int fd, std::string* s, Clock::time_point end) {
  uint32_t n;
  int rc = io_all(fd, &n, 4, false, end);
  if (rc) return rc;
  if (n > kMaxBlob) return -EMSGSIZE;
  s->resize(n);
  return io_all(fd, &(*s)[0], n, false, end);
}

int resolve(const std::string& host, uint16_t port, sockaddr_in* sa) {
  std::memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa->sin_addr) == 1) return 0;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return -EHOSTUNREACH;
  sa->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return 0;
}

}  // namespace

Session::~Session() { close(); }

void Session::close() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

int Session::open(const Options& options) {
  opt_ = options;
  if (opt_.size < 1 || opt_.timeout_ms <= 0) return -EINVAL;
  sockaddr_in sa;
  int rc = resolve(opt_.host, opt_.port, &sa);
  if (rc) return rc;
  auto end = Clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  if (opt_.server) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return -errno;
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(listen_fd_, 64) != 0) {
      return -errno;
    }
    socklen_t sl = sizeof(sa);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &sl);
    port_ = ntohs(sa.sin_port);
    rank_ = 0;
    size_ = opt_.size;
    return 0;
  }
  port_ = opt_.port;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fds_.push_back(fd);
      // The server tells each client its rank and the group size.
      uint32_t hello[2];
      rc = io_all(fd, hello, sizeof(hello), false, end);
      if (rc) return rc;
      rank_ = static_cast<int>(hello[0]);
      size_ = static_cast<int>(hello[1]);
      return 0;
    }
    ::close(fd);
    if (Clock::now() > end) return -ETIMEDOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Session::accept_all() {
  auto end = Clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  while (static_cast<int>(fds_.size()) < size_ - 1) {
    int rc = wait_fd(listen_fd_, POLLIN, end);
    if (rc) return rc;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return -errno;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fds_.push_back(fd);
    uint32_t hello[2] = {static_cast<uint32_t>(fds_.size()), static_cast<uint32_t>(size_)};
    rc = io_all(fd, hello, sizeof(hello), true, end);
    if (rc) return rc;
  }
  return 0;
}

int Session::allgather(const std::string& mine, std::vector<std::string>* all) {
  if (rank_ < 0 || all == nullptr) return -EINVAL;
  auto end = Clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  all->assign(static_cast<size_t>(size_), std::string());
  if (rank_ == 0) {
    int rc = accept_all();
    if (rc) return rc;
    (*all)[0] = mine;
    for (size_t i = 0; i < fds_.size(); ++i) {
      rc = recv_blob(fds_[i], &(*all)[i + 1], end);
      if (rc) return rc;
    }
    for (int fd : fds_) {
      for (const std::string& s : *all) {
        rc = send_blob(fd, s, end);
        if (rc) return rc;
      }
    }
    return 0;
  }
  int rc = send_blob(fds_[0], mine, end);
  if (rc) return rc;
  for (std::string& s : *all) {
    rc = recv_blob(fds_[0], &s, end);
    if (rc) return rc;
  }
  return 0;
}

int Session::barrier() {
  std::vector<std::string> ignored;
  return allgather(std::string(), &ignored);
}

}  // namespace oob
}  // namespace xpufab
