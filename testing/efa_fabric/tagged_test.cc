// Tagged messages and messages beyond the MTU between two processes on the protocol fabric,
// through the public API, over shared memory, UDP, and shared memory with loss and reordering:
// matching out of order and in posting order, unexpected messages with FI_PEEK / FI_CLAIM /
// FI_DISCARD, ignore masks, fi_cancel, 4 MiB tagged and untagged messages, remote CQ data,
// truncation, scatter/gather over several buffers, posting order, and blocking CQ reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/group_util.h"

namespace xpufab::efa_fabric {
namespace {

constexpr size_t kBuf = 16u << 20;
constexpr size_t kFourMiB = 4u << 20;

class Tagged : public ::testing::TestWithParam<Wire> {
 protected:
  // Runs `fn` in two processes; rank 0 receives, rank 1 sends.
  template <typename Fn>
  void pair(Fn fn) {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::vector<int> st = run_group(2, 120, [&](Member& m) {
      Node n(kBuf);
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p.addr[1 - m.rank()]);
      m.barrier();  // neither side closes while the other may still need it
      m.set_idle(nullptr);
    });
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0], 0) << "receiver";
    EXPECT_EQ(st[1], 0) << "sender";
  }
};

bool is_recv(const fi_cq_tagged_entry& e) { return (e.flags & (FI_TAGGED | FI_RECV)) == (FI_TAGGED | FI_RECV); }
bool is_send(const fi_cq_tagged_entry& e) { return (e.flags & (FI_TAGGED | FI_SEND)) == (FI_TAGGED | FI_SEND); }

TEST_P(Tagged, ReceivesMatchByTagWhateverTheOrder) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int ctx[4];
    if (m.rank() == 0) {
      for (uint64_t tag : {3, 2, 1})
        GROUP_CHECK(fi_trecv(n.ep(), n.at(tag * 4096), 64, n.desc(), FI_ADDR_UNSPEC, tag, 0,
                             &ctx[tag]) == 0);
      m.barrier();
      bool seen[4] = {};
      for (int i = 0; i < 3; ++i) {
        const fi_cq_tagged_entry e = n.expect();
        GROUP_CHECK(is_recv(e) && e.tag >= 1 && e.tag <= 3 && !seen[e.tag]);
        seen[e.tag] = true;
        GROUP_CHECK(e.op_context == &ctx[e.tag] && e.len == 64);
        GROUP_CHECK(has_pattern(n.at(e.tag * 4096), 64, static_cast<uint32_t>(e.tag)));
      }
    } else {
      m.barrier();
      for (uint64_t tag : {1, 2, 3}) {
        fill(n.at(tag * 4096), 64, static_cast<uint32_t>(tag));
        GROUP_CHECK(fi_tsend(n.ep(), n.at(tag * 4096), 64, n.desc(), peer, tag, &ctx[tag]) == 0);
      }
      for (int i = 0; i < 3; ++i) GROUP_CHECK(is_send(n.expect()));
    }
    m.barrier();
    // Receives are matched in posting order: a message both match goes to the older one.
    if (m.rank() == 0) {
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 64, n.desc(), FI_ADDR_UNSPEC, 0, ~uint64_t{0},
                           &ctx[0]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(4096), 64, n.desc(), FI_ADDR_UNSPEC, 0x100, 0,
                           &ctx[1]) == 0);
      m.barrier();
      fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[0] && e.tag == 0x100);
      m.barrier();
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[1] && e.tag == 0x100);
    } else {
      for (int round = 0; round < 2; ++round) {
        m.barrier();
        GROUP_CHECK(fi_tinject(n.ep(), n.at(0), 8, peer, 0x100) == 0);
      }
    }
  });
}

TEST_P(Tagged, IgnoreMaskAndSourceSelect) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int ctx[2];
    if (m.rank() == 0) {
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 64, n.desc(), FI_ADDR_UNSPEC, 0xac00, 0xff,
                           &ctx[0]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(4096), 64, n.desc(), peer, 0xab00, 0xff, &ctx[1]) == 0);
      m.barrier();
      fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[1] && e.tag == 0xab42 && e.len == 16);
      GROUP_CHECK(has_pattern(n.at(4096), 16, 42));
      m.barrier();
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[0] && e.tag == 0xac07);
    } else {
      m.barrier();
      fill(n.at(0), 16, 42);
      GROUP_CHECK(fi_tsend(n.ep(), n.at(0), 16, n.desc(), peer, 0xab42, nullptr) == 0);
      GROUP_CHECK(is_send(n.expect()));
      m.barrier();
      GROUP_CHECK(fi_tinject(n.ep(), n.at(0), 16, peer, 0xac07) == 0);
    }
  });
}

// Messages that arrived before any receive wait on the unexpected list; FI_PEEK finds them,
// FI_CLAIM reserves one for a later receive, FI_DISCARD drops one.
TEST_P(Tagged, UnexpectedMessagesPeekClaimDiscard) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    constexpr size_t kBig = 256u << 10;  // well above one eager message
    if (m.rank() == 1) {
      for (uint32_t t = 10; t <= 13; ++t) {
        fill(n.at(t * 4096), 64, t);
        GROUP_CHECK(fi_tsend(n.ep(), n.at(t * 4096), 64, n.desc(), peer, t, nullptr) == 0);
      }
      fill(n.at(1u << 20), kBig, 14);
      GROUP_CHECK(fi_tsend(n.ep(), n.at(1u << 20), kBig, n.desc(), peer, 14, nullptr) == 0);
      m.barrier();
      // The big one completes only once the receiver took it; discarded ones complete too.
      for (int i = 0; i < 5; ++i) GROUP_CHECK(is_send(n.expect()));
      m.barrier();
      return;
    }
    m.barrier();
    fi_context pctx{};
    fi_msg_tagged msg{};
    iovec iov{};
    void* desc = n.desc();
    auto peek = [&](uint64_t tag, uint64_t flags, fi_context* c) {
      iov = {n.at(0), 64};
      msg = {};
      msg.msg_iov = &iov;
      msg.desc = &desc;
      msg.iov_count = 1;
      msg.addr = FI_ADDR_UNSPEC;
      msg.tag = tag;
      msg.context = c;
      return fi_trecvmsg(n.ep(), &msg, flags);
    };
    // Peek until the rendezvous-sized message is there: then all five have arrived or are
    // arriving, and none has a receive.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      GROUP_CHECK(std::chrono::steady_clock::now() < deadline);
      GROUP_CHECK(peek(14, FI_PEEK, &pctx) == 0);
      fi_cq_tagged_entry e{};
      fi_cq_err_entry err{};
      const int rc = n.wait(&e, &err);
      if (rc == 1) {
        GROUP_CHECK(e.op_context == &pctx && e.tag == 14 && e.len == kBig);
        break;
      }
      GROUP_CHECK(rc == -FI_EAVAIL && err.err == FI_ENOMSG && err.op_context == &pctx);
    }
    for (uint32_t t = 10; t <= 13; ++t) {  // the eager ones can still be in flight
      for (;;) {
        GROUP_CHECK(std::chrono::steady_clock::now() < deadline);
        GROUP_CHECK(peek(t, FI_PEEK, &pctx) == 0);
        fi_cq_tagged_entry e{};
        fi_cq_err_entry err{};
        if (n.wait(&e, &err) == 1) {
          GROUP_CHECK(e.tag == t && e.len == 64);
          break;
        }
        GROUP_CHECK(err.err == FI_ENOMSG);
      }
    }
    // FI_PEEK | FI_CLAIM, then the claimed message into a buffer.
    fi_context claim{};
    GROUP_CHECK(peek(11, FI_PEEK | FI_CLAIM, &claim) == 0);
    fi_cq_tagged_entry e = n.expect();
    GROUP_CHECK(e.op_context == &claim && e.tag == 11);
    // A peek no longer sees a claimed message.
    GROUP_CHECK(peek(11, FI_PEEK, &pctx) == 0);
    GROUP_CHECK(n.expect_error().err == FI_ENOMSG);
    memset(n.at(0), 0, 64);
    GROUP_CHECK(peek(11, FI_CLAIM, &claim) == 0);
    e = n.expect();
    GROUP_CHECK(e.op_context == &claim && e.tag == 11 && e.len == 64 && has_pattern(n.at(0), 64, 11));
    // FI_PEEK | FI_DISCARD drops it.
    GROUP_CHECK(peek(12, FI_PEEK | FI_DISCARD, &pctx) == 0);
    e = n.expect();
    GROUP_CHECK(e.tag == 12);
    GROUP_CHECK(peek(12, FI_PEEK, &pctx) == 0);
    GROUP_CHECK(n.expect_error().err == FI_ENOMSG);
    // Ordinary receives take the rest, the big one straight into its buffer.
    int ctx[3];
    GROUP_CHECK(fi_trecv(n.ep(), n.at(1u << 20), kBig, n.desc(), FI_ADDR_UNSPEC, 14, 0, &ctx[0]) == 0);
    GROUP_CHECK(fi_trecv(n.ep(), n.at(13 * 4096), 64, n.desc(), FI_ADDR_UNSPEC, 13, 0, &ctx[1]) == 0);
    GROUP_CHECK(fi_trecv(n.ep(), n.at(10 * 4096), 64, n.desc(), FI_ADDR_UNSPEC, 10, 0, &ctx[2]) == 0);
    for (int i = 0; i < 3; ++i) {
      e = n.expect();
      GROUP_CHECK(is_recv(e));
      if (e.op_context == &ctx[0]) GROUP_CHECK(e.len == kBig && has_pattern(n.at(1u << 20), kBig, 14));
      else if (e.op_context == &ctx[1]) GROUP_CHECK(e.len == 64 && has_pattern(n.at(13 * 4096), 64, 13));
      else GROUP_CHECK(e.op_context == &ctx[2] && has_pattern(n.at(10 * 4096), 64, 10));
    }
    m.barrier();
  });
}

TEST_P(Tagged, CancelAPostedReceive) {
  pair([](Member& m, Node& n, fi_addr_t) {
    if (m.rank() == 0) {
      fi_context ctx{};
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 64, n.desc(), FI_ADDR_UNSPEC, 99, 0, &ctx) == 0);
      GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == 0);
      const fi_cq_err_entry err = n.expect_error();
      GROUP_CHECK(err.err == FI_ECANCELED && err.op_context == &ctx);
      // Nothing is left to cancel.
      GROUP_CHECK(fi_cancel(&n.ep()->fid, &ctx) == -FI_ENOENT);
    }
  });
}

TEST_P(Tagged, FourMiBTaggedAndUntaggedWithData) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    int ctx[2];
    if (m.rank() == 0) {
      memset(n.at(0), 0, 2 * kFourMiB);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), kFourMiB, n.desc(), FI_ADDR_UNSPEC, 7, 0, &ctx[0]) == 0);
      GROUP_CHECK(fi_recv(n.ep(), n.at(kFourMiB), kFourMiB, n.desc(), FI_ADDR_UNSPEC, &ctx[1]) == 0);
      m.barrier();
      for (int i = 0; i < 2; ++i) {
        const fi_cq_tagged_entry e = n.expect(60000);
        GROUP_CHECK(e.len == kFourMiB);
        if (e.op_context == &ctx[0]) {
          GROUP_CHECK(is_recv(e) && e.tag == 7 && (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x5eed);
          GROUP_CHECK(has_pattern(n.at(0), kFourMiB, 7));
        } else {
          GROUP_CHECK(e.op_context == &ctx[1] && (e.flags & FI_MSG) && (e.flags & FI_RECV));
          GROUP_CHECK(!(e.flags & FI_TAGGED));
          GROUP_CHECK(has_pattern(n.at(kFourMiB), kFourMiB, 8));
        }
      }
    } else {
      fill(n.at(0), kFourMiB, 7);
      fill(n.at(kFourMiB), kFourMiB, 8);
      m.barrier();
      // One after the other: each is a burst of rendezvous reads.
      GROUP_CHECK(fi_tsenddata(n.ep(), n.at(0), kFourMiB, n.desc(), 0x5eed, peer, 7, &ctx[0]) == 0);
      fi_cq_tagged_entry e = n.expect(60000);
      GROUP_CHECK(e.op_context == &ctx[0] && (e.flags & FI_SEND));
      GROUP_CHECK(fi_send(n.ep(), n.at(kFourMiB), kFourMiB, n.desc(), peer, &ctx[1]) == 0);
      e = n.expect(60000);
      GROUP_CHECK(e.op_context == &ctx[1] && (e.flags & FI_SEND));
    }
  });
}

TEST_P(Tagged, ShortReceivesTruncate) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    constexpr size_t kLong = 1u << 20;
    int ctx[2];
    if (m.rank() == 0) {
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 100, n.desc(), FI_ADDR_UNSPEC, 1, 0, &ctx[0]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(1u << 20), kLong / 2, n.desc(), FI_ADDR_UNSPEC, 2, 0, &ctx[1]) == 0);
      m.barrier();
      for (int i = 0; i < 2; ++i) {
        const fi_cq_err_entry err = n.expect_error(60000);
        GROUP_CHECK(err.err == FI_ETRUNC && (err.flags & FI_RECV));
        if (err.op_context == &ctx[0]) {
          GROUP_CHECK(err.tag == 1 && err.len == 100 && err.olen == 100);
          GROUP_CHECK(has_pattern(n.at(0), 100, 1));
        } else {
          GROUP_CHECK(err.op_context == &ctx[1] && err.tag == 2);
          GROUP_CHECK(err.len == kLong / 2 && err.olen == kLong / 2);
        }
      }
    } else {
      fill(n.at(0), 200, 1);
      fill(n.at(1u << 20), kLong, 2);
      m.barrier();
      GROUP_CHECK(fi_tsend(n.ep(), n.at(0), 200, n.desc(), peer, 1, nullptr) == 0);
      GROUP_CHECK(fi_tsend(n.ep(), n.at(1u << 20), kLong, n.desc(), peer, 2, nullptr) == 0);
      // Truncation is the receiver's error: both sends complete.
      for (int i = 0; i < 2; ++i) GROUP_CHECK(is_send(n.expect(60000)));
    }
  });
}

// The sender inserts the receiver and sends at once; the receiver reads its CQ (so its core sees
// the packet, from a sender it has no address handle for) and only then inserts the sender and
// posts the receive. The message is kept, not dropped.
TEST_P(Tagged, AMessageFromASenderNotYetInTheAvIsKept) {
  use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::vector<int> st = run_group(2, 120, [](Member& m) {
    Node n(kBuf);
    const std::vector<std::string> names = m.allgather(encode(n.self()));
    int ctx = 0;
    if (m.rank() == 1) {
      const fi_addr_t peer = n.insert(decode(names[0]));
      fill(n.at(0), 64, 77);
      GROUP_CHECK(fi_tsend(n.ep(), n.at(0), 64, n.desc(), peer, 5, &ctx) == 0);
      fill(n.at(kFourMiB), kFourMiB, 78);
      GROUP_CHECK(fi_tsend(n.ep(), n.at(kFourMiB), kFourMiB, n.desc(), peer, 6, &ctx) == 0);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      m.barrier();
      for (int i = 0; i < 2; ++i) GROUP_CHECK(is_send(n.expect()));
    } else {
      n.expect_nothing(300);
      const fi_addr_t peer = n.insert(decode(names[1]));
      GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 64, n.desc(), peer, 5, 0, &ctx) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), n.at(kFourMiB), kFourMiB, n.desc(), peer, 6, 0, &ctx) == 0);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      m.barrier();
      for (int i = 0; i < 2; ++i) {
        const fi_cq_tagged_entry e = n.expect();
        GROUP_CHECK(is_recv(e));
        if (e.tag == 5) GROUP_CHECK(e.len == 64 && has_pattern(n.at(0), 64, 77));
        else GROUP_CHECK(e.tag == 6 && e.len == kFourMiB && has_pattern(n.at(kFourMiB), kFourMiB, 78));
      }
    }
    m.barrier();
    m.set_idle(nullptr);
  });
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0], 0) << "receiver";
  EXPECT_EQ(st[1], 0) << "sender";
}

// Scatter/gather up to the advertised iov_limit: eager messages gathered from and scattered
// into several buffers, a rendezvous from several buffers (pushed) and from one (read into
// several), the msg forms, and truncation across buffers.
TEST_P(Tagged, SeveralBuffersGatherAndScatter) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    GROUP_CHECK(n.info()->tx_attr->iov_limit == 4 && n.info()->rx_attr->iov_limit == 4);
    constexpr size_t kSmall = 5000, kLarge = (1u << 20) + 77;
    void* d[4] = {n.desc(), n.desc(), n.desc(), n.desc()};
    int ctx[5];
    if (m.rank() == 0) {
      memset(n.at(0), 0, 8u << 20);
      iovec a[2] = {{n.at(0), 1000}, {n.at(4096), 4000}};
      GROUP_CHECK(fi_trecvv(n.ep(), a, d, 2, FI_ADDR_UNSPEC, 1, 0, &ctx[0]) == 0);
      iovec b[4] = {{n.at(1u << 20), 1}, {n.at((1u << 20) + 64), 500000},
                    {n.at(2u << 20), 48576}, {n.at(3u << 20), kLarge - 548577}};
      GROUP_CHECK(fi_trecvv(n.ep(), b, d, 4, FI_ADDR_UNSPEC, 2, 0, &ctx[1]) == 0);
      iovec c[3] = {{n.at(4u << 20), 300000}, {n.at(5u << 20), 300000}, {n.at(6u << 20), kLarge - 600000}};
      GROUP_CHECK(fi_trecvv(n.ep(), c, d, 3, FI_ADDR_UNSPEC, 3, 0, &ctx[2]) == 0);
      iovec u[2] = {{n.at(7u << 20), 10}, {n.at((7u << 20) + 100), 4990}};
      fi_msg msg{};
      msg.msg_iov = u;
      msg.desc = d;
      msg.iov_count = 2;
      msg.addr = FI_ADDR_UNSPEC;
      msg.context = &ctx[3];
      GROUP_CHECK(fi_recvmsg(n.ep(), &msg, 0) == 0);
      iovec t[2] = {{n.at((7u << 20) + 8192), 100}, {n.at((7u << 20) + 16384), 100}};
      GROUP_CHECK(fi_trecvv(n.ep(), t, d, 2, FI_ADDR_UNSPEC, 5, 0, &ctx[4]) == 0);
      m.barrier();
      std::vector<uint8_t> got(kLarge);
      auto gather = [&](const iovec* v, size_t k, size_t len) {
        size_t off = 0;
        for (size_t i = 0; i < k && off < len; ++i) {
          const size_t n2 = std::min(v[i].iov_len, len - off);
          memcpy(got.data() + off, v[i].iov_base, n2);
          off += n2;
        }
        return off;
      };
      for (int i = 0; i < 5; ++i) {
        fi_cq_tagged_entry e{};
        fi_cq_err_entry err{};
        const int rc = n.wait(&e, &err);
        if (rc == -FI_EAVAIL) {
          GROUP_CHECK(err.op_context == &ctx[4] && err.err == FI_ETRUNC);
          GROUP_CHECK(err.len == 200 && err.olen == 100);
          GROUP_CHECK(gather(t, 2, 200) == 200 && has_pattern(got.data(), 200, 5));
          continue;
        }
        GROUP_CHECK(rc == 1);
        if (e.op_context == &ctx[0]) {
          GROUP_CHECK(e.len == kSmall && gather(a, 2, kSmall) == kSmall && has_pattern(got.data(), kSmall, 1));
        } else if (e.op_context == &ctx[1]) {
          GROUP_CHECK(e.len == kLarge && gather(b, 4, kLarge) == kLarge && has_pattern(got.data(), kLarge, 2));
        } else if (e.op_context == &ctx[2]) {
          GROUP_CHECK(e.len == kLarge && gather(c, 3, kLarge) == kLarge && has_pattern(got.data(), kLarge, 3));
        } else {
          GROUP_CHECK(e.op_context == &ctx[3] && (e.flags & FI_MSG) && e.len == kSmall);
          GROUP_CHECK(gather(u, 2, kSmall) == kSmall && has_pattern(got.data(), kSmall, 4));
        }
      }
    } else {
      fill(n.at(0), kSmall, 1);
      fill(n.at(1u << 20), kLarge, 2);
      fill(n.at(3u << 20), kLarge, 3);
      fill(n.at(5u << 20), kSmall, 4);
      fill(n.at(6u << 20), 300, 5);
      m.barrier();
      iovec a[3] = {{n.at(0), 1}, {n.at(1), 2999}, {n.at(3000), 2000}};
      GROUP_CHECK(fi_tsendv(n.ep(), a, d, 3, peer, 1, &ctx[0]) == 0);
      // Several buffers: the receiver is asked to take a push.
      iovec b[4] = {{n.at(1u << 20), 333333}, {n.at((1u << 20) + 333333), 1},
                    {n.at((1u << 20) + 333334), 100000}, {n.at((1u << 20) + 433334), kLarge - 433334}};
      GROUP_CHECK(fi_tsendv(n.ep(), b, d, 4, peer, 2, &ctx[1]) == 0);
      // One buffer: read into the receiver's three.
      GROUP_CHECK(fi_tsend(n.ep(), n.at(3u << 20), kLarge, n.desc(), peer, 3, &ctx[2]) == 0);
      iovec u[2] = {{n.at(5u << 20), 2500}, {n.at((5u << 20) + 2500), 2500}};
      fi_msg msg{};
      msg.msg_iov = u;
      msg.desc = d;
      msg.iov_count = 2;
      msg.addr = peer;
      msg.context = &ctx[3];
      GROUP_CHECK(fi_sendmsg(n.ep(), &msg, 0) == 0);
      iovec t[2] = {{n.at(6u << 20), 150}, {n.at((6u << 20) + 150), 150}};
      GROUP_CHECK(fi_tsendv(n.ep(), t, d, 2, peer, 5, &ctx[4]) == 0);
      iovec five[5] = {};
      GROUP_CHECK(fi_tsendv(n.ep(), five, d, 5, peer, 9, nullptr) == -FI_EINVAL);
      for (int i = 0; i < 5; ++i) {
        const fi_cq_tagged_entry e = n.expect(60000);
        GROUP_CHECK(e.flags & FI_SEND);
      }
    }
  });
}

// FI_ORDER_SAS: messages both match go to receives in the sender's posting order, eager and
// rendezvous mixed, whatever order SRD delivers their packets in.
TEST_P(Tagged, SendsMatchInPostingOrder) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    GROUP_CHECK(n.info()->tx_attr->msg_order & FI_ORDER_SAS);
    constexpr int kMsgs = 24;
    auto size = [](int i) -> size_t { return i % 3 == 2 ? 200000 + i : 1000 + i; };
    if (m.rank() == 0) {
      for (int i = 0; i < kMsgs; ++i)
        GROUP_CHECK(fi_trecv(n.ep(), n.at(static_cast<size_t>(i) << 18), 1u << 18, n.desc(),
                             FI_ADDR_UNSPEC, 42, 0, nullptr) == 0);
      m.barrier();
      for (int i = 0; i < kMsgs; ++i) (void)n.expect(60000);
      for (int i = 0; i < kMsgs; ++i)
        GROUP_CHECK(has_pattern(n.at(static_cast<size_t>(i) << 18), size(i), 300 + i));
    } else {
      for (int i = 0; i < kMsgs; ++i) fill(n.at(static_cast<size_t>(i) << 18), size(i), 300 + i);
      m.barrier();
      for (int i = 0; i < kMsgs; ++i)
        GROUP_CHECK(post_retrying(n, [&] {
                      return fi_tsend(n.ep(), n.at(static_cast<size_t>(i) << 18), size(i),
                                      n.desc(), peer, 42, nullptr);
                    }) == 0);
      for (int i = 0; i < kMsgs; ++i) GROUP_CHECK(is_send(n.expect(60000)));
    }
  });
}

// fi_cq_sread with no timeout returns each message of a ping-pong. The time per round trip is
// printed (the waits woke on the completion or, before, only when a 5 ms slice ran out).
TEST_P(Tagged, BlockingReadsReturnEachCompletion) {
  pair([](Member& m, Node& n, fi_addr_t peer) {
    constexpr int kRounds = 100;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      const bool first = (m.rank() == 1);
      fi_cq_tagged_entry e{};
      auto recv_one = [&] {
        GROUP_CHECK(fi_trecv(n.ep(), n.at(0), 64, n.desc(), FI_ADDR_UNSPEC, 9, 0, nullptr) == 0);
        // Our own send's completion may come first.
        for (;;) {
          GROUP_CHECK(fi_cq_sread(n.cq(), &e, 1, nullptr, -1) == 1);
          if (e.flags & FI_RECV) break;
        }
        GROUP_CHECK(e.tag == 9 && e.len == 64);
      };
      if (!first) recv_one();
      GROUP_CHECK(post_retrying(n, [&] {
                    return fi_tsend(n.ep(), n.at(4096), 64, n.desc(), peer, 9, nullptr);
                  }) == 0);
      if (first) recv_one();
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    double load = 0;
    if (FILE* f = fopen("/proc/loadavg", "r")) {
      if (fscanf(f, "%lf", &load) != 1) load = 0;
      fclose(f);
    }
    if (m.rank() == 1)
      printf("fi_cq_sread ping-pong: %.1f us per round trip (load average %.2f)\n", us / kRounds, load);
  });
}

INSTANTIATE_TEST_SUITE_P(Wire, Tagged,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
