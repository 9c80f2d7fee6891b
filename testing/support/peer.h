// One process of a multi-process run over the public libfabric API: the set-up every peer
// program repeats (getinfo, fabric, domain, AV, CQ, EP and one registered buffer), the exchange
// of addresses and MR keys through the out-of-band rendezvous (tools/oob), the waits on the CQ,
// and the ping-pong and verified RDMA rounds the programs measure or check. Any failed check
// ends the process with exit status 1 and a line naming the check, which is what the tests that
// start these programs look for.
#ifndef XPUFAB_TESTING_SUPPORT_PEER_H_
#define XPUFAB_TESTING_SUPPORT_PEER_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/oob/oob.h"

namespace xpufab::peer {

using Clock = std::chrono::steady_clock;

// Exits with status 1, naming the process, the place and the condition.
[[noreturn]] void check_failed(const char* file, int line, const char* cond);

#define PEER_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) ::xpufab::peer::check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

// What one process tells the others: its role, its EP's raw address and its buffer's MR.
struct Address {
  uint32_t role = 0;
  uint32_t name_len = 0;
  uint64_t key = 0, addr = 0;
  char name[64] = {};
};

struct EndpointOptions {
  size_t buffer_bytes = 0;  // one buffer, registered for every local and remote access
  size_t cq_size = 1024;
  int extra_eps = 0;  // idle endpoints sharing the CQ: more QPs on the same device
};

// An RDM endpoint of provider efa (FI_MSG | FI_RMA, the efa-direct MR modes) with its own CQ
// (FI_CQ_FORMAT_DATA, both directions) and AV. FI_EFA_BACKEND and the emulator's variables of
// the environment choose the device.
class Endpoint {
 public:
  explicit Endpoint(const EndpointOptions& options);
  ~Endpoint();  // checked closes in reverse order
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // This process's address, tagged with `role`.
  Address address(uint32_t role = 0) const;
  fi_addr_t insert(const Address& peer);

  uint8_t* at(size_t offset) { return buf_.data() + offset; }
  void* desc() const { return fi_mr_desc(mr_); }
  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }
  const fi_info* info() const { return info_; }
  // Taken just before fi_domain, when the device (and its fault plan's clock) starts.
  Clock::time_point opened() const { return opened_; }
  size_t extra_eps() const { return extra_.size(); }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  std::vector<fid_ep*> extra_;
  std::vector<uint8_t> buf_;
  Clock::time_point opened_;
};

// Every process's address, by OOB rank.
std::vector<Address> exchange(oob::Session& s, const Address& mine);
// Every process's address, by role (roles 0..roles-1, one process each; OOB ranks follow the
// order in which processes connect).
std::vector<Address> exchange_by_role(oob::Session& s, const Address& mine, size_t roles);

// One completion: 1, or -FI_EAVAIL with *err filled, or -FI_ETIMEDOUT after `ms`.
int wait_one(Endpoint& e, fi_cq_data_entry* entry, fi_cq_err_entry* err, int ms);
// Poll loops read the clock for their deadline once per this many empty CQ reads.
inline constexpr uint32_t kPollsPerClock = 256;
// One successful completion within `ms`; otherwise prints what came and fails.
void expect_one(Endpoint& e, fi_cq_data_entry* entry, int ms);
// The same, and it must carry `context`.
void expect_context(Endpoint& e, void* context, int ms);

// Retries `post` while the send queue is full (-FI_EAGAIN), calling `reap` in between.
template <typename Post, typename Reap>
void post_retrying(Post post, Reap reap) {
  for (;;) {
    const ssize_t rc = post();
    if (rc == 0) return;
    PEER_CHECK(rc == -FI_EAGAIN);
    reap();
  }
}

// The byte pattern the programs write and verify; `seed` tells one transfer from another.
void fill(uint8_t* p, size_t n, uint32_t seed);
bool has_pattern(const uint8_t* p, size_t n, uint32_t seed);

// A `bytes`-long send/recv ping-pong between ranks 0 and 1 of `s` through buffer offsets `rx` and
// `tx`, `warm` rounds then `iters` timed ones; returns the one-way latency in microseconds.
double send_pingpong(Endpoint& e, oob::Session& s, fi_addr_t peer, size_t bytes, size_t rx,
                     size_t tx, int iters, int warm);
// `iters` rounds in which each side RDMA-writes `bytes` from its offset `src` to the peer's
// offset `dst` and then announces it with a 64 B send (received at offset 0); returns seconds.
double write_pingpong(Endpoint& e, oob::Session& s, fi_addr_t peer, const Address& remote,
                      size_t bytes, size_t src, size_t dst, int iters);
// An RDMA write of `bytes` patterned with `seed` from offset `src` to the peer's offset `dst`,
// then a read of it back into offset `back`, verified.
void write_read_verified(Endpoint& e, fi_addr_t peer, const Address& remote, size_t bytes,
                         size_t src, size_t back, size_t dst, uint32_t seed);

}  // namespace xpufab::peer

#endif  // XPUFAB_TESTING_SUPPORT_PEER_H_
