// The peer library with both sides in one process: two endpoints on the emulated EFA, each
// driven by its own thread and OOB session, exchange addresses and run every round the peer
// programs use.
#include "testing/support/peer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace xpufab::peer {
namespace {

// Roles run opposite to OOB ranks so that exchange_by_role has to reorder.
void run_side(oob::Session& s) {
  EndpointOptions eo;
  eo.buffer_bytes = 1 << 16;
  eo.extra_eps = 2;
  Endpoint ep(eo);
  EXPECT_EQ(ep.extra_eps(), 2u);
  const uint32_t role = static_cast<uint32_t>(1 - s.rank());
  const std::vector<Address> by_rank = exchange(s, ep.address(role));
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_EQ(by_rank[s.rank()].role, role);
  const std::vector<Address> by_role = exchange_by_role(s, ep.address(role), 2);
  EXPECT_EQ(by_role[role].addr, reinterpret_cast<uint64_t>(ep.at(0)));
  const Address& other = by_role[1 - role];
  EXPECT_NE(other.addr, reinterpret_cast<uint64_t>(ep.at(0)));
  const fi_addr_t peer = ep.insert(other);

  EXPECT_GT(send_pingpong(ep, s, peer, 64, 0, 4096, 20, 2), 0.0);
  ASSERT_EQ(s.barrier(), 0);
  EXPECT_GT(write_pingpong(ep, s, peer, other, 4096, 8192, 16384, 5), 0.0);
  ASSERT_EQ(s.barrier(), 0);
  if (s.rank() == 1) write_read_verified(ep, peer, other, 1024, 24576, 28672, 32768, 7);
  ASSERT_EQ(s.barrier(), 0);
  // The write reached the other side's buffer, not only the read-back.
  if (s.rank() == 0) {
    EXPECT_TRUE(has_pattern(ep.at(32768), 1024, 7));
  }
  ASSERT_EQ(s.barrier(), 0);
}

TEST(Peer, TwoEndpointsExchangePingPongAndVerifyRdma) {
  setenv("FI_EFA_BACKEND", "emu", 1);
  oob::Options so;
  so.server = true;
  so.port = 0;
  oob::Session server;
  ASSERT_EQ(server.open(so), 0);
  std::thread client([port = server.port()] {
    oob::Options co;
    co.port = port;
    oob::Session s;
    ASSERT_EQ(s.open(co), 0);
    run_side(s);
  });
  run_side(server);
  client.join();
}

TEST(Peer, PatternTellsSeedsApart) {
  std::vector<uint8_t> a(300);
  fill(a.data(), a.size(), 5);
  EXPECT_TRUE(has_pattern(a.data(), a.size(), 5));
  EXPECT_FALSE(has_pattern(a.data(), a.size(), 6));
  a[299] ^= 1;
  EXPECT_FALSE(has_pattern(a.data(), a.size(), 5));
}

}  // namespace
}  // namespace xpufab::peer
