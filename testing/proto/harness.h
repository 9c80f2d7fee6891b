// A protocol endpoint on an emulated EFA device, set up through the backend interface the way a
// consumer does it (api/efa/ep.cc): PD, bounce-region MR, one CQ, an SRD QP brought to RTS, the
// rings from query_wqs / query_cq, then proto_ep_init. Peers get an AH per GID.
#ifndef XPUFAB_TESTING_PROTO_HARNESS_H_
#define XPUFAB_TESTING_PROTO_HARNESS_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "api/proto/proto.h"

namespace xpufab::proto_test {

// One opened device of backend "emu" (FI_EFA_EMU_* of the environment apply).
class Stack {
 public:
  int open();
  backend::Device* dev() const { return dev_.get(); }
  const backend::DeviceAttr& attr() const { return attr_; }
  ~Stack();

 private:
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<backend::Device> dev_;
  backend::DeviceAttr attr_{};
};

// What a peer needs to reach a node (and to target its memory).
struct NodeAddress {
  uint8_t gid[16];
  uint32_t qpn;
  uint32_t qkey;
  uint64_t addr;  // a region of the node's choosing (atomics target)
  uint32_t key;
  uint32_t pad;
};

class Node {
 public:
  explicit Node(Stack* stack) : stack_(stack) {}
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // 0 or a negative errno / FI_E*. `rnr_retry` 0 makes any RNR an error completion.
  int open(const proto_config& cfg, uint32_t sq_depth = 1024, uint8_t rnr_retry = 0);
  NodeAddress address() const;
  // The peer index of `a` (creates its AH once per GID).
  int add_peer(const NodeAddress& a, uint32_t* peer);
  // Registers [p, p + len) for local and remote access; *lkey / *rkey.
  int reg(void* p, size_t len, uint32_t* lkey, uint32_t* rkey);
  // Drives the device, then the endpoint.
  int progress(proto_comp* out, int max);
  // progress() into comps().
  int poll();
  std::vector<proto_comp>& comps() { return comps_; }
  proto_ep* ep() { return &ep_; }
  const backend::DeviceAttr& attr() const { return stack_->attr(); }
  uint32_t rnr_errors() const { return rnr_errors_; }

 private:
  Stack* stack_;
  backend::Pd* pd_ = nullptr;
  backend::Cq* cq_ = nullptr;
  backend::Qp* qp_ = nullptr;
  backend::Mr* bounce_mr_ = nullptr;
  std::vector<backend::Mr*> mrs_;
  std::vector<std::pair<std::string, backend::Ah*>> ahs_;
  std::vector<uint64_t> mem_;
  uint8_t* bounce_ = nullptr;
  size_t bounce_len_ = 0;
  proto_ep ep_{};
  uint8_t gid_[16] = {};
  uint32_t qpn_ = 0, qkey_ = 0;
  uint32_t rnr_errors_ = 0;
  std::vector<proto_comp> comps_;
};

// Polls every node until done() holds; false if it did not within `ms` (a hang guard, not a
// speed check).
template <typename Done>
bool pump(std::initializer_list<Node*> nodes, Done done, int ms = 20000);

// Byte patterns the tests write and check.
void fill(void* p, size_t n, uint32_t seed);
bool has_pattern(const void* p, size_t n, uint32_t seed);

double now_ms();

template <typename Done>
bool pump(std::initializer_list<Node*> nodes, Done done, int ms) {
  const double end = now_ms() + ms;
  while (!done()) {
    for (Node* n : nodes) n->poll();
    if (now_ms() > end) return false;
  }
  return true;
}

}  // namespace xpufab::proto_test

#endif  // XPUFAB_TESTING_PROTO_HARNESS_H_
