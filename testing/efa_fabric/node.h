// One process's view of the protocol fabric "efa" through the public API: fabric, domain
// "<device>-rdm", AV, one FI_CQ_FORMAT_TAGGED CQ for both directions, an RDM endpoint and one
// buffer registered for every access. Set-up failures end the process (GROUP_CHECK), which is
// what a forked member of a group and an in-process test both want.
#ifndef XPUFAB_TESTING_EFA_FABRIC_NODE_H_
#define XPUFAB_TESTING_EFA_FABRIC_NODE_H_

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xpufab::efa_fabric {

// What a process tells its peers: its endpoint's name and its buffer.
struct Remote {
  std::string name;
  uint64_t addr = 0;
  uint64_t key = 0;
};
std::string encode(const Remote& r);
Remote decode(const std::string& blob);

// The hints of an application of the protocol fabric: messages, tagged ones with receives that
// name their source, atomics.
fi_info* protocol_hints();
// The same with RMA and its remote events (remote counters, remote CQ data).
fi_info* rma_hints();

// Counters a node binds: what it initiated and what peers did to its memory.
struct Counters {
  fid_cntr* send = nullptr;
  fid_cntr* write = nullptr;
  fid_cntr* read = nullptr;
  fid_cntr* remote_write = nullptr;
  fid_cntr* remote_read = nullptr;
};

class Node {
 public:
  // Takes the hints (a tx_attr->size there sizes the endpoint's transmit queue); `counters`: one counter each for FI_SEND, FI_WRITE, FI_READ,
  // FI_REMOTE_WRITE and FI_REMOTE_READ, bound before the endpoint is enabled.
  explicit Node(size_t buffer_bytes, fi_info* hints = nullptr, bool counters = false);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Remote self() const;
  fi_addr_t insert(const Remote& r);

  uint8_t* at(size_t off) { return buf_.data() + off; }
  void* desc() const { return fi_mr_desc(mr_); }
  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }
  fid_domain* domain() const { return domain_; }
  const fi_info* info() const { return info_; }
  const Counters& counters() const { return cntrs_; }

  // One completion: 1 with *e filled, -FI_EAVAIL with *err filled, -FI_ETIMEDOUT after `ms`.
  // Reading the CQ drives the protocol, as applications do.
  int wait(fi_cq_tagged_entry* e, fi_cq_err_entry* err, int ms = 20000);
  // A successful completion, else the process fails naming what came.
  fi_cq_tagged_entry expect(int ms = 20000);
  // An error completion, else the process fails.
  fi_cq_err_entry expect_error(int ms = 20000);
  // Reads the CQ for `ms` and fails the process if anything arrives.
  void expect_nothing(int ms);

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  Counters cntrs_;
  std::vector<uint8_t> buf_;
};

// Retries `post` while it reports -FI_EAGAIN, reading `n`'s CQ in between would steal
// completions, so only the protocol's progress runs (fi_cq_read with a zero count).
template <typename Post>
ssize_t post_retrying(Node& n, Post post) {
  for (;;) {
    const ssize_t rc = post();
    if (rc != -FI_EAGAIN) return rc;
    fi_cq_read(n.cq(), nullptr, 0);
  }
}

}  // namespace xpufab::efa_fabric

#endif  // XPUFAB_TESTING_EFA_FABRIC_NODE_H_
