#include "emu/fabric.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <memory>
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
  // On a loaded machine the senders may not have run yet.
  while (stay.got.load() == 0) std::this_thread::yield();
  stop.store(true);
  for (auto& t : senders) t.join();
}

// A sink that tells batches from single deliveries.
class BatchSink : public CountingSink {
 public:
  void deliver_batch(std::vector<Packet>* pkts) override {
    if (detached.load()) late.fetch_add(1);
    batches.fetch_add(1);
    for (const Packet& p : *pkts) tokens.push_back(p.token);
    got.fetch_add(pkts->size());
    pkts->clear();
  }
  std::atomic<uint64_t> batches{0};
  std::vector<uint64_t> tokens;  // written by the one sending thread
};

Packet with_token(uint64_t t, size_t bytes = 0) {
  Packet p;
  p.token = t;
  p.payload.resize(bytes);
  return p;
}

// What a batch sends reaches each destination at batch_end, all at once and in order; a send's
// result is known at once; a copy leaves the caller's packet (and a borrowed payload's bytes)
// as they were.
TEST(InProcFabric, ABatchHandsEachDestinationItsPacketsAtOnce) {
  InProcFabric f;
  BatchSink a, b;
  ASSERT_EQ(f.attach(gid_of(1), &a), 0);
  ASSERT_EQ(f.attach(gid_of(2), &b), 0);
  SendBatch batch;
  f.batch_begin(&batch);
  EXPECT_EQ(f.send(gid_of(1), with_token(1)), 0);
  EXPECT_EQ(f.send(gid_of(2), with_token(2)), 0);
  std::vector<uint8_t> lent(300, 7);
  Packet kept = with_token(3);
  kept.payload.view(lent.data(), lent.size());
  uint64_t mark = 9;
  EXPECT_EQ(f.send_copy(gid_of(1), kept, &mark), 0);
  EXPECT_EQ(mark, 0u);
  EXPECT_EQ(f.send(gid_of(3), with_token(4)), -EHOSTUNREACH);
  EXPECT_EQ(f.send_copy(gid_of(3), kept, &mark), -EHOSTUNREACH);
  EXPECT_TRUE(kept.payload.borrowed());
  lent[0] = 8;  // the queued copy owns its bytes already
  EXPECT_EQ(f.send(gid_of(1), with_token(5)), 0);
  EXPECT_EQ(a.got.load() + b.got.load(), 0u);  // nothing handed over yet
  f.batch_end();
  EXPECT_EQ(a.batches.load(), 1u);
  EXPECT_EQ(b.batches.load(), 1u);
  EXPECT_EQ(a.tokens, (std::vector<uint64_t>{1, 3, 5}));
  EXPECT_EQ(b.tokens, (std::vector<uint64_t>{2}));
  // Closed: sends go out at once again.
  EXPECT_EQ(f.send(gid_of(2), with_token(6)), 0);
  EXPECT_EQ(b.got.load(), 2u);
  EXPECT_EQ(b.batches.load(), 1u);
}

// Pairs nest (the outer end hands over); another fabric's sends are not held by this one's
// batch; destinations beyond the queues a batch has are delivered to at once.
TEST(InProcFabric, BatchesNestAndBelongToOneFabric) {
  InProcFabric f, g;
  BatchSink a, other;
  ASSERT_EQ(f.attach(gid_of(1), &a), 0);
  ASSERT_EQ(g.attach(gid_of(1), &other), 0);
  std::vector<std::unique_ptr<BatchSink>> many;
  for (int i = 0; i < SendBatch::kQueues + 2; ++i) {
    many.emplace_back(new BatchSink());
    ASSERT_EQ(f.attach(gid_of(static_cast<uint8_t>(10 + i)), many.back().get()), 0);
  }
  SendBatch outer, inner;
  f.batch_begin(&outer);
  f.batch_begin(&inner);
  g.batch_begin(&inner);  // not g's: this thread's batch is f's
  EXPECT_EQ(f.send(gid_of(1), with_token(1)), 0);
  EXPECT_EQ(g.send(gid_of(1), with_token(2)), 0);
  EXPECT_EQ(other.got.load(), 1u);
  EXPECT_EQ(other.batches.load(), 0u);
  g.batch_end();
  f.batch_end();
  EXPECT_EQ(a.got.load(), 0u);  // the inner end hands nothing over
  for (size_t i = 0; i < many.size(); ++i) {
    EXPECT_EQ(f.send(gid_of(static_cast<uint8_t>(10 + i)), with_token(10 + i)), 0);
  }
  // a holds one queue: kQueues - 1 more are queued, the rest delivered one by one.
  size_t direct = 0;
  for (auto& s : many) direct += s->got.load();
  EXPECT_EQ(direct, many.size() - (SendBatch::kQueues - 1));
  f.batch_end();
  EXPECT_EQ(a.batches.load(), 1u);
  EXPECT_EQ(a.tokens, (std::vector<uint64_t>{1}));
  size_t batched = 0;
  for (auto& s : many) {
    EXPECT_EQ(s->got.load(), 1u);
    batched += s->batches.load();
  }
  EXPECT_EQ(batched, SendBatch::kQueues - 1u);
}

// A detach waits for a batch on another thread that may have queued packets for its sink: its
// sink gets them before detach returns, never after.
TEST(InProcFabric, DetachWaitsForAnOpenBatch) {
  InProcFabric f;
  BatchSink stay;
  ASSERT_EQ(f.attach(gid_of(1), &stay), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::thread sender([&] {
    SendBatch batch;
    while (!stop.load()) {
      f.batch_begin(&batch);
      for (int i = 0; i < 8; ++i) {
        f.send(gid_of(1), Packet());
        if (f.send(gid_of(2), Packet()) == 0) sent.fetch_add(1);
      }
      std::this_thread::yield();
      f.batch_end();
    }
  });
  while (stay.got.load() == 0) std::this_thread::yield();  // the sender runs
  uint64_t got = 0;
  for (int round = 0; round < 20; ++round) {
    BatchSink s;
    ASSERT_EQ(f.attach(gid_of(2), &s), 0);
    std::this_thread::yield();
    f.detach(gid_of(2));
    s.detached.store(true);
    std::this_thread::yield();
    EXPECT_EQ(s.late.load(), 0u);
    got += s.got.load();
  }
  stop.store(true);
  sender.join();
  EXPECT_EQ(got, sent.load());  // every packet queued for a sink reached it
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
