#include "emu/net/udp_fabric.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "emu/net/test_sink.h"

namespace xpufab {
namespace emu {
namespace net {
namespace {

UdpFabricOptions opts() {
  UdpFabricOptions o;
  o.key = "udp-test-key";
  return o;
}

TEST(UdpGid, EncodesTheEndpoint) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(4791);
  inet_pton(AF_INET, "10.1.2.3", &sa.sin_addr);
  Gid g = udp_gid(sa, 5);
  sockaddr_in back;
  ASSERT_TRUE(udp_endpoint(g, &back));
  EXPECT_EQ(back.sin_port, sa.sin_port);
  EXPECT_EQ(back.sin_addr.s_addr, sa.sin_addr.s_addr);
  EXPECT_EQ(g[7], 5);
  g[9] = 'x';
  EXPECT_FALSE(udp_endpoint(g, &back));
}

// Both directions lose a fifth of their datagrams (data, retransmissions and acks): every packet
// still arrives exactly once and intact.
TEST(UdpFabric, LossyWireDeliversEachPacketOnceIntact) {
  UdpFabricOptions oa = opts(), ob = opts();
  oa.drop_tx = ob.drop_tx = 0.2;
  oa.seed = 1;
  ob.seed = 2;
  oa.rto_min_us = ob.rto_min_us = 2000;
  oa.window = 64;  // forces queueing behind the window
  std::shared_ptr<UdpFabric> a, b;
  ASSERT_EQ(UdpFabric::create(oa, &a), 0);
  ASSERT_EQ(UdpFabric::create(ob, &b), 0);
  TestSink sa, sb;
  ASSERT_EQ(a->attach(a->gid(0), &sa), 0);
  ASSERT_EQ(b->attach(b->gid(0), &sb), 0);
  const size_t sizes[] = {0, 1, 100, 8928, 20000, 1u << 20};
  int n = 0;
  for (int r = 0; r < 10; ++r) {
    for (size_t s : sizes) {
      ASSERT_EQ(a->send(b->gid(0), make_packet(a->gid(0), static_cast<uint64_t>(++n), s)), 0);
    }
  }
  ASSERT_EQ(b->send(a->gid(0), make_packet(b->gid(0), 1000, 3000)), 0);
  EXPECT_EQ(sb.wait_for(static_cast<size_t>(n), 15000), static_cast<size_t>(n));
  EXPECT_EQ(sa.wait_for(1, 15000), 1u);
  usleep(100000);  // late duplicates, if any, would show up now
  std::map<uint64_t, int> seen;
  for (const Packet& p : sb.take()) {
    EXPECT_TRUE(packet_ok(p)) << p.token;
    EXPECT_EQ(p.src, a->gid(0));
    seen[p.token]++;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  for (auto& kv : seen) EXPECT_EQ(kv.second, 1) << kv.first;
  UdpFabricStats s = a->stats();
  EXPECT_GT(s.injected_drops, 0u);
  EXPECT_GT(s.retransmits, 0u);
  EXPECT_GT(s.window_waits, 0u);
  EXPECT_EQ(b->stats().dropped_bad_mac, 0u);
  EXPECT_EQ(b->stats().dropped_malformed, 0u);
}

// Datagrams that are foreign, truncated, carry another key or were altered are dropped and
// counted, never delivered.
TEST(UdpFabric, DropsAndCountsForeignTruncatedAndForgedDatagrams) {
  std::shared_ptr<UdpFabric> a, b, other;
  ASSERT_EQ(UdpFabric::create(opts(), &a), 0);
  ASSERT_EQ(UdpFabric::create(opts(), &b), 0);
  UdpFabricOptions ok = opts();
  ok.key = "some-other-fabric";
  ASSERT_EQ(UdpFabric::create(ok, &other), 0);
  TestSink sb, so;
  ASSERT_EQ(b->attach(b->gid(0), &sb), 0);
  ASSERT_EQ(other->attach(other->gid(0), &so), 0);

  // Capture a genuine datagram by sending through a socket we read from.
  int spy = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(bind(spy, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  socklen_t sl = sizeof(sa);
  ASSERT_EQ(getsockname(spy, reinterpret_cast<sockaddr*>(&sa), &sl), 0);
  ASSERT_EQ(a->send(udp_gid(sa, 0), make_packet(a->gid(0), 7, 500)), 0);
  std::vector<uint8_t> real(65536);
  ssize_t n = recv(spy, real.data(), real.size(), 0);
  ASSERT_GT(n, 80);
  real.resize(static_cast<size_t>(n));
  // Rewrite it for b: a forged destination without the key fails the MAC.
  sockaddr_in to = b->local();
  auto inject = [&](const std::vector<uint8_t>& d) {
    ASSERT_EQ(sendto(spy, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(d.size()));
  };
  std::vector<uint8_t> garbage(300, 0x5a);
  inject(garbage);                                              // foreign
  inject(std::vector<uint8_t>(real.begin(), real.begin() + 40));  // truncated header
  inject(std::vector<uint8_t>(real.begin(), real.end() - 10));    // truncated payload
  std::vector<uint8_t> forged = real;
  Gid bg = b->gid(0);
  std::memcpy(forged.data() + 48, bg.data(), 16);  // redirected without the key
  inject(forged);
  std::vector<uint8_t> flipped = real;
  flipped[100] ^= 1;  // payload altered in flight
  inject(flipped);
  // A genuine datagram of this fabric is refused by a fabric with another key.
  to = other->local();
  inject(real);
  to = b->local();

  for (int i = 0; i < 200; ++i) {
    UdpFabricStats s = b->stats();
    if (s.dropped_foreign + s.dropped_truncated + s.dropped_bad_mac >= 5) break;
    usleep(5000);
  }
  UdpFabricStats s = b->stats();
  EXPECT_EQ(s.dropped_foreign, 1u);
  EXPECT_EQ(s.dropped_truncated, 2u);
  EXPECT_EQ(s.dropped_bad_mac, 2u);
  EXPECT_EQ(s.packets_rx, 0u);
  for (int i = 0; i < 200 && other->stats().dropped_bad_mac == 0; ++i) usleep(5000);
  EXPECT_EQ(other->stats().dropped_bad_mac, 1u);
  EXPECT_EQ(sb.wait_for(1, 100), 0u);
  EXPECT_EQ(so.wait_for(1, 100), 0u);

  // The wire still works for genuine traffic.
  TestSink sa2;
  ASSERT_EQ(a->attach(a->gid(0), &sa2), 0);
  ASSERT_EQ(a->send(b->gid(0), make_packet(a->gid(0), 8, 100)), 0);
  EXPECT_EQ(sb.wait_for(1, 10000), 1u);
  close(spy);
}

// A peer that goes away is declared dead after peer_timeout_ms; sends to it then fail fast while
// other peers keep working.
TEST(UdpFabric, DeadPeerIsGivenUpOthersUnaffected) {
  UdpFabricOptions o = opts();
  o.peer_timeout_ms = 300;
  std::shared_ptr<UdpFabric> a, b, c;
  ASSERT_EQ(UdpFabric::create(o, &a), 0);
  ASSERT_EQ(UdpFabric::create(o, &b), 0);
  ASSERT_EQ(UdpFabric::create(o, &c), 0);
  TestSink sb, sc;
  ASSERT_EQ(b->attach(b->gid(0), &sb), 0);
  ASSERT_EQ(c->attach(c->gid(0), &sc), 0);
  Gid bg = b->gid(0);
  ASSERT_EQ(a->send(bg, make_packet(a->gid(0), 1, 10)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  b.reset();  // the peer dies
  ASSERT_EQ(a->send(bg, make_packet(a->gid(0), 2, 10)), 0);
  int rc = 0;
  for (int i = 0; i < 400 && rc == 0; ++i) {
    usleep(10000);
    if (a->stats().dead_peers != 0) rc = a->send(bg, make_packet(a->gid(0), 3, 10));
  }
  EXPECT_EQ(rc, -EHOSTUNREACH);
  ASSERT_EQ(a->send(c->gid(0), make_packet(a->gid(0), 4, 10)), 0);
  EXPECT_EQ(sc.wait_for(1, 10000), 1u);
}

// A device that polls reads the socket on its own thread: its packets come back from the call,
// a packet for another device on the same socket reaches that device's sink, the receive thread
// parks meanwhile, and a lossy wire is still repaired (the poller sends the acks and runs the
// retransmissions). Once the polls stop, the receive thread delivers again.
TEST(UdpFabric, APollerReadsTheSocketOnItsOwnThread) {
  UdpFabricOptions oa = opts(), ob = opts();
  oa.drop_tx = ob.drop_tx = 0.1;
  oa.rto_min_us = ob.rto_min_us = 2000;
  std::shared_ptr<UdpFabric> a, b;
  ASSERT_EQ(UdpFabric::create(oa, &a), 0);
  ASSERT_EQ(UdpFabric::create(ob, &b), 0);
  TestSink sa, sb, sc;
  ASSERT_EQ(a->attach(a->gid(0), &sa), 0);
  ASSERT_EQ(b->attach(b->gid(0), &sb), 0);
  ASSERT_EQ(b->attach(b->gid(1), &sc), 0);
  constexpr size_t kPackets = 200;
  std::vector<Packet> got;  // the poller's until it is joined
  std::atomic<size_t> polled{0}, in_sink{0};
  std::atomic<bool> stop{false};
  // The device's engine passes, on a thread of their own; what the receive thread read before
  // it parked arrives through the sink.
  std::thread poller([&] {
    while (!stop.load() && polled.load() + in_sink.load() < kPackets) {
      b->poll_rx_batch(b->gid(0), 64, 0, &got);
      polled.store(got.size());
      in_sink.store(in_sink.load() + sb.take().size());
    }
  });
  // The receive thread parks once it sees the poller (within a park's length on a quiet machine;
  // a loaded one may take longer): only then is the socket the poller's to read.
  const auto parked_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b->stats().rx_parks == 0 && std::chrono::steady_clock::now() < parked_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (size_t i = 1; i <= kPackets; ++i) {
    const size_t bytes = i % 2 ? 64 : 20000;  // one datagram, or several
    // (EXPECT: the poller thread must be joined before the test returns.)
    EXPECT_EQ(a->send(b->gid(0), make_packet(a->gid(0), i, bytes)), 0);
    if (i == kPackets / 2) {
      EXPECT_EQ(a->send(b->gid(1), make_packet(a->gid(0), 9999, 64)), 0);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (polled.load() + in_sink.load() < kPackets && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop.store(true);
  poller.join();
  ASSERT_EQ(got.size() + in_sink.load(), kPackets);
  // How many come each way depends on the machine's timing (a slow poller hands over more).
  EXPECT_GT(got.size(), 0u) << "through the sink: " << in_sink.load();
  std::map<uint64_t, int> seen;
  for (const Packet& p : got) {
    EXPECT_TRUE(packet_ok(p)) << p.token;
    seen[p.token]++;
  }
  for (auto& kv : seen) EXPECT_EQ(kv.second, 1) << kv.first;
  ASSERT_EQ(sc.wait_for(1, 10000), 1u);
  EXPECT_EQ(sc.take()[0].token, 9999u);
  const UdpFabricStats st = b->stats();
  EXPECT_GT(st.polled_datagrams, 0u);
  EXPECT_GT(st.rx_parks, 0u);
  EXPECT_GT(a->stats().retransmits, 0u);
  // No more polls: the receive thread takes over, at once after poll_rx_stop.
  b->poll_rx_stop(b->gid(0));
  ASSERT_EQ(a->send(b->gid(0), make_packet(a->gid(0), 5000, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  EXPECT_EQ(sb.take()[0].token, 5000u);
}

TEST(UdpFabric, RejectsBadOptions) {
  std::shared_ptr<UdpFabric> f;
  UdpFabricOptions o = opts();
  o.addr = "not-an-address";
  EXPECT_EQ(UdpFabric::create(o, &f), -EINVAL);
  o = opts();
  o.fragment_bytes = 10;
  EXPECT_EQ(UdpFabric::create(o, &f), -EINVAL);
}

}  // namespace
}  // namespace net
}  // namespace emu
}  // namespace xpufab
