// FI_MULTI_RECV on the protocol fabric between two processes, through the public API, over
// shared memory, UDP, and shared memory with loss and reordering: untagged messages filling
// one buffer at successive offsets, its release once the space left falls below
// FI_OPT_MIN_MULTI_RECV (the FI_MULTI_RECV flag on the completion after which the buffer is the
// application's again), a message that no longer fits going to the next receive, messages that
// arrived before the buffer was posted, a rendezvous message landing in it, and fi_cancel; and
// the same for tagged receives (FI_TAGGED_MULTI_RECV): the messages whose tag matches under
// the ignore mask fill the buffer, the others go to the receives they match.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/group_util.h"

namespace xpufab::efa_fabric {
namespace {

constexpr size_t kBuf = 8u << 20;

fi_info* multi_recv_hints() {
  fi_info* h = protocol_hints();
  h->caps |= FI_MULTI_RECV | FI_SOURCE;
  return h;
}

// A successful completion read with its source, else the process fails.
fi_cq_tagged_entry expect_from(Node& n, fi_addr_t* src, int ms = 20000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  fi_cq_tagged_entry e{};
  for (;;) {
    const ssize_t rc = fi_cq_readfrom(n.cq(), &e, 1, src);
    if (rc == 1) return e;
    if (rc == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      GROUP_CHECK(fi_cq_readerr(n.cq(), &err, 0) == 1);
      fprintf(stderr, "error completion: err %d len %zu flags %#llx\n", err.err, err.len,
              static_cast<unsigned long long>(err.flags));
      GROUP_CHECK(false);
    }
    GROUP_CHECK(rc == -FI_EAGAIN);
    GROUP_CHECK(std::chrono::steady_clock::now() < deadline);
  }
}

// fi_recvmsg of [at, at + len) with `flags`.
ssize_t post_recv(Node& n, size_t at, size_t len, void* ctx, uint64_t flags) {
  iovec iov{n.at(at), len};
  void* desc = n.desc();
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = FI_ADDR_UNSPEC;
  msg.context = ctx;
  return fi_recvmsg(n.ep(), &msg, flags);
}

void set_min(Node& n, size_t v) {
  GROUP_CHECK(fi_setopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof(v)) == 0);
}

// Sends `len` bytes of pattern `seed` from offset `at` and waits for the send's completion.
void send_one(Node& n, fi_addr_t peer, size_t at, size_t len, uint32_t seed) {
  fill(n.at(at), len, seed);
  GROUP_CHECK(post_retrying(n, [&] { return fi_send(n.ep(), n.at(at), len, n.desc(), peer, nullptr); }) == 0);
  const fi_cq_tagged_entry e = n.expect(60000);
  GROUP_CHECK((e.flags & (FI_SEND | FI_MSG)) == (FI_SEND | FI_MSG));
}

// fi_trecvmsg of [at, at + len) for `tag` under `ignore` with `flags`.
ssize_t post_trecv(Node& n, size_t at, size_t len, uint64_t tag, uint64_t ignore, void* ctx,
                   uint64_t flags) {
  iovec iov{n.at(at), len};
  void* desc = n.desc();
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = FI_ADDR_UNSPEC;
  msg.tag = tag;
  msg.ignore = ignore;
  msg.context = ctx;
  return fi_trecvmsg(n.ep(), &msg, flags);
}

// Sends `len` bytes of pattern `seed` tagged `tag` and waits for the send's completion.
void tsend_one(Node& n, fi_addr_t peer, size_t at, size_t len, uint64_t tag, uint32_t seed) {
  fill(n.at(at), len, seed);
  GROUP_CHECK(post_retrying(n, [&] {
                return fi_tsend(n.ep(), n.at(at), len, n.desc(), peer, tag, nullptr);
              }) == 0);
  const fi_cq_tagged_entry e = n.expect(60000);
  GROUP_CHECK((e.flags & (FI_SEND | FI_TAGGED)) == (FI_SEND | FI_TAGGED));
}

bool is_tagged_part(const fi_cq_tagged_entry& e) {
  return (e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED) && !(e.flags & FI_MSG);
}

bool is_multi_part(const fi_cq_tagged_entry& e) {
  return (e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG) && !(e.flags & FI_TAGGED);
}

class MultiRecv : public ::testing::TestWithParam<Wire> {
 protected:
  // Runs `fn` in two processes; rank 0 receives, rank 1 sends.
  template <typename Fn>
  void pair(Fn fn) {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::vector<int> st = run_group(2, 120, [&](Member& m) {
      Node n(kBuf, multi_recv_hints());
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p.addr[1 - m.rank()]);
      m.barrier();
      m.set_idle(nullptr);
    });
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0], 0) << "receiver";
    EXPECT_EQ(st[1], 0) << "sender";
  }
};

// Six messages into one 1 KiB buffer: each at the next offset with its own completion, the
// sixth leaving 44 bytes (< 64, the default minimum) and so releasing it with FI_MULTI_RECV; a
// seventh goes to the plain receive posted after it.
TEST_P(MultiRecv, MessagesFillOneBufferAndTheLastReleasesIt) {
  constexpr size_t kSizes[] = {100, 200, 50, 300, 150, 180};
  pair([&](Member& m, Node& n, fi_addr_t peer) {
    int ctx = 0, plain = 0;
    if (m.rank() == 0) {
      size_t min = 0, len = sizeof(min);
      GROUP_CHECK(fi_getopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len) == 0);
      GROUP_CHECK(len == sizeof(size_t) && min == 64);
      GROUP_CHECK(post_recv(n, 0, 1024, &ctx, FI_MULTI_RECV) == 0);
      GROUP_CHECK(fi_recv(n.ep(), n.at(1 << 20), 4096, n.desc(), FI_ADDR_UNSPEC, &plain) == 0);
      m.barrier();
      size_t off = 0;
      for (size_t i = 0; i < 6; ++i) {
        fi_addr_t src = FI_ADDR_NOTAVAIL;
        const fi_cq_tagged_entry e = expect_from(n, &src, 60000);
        GROUP_CHECK(is_multi_part(e) && e.op_context == &ctx && src == peer);
        GROUP_CHECK(e.buf == n.at(off) && e.len == kSizes[i]);
        GROUP_CHECK(has_pattern(n.at(off), kSizes[i], static_cast<uint32_t>(i)));
        GROUP_CHECK(((e.flags & FI_MULTI_RECV) != 0) == (i == 5));
        off += kSizes[i];
      }
      const fi_cq_tagged_entry e = n.expect(60000);
      GROUP_CHECK(e.op_context == &plain && e.len == 64 && !(e.flags & FI_MULTI_RECV));
      GROUP_CHECK(has_pattern(n.at(1 << 20), 64, 7));
    } else {
      m.barrier();
      for (size_t i = 0; i < 6; ++i) send_one(n, peer, 0, kSizes[i], static_cast<uint32_t>(i));
      send_one(n, peer, 0, 64, 7);
    }
  });
}

// With a minimum of 16: a message the first buffer has no room for goes to the second one, a
// later smaller one still lands in the first (and releases it); fi_cancel releases the second
// with an FI_ECANCELED entry.
TEST_P(MultiRecv, AMessageThatDoesNotFitGoesToTheNextBuffer) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int a = 0, b = 0;
    if (m.rank() == 0) {
      set_min(n, 16);
      size_t min = 0, len = sizeof(min);
      GROUP_CHECK(fi_getopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len) == 0);
      GROUP_CHECK(min == 16);
      GROUP_CHECK(post_recv(n, 0, 512, &a, FI_MULTI_RECV) == 0);
      GROUP_CHECK(post_recv(n, 4096, 4096, &b, FI_MULTI_RECV) == 0);
      m.barrier();
      fi_cq_tagged_entry e = n.expect(60000);
      GROUP_CHECK(e.op_context == &a && e.buf == n.at(0) && e.len == 400 && !(e.flags & FI_MULTI_RECV));
      e = n.expect(60000);
      GROUP_CHECK(e.op_context == &b && e.buf == n.at(4096) && e.len == 200 && !(e.flags & FI_MULTI_RECV));
      e = n.expect(60000);
      GROUP_CHECK(e.op_context == &a && e.buf == n.at(400) && e.len == 100 && (e.flags & FI_MULTI_RECV));
      GROUP_CHECK(has_pattern(n.at(0), 400, 1) && has_pattern(n.at(4096), 200, 2) &&
                  has_pattern(n.at(400), 100, 3));
      m.barrier();
      // The next message lands after the first in the second buffer.
      e = n.expect(60000);
      GROUP_CHECK(e.op_context == &b && e.buf == n.at(4096 + 200) && e.len == 300);
      GROUP_CHECK(fi_cancel(&n.ep()->fid, &b) == 0);
      const fi_cq_err_entry err = n.expect_error();
      GROUP_CHECK(err.err == FI_ECANCELED && err.op_context == &b && (err.flags & FI_MULTI_RECV));
      GROUP_CHECK(fi_cancel(&n.ep()->fid, &b) == -FI_ENOENT);
      n.expect_nothing(50);
    } else {
      m.barrier();
      send_one(n, peer, 0, 400, 1);
      send_one(n, peer, 0, 200, 2);
      send_one(n, peer, 0, 100, 3);
      m.barrier();
      send_one(n, peer, 0, 300, 4);
    }
  });
}

// Messages that arrived before the buffer was posted fill it in arrival order when it is.
TEST_P(MultiRecv, UnexpectedMessagesFillTheBufferWhenPosted) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int ctx = 0;
    if (m.rank() == 1) {
      for (uint32_t i = 0; i < 3; ++i) send_one(n, peer, 0, 64 + i * 8, 10 + i);
      GROUP_CHECK(fi_tinject(n.ep(), n.at(0), 8, peer, 77) == 0);
      return;
    }
    // The receiver handles each sender's packets in order: once the tagged message that followed
    // them is here, the three untagged ones wait as unexpected.
    int tctx = 0;
    GROUP_CHECK(fi_trecv(n.ep(), n.at(1 << 20), 64, n.desc(), FI_ADDR_UNSPEC, 77, 0, &tctx) == 0);
    GROUP_CHECK(n.expect(60000).op_context == &tctx);
    GROUP_CHECK(post_recv(n, 0, 8192, &ctx, FI_MULTI_RECV) == 0);
    size_t off = 0;
    for (uint32_t i = 0; i < 3; ++i) {
      const fi_cq_tagged_entry e = n.expect(60000);
      GROUP_CHECK(is_multi_part(e) && e.op_context == &ctx && e.buf == n.at(off) && e.len == 64 + i * 8);
      GROUP_CHECK(has_pattern(n.at(off), e.len, 10 + i) && !(e.flags & FI_MULTI_RECV));
      off += e.len;
    }
    GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == 0);
    const fi_cq_err_entry err = n.expect_error();
    GROUP_CHECK(err.err == FI_ECANCELED && err.op_context == &ctx && (err.flags & FI_MULTI_RECV));
  });
}

// A rendezvous message (1 MiB, far above one packet) between two eager ones: all three land
// at their offsets; the buffer is released by the third, and the flag is on whichever of them
// completes last (the buffer is the application's only once the read into it is done).
void rendezvous_into_buffer(Member& m, Node& n, fi_addr_t peer) {
  constexpr size_t kBig = 1u << 20;
  int ctx = 0;
  if (m.rank() == 0) {
    // Room for the three and 40 bytes: below the default minimum, so the third releases it.
    GROUP_CHECK(post_recv(n, 0, 64 + kBig + 64 + 40, &ctx, FI_MULTI_RECV) == 0);
    m.barrier();
    std::vector<fi_cq_tagged_entry> got;
    for (int i = 0; i < 3; ++i) got.push_back(n.expect(60000));
    for (int i = 0; i < 3; ++i) GROUP_CHECK(((got[i].flags & FI_MULTI_RECV) != 0) == (i == 2));
    std::sort(got.begin(), got.end(), [](const fi_cq_tagged_entry& x, const fi_cq_tagged_entry& y) {
      return x.buf < y.buf;
    });
    GROUP_CHECK(got[0].buf == n.at(0) && got[0].len == 64);
    GROUP_CHECK(got[1].buf == n.at(64) && got[1].len == kBig);
    GROUP_CHECK(got[2].buf == n.at(64 + kBig) && got[2].len == 64);
    for (const auto& e : got) GROUP_CHECK(e.op_context == &ctx && is_multi_part(e));
    GROUP_CHECK(has_pattern(n.at(0), 64, 1) && has_pattern(n.at(64), kBig, 2) &&
                has_pattern(n.at(64 + kBig), 64, 3));
    GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == -FI_ENOENT);
  } else {
    m.barrier();
    fill(n.at(0), 64, 1);
    fill(n.at(4096), kBig, 2);
    fill(n.at(2u << 20), 64, 3);
    for (size_t at : {size_t{0}, size_t{4096}, size_t{2u << 20}}) {
      const size_t len = at == 4096 ? kBig : 64;
      GROUP_CHECK(post_retrying(n, [&] { return fi_send(n.ep(), n.at(at), len, n.desc(), peer, nullptr); }) == 0);
    }
    for (int i = 0; i < 3; ++i) GROUP_CHECK((n.expect(60000).flags & FI_SEND) != 0);
  }
}

// fi_cancel of a buffer a rendezvous message may still be landing in: its FI_ECANCELED entry
// (with FI_MULTI_RECV) comes after the completions of every message that landed in it.
void cancel_after_parts(Member& m, Node& n, fi_addr_t peer) {
  constexpr size_t kBig = 1u << 20;
  int ctx = 0;
  if (m.rank() == 1) {
    fill(n.at(0), kBig, 5);
    fill(n.at(2u << 20), 64, 6);
    m.barrier();
    GROUP_CHECK(post_retrying(n, [&] { return fi_send(n.ep(), n.at(0), kBig, n.desc(), peer, nullptr); }) == 0);
    GROUP_CHECK(post_retrying(n, [&] { return fi_send(n.ep(), n.at(2u << 20), 64, n.desc(), peer, nullptr); }) == 0);
    for (int i = 0; i < 2; ++i) GROUP_CHECK((n.expect(60000).flags & FI_SEND) != 0);
    return;
  }
  GROUP_CHECK(post_recv(n, 0, 4u << 20, &ctx, FI_MULTI_RECV) == 0);
  m.barrier();
  bool big = false, small = false;
  while (!small) {
    const fi_cq_tagged_entry e = n.expect(60000);
    GROUP_CHECK(e.op_context == &ctx && !(e.flags & FI_MULTI_RECV));
    if (e.len == kBig) big = true;
    else small = e.len == 64 && e.buf == n.at(kBig);
    GROUP_CHECK(big || small);
  }
  GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == 0);
  for (;;) {
    fi_cq_tagged_entry e{};
    fi_cq_err_entry err{};
    const int rc = n.wait(&e, &err, 60000);
    GROUP_CHECK(rc == 1 || rc == -FI_EAVAIL);
    if (rc == -FI_EAVAIL) {
      GROUP_CHECK(err.err == FI_ECANCELED && err.op_context == &ctx && (err.flags & FI_MULTI_RECV));
      break;
    }
    GROUP_CHECK(!big && e.len == kBig && e.op_context == &ctx && !(e.flags & FI_MULTI_RECV));
    big = true;
  }
  GROUP_CHECK(big && has_pattern(n.at(0), kBig, 5) && has_pattern(n.at(kBig), 64, 6));
}

TEST_P(MultiRecv, ARendezvousMessageLandsInTheBuffer) { pair(rendezvous_into_buffer); }

// The same on EFA gen1, without RDMA read: the sender pushes the message into its part.
TEST_P(MultiRecv, ARendezvousMessageLandsInTheBufferWithoutRdmaRead) {
  setenv("FI_EFA_EMU_PROFILE", "gen1", 1);
  pair(rendezvous_into_buffer);
  unsetenv("FI_EFA_EMU_PROFILE");
}

TEST_P(MultiRecv, CancelWaitsForTheMessagesLandingInIt) { pair(cancel_after_parts); }

TEST_P(MultiRecv, CancelWaitsForTheMessagesLandingInItWithoutRdmaRead) {
  setenv("FI_EFA_EMU_PROFILE", "gen1", 1);
  pair(cancel_after_parts);
  unsetenv("FI_EFA_EMU_PROFILE");
}

// One endpoint: the option's bounds, what FI_MULTI_RECV refuses, and a buffer already below
// the minimum when posted (released at once: a length-0 FI_MULTI_RECV entry). In a forked
// process like the others: the parent never opens a device, which its children would inherit.
TEST_P(MultiRecv, OptionAndRefusals) {
  use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::vector<int> st = run_group(1, 60, [](Member&) {
    Node n(1 << 16, multi_recv_hints());
    GROUP_CHECK(n.info()->caps & FI_MULTI_RECV);
    GROUP_CHECK(n.info()->rx_attr->caps & FI_MULTI_RECV);
    size_t v = 256, len = sizeof(v);
    GROUP_CHECK(fi_setopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof(int)) ==
                -FI_EINVAL);
    GROUP_CHECK(fi_setopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof(v)) == 0);
    v = 0;
    GROUP_CHECK(fi_getopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &len) == 0);
    GROUP_CHECK(v == 256);
    len = 1;
    GROUP_CHECK(fi_getopt(&n.ep()->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &len) ==
                -FI_ETOOSMALL);
    GROUP_CHECK(len == sizeof(size_t));

    // FI_TAGGED_MULTI_RECV is offered; a tagged multi-receive buffer takes no FI_PEEK, FI_CLAIM
    // or FI_DISCARD, and no multi-receive buffer comes in several pieces.
    GROUP_CHECK(n.info()->caps & FI_TAGGED_MULTI_RECV);
    GROUP_CHECK(n.info()->rx_attr->caps & FI_TAGGED_MULTI_RECV);
    int ctx = 0;
    iovec iov[2] = {{n.at(0), 128}, {n.at(256), 128}};
    void* desc[2] = {n.desc(), n.desc()};
    fi_msg_tagged tm{};
    tm.msg_iov = iov;
    tm.desc = desc;
    tm.iov_count = 1;
    tm.addr = FI_ADDR_UNSPEC;
    tm.context = &ctx;
    for (uint64_t f : {uint64_t{FI_PEEK}, uint64_t{FI_CLAIM}, uint64_t{FI_PEEK | FI_DISCARD}})
      GROUP_CHECK(fi_trecvmsg(n.ep(), &tm, FI_MULTI_RECV | f) == -FI_EINVAL);
    tm.iov_count = 2;
    GROUP_CHECK(fi_trecvmsg(n.ep(), &tm, FI_MULTI_RECV) == -FI_EINVAL);
    fi_msg msg{};
    msg.msg_iov = iov;
    msg.desc = desc;
    msg.iov_count = 2;
    msg.addr = FI_ADDR_UNSPEC;
    msg.context = &ctx;
    GROUP_CHECK(fi_recvmsg(n.ep(), &msg, FI_MULTI_RECV) == -FI_EINVAL);

    // 128 bytes < 256: released as posted, no message in it.
    GROUP_CHECK(post_recv(n, 0, 128, &ctx, FI_MULTI_RECV) == 0);
    const fi_cq_tagged_entry e = n.expect(5000);
    GROUP_CHECK(e.op_context == &ctx && e.len == 0);
    GROUP_CHECK((e.flags & (FI_RECV | FI_MSG | FI_MULTI_RECV)) == (FI_RECV | FI_MSG | FI_MULTI_RECV));
    GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == -FI_ENOENT);
  });
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0], 0);
}

// A tagged buffer for tags 0x500-0x5ff: two eager messages and a rendezvous one with such tags
// land in it at successive offsets with their own tags, the last to complete releasing it; a
// message tagged 0x900 between them goes to the receive for 0x900 instead.
TEST_P(MultiRecv, TaggedMessagesMatchingTheBufferFillIt) {
  constexpr size_t kRndv = 20000;  // above the eager limit of one packet
  constexpr size_t kSizes[] = {100, 200, kRndv};
  constexpr uint64_t kTags[] = {0x501, 0x5ff, 0x510};
  pair([&](Member& m, Node& n, fi_addr_t peer) {
    int ctx = 0, plain = 0;
    if (m.rank() == 0) {
      // Room for the three and 40 bytes: below the default minimum, so the third releases it.
      GROUP_CHECK(post_trecv(n, 0, 100 + 200 + kRndv + 40, 0x500, 0xff, &ctx, FI_MULTI_RECV) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(1 << 20), 4096, n.desc(), FI_ADDR_UNSPEC, 0x900, 0,
                           &plain) == 0);
      m.barrier();
      std::vector<fi_cq_tagged_entry> got;
      bool plain_seen = false;
      while (got.size() < 3 || !plain_seen) {
        const fi_cq_tagged_entry e = n.expect(60000);
        if (e.op_context == &plain) {
          GROUP_CHECK(!plain_seen && e.tag == 0x900 && e.len == 64 && !(e.flags & FI_MULTI_RECV));
          GROUP_CHECK(has_pattern(n.at(1 << 20), 64, 9));
          plain_seen = true;
          continue;
        }
        GROUP_CHECK(e.op_context == &ctx && is_tagged_part(e));
        got.push_back(e);
      }
      for (size_t i = 0; i < 3; ++i) GROUP_CHECK(((got[i].flags & FI_MULTI_RECV) != 0) == (i == 2));
      std::sort(got.begin(), got.end(),
                [](const fi_cq_tagged_entry& x, const fi_cq_tagged_entry& y) { return x.buf < y.buf; });
      size_t off = 0;
      for (size_t i = 0; i < 3; ++i) {
        GROUP_CHECK(got[i].buf == n.at(off) && got[i].len == kSizes[i] && got[i].tag == kTags[i]);
        GROUP_CHECK(has_pattern(n.at(off), kSizes[i], static_cast<uint32_t>(i + 1)));
        off += kSizes[i];
      }
      GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == -FI_ENOENT);
    } else {
      m.barrier();
      tsend_one(n, peer, 0, kSizes[0], kTags[0], 1);
      tsend_one(n, peer, 0, 64, 0x900, 9);
      tsend_one(n, peer, 0, kSizes[1], kTags[1], 2);
      tsend_one(n, peer, 0, kSizes[2], kTags[2], 3);
    }
  });
}

// Tagged messages that arrived before the buffer was posted fill it when it is, those of other
// tags staying unexpected for the receives that match them; fi_cancel then releases it.
TEST_P(MultiRecv, UnexpectedTaggedMessagesFillTheBufferWhenPosted) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int ctx = 0, other = 0, last = 0;
    if (m.rank() == 1) {
      tsend_one(n, peer, 0, 80, 0x700, 20);
      tsend_one(n, peer, 0, 90, 0x800, 21);
      tsend_one(n, peer, 0, 70, 0x701, 22);
      GROUP_CHECK(fi_tinject(n.ep(), n.at(0), 8, peer, 77) == 0);
      return;
    }
    // Once the last message is here, the three before it wait as unexpected (each sender's
    // packets are handled in order).
    GROUP_CHECK(fi_trecv(n.ep(), n.at(1 << 20), 64, n.desc(), FI_ADDR_UNSPEC, 77, 0, &last) == 0);
    GROUP_CHECK(n.expect(60000).op_context == &last);
    GROUP_CHECK(post_trecv(n, 0, 8192, 0x700, 0x1, &ctx, FI_MULTI_RECV) == 0);
    fi_cq_tagged_entry e = n.expect(60000);
    GROUP_CHECK(is_tagged_part(e) && e.op_context == &ctx && e.buf == n.at(0) && e.len == 80);
    GROUP_CHECK(e.tag == 0x700 && has_pattern(n.at(0), 80, 20) && !(e.flags & FI_MULTI_RECV));
    e = n.expect(60000);
    GROUP_CHECK(is_tagged_part(e) && e.op_context == &ctx && e.buf == n.at(80) && e.len == 70);
    GROUP_CHECK(e.tag == 0x701 && has_pattern(n.at(80), 70, 22) && !(e.flags & FI_MULTI_RECV));
    GROUP_CHECK(fi_trecv(n.ep(), n.at(1 << 21), 4096, n.desc(), FI_ADDR_UNSPEC, 0x800, 0,
                         &other) == 0);
    e = n.expect(60000);
    GROUP_CHECK(e.op_context == &other && e.len == 90 && has_pattern(n.at(1 << 21), 90, 21));
    GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == 0);
    const fi_cq_err_entry err = n.expect_error();
    GROUP_CHECK(err.err == FI_ECANCELED && err.op_context == &ctx && (err.flags & FI_MULTI_RECV));
    GROUP_CHECK((err.flags & FI_TAGGED) != 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Wire, MultiRecv,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
