#include "emu/fabric.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

namespace xpufab {
namespace emu {
namespace {

Gid gid_of(uint8_t n) { return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x66, n}; }

class CountingSink : public PacketSink {
 public:
  void deliver(Packet&& pkt) override {
    if (detached.load()) late.fetch_add(1);
    got.fetch_add(1);
    bytes.fetch_add(pkt.payload.size());
  }
  std::atomic<bool> detached{false};
  std::atomic<uint64_t> got{0}, bytes{0}, late{0};
};

TEST(Payload, InlineHeapAndBorrowed) {
  Payload p;
  std::vector<uint8_t> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 3);
  p.assign(src.data(), src.data() + 64);
  EXPECT_EQ(p.size(), 64u);
  EXPECT_EQ(p.data()[63], src[63]);
  p.view(src.data(), src.size());
  EXPECT_TRUE(p.borrowed());
  const Payload& cp = p;
  EXPECT_EQ(cp.data(), src.data());  // no copy while only read
  Payload copy = p;                   // a copy owns its bytes
  EXPECT_FALSE(copy.borrowed());
  EXPECT_NE(copy.data(), src.data());
  Payload moved = std::move(p);       // a move keeps borrowing
  EXPECT_TRUE(moved.borrowed());
  EXPECT_EQ(p.size(), 0u);
  moved.data()[0] ^= 1;  // writable bytes: owns them first, the source stays untouched
  EXPECT_FALSE(moved.borrowed());
  EXPECT_EQ(src[0], 0u);
  EXPECT_EQ(moved.data()[0], 1u);
  src[5] = 0xee;
  EXPECT_EQ(copy.data()[5], 15u);
  EXPECT_EQ(moved.data()[999], static_cast<uint8_t>(999 * 3));
  Payload small;
  small.view(src.data(), 10);
  small.assign(small.data() + 2, small.data() + 6);  // from its own bytes
  EXPECT_EQ(small.size(), 4u);
  EXPECT_EQ(small.data()[0], src[2]);
  small.view(src.data(), 0);
  EXPECT_TRUE(small.empty());
  EXPECT_FALSE(small.borrowed());
}

TEST(InProcFabric, AttachSendDetach) {
  InProcFabric f;
  CountingSink a;
  EXPECT_EQ(f.send(gid_of(1), Packet()), -EHOSTUNREACH);
  ASSERT_EQ(f.attach(gid_of(1), &a), 0);
  EXPECT_EQ(f.attach(gid_of(1), &a), -EEXIST);
  Packet p;
  p.payload.resize(200);
  EXPECT_EQ(f.send(gid_of(1), std::move(p)), 0);
  EXPECT_EQ(a.got.load(), 1u);
  EXPECT_EQ(a.bytes.load(), 200u);
  f.detach(gid_of(1));
  f.detach(gid_of(1));  // twice is harmless
  EXPECT_EQ(f.send(gid_of(1), Packet()), -EHOSTUNREACH);
  EXPECT_EQ(f.poll_rx(gid_of(1), 8), 0);  // delivers from send(); nothing to poll
  EXPECT_FALSE(f.copies_on_send());
}

// send_copy hands the sink a copy (made once, by the sink) and leaves the caller's packet whole.
TEST(InProcFabric, SendCopyKeepsTheCallersPacket) {
  struct CopyingSink : CountingSink {
    void deliver_copy(const Packet& pkt) override {
      copies.fetch_add(1);
      last_token = pkt.token;
      CountingSink::deliver_copy(pkt);
    }
    std::atomic<uint64_t> copies{0};
    uint64_t last_token = 0;
  };
  InProcFabric f;
  CopyingSink a;
  ASSERT_EQ(f.attach(gid_of(1), &a), 0);
  Packet p;
  p.token = 77;
  p.payload.resize(40);
  uint64_t mark = 123;
  EXPECT_EQ(f.send_copy(gid_of(1), p, &mark), 0);
  EXPECT_EQ(mark, 0u);
  EXPECT_EQ(a.copies.load(), 1u);
  EXPECT_EQ(a.last_token, 77u);
  EXPECT_EQ(a.got.load(), 1u);
  EXPECT_EQ(a.bytes.load(), 40u);
  EXPECT_EQ(p.payload.size(), 40u);
  EXPECT_EQ(f.send_copy(gid_of(2), p, &mark), -EHOSTUNREACH);
}

// A destination this thread sent to before (its look-up remembered) is not delivered to once
// detached, and a GID attached again reaches its new sink.
TEST(InProcFabric, ARememberedDestinationFollowsDetachAndAttach) {
  InProcFabric f;
  CountingSink a, b, other;
  ASSERT_EQ(f.attach(gid_of(1), &a), 0);
  ASSERT_EQ(f.attach(gid_of(5), &other), 0);  // the same cache entry as gid_of(1)
  EXPECT_EQ(f.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(f.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(f.send(gid_of(5), Packet()), 0);
  EXPECT_EQ(f.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(a.got.load(), 3u);
  EXPECT_EQ(other.got.load(), 1u);
  f.detach(gid_of(1));
  EXPECT_EQ(f.send(gid_of(1), Packet()), -EHOSTUNREACH);
  EXPECT_EQ(a.got.load(), 3u);
  ASSERT_EQ(f.attach(gid_of(1), &b), 0);
  EXPECT_EQ(f.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(a.got.load(), 3u);
  EXPECT_EQ(b.got.load(), 1u);
  // Another fabric with the same GID: its own sink, though this thread remembered the first.
  InProcFabric g;
  CountingSink c;
  ASSERT_EQ(g.attach(gid_of(1), &c), 0);
  EXPECT_EQ(g.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(f.send(gid_of(1), Packet()), 0);
  EXPECT_EQ(c.got.load(), 1u);
  EXPECT_EQ(b.got.load(), 2u);
}

// Senders on several threads while sinks come and go: after detach returns, its sink is never
// called again (the grace period), and other destinations keep receiving.
TEST(InProcFabric, DetachWaitsForSendersInFlight) {
  InProcFabric f;
  CountingSink stay;
  ASSERT_EQ(f.attach(gid_of(1), &stay), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  for (int t = 0; t < 2; ++t) {
    senders.emplace_back([&] {
      while (!stop.load()) {
        f.send(gid_of(1), Packet());
        f.send(gid_of(2), Packet());
      }
    });
  }
  for (int round = 0; round < 50; ++round) {
    CountingSink s;
    ASSERT_EQ(f.attach(gid_of(2), &s), 0);
    std::this_thread::yield();
    f.detach(gid_of(2));
    s.detached.store(true);
    std::this_thread::yield();
    EXPECT_EQ(s.late.load(), 0u);
  }
  stop.store(true);
  for (auto& t : senders) t.join();
  EXPECT_GT(stay.got.load(), 0u);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
