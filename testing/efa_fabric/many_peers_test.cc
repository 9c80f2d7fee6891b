// An endpoint of the protocol fabric "efa" talking to more peers than its first peer table holds
// (16): the table and its receive buffers grow as the AV does, messages from senders the
// endpoint does not know yet are kept across the growth, and FI_EFA_MAX_PEERS caps it with a
// clear error. One process holds a hub and its spokes, each with its own fabric, domain and
// device on the emulated fabric in shared memory (with loss and reordering in the second run).
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/node.h"

namespace xpufab::efa_fabric {
namespace {

constexpr int kSpokes = 40;  // more than two doublings of the first table
constexpr size_t kBuf = 1 << 20;
constexpr size_t kLarge = 20000;  // beyond one packet: a rendezvous
constexpr int kBurst = 80;        // more packets than a peer's credits

void fill(uint8_t* p, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7);
}

bool has_fill(const uint8_t* p, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed * 131 + i * 7)) return false;
  return true;
}

class ManyPeers : public ::testing::TestWithParam<Wire> {
 protected:
  void SetUp() override {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // Several dozen devices share two cores: a starved engine must not look like a dead peer.
    setenv("FI_EFA_EMU_TIMEOUT_MS", "60000", 1);
  }
  void TearDown() override {
    spokes_.clear();
    hub_.reset();
    unsetenv("FI_EFA_MAX_PEERS");
  }

  void open(int spokes) {
    hub_ = std::make_unique<Node>(kBuf);
    for (int i = 0; i < spokes; ++i) spokes_.push_back(std::make_unique<Node>(kBuf));
    for (auto& s : spokes_) hub_at_spoke_.push_back(s->insert(hub_->self()));
  }

  void insert_spokes() {
    for (auto& s : spokes_) spoke_at_hub_.push_back(hub_->insert(s->self()));
  }

  // Reads every node's CQ once (which drives each one's protocol), keeping what came.
  void poll_all() {
    if (before_poll_) before_poll_();
    poll(hub_.get(), &hub_got_);
    spoke_got_.resize(spokes_.size());
    for (size_t i = 0; i < spokes_.size(); ++i) poll(spokes_[i].get(), &spoke_got_[i]);
  }

  // Polls every node until `done` holds; false after a minute.
  template <typename Done>
  bool drive_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      poll_all();
    }
    return true;
  }

  size_t sends_done() const {
    size_t n = 0;
    for (const auto& got : spoke_got_)
      for (const fi_cq_tagged_entry& e : got) n += (e.flags & FI_SEND) != 0;
    return n;
  }

  std::unique_ptr<Node> hub_;
  std::vector<std::unique_ptr<Node>> spokes_;
  std::vector<fi_addr_t> hub_at_spoke_, spoke_at_hub_;
  std::vector<fi_cq_tagged_entry> hub_got_;
  std::vector<std::vector<fi_cq_tagged_entry>> spoke_got_;
  std::function<void()> before_poll_;

 private:
  static void poll(Node* n, std::vector<fi_cq_tagged_entry>* got) {
    fi_cq_tagged_entry e[16];
    const ssize_t r = fi_cq_read(n->cq(), e, 16);
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      ASSERT_EQ(fi_cq_readerr(n->cq(), &err, 0), 1);
      FAIL() << "error completion: err " << err.err << " prov_errno " << err.prov_errno;
    }
    ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << r;
    for (ssize_t i = 0; i < r; ++i) got->push_back(e[i]);
  }
};

// Every spoke sends before the hub knows it; the hub then inserts all forty, takes each message
// by a receive naming its sender, answers each with an eager and a rendezvous message, and then
// takes a burst from every spoke at once.
TEST_P(ManyPeers, AHubGrowsItsPeerTableAsTheAvGrows) {
  open(kSpokes);
  int ctx = 0;
  for (int i = 0; i < kSpokes; ++i) {
    Node& s = *spokes_[i];
    fill(s.at(0), 64, i);
    ASSERT_EQ(fi_tsend(s.ep(), s.at(0), 64, s.desc(), hub_at_spoke_[i], i, &ctx), 0) << i;
  }
  // The hub sees those packets before it has any of their senders: it keeps them.
  for (int k = 0; k < 200; ++k) poll_all();
  ASSERT_TRUE(hub_got_.empty());
  insert_spokes();
  for (int i = 0; i < kSpokes; ++i)
    ASSERT_EQ(fi_trecv(hub_->ep(), hub_->at(i * 64), 64, hub_->desc(), spoke_at_hub_[i], i, 0, &ctx), 0) << i;
  ASSERT_TRUE(drive_until([&] { return hub_got_.size() == kSpokes && sends_done() == kSpokes; }));
  for (const fi_cq_tagged_entry& e : hub_got_) {
    ASSERT_TRUE(e.flags & FI_RECV);
    ASSERT_LT(e.tag, uint64_t{kSpokes});
    EXPECT_EQ(e.len, 64u);
    EXPECT_TRUE(has_fill(hub_->at(e.tag * 64), 64, static_cast<int>(e.tag))) << e.tag;
  }

  // The hub answers every spoke: an eager message and a rendezvous one, each from its own bytes.
  hub_got_.clear();
  for (auto& g : spoke_got_) g.clear();
  for (int i = 0; i < kSpokes; ++i) {
    Node& s = *spokes_[i];
    ASSERT_EQ(fi_trecv(s.ep(), s.at(0), 64, s.desc(), hub_at_spoke_[i], 100, 0, &ctx), 0);
    ASSERT_EQ(fi_trecv(s.ep(), s.at(4096), kLarge, s.desc(), hub_at_spoke_[i], 101, 0, &ctx), 0);
  }
  for (int i = 0; i < kSpokes; ++i) {
    uint8_t* small = hub_->at(i * 64);
    uint8_t* large = hub_->at(4096 + i * kLarge);
    fill(small, 64, 1000 + i);
    fill(large, kLarge, 2000 + i);
    ASSERT_EQ(fi_tsend(hub_->ep(), small, 64, hub_->desc(), spoke_at_hub_[i], 100, &ctx), 0) << i;
    ssize_t rc;
    while ((rc = fi_tsend(hub_->ep(), large, kLarge, hub_->desc(), spoke_at_hub_[i], 101, &ctx)) == -FI_EAGAIN)
      poll_all();
    ASSERT_EQ(rc, 0) << i;
  }
  auto recvs_done = [&] {
    size_t n = 0;
    for (const auto& got : spoke_got_) n += got.size();
    return n == 2u * kSpokes && hub_got_.size() == 2u * kSpokes;
  };
  ASSERT_TRUE(drive_until(recvs_done));
  for (int i = 0; i < kSpokes; ++i) {
    EXPECT_TRUE(has_fill(spokes_[i]->at(0), 64, 1000 + i)) << i;
    EXPECT_TRUE(has_fill(spokes_[i]->at(4096), kLarge, 2000 + i)) << i;
  }

  // A burst from every spoke at once: more packets per peer than its credits, so each grown
  // peer's credits must come back. Receives name no source (the tag says who sent what), and
  // the hub keeps kPosted of them posted as they complete.
  hub_got_.clear();
  for (auto& g : spoke_got_) g.clear();
  const int total = kSpokes * kBurst;
  constexpr int kPosted = 512;
  int posted = 0;
  before_poll_ = [&] {
    while (posted < total && posted - static_cast<int>(hub_got_.size()) < kPosted) {
      ASSERT_EQ(fi_trecv(hub_->ep(), hub_->at(posted * 8), 8, hub_->desc(), FI_ADDR_UNSPEC, 0,
                         ~uint64_t{0}, &ctx), 0) << posted;
      ++posted;
    }
  };
  for (int m = 0; m < kBurst; ++m) {
    for (int i = 0; i < kSpokes; ++i) {
      Node& s = *spokes_[i];
      const uint64_t word = uint64_t(i) << 32 | uint32_t(m);
      ssize_t rc;
      while ((rc = fi_tinject(s.ep(), &word, 8, hub_at_spoke_[i], word)) == -FI_EAGAIN) poll_all();
      ASSERT_EQ(rc, 0) << i << " " << m;
    }
  }
  ASSERT_TRUE(drive_until([&] { return hub_got_.size() == static_cast<size_t>(total); }));
  std::vector<int> next(kSpokes, 0);
  for (const fi_cq_tagged_entry& e : hub_got_) {
    uint64_t word;
    memcpy(&word, e.buf, 8);
    ASSERT_EQ(word, e.tag);
    const int i = static_cast<int>(e.tag >> 32);
    ASSERT_LT(i, kSpokes);
    // Tagged messages from one sender match in the order it sent them.
    EXPECT_EQ(static_cast<int>(e.tag & 0xffffffffu), next[i]++) << i;
  }
  for (int i = 0; i < kSpokes; ++i) EXPECT_EQ(next[i], kBurst) << i;
  before_poll_ = nullptr;
}

// FI_EFA_MAX_PEERS caps the table: sends to the entries within it work, and the first entry
// beyond it is refused with -FI_EINVAL before anything is sent.
TEST_P(ManyPeers, TheLimitRefusesPeersBeyondIt) {
  constexpr int kLimit = 20;
  setenv("FI_EFA_MAX_PEERS", std::to_string(kLimit).c_str(), 1);
  open(kLimit + 2);
  insert_spokes();
  int ctx = 0;
  for (int i = 0; i < kLimit + 2; ++i) {
    Node& s = *spokes_[i];
    ASSERT_EQ(fi_trecv(s.ep(), s.at(0), 64, s.desc(), hub_at_spoke_[i], 7, 0, &ctx), 0) << i;
  }
  for (int i = 0; i < kLimit; ++i) {
    fill(hub_->at(i * 64), 64, i);
    ASSERT_EQ(fi_tsend(hub_->ep(), hub_->at(i * 64), 64, hub_->desc(), spoke_at_hub_[i], 7, &ctx), 0) << i;
  }
  for (int i = kLimit; i < kLimit + 2; ++i)
    EXPECT_EQ(fi_tsend(hub_->ep(), hub_->at(0), 64, hub_->desc(), spoke_at_hub_[i], 7, &ctx), -FI_EINVAL) << i;
  ASSERT_TRUE(drive_until([&] {
    size_t n = 0;
    for (const auto& got : spoke_got_) n += got.size();
    return n == kLimit && hub_got_.size() == kLimit;
  }));
  for (int i = 0; i < kLimit; ++i) EXPECT_TRUE(has_fill(spokes_[i]->at(0), 64, i)) << i;
}

INSTANTIATE_TEST_SUITE_P(Wire, ManyPeers, ::testing::Values(Wire::kShm, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
