// Active messages and credit flow control between two protocol endpoints of one process on the
// emulated EFA: payloads arrive intact and in the sender's order, many messages in flight are
// paced by credits, and a receiver that stops progressing is never driven into RNR (the QPs run
// with rnr_retry 0, so an RNR would be an error completion; a control test shows that flooding
// without credits does produce one).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "testing/proto/harness.h"

namespace xpufab::proto_test {
namespace {

constexpr uint32_t kEcho = 3;
constexpr uint32_t kStream = 4;

struct Pair : ::testing::Test {
  Stack stack;
  Node a{&stack}, b{&stack};
  uint32_t a_to_b = 0, b_to_a = 0;
  proto_config cfg{};

  void SetUp() override {
    ASSERT_EQ(stack.open(), 0);
    proto_config_default(&cfg);
    cfg.max_peers = 4;
    cfg.credits = 16;
    ASSERT_EQ(a.open(cfg), 0);
    ASSERT_EQ(b.open(cfg), 0);
    ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
    ASSERT_EQ(b.add_peer(a.address(), &b_to_a), 0);
  }
};

// Received messages: sequence numbers and payload sizes, checked against the pattern.
struct Sink {
  proto_ep* ep = nullptr;
  uint32_t expect_seq = 0;
  uint32_t received = 0;
  uint32_t bad = 0;
  uint32_t out_of_order = 0;
  static int on_stream(void* arg, uint32_t, const void* payload, uint32_t len) {
    Sink* s = static_cast<Sink*>(arg);
    uint32_t seq = 0;
    if (len < 4) {
      ++s->bad;
      return 0;
    }
    std::memcpy(&seq, payload, 4);
    if (seq != s->expect_seq) ++s->out_of_order;
    s->expect_seq = seq + 1;
    if (!has_pattern(static_cast<const uint8_t*>(payload) + 4, len - 4, seq)) ++s->bad;
    ++s->received;
    return 0;
  }
};

uint32_t stream_len(uint32_t seq, uint32_t max) { return 4 + (seq * 977u) % (max - 4); }

int send_stream(proto_ep* ep, uint32_t peer, uint32_t seq, uint32_t max) {
  std::vector<uint8_t> p(stream_len(seq, max));
  std::memcpy(p.data(), &seq, 4);
  fill(p.data() + 4, p.size() - 4, seq);
  return proto_am_send(ep, peer, kStream, p.data(), 4, p.data() + 4, static_cast<uint32_t>(p.size() - 4));
}

// B echoes every kEcho message back to its sender; a full transmit pool makes it wait.
struct Echo {
  proto_ep* ep;
  static int on_echo(void* arg, uint32_t src, const void* payload, uint32_t len) {
    Echo* e = static_cast<Echo*>(arg);
    return proto_am_send(e->ep, src, kEcho + 1, payload, len, nullptr, 0);
  }
};

struct Got {
  std::vector<uint8_t> data;
  int count = 0;
  static int on(void* arg, uint32_t, const void* payload, uint32_t len) {
    Got* g = static_cast<Got*>(arg);
    g->data.assign(static_cast<const uint8_t*>(payload), static_cast<const uint8_t*>(payload) + len);
    ++g->count;
    return 0;
  }
};

TEST_F(Pair, AmPingPongCarriesEverySizeIntact) {
  Echo echo{b.ep()};
  Got got;
  ASSERT_EQ(proto_am_set_handler(b.ep(), kEcho, Echo::on_echo, &echo), 0);
  ASSERT_EQ(proto_am_set_handler(a.ep(), kEcho + 1, Got::on, &got), 0);
  const uint32_t max = proto_am_max(a.ep());
  ASSERT_GT(max, 8000u);
  for (uint32_t len : {0u, 1u, 7u, 64u, 1000u, 4096u, max - 1, max}) {
    std::vector<uint8_t> p(len);
    fill(p.data(), len, len);
    const int before = got.count;
    ASSERT_EQ(proto_am_send(a.ep(), a_to_b, kEcho, p.data(), len, nullptr, 0), 0) << len;
    ASSERT_TRUE(pump({&a, &b}, [&] { return got.count == before + 1; })) << len;
    ASSERT_EQ(got.data.size(), len);
    EXPECT_TRUE(has_pattern(got.data.data(), len, len)) << len;
  }
  EXPECT_EQ(a.ep()->stats.tx_errors, 0u);
  EXPECT_EQ(b.ep()->stats.tx_errors, 0u);
}

TEST_F(Pair, AmRejectsBadInput) {
  uint8_t x[16] = {};
  EXPECT_EQ(proto_am_send(a.ep(), 99, kEcho, x, 1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(proto_am_send(a.ep(), a_to_b, PROTO_AM_MAX, x, 1, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(proto_am_send(a.ep(), a_to_b, kEcho, nullptr, 1, nullptr, 0), -FI_EINVAL);
  std::vector<uint8_t> big(proto_am_max(a.ep()) + 1);
  EXPECT_EQ(proto_am_send(a.ep(), a_to_b, kEcho, big.data(), static_cast<uint32_t>(big.size()), nullptr, 0),
            -FI_EMSGSIZE);
  EXPECT_EQ(proto_am_set_handler(a.ep(), PROTO_AM_MAX, Got::on, nullptr), -FI_EINVAL);
}

TEST_F(Pair, ManyMessagesInFlightArriveInOrderBothWays) {
  Sink at_a{a.ep()}, at_b{b.ep()};
  ASSERT_EQ(proto_am_set_handler(a.ep(), kStream, Sink::on_stream, &at_a), 0);
  ASSERT_EQ(proto_am_set_handler(b.ep(), kStream, Sink::on_stream, &at_b), 0);
  const uint32_t n = 4000, max = proto_am_max(a.ep());
  uint32_t sa = 0, sb = 0;
  ASSERT_TRUE(pump({&a, &b}, [&] {
    while (sa < n && send_stream(a.ep(), a_to_b, sa, max) == 0) ++sa;
    while (sb < n && send_stream(b.ep(), b_to_a, sb, max) == 0) ++sb;
    return at_a.received == n && at_b.received == n;
  }));
  EXPECT_EQ(at_b.out_of_order, 0u);
  EXPECT_EQ(at_a.out_of_order, 0u);
  EXPECT_EQ(at_b.bad, 0u);
  EXPECT_EQ(at_a.bad, 0u);
  EXPECT_EQ(a.ep()->stats.tx_errors + b.ep()->stats.tx_errors, 0u);
  // The window was the limit at some point, and credits came back both ways.
  EXPECT_GT(a.ep()->stats.credit_stalls + b.ep()->stats.credit_stalls, 0u);
}

TEST_F(Pair, AReceiverThatStopsProgressingIsNeverDrivenIntoRnr) {
  Sink at_b{b.ep()};
  ASSERT_EQ(proto_am_set_handler(b.ep(), kStream, Sink::on_stream, &at_b), 0);
  const uint32_t n = cfg.credits * 8, max = 2000;
  uint32_t sent = 0;
  // Only A progresses for a while: B's device still accepts packets into posted buffers.
  const double until = now_ms() + 300;
  while (now_ms() < until) {
    while (sent < n && send_stream(a.ep(), a_to_b, sent, max) == 0) ++sent;
    a.poll();
  }
  EXPECT_EQ(at_b.received, 0u);
  EXPECT_EQ(a.ep()->stats.tx_errors, 0u) << "status " << a.ep()->stats.last_tx_status;
  EXPECT_GT(a.ep()->stats.credit_stalls, 0u);
  EXPECT_LE(a.ep()->stats.tx_packets, cfg.credits);
  ASSERT_TRUE(pump({&a, &b}, [&] {
    while (sent < n && send_stream(a.ep(), a_to_b, sent, max) == 0) ++sent;
    return at_b.received == n;
  }));
  EXPECT_EQ(at_b.out_of_order, 0u);
  EXPECT_EQ(at_b.bad, 0u);
  EXPECT_EQ(a.ep()->stats.tx_errors, 0u);
}

// A handler that asks to be called again gets the same message again, and the sender's later
// messages wait behind it.
struct Picky {
  uint32_t next = 0, refusals = 0, bad = 0;
  static int on(void* arg, uint32_t, const void* payload, uint32_t len) {
    Picky* p = static_cast<Picky*>(arg);
    uint32_t seq = ~0u;
    if (len >= 4) std::memcpy(&seq, payload, 4);
    if (seq % 3 == 0 && p->refusals < seq / 3 + 1) {
      ++p->refusals;
      return -FI_EAGAIN;
    }
    if (seq != p->next) ++p->bad;
    p->next = seq + 1;
    return 0;
  }
};

TEST_F(Pair, AHandlerThatAsksToWaitSeesTheSameMessageAgainAndOrderHolds) {
  Picky picky;
  ASSERT_EQ(proto_am_set_handler(b.ep(), kStream, Picky::on, &picky), 0);
  const uint32_t n = 300;
  uint32_t sent = 0;
  ASSERT_TRUE(pump({&a, &b}, [&] {
    while (sent < n && send_stream(a.ep(), a_to_b, sent, 100) == 0) ++sent;
    return picky.next == n;
  }));
  EXPECT_EQ(picky.bad, 0u);
  EXPECT_EQ(picky.refusals, n / 3);
  EXPECT_EQ(a.ep()->stats.tx_errors, 0u);
}

// A sender that added us before we added it: its packets wait for proto_peer_add, then arrive
// in its order. (In one process both share a GID, so here the AH is known; the two-process test
// covers a sender whose GID has no AH yet.)
TEST(Orphans, PacketsFromASenderNotYetAPeerWaitForIt) {
  Stack stack;
  ASSERT_EQ(stack.open(), 0);
  Node a(&stack), b(&stack), c(&stack);
  proto_config cfg;
  proto_config_default(&cfg);
  cfg.max_peers = 4;
  cfg.credits = 16;
  ASSERT_EQ(a.open(cfg), 0);
  ASSERT_EQ(b.open(cfg), 0);
  ASSERT_EQ(c.open(cfg), 0);
  uint32_t a_to_b = 0, b_to_c = 0, b_to_a = 0;
  ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
  ASSERT_EQ(b.add_peer(c.address(), &b_to_c), 0);
  Sink at_b{b.ep()};
  ASSERT_EQ(proto_am_set_handler(b.ep(), kStream, Sink::on_stream, &at_b), 0);
  const uint32_t n = 12;
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(send_stream(a.ep(), a_to_b, i, 500), 0);
  ASSERT_TRUE(pump({&a, &b}, [&] { return b.ep()->norphans == n; }));
  EXPECT_EQ(at_b.received, 0u);
  ASSERT_EQ(b.add_peer(a.address(), &b_to_a), 0);
  ASSERT_TRUE(pump({&a, &b}, [&] { return at_b.received == n; }));
  EXPECT_EQ(at_b.out_of_order, 0u);
  EXPECT_EQ(at_b.bad, 0u);
  EXPECT_EQ(b.ep()->norphans, 0u);
  EXPECT_EQ(a.ep()->stats.tx_errors, 0u);
}

// A peer that stops progressing holds up only the packets to it, not those to others.
TEST(Fairness, AStalledPeerDoesNotHoldUpOthers) {
  Stack stack;
  ASSERT_EQ(stack.open(), 0);
  Node a(&stack), b(&stack), c(&stack);
  proto_config cfg;
  proto_config_default(&cfg);
  cfg.max_peers = 4;
  cfg.credits = 16;
  ASSERT_EQ(a.open(cfg), 0);
  ASSERT_EQ(b.open(cfg), 0);
  ASSERT_EQ(c.open(cfg), 0);
  uint32_t a_to_b = 0, a_to_c = 0, unused = 0;
  ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
  ASSERT_EQ(a.add_peer(c.address(), &a_to_c), 0);
  ASSERT_EQ(b.add_peer(a.address(), &unused), 0);
  ASSERT_EQ(c.add_peer(a.address(), &unused), 0);
  Sink at_b{b.ep()}, at_c{c.ep()};
  ASSERT_EQ(proto_am_set_handler(b.ep(), kStream, Sink::on_stream, &at_b), 0);
  ASSERT_EQ(proto_am_set_handler(c.ep(), kStream, Sink::on_stream, &at_c), 0);
  // B never progresses: most of these wait in A for credits.
  for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(send_stream(a.ep(), a_to_b, i, 200), 0);
  uint32_t sent = 0;
  ASSERT_TRUE(pump({&a, &c}, [&] {
    while (sent < 100 && send_stream(a.ep(), a_to_c, sent, 200) == 0) ++sent;
    return at_c.received == 100;
  }));
  EXPECT_EQ(at_c.out_of_order, 0u);
  EXPECT_GT(a.ep()->txq.count, 0u);
  EXPECT_EQ(proto_peer_remove(a.ep(), a_to_b), -FI_EBUSY);
  // Once B progresses its packets follow, in order.
  ASSERT_TRUE(pump({&a, &b, &c}, [&] { return at_b.received == 100 && proto_ep_idle(a.ep()); }));
  EXPECT_EQ(at_b.out_of_order, 0u);
  EXPECT_EQ(at_b.bad, 0u);
  // Nothing waits for it any more: the peer can go, and then it is unknown.
  EXPECT_EQ(proto_peer_remove(a.ep(), a_to_b), 0);
  EXPECT_EQ(send_stream(a.ep(), a_to_b, 0, 200), -FI_EINVAL);
  EXPECT_EQ(proto_peer_remove(a.ep(), a_to_b), -FI_EINVAL);
}

// The control for the test above: SENDs posted past the receiver's buffers, with no credits,
// do end in RNR on this QP configuration.
TEST_F(Pair, FloodingWithoutCreditsEndsInRnr) {
  proto_ep* ep = a.ep();
  const uint32_t nrx = proto_rx_buffers(&cfg);
  uint32_t posted = 0;
  std::vector<uint8_t> junk(64, 0);
  ASSERT_TRUE(pump({&a}, [&] {
    while (posted < nrx + 32) {
      efa_dp_wr wr{};
      wr.op = EFA_DP_OP_SEND;
      wr.ah = ep->peers[a_to_b].ahn;
      wr.dest_qpn = ep->peers[a_to_b].qpn;
      wr.qkey = ep->peers[a_to_b].qkey;
      wr.num_sge = 1;
      wr.flags = EFA_DP_WR_INLINE;
      wr.sge[0] = {reinterpret_cast<uint64_t>(junk.data()), 16, 0};
      if (efa_sq_post(&ep->sq, &wr)) break;
      ++posted;
    }
    return ep->stats.tx_errors > 0;
  }));
  EXPECT_EQ(ep->stats.last_tx_status, static_cast<uint32_t>(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR));
}

}  // namespace
}  // namespace xpufab::proto_test
