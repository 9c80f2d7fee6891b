// RMA on the protocol fabric between two processes, through the public API, over shared memory,
// UDP, and shared memory with loss and reordering, on a device with RDMA read and on one without
// (EFA gen1, where the core reads in packets): every fi_read / fi_write form beyond the MTU and
// over several buffers, remote CQ data and remote counters at the target, a bad key reported
// with the EFA status, FI_FENCE ordering a read after a write (a fenced post is taken at once and
// waits in the endpoint, with what is posted after it), writes landing in posting order, and
// every inject form counted at the initiator.
#include <gtest/gtest.h>

#include <glob.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/group_util.h"

namespace xpufab::efa_fabric {
namespace {

constexpr size_t kBuf = 8u << 20;
constexpr size_t kBig = (1u << 20) + 12345;  // many packets, not a multiple of any of them
// The EFA completion status of an access the target's keys or bounds refuse.
constexpr int kEfaRemoteBadAddress = 7;

struct Setup {
  Wire wire;
  const char* profile;  // FI_EFA_EMU_PROFILE; nullptr for the emulator's default
};

std::string setup_name(const ::testing::TestParamInfo<Setup>& i) {
  return std::string(wire_name(i.param.wire)) + (i.param.profile ? i.param.profile : "");
}

class Rma : public ::testing::TestWithParam<Setup> {
 protected:
  // Runs `fn` in two processes with counters bound; rank 0 is the target, rank 1 the initiator.
  // `tx_size`: the endpoints' tx_attr->size when not 0.
  template <typename Fn>
  void pair(Fn fn, size_t tx_size = 0) {
    use_wire(GetParam().wire, ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (GetParam().profile) setenv("FI_EFA_EMU_PROFILE", GetParam().profile, 1);
    else unsetenv("FI_EFA_EMU_PROFILE");
    const std::vector<int> st = run_group(2, 120, [&](Member& m) {
      fi_info* hints = rma_hints();
      if (tx_size) hints->tx_attr->size = tx_size;
      Node n(kBuf, hints, true);
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p);
      m.barrier();
      m.set_idle(nullptr);
    });
    unsetenv("FI_EFA_EMU_PROFILE");
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0], 0) << "target";
    EXPECT_EQ(st[1], 0) << "initiator";
  }
};

bool is_rma(const fi_cq_tagged_entry& e, uint64_t dir) {
  return (e.flags & (FI_RMA | dir)) == (FI_RMA | dir);
}

// Waits for `c` to reach `v`, reading the CQ meanwhile (the protocol's progress).
void wait_cntr(Node& n, fid_cntr* c, uint64_t v) {
  const int rc = fi_cntr_wait(c, v, 20000);
  if (rc) fprintf(stderr, "counter at %llu (errors %llu), waited for %llu: %d\n",
                  static_cast<unsigned long long>(fi_cntr_read(c)),
                  static_cast<unsigned long long>(fi_cntr_readerr(c)),
                  static_cast<unsigned long long>(v), rc);
  GROUP_CHECK(rc == 0);
  GROUP_CHECK(fi_cntr_read(c) == v);
  (void)n;
}

TEST_P(Rma, TheOfferHasRmaAndItsEvents) {
  pair([](Member&, Node& n, Peers&) {
    const fi_info* i = n.info();
    GROUP_CHECK((i->caps & (FI_RMA | FI_RMA_EVENT | FI_READ | FI_WRITE | FI_REMOTE_READ |
                            FI_REMOTE_WRITE | FI_FENCE)) ==
                (FI_RMA | FI_RMA_EVENT | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                 FI_FENCE));
    GROUP_CHECK(i->tx_attr->iov_limit == 4 && i->rx_attr->iov_limit == 4);
    GROUP_CHECK(i->tx_attr->rma_iov_limit == 1);
    GROUP_CHECK(i->ep_attr->max_msg_size >= kBig);
  });
}

TEST_P(Rma, WritesAndReadsBeyondTheMtuInEveryForm) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    const Counters& c = n.counters();
    int ctx[8];
    if (m.rank() == 1) {
      // fi_write of many packets, then fi_read of what the target filled.
      fill(n.at(0), kBig, 1);
      GROUP_CHECK(fi_write(n.ep(), n.at(0), kBig, n.desc(), p.addr[0], t.addr + 16, t.key,
                           &ctx[0]) == 0);
      fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[0] && is_rma(e, FI_WRITE) && e.len == kBig);
      wait_cntr(n, c.write, 1);
      m.barrier();  // the target checks the write and fills its read region
      m.barrier();
      memset(n.at(2u << 20), 0, kBig);
      GROUP_CHECK(fi_read(n.ep(), n.at(2u << 20), kBig, n.desc(), p.addr[0], t.addr + (4u << 20),
                          t.key, &ctx[1]) == 0);
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[1] && is_rma(e, FI_READ) && e.len == kBig);
      GROUP_CHECK(has_pattern(n.at(2u << 20), kBig, 2));
      wait_cntr(n, c.read, 1);
      // Gather and scatter over three local buffers of uneven sizes, and the msg forms.
      fill(n.at(0), 3 * 9000, 3);
      iovec w[3] = {{n.at(0), 100}, {n.at(100), 20000}, {n.at(20100), 6900}};
      void* d[3] = {n.desc(), n.desc(), n.desc()};
      GROUP_CHECK(fi_writev(n.ep(), w, d, 3, p.addr[0], t.addr + (6u << 20), t.key, &ctx[2]) == 0);
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[2] && is_rma(e, FI_WRITE) && e.len == 27000);
      memset(n.at(1u << 20), 0, 27000);
      iovec r[3] = {{n.at(1u << 20), 9999}, {n.at((1u << 20) + 9999), 1}, {n.at((1u << 20) + 10000), 17000}};
      fi_rma_iov rv{t.addr + (6u << 20), 27000, t.key};
      fi_msg_rma msg{};
      msg.msg_iov = r;
      msg.desc = d;
      msg.iov_count = 3;
      msg.addr = p.addr[0];
      msg.rma_iov = &rv;
      msg.rma_iov_count = 1;
      msg.context = &ctx[3];
      GROUP_CHECK(fi_readmsg(n.ep(), &msg, 0) == 0);
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[3] && is_rma(e, FI_READ) && e.len == 27000);
      GROUP_CHECK(has_pattern(n.at(1u << 20), 27000, 3));
      // fi_readv of the same bytes into two buffers.
      memset(n.at(1u << 20), 0, 27000);
      iovec r2[2] = {{n.at(1u << 20), 13500}, {n.at((1u << 20) + 13500), 13500}};
      GROUP_CHECK(fi_readv(n.ep(), r2, d, 2, p.addr[0], t.addr + (6u << 20), t.key, &ctx[4]) == 0);
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[4] && has_pattern(n.at(1u << 20), 27000, 3));
      // fi_writemsg, and fi_inject_write (nothing reported, buffer reusable at once).
      fill(n.at(0), 4096, 4);
      iovec one{n.at(0), 4096};
      fi_rma_iov wv{t.addr + (7u << 20), 4096, t.key};
      msg.msg_iov = &one;
      msg.iov_count = 1;
      msg.rma_iov = &wv;
      msg.context = &ctx[5];
      GROUP_CHECK(fi_writemsg(n.ep(), &msg, FI_INJECT) == 0);
      memset(n.at(0), 0, 4096);  // FI_INJECT: the data was taken
      e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[5] && is_rma(e, FI_WRITE));
      fill(n.at(8192), 256, 5);
      GROUP_CHECK(post_retrying(n, [&] {
                    return fi_inject_write(n.ep(), n.at(8192), 256, p.addr[0],
                                           t.addr + (7u << 20) + 4096, t.key);
                  }) == 0);
      memset(n.at(8192), 0, 256);
      // The inject reports nothing but counts, here and at the target (below).
      wait_cntr(n, c.write, 4);
      n.expect_nothing(50);
      m.barrier();
    } else {
      // The target counts what the peer did to its memory.
      wait_cntr(n, c.remote_write, 1);
      m.barrier();
      GROUP_CHECK(has_pattern(n.at(16), kBig, 1));
      fill(n.at(4u << 20), kBig, 2);
      m.barrier();
      wait_cntr(n, c.remote_read, 3);
      wait_cntr(n, c.remote_write, 4);
      m.barrier();
      GROUP_CHECK(has_pattern(n.at(6u << 20), 27000, 3));
      GROUP_CHECK(has_pattern(n.at(7u << 20), 4096, 4));
      GROUP_CHECK(has_pattern(n.at((7u << 20) + 4096), 256, 5));
      // Writes without remote CQ data put nothing on the target's CQ.
      n.expect_nothing(50);
    }
  });
}

TEST_P(Rma, WritedataReportsTheDataAtTheTarget) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    int ctx;
    if (m.rank() == 1) {
      fill(n.at(0), kBig, 6);
      GROUP_CHECK(fi_writedata(n.ep(), n.at(0), kBig, n.desc(), 0xfeedbeefcafe, p.addr[0], t.addr,
                               t.key, &ctx) == 0);
      const fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.op_context == &ctx && is_rma(e, FI_WRITE));
      fill(n.at(0), 64, 7);
      GROUP_CHECK(post_retrying(n, [&] {
                    return fi_inject_writedata(n.ep(), n.at(0), 64, 0x77, p.addr[0],
                                               t.addr + (2u << 20), t.key);
                  }) == 0);
      wait_cntr(n, n.counters().write, 2);
      n.expect_nothing(50);
    } else {
      fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK((e.flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) ==
                  (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
      GROUP_CHECK(e.data == 0xfeedbeefcafe && e.len == kBig);
      GROUP_CHECK(has_pattern(n.at(0), kBig, 6));
      e = n.expect();
      GROUP_CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x77 && e.len == 64);
      GROUP_CHECK(has_pattern(n.at(2u << 20), 64, 7));
      wait_cntr(n, n.counters().remote_write, 2);
    }
  });
}

TEST_P(Rma, BadKeysAndRangesCompleteWithTheEfaStatus) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    int ctx[4];
    if (m.rank() == 1) {
      fill(n.at(0), 20000, 8);
      // Bad input fails before anything is sent.
      fi_rma_iov two[2] = {{t.addr, 8, t.key}, {t.addr + 8, 8, t.key}};
      iovec one{n.at(0), 16};
      void* d[5] = {n.desc(), n.desc(), n.desc(), n.desc(), n.desc()};
      fi_msg_rma msg{};
      msg.msg_iov = &one;
      msg.desc = d;
      msg.iov_count = 1;
      msg.addr = p.addr[0];
      msg.rma_iov = two;
      msg.rma_iov_count = 2;
      GROUP_CHECK(fi_writemsg(n.ep(), &msg, 0) == -FI_EINVAL);
      iovec five[5] = {{n.at(0), 1}, {n.at(1), 1}, {n.at(2), 1}, {n.at(3), 1}, {n.at(4), 1}};
      GROUP_CHECK(fi_writev(n.ep(), five, d, 5, p.addr[0], t.addr, t.key, nullptr) == -FI_EINVAL);
      GROUP_CHECK(fi_inject_write(n.ep(), n.at(0), 20000, p.addr[0], t.addr, t.key) == -FI_EMSGSIZE);
      n.expect_nothing(50);
      // A key the target does not have, a range past its region: both directions.
      GROUP_CHECK(fi_write(n.ep(), n.at(0), 20000, n.desc(), p.addr[0], t.addr, t.key + 977,
                           &ctx[0]) == 0);
      fi_cq_err_entry err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[0] && err.err != 0 && err.prov_errno == kEfaRemoteBadAddress);
      GROUP_CHECK(err.flags & FI_RMA);
      GROUP_CHECK(fi_read(n.ep(), n.at(0), 20000, n.desc(), p.addr[0], t.addr, t.key + 977,
                          &ctx[1]) == 0);
      err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[1] && err.prov_errno == kEfaRemoteBadAddress);
      GROUP_CHECK(fi_write(n.ep(), n.at(0), 64, n.desc(), p.addr[0], t.addr + kBuf - 32, t.key,
                           &ctx[2]) == 0);
      err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[2] && err.prov_errno == kEfaRemoteBadAddress);
      GROUP_CHECK(fi_read(n.ep(), n.at(0), 64, n.desc(), p.addr[0], t.addr + kBuf - 32, t.key,
                          &ctx[3]) == 0);
      err = n.expect_error();
      GROUP_CHECK(err.op_context == &ctx[3] && err.prov_errno == kEfaRemoteBadAddress);
      uint64_t errs = fi_cntr_readerr(n.counters().write) + fi_cntr_readerr(n.counters().read);
      GROUP_CHECK(errs == 4);
      m.barrier();
    } else {
      memset(n.at(0), 0x5c, 20000);
      m.barrier();
      for (size_t i = 0; i < 20000; ++i) GROUP_CHECK(*n.at(i) == 0x5c);
      GROUP_CHECK(fi_cntr_read(n.counters().remote_write) == 0);
      GROUP_CHECK(fi_cntr_read(n.counters().remote_read) == 0);
    }
  });
}

// fi_readmsg with FI_FENCE: kBig bytes at the peer's t.addr into n.at(4 MiB).
ssize_t read_fenced(Node& n, fi_addr_t peer, const Remote& t, void** desc, void* ctx) {
  iovec r{n.at(4u << 20), kBig};
  fi_rma_iov rv{t.addr, kBig, t.key};
  fi_msg_rma msg{};
  msg.msg_iov = &r;
  msg.desc = desc;
  msg.iov_count = 1;
  msg.addr = peer;
  msg.rma_iov = &rv;
  msg.rma_iov_count = 1;
  msg.context = ctx;
  return fi_readmsg(n.ep(), &msg, FI_FENCE);
}

// A fenced read of bytes the previous write changes sees the write, even where the read goes
// by RDMA read and the write by packets.
TEST_P(Rma, AFencedReadSeesThePreviousWrite) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    if (m.rank() != 1) return;
    int ctx[2];
    void* d = n.desc();
    for (uint32_t round = 0; round < 4; ++round) {
      fill(n.at(0), kBig, 10 + round);
      memset(n.at(4u << 20), 0, kBig);
      GROUP_CHECK(fi_write(n.ep(), n.at(0), kBig, d, p.addr[0], t.addr, t.key, &ctx[0]) == 0);
      GROUP_CHECK(post_retrying(n, [&] { return read_fenced(n, p.addr[0], t, &d, &ctx[1]); }) == 0);
      bool seen[2] = {};
      for (int i = 0; i < 2; ++i) {
        const fi_cq_tagged_entry e = n.expect();
        GROUP_CHECK(e.op_context == &ctx[0] || e.op_context == &ctx[1]);
        seen[e.op_context == &ctx[1]] = true;
      }
      GROUP_CHECK(seen[0] && seen[1]);
      GROUP_CHECK(has_pattern(n.at(4u << 20), kBig, 10 + round));
    }
  });
}

// fi_msg(3) / fi_rma(3): a fenced operation and those posted after it to the same peer are
// deferred until everything before them completed; the posts themselves succeed. Here the fenced
// ones are posted while a write of many packets is still out, so each post has to wait.
TEST_P(Rma, AFencedPostIsTakenAtOnceAndWaitsInTheEndpoint) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    void* d = n.desc();
    int ctx[4];
    if (m.rank() == 1) {
      fill(n.at(0), kBig, 20);
      memset(n.at(4u << 20), 0, kBig);
      GROUP_CHECK(fi_write(n.ep(), n.at(0), kBig, d, p.addr[0], t.addr, t.key, &ctx[0]) == 0);
      GROUP_CHECK(read_fenced(n, p.addr[0], t, &d, &ctx[1]) == 0);
      // Behind the fence: a tagged send whose buffer is reusable at once, and an atomic.
      fill(n.at(kBig), 64, 21);
      iovec sv{n.at(kBig), 64};
      fi_msg_tagged tm{};
      tm.msg_iov = &sv;
      tm.desc = &d;
      tm.iov_count = 1;
      tm.addr = p.addr[0];
      tm.tag = 0xfe;
      tm.context = &ctx[2];
      GROUP_CHECK(fi_tsendmsg(n.ep(), &tm, FI_INJECT) == 0);
      memset(n.at(kBig), 0, 64);
      uint64_t one = 1, prior = 99;
      GROUP_CHECK(fi_fetch_atomic(n.ep(), &one, 1, nullptr, &prior, nullptr, p.addr[0],
                                  t.addr + (6u << 20), t.key, FI_UINT64, FI_SUM, &ctx[3]) == 0);
      bool seen[4] = {};
      for (int i = 0; i < 4; ++i) {
        const fi_cq_tagged_entry e = n.expect();
        int k = 0;
        while (k < 4 && e.op_context != &ctx[k]) ++k;
        GROUP_CHECK(k < 4 && !seen[k]);
        // The fenced read completes after the write it waited for.
        if (k == 1) GROUP_CHECK(seen[0]);
        seen[k] = true;
      }
      GROUP_CHECK(has_pattern(n.at(4u << 20), kBig, 20));
      GROUP_CHECK(prior == 0);
      m.barrier();
    } else {
      uint8_t* got = n.at(7u << 20);  // outside what the initiator writes and reads
      GROUP_CHECK(fi_trecv(n.ep(), got, 64, d, p.addr[1], 0xfe, 0, &ctx[0]) == 0);
      const fi_cq_tagged_entry e = n.expect();
      GROUP_CHECK(e.op_context == &ctx[0] && e.len == 64 && e.tag == 0xfe);
      GROUP_CHECK(has_pattern(got, 64, 21));
      m.barrier();
    }
  });
}

// The requests a fence holds back are bounded by the transmit queue's size: one more is refused
// with -FI_EAGAIN until progress issued some of them.
TEST_P(Rma, TheFenceQueueHoldsTxSizeRequests) {
  constexpr size_t kTx = 32;
  pair(
      [](Member& m, Node& n, Peers& p) {
        const Remote& t = p.remote[0];
        if (m.rank() != 1) return;
        GROUP_CHECK(n.info()->tx_attr->size == kTx);
        void* d = n.desc();
        fill(n.at(0), kBig, 30);
        GROUP_CHECK(fi_write(n.ep(), n.at(0), kBig, d, p.addr[0], t.addr, t.key, nullptr) == 0);
        fi_rma_iov rv{t.addr + (2u << 20), 8, t.key};
        fi_msg_rma msg{};
        iovec v[kTx + 1];
        msg.desc = &d;
        msg.iov_count = 1;
        msg.addr = p.addr[0];
        msg.rma_iov = &rv;
        msg.rma_iov_count = 1;
        for (size_t i = 0; i <= kTx; ++i) {
          fill(n.at((1u << 20) * 3 + 8 * i), 8, 31 + static_cast<uint32_t>(i));
          v[i] = iovec{n.at((1u << 20) * 3 + 8 * i), 8};
          msg.msg_iov = &v[i];
          const ssize_t rc = fi_writemsg(n.ep(), &msg, FI_FENCE | FI_COMPLETION);
          GROUP_CHECK(rc == (i < kTx ? 0 : -FI_EAGAIN));
        }
        GROUP_CHECK(post_retrying(n, [&] { return fi_writemsg(n.ep(), &msg, FI_FENCE); }) == 0);
        for (size_t i = 0; i < kTx + 2; ++i) GROUP_CHECK(is_rma(n.expect(), FI_WRITE));
        // The fenced writes to the same bytes landed in posting order: the last one is there.
        memset(n.at(5u << 20), 0, 8);
        GROUP_CHECK(fi_read(n.ep(), n.at(5u << 20), 8, d, p.addr[0], t.addr + (2u << 20), t.key,
                            nullptr) == 0);
        GROUP_CHECK(is_rma(n.expect(), FI_READ));
        GROUP_CHECK(has_pattern(n.at(5u << 20), 8, 31 + kTx));
      },
      kTx);
}

// Every inject form counts in the initiator's FI_SEND or FI_WRITE counter and reports nothing
// there, as Debian's libfabric efa provider does.
TEST_P(Rma, EveryInjectFormCountsAtTheInitiator) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    const Counters& c = n.counters();
    if (m.rank() == 1) {
      uint8_t b[64];
      fill(b, sizeof(b), 40);
      auto post = [&](auto fn) { GROUP_CHECK(post_retrying(n, fn) == 0); };
      post([&] { return fi_inject(n.ep(), b, 16, p.addr[0]); });
      post([&] { return fi_injectdata(n.ep(), b, 16, 0x11, p.addr[0]); });
      post([&] { return fi_tinject(n.ep(), b, 16, p.addr[0], 0x21); });
      post([&] { return fi_tinjectdata(n.ep(), b, 16, 0x22, p.addr[0], 0x22); });
      post([&] { return fi_inject_write(n.ep(), b, 64, p.addr[0], t.addr, t.key); });
      post([&] { return fi_inject_writedata(n.ep(), b, 64, 0x33, p.addr[0], t.addr + 64, t.key); });
      const uint64_t add = 5;
      post([&] {
        return fi_inject_atomic(n.ep(), &add, 1, p.addr[0], t.addr + 128, t.key, FI_UINT64,
                                FI_SUM);
      });
      memset(b, 0, sizeof(b));  // every form took its bytes
      wait_cntr(n, c.send, 4);
      wait_cntr(n, c.write, 3);
      GROUP_CHECK(fi_cntr_readerr(c.send) == 0 && fi_cntr_readerr(c.write) == 0);
      n.expect_nothing(50);
      m.barrier();
    } else {
      uint8_t* got[4] = {n.at(1u << 20), n.at((1u << 20) + 16), n.at((1u << 20) + 32),
                         n.at((1u << 20) + 48)};
      int ctx[4];
      void* d = n.desc();
      GROUP_CHECK(fi_recv(n.ep(), got[0], 16, d, p.addr[1], &ctx[0]) == 0);
      GROUP_CHECK(fi_recv(n.ep(), got[1], 16, d, p.addr[1], &ctx[1]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), got[2], 16, d, p.addr[1], 0x21, 0, &ctx[2]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), got[3], 16, d, p.addr[1], 0x22, 0, &ctx[3]) == 0);
      // The four messages and the write with data; the plain write and the atomic make none.
      for (int i = 0; i < 5; ++i) {
        const fi_cq_tagged_entry e = n.expect();
        if (e.flags & FI_REMOTE_WRITE) {
          GROUP_CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x33);
        } else {
          GROUP_CHECK(e.op_context >= &ctx[0] && e.op_context <= &ctx[3] && e.len == 16);
          const int k = static_cast<int>(static_cast<int*>(e.op_context) - ctx);
          GROUP_CHECK(has_pattern(got[k], 16, 40));
          if (k == 1) GROUP_CHECK(e.data == 0x11);
          if (k == 3) GROUP_CHECK(e.data == 0x22);
        }
      }
      m.barrier();
      GROUP_CHECK(has_pattern(n.at(0), 64, 40) && has_pattern(n.at(64), 64, 40));
      uint64_t sum = 0;
      memcpy(&sum, n.at(128), 8);
      GROUP_CHECK(sum == 5);
    }
  });
}

// FI_ORDER_WAW: writes to the same bytes, posted back to back, land in posting order.
TEST_P(Rma, WritesToTheSameBytesLandInPostingOrder) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    GROUP_CHECK(n.info()->tx_attr->msg_order & FI_ORDER_RMA_WAW);
    constexpr size_t kLen = 40000;
    constexpr uint32_t kWrites = 12;
    if (m.rank() == 1) {
      for (uint32_t i = 0; i < kWrites; ++i) fill(n.at(i * 65536), kLen, 100 + i);
      for (uint32_t i = 0; i < kWrites; ++i)
        GROUP_CHECK(post_retrying(n, [&] {
                      return fi_write(n.ep(), n.at(i * 65536), kLen, n.desc(), p.addr[0], t.addr,
                                      t.key, nullptr);
                    }) == 0);
      for (uint32_t i = 0; i < kWrites; ++i) GROUP_CHECK(is_rma(n.expect(), FI_WRITE));
      m.barrier();
    } else {
      m.barrier();
      GROUP_CHECK(has_pattern(n.at(0), kLen, 100 + kWrites - 1));
    }
  });
}

// FI_ORDER_WAW across the two write paths and atomics: an atomic and a one-packet write posted
// after a write of many packets (an RDMA write where the device has one) land after it, and a
// write of many packets after them lands after them.
TEST_P(Rma, WritesAndAtomicsLandInPostingOrderAcrossPaths) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    GROUP_CHECK(n.info()->tx_attr->msg_order & FI_ORDER_WAW);
    constexpr size_t kLen = 40000;
    if (m.rank() == 1) {
      void* d = n.desc();
      for (uint32_t round = 0; round < 4; ++round) {
        fill(n.at(0), kLen, 60 + round);
        fill(n.at(65536), kLen, 70 + round);
        uint64_t v = 0x5151 + round, add = 7;
        memcpy(n.at(131072), &v, 8);
        auto post = [&](auto fn) { GROUP_CHECK(post_retrying(n, fn) == 0); };
        post([&] { return fi_write(n.ep(), n.at(0), kLen, d, p.addr[0], t.addr, t.key, nullptr); });
        post([&] {
          return fi_atomic(n.ep(), &add, 1, nullptr, p.addr[0], t.addr, t.key, FI_UINT64, FI_SUM,
                           nullptr);
        });
        post([&] {
          return fi_write(n.ep(), n.at(131072), 8, d, p.addr[0], t.addr + 8, t.key, nullptr);
        });
        post([&] {
          return fi_write(n.ep(), n.at(65536 + 16), kLen - 16, d, p.addr[0], t.addr + 16, t.key,
                          nullptr);
        });
        for (int i = 0; i < 4; ++i) GROUP_CHECK(n.expect().flags & FI_WRITE);
        m.barrier();
        m.barrier();  // the target checked
      }
    } else {
      for (uint32_t round = 0; round < 4; ++round) {
        m.barrier();
        uint8_t want[kLen];
        fill(want, kLen, 60 + round);
        uint64_t first = 0;
        memcpy(&first, want, 8);
        first += 7;
        memcpy(want, &first, 8);
        const uint64_t v = 0x5151 + round;
        memcpy(want + 8, &v, 8);
        uint8_t tail[kLen];
        fill(tail, kLen, 70 + round);
        memcpy(want + 16, tail + 16, kLen - 16);
        GROUP_CHECK(memcmp(n.at(0), want, kLen) == 0);
        m.barrier();
      }
    }
  });
}

// Writes to disjoint ranges are in flight together; one overlapping both waits for them, a
// packet write inside it waits for it, an atomic into the first waits for that one: what lands
// is what posting order gives, whatever order the fabric delivers in.
TEST_P(Rma, DisjointWritesOverlapAndOverlappingOnesLandInPostingOrder) {
  pair([](Member& m, Node& n, Peers& p) {
    const Remote& t = p.remote[0];
    constexpr size_t kLen = 40000;
    constexpr size_t kMid = kLen / 2;
    if (m.rank() == 1) {
      void* d = n.desc();
      for (uint32_t round = 0; round < 4; ++round) {
        fill(n.at(0), kLen, 80 + round);
        fill(n.at(65536), kLen, 90 + round);
        fill(n.at(131072), kLen, 100 + round);
        uint64_t v = 0x7171 + round, add = 3;
        memcpy(n.at(196608), &v, 8);
        auto post = [&](auto fn) { GROUP_CHECK(post_retrying(n, fn) == 0); };
        post([&] { return fi_write(n.ep(), n.at(0), kLen, d, p.addr[0], t.addr, t.key, nullptr); });
        post([&] {
          return fi_write(n.ep(), n.at(65536), kLen, d, p.addr[0], t.addr + kLen, t.key, nullptr);
        });
        post([&] {
          return fi_write(n.ep(), n.at(131072), kLen, d, p.addr[0], t.addr + kMid, t.key,
                          nullptr);
        });
        post([&] {
          return fi_write(n.ep(), n.at(196608), 8, d, p.addr[0], t.addr + kMid + 8, t.key,
                          nullptr);
        });
        post([&] {
          return fi_atomic(n.ep(), &add, 1, nullptr, p.addr[0], t.addr, t.key, FI_UINT64, FI_SUM,
                           nullptr);
        });
        for (int i = 0; i < 5; ++i) GROUP_CHECK(n.expect().flags & FI_WRITE);
        m.barrier();
        m.barrier();  // the target checked
      }
    } else {
      for (uint32_t round = 0; round < 4; ++round) {
        m.barrier();
        static uint8_t want[2 * kLen], part[kLen];
        fill(want, kLen, 80 + round);
        uint64_t first = 0;
        memcpy(&first, want, 8);
        first += 3;
        memcpy(want, &first, 8);
        fill(part, kLen, 90 + round);
        memcpy(want + kLen, part, kLen);
        fill(part, kLen, 100 + round);
        memcpy(want + kMid, part, kLen);
        const uint64_t v = 0x7171 + round;
        memcpy(want + kMid + 8, &v, 8);
        GROUP_CHECK(memcmp(n.at(0), want, 2 * kLen) == 0);
        m.barrier();
      }
    }
  });
}

// The WQEs the emulated device of a closed node took, from its statistics file
// (FI_EFA_EMU_STATS=<prefix>: written when the device closes), or -1.
long device_wqes(const std::string& prefix) {
  glob_t g{};
  long wqes = -1;
  if (glob((prefix + ".*.stats").c_str(), 0, nullptr, &g) == 0 && g.gl_pathc == 1) {
    FILE* f = fopen(g.gl_pathv[0], "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
      if (sscanf(line, "wqes: %ld", &wqes) == 1) break;
    if (f) fclose(f);
  }
  globfree(&g);
  return wqes;
}

// fi_write of many packets goes by the device's RDMA write where the profile has one (gen3,
// gen4: a WQE per rdma chunk, none per MTU), and by packets elsewhere; remote CQ data and the
// remote counter reach the target either way.
TEST_P(Rma, LargeWritesGoByRdmaWriteWhereTheDeviceHasIt) {
  const char* profile = GetParam().profile;
  use_wire(GetParam().wire, "RdmaWrite");
  if (profile) setenv("FI_EFA_EMU_PROFILE", profile, 1);
  else unsetenv("FI_EFA_EMU_PROFILE");
  const bool rdma_write = !profile || strcmp(profile, "gen3") == 0 || strcmp(profile, "gen4") == 0;
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string prefix = std::string(tmp ? tmp : "/tmp") + "/rdmaw-" + setup_name({GetParam(), 0}) +
                             "-" + std::to_string(getpid());
  const std::vector<int> st = run_group(2, 120, [&](Member& m) {
    const std::string mine = prefix + "-" + std::to_string(m.rank());
    setenv("FI_EFA_EMU_STATS", mine.c_str(), 1);
    size_t mtu = 0;
    {
      Node n(kBuf, rma_hints(), true);
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      mtu = n.info()->tx_attr->inject_size + 64;
      const Remote& t = p.remote[0];
      if (m.rank() == 1) {
        fill(n.at(0), kBig, 50);
        int ctx[2];
        GROUP_CHECK(fi_write(n.ep(), n.at(0), kBig, n.desc(), p.addr[0], t.addr, t.key,
                             &ctx[0]) == 0);
        GROUP_CHECK(n.expect().op_context == &ctx[0]);
        iovec v[2] = {{n.at(kBig), 3000}, {n.at(kBig + 3000), 2 * mtu}};
        void* d[2] = {n.desc(), n.desc()};
        fill(n.at(kBig), 3000 + 2 * mtu, 51);
        fi_rma_iov rv{t.addr + (4u << 20), 3000 + 2 * mtu, t.key};
        fi_msg_rma msg{};
        msg.msg_iov = v;
        msg.desc = d;
        msg.iov_count = 2;
        msg.addr = p.addr[0];
        msg.rma_iov = &rv;
        msg.rma_iov_count = 1;
        msg.context = &ctx[1];
        msg.data = 0xd00d;
        GROUP_CHECK(fi_writemsg(n.ep(), &msg, FI_REMOTE_CQ_DATA) == 0);
        GROUP_CHECK(n.expect().op_context == &ctx[1]);
        wait_cntr(n, n.counters().write, 2);
        m.barrier();
      } else {
        const fi_cq_tagged_entry e = n.expect();
        GROUP_CHECK((e.flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) ==
                    (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
        GROUP_CHECK(e.data == 0xd00d && e.len == 3000 + 2 * mtu);
        wait_cntr(n, n.counters().remote_write, 2);
        m.barrier();
        GROUP_CHECK(has_pattern(n.at(0), kBig, 50));
        GROUP_CHECK(has_pattern(n.at(4u << 20), 3000 + 2 * mtu, 51));
      }
      m.barrier();
      m.set_idle(nullptr);
    }
    unsetenv("FI_EFA_EMU_STATS");
    if (m.rank() != 1) return;
    // The packet path takes a WQE per MTU of payload; RDMA write one per chunk and two notes.
    const long wqes = device_wqes(mine);
    const long per_mtu = static_cast<long>(kBig / mtu);
    fprintf(stderr, "initiator's device took %ld WQEs (%ld MTUs of data)\n", wqes, per_mtu);
    GROUP_CHECK(wqes > 0);
    GROUP_CHECK(rdma_write ? wqes < per_mtu / 8 : wqes >= per_mtu);
  });
  unsetenv("FI_EFA_EMU_PROFILE");
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0], 0) << "target";
  EXPECT_EQ(st[1], 0) << "initiator";
}

INSTANTIATE_TEST_SUITE_P(Wire, Rma,
                         ::testing::Values(Setup{Wire::kShm, nullptr}, Setup{Wire::kUdp, nullptr},
                                           Setup{Wire::kShmFaults, nullptr},
                                           Setup{Wire::kShm, "gen1"},
                                           Setup{Wire::kShm, "gen2"},
                                           Setup{Wire::kShm, "gen3"},
                                           Setup{Wire::kShmFaults, "gen1"}),
                         setup_name);

}  // namespace
}  // namespace xpufab::efa_fabric
