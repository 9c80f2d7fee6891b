// Tagged messages and messages beyond the MTU between two processes on the protocol fabric,
// through the public API, over shared memory, UDP, and shared memory with loss and reordering:
// matching out of order and in posting order, unexpected messages with FI_PEEK / FI_CLAIM /
// FI_DISCARD, ignore masks, fi_cancel, 4 MiB tagged and untagged messages, remote CQ data, and
// truncation.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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

INSTANTIATE_TEST_SUITE_P(Wire, Tagged,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
