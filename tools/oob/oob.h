// Out-of-band rendezvous over TCP for exchanging raw addresses (fi_getname blobs, MR keys)
// before a fabric is usable, in the manner of fabtests' OOB socket: one process listens, the
// others connect; every process then learns every blob (an allgather), and barrier() keeps
// processes in step. Rank 0 is the listener; clients are ranked in the order they connect.
#ifndef XPUFAB_TOOLS_OOB_OOB_H_
#define XPUFAB_TOOLS_OOB_OOB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace xpufab {
namespace oob {

struct Options {
  bool server = false;
  std::string host = "127.0.0.1";  // client: where the server listens; server: bind address
  uint16_t port = 47592;           // server: 0 picks a free port (see Session::port())
  int size = 2;                    // processes in the group (server side)
  int timeout_ms = 30000;          // for connecting and for every exchange
};

class Session {
 public:
  Session() = default;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Server: binds and listens (returns once listening; clients are accepted by the first
  // exchange). Client: connects, retrying until the timeout. Negative errno on failure.
  int open(const Options& options);
  uint16_t port() const { return port_; }
  // Every process's blob, indexed by rank. Also assigns ranks on the first call.
  int allgather(const std::string& mine, std::vector<std::string>* all);
  int barrier();
  int rank() const { return rank_; }
  int size() const { return size_; }
  void close();

 private:
  int accept_all();
  Options opt_;
  int listen_fd_ = -1;
  std::vector<int> fds_;  // server: one per client (rank i+1); client: the server
  int rank_ = -1;
  int size_ = 0;
  uint16_t port_ = 0;
};

}  // namespace oob
}  // namespace xpufab

#endif  // XPUFAB_TOOLS_OOB_OOB_H_
