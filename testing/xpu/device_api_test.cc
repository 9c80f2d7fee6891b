// Every fi_xpu_* device call of the efa provider, at every scope, run by kernels on the host XPU
// against the emulated EFA device; CQ entries compared with what the host provider reports.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "testing/xpu/xpu_fixture.h"
#include "testing/xpu/xpu_test_util.h"

namespace xpufab::testing {
namespace {

using runtime::launch;
using runtime::LaunchConfig;
using runtime::WorkItem;

constexpr size_t kMsg = 256;

class DeviceApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(w_.open(), "");
    ASSERT_EQ(w_.add_ep(&a_), "");
    ASSERT_EQ(w_.add_ep(&b_), "");
    ASSERT_EQ(w_.export_ep(&a_), "");
    ASSERT_EQ(w_.export_ep(&b_), "");
  }
  void TearDown() override { EXPECT_EQ(w_.close(), 0); }

  // The launch that posts: several groups of every scope at once (one group for DEVICE).
  static LaunchConfig post_shape() { return shape(2, 8, 4); }

  XpuWorld w_;
  XpuEp a_, b_;
};

void* ctx_of(uint32_t i) { return reinterpret_cast<void*>(uintptr_t{0x1000} + i); }

TEST_F(DeviceApi, SendRecvWithImmediateAtEveryScope) {
  const LaunchConfig cfg = post_shape();
  const uint32_t n = cfg.grid * cfg.workgroup_size;
  uint64_t sends = 0;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    XpuBuf src, dst;
    ASSERT_EQ(w_.reg(&src, kMsg * n), "");
    ASSERT_EQ(w_.reg(&dst, kMsg * n), "");
    for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = static_cast<uint8_t>(i * 7 + scope);
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_recv(&b_.xep, dst.data() + g * kMsg, kMsg, &dst.desc, nullptr,
                                       ctx_of(1000 + g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       // Odd work-items carry immediate data; lengths differ per work-item.
                       const uint64_t fl = (g & 1) ? FI_REMOTE_CQ_DATA : 0;
                       if (fi_xpu_send(&a_.xep, src.data() + g * kMsg, kMsg - g, &src.desc, 0xabc00 + g,
                                       &b_.peer, ctx_of(g), fl, scope) != 0)
                         bad++;
                     }),
              0);
    EXPECT_EQ(bad.load(), 0);
    std::vector<fi_cq_data_entry> tx, rx;
    ASSERT_EQ(drain_cq(&a_.xcq, scope, n, &tx), 0);
    ASSERT_EQ(drain_cq(&b_.xcq, scope, n, &rx), 0);
    ASSERT_EQ(tx.size(), n);
    ASSERT_EQ(rx.size(), n);
    std::vector<int> seen_tx(n), seen_rx(n);
    for (const auto& e : tx) {
      const uintptr_t g = reinterpret_cast<uintptr_t>(e.op_context) - 0x1000;
      ASSERT_LT(g, n);
      seen_tx[g]++;
      EXPECT_EQ(e.flags, FI_MSG | FI_SEND);
      EXPECT_EQ(e.len, 0u);
      EXPECT_EQ(e.buf, nullptr);
      EXPECT_EQ(e.data, 0u);
    }
    for (const auto& e : rx) {
      const uintptr_t g = reinterpret_cast<uintptr_t>(e.op_context) - 0x1000 - 1000;
      ASSERT_LT(g, n);
      seen_rx[g]++;
      // Receives match sends in any order; the entry names its own buffer and length.
      EXPECT_EQ(e.buf, dst.data() + g * kMsg);
      const size_t len = e.len;
      ASSERT_GE(len, kMsg - n + 1);
      ASSERT_LE(len, kMsg);
      const uint32_t sender = static_cast<uint32_t>(kMsg - len);
      EXPECT_EQ(e.flags, FI_MSG | FI_RECV | ((sender & 1) ? FI_REMOTE_CQ_DATA : 0));
      EXPECT_EQ(e.data, (sender & 1) ? 0xabc00u + sender : 0u);
      EXPECT_EQ(memcmp(dst.data() + g * kMsg, src.data() + sender * kMsg, len), 0);
    }
    for (uint32_t g = 0; g < n; ++g) {
      EXPECT_EQ(seen_tx[g], 1);
      EXPECT_EQ(seen_rx[g], 1);
    }
    sends += n;
    // Counters at this scope: read from a group of the scope, all members agree.
    std::atomic<uint64_t> tx_seen{0}, rx_seen{0};
    std::atomic<int> disagree{0};
    ASSERT_EQ(launch(one_group(scope),
                     [&](const WorkItem&) {
                       fi_xpu_cntr_wait(&a_.xtx, sends, 5000, scope);
                       const uint64_t t = fi_xpu_cntr_read(&a_.xtx, scope);
                       const uint64_t r = fi_xpu_cntr_read(&b_.xrx, scope);
                       if (xpu_scope_is_leader(scope)) tx_seen = t, rx_seen = r;
                       xpu_scope_barrier(scope);
                       if (t != tx_seen.load() || r != rx_seen.load()) disagree++;
                     }),
              0);
    EXPECT_EQ(tx_seen.load(), sends);
    EXPECT_EQ(rx_seen.load(), sends);
    EXPECT_EQ(disagree.load(), 0);
  }
}

TEST_F(DeviceApi, WriteWithImmediateAndReadAtEveryScope) {
  const LaunchConfig cfg = post_shape();
  const uint32_t n = cfg.grid * cfg.workgroup_size;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    XpuBuf local, remote, back;
    ASSERT_EQ(w_.reg(&local, kMsg * n), "");
    ASSERT_EQ(w_.reg(&remote, kMsg * n), "");
    ASSERT_EQ(w_.reg(&back, kMsg * n), "");
    for (size_t i = 0; i < local.bytes.size(); ++i) local.bytes[i] = static_cast<uint8_t>(i ^ (i >> 8) ^ scope);
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_write(&a_.xep, local.data() + g * kMsg, kMsg, &local.desc, 0x5000 + g,
                                        &b_.peer, remote.addr() + g * kMsg, remote.key, ctx_of(g),
                                        FI_REMOTE_CQ_DATA, scope) != 0)
                         bad++;
                     }),
              0);
    std::vector<fi_cq_data_entry> tx, rx;
    ASSERT_EQ(drain_cq(&a_.xcq, scope, n, &tx), 0);
    ASSERT_EQ(drain_cq(&b_.xcq, scope, n, &rx), 0);
    ASSERT_EQ(tx.size(), n);
    ASSERT_EQ(rx.size(), n);
    for (const auto& e : tx) EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
    std::vector<int> seen(n);
    for (const auto& e : rx) {
      // Unsolicited write-with-immediate: no receive consumed, so no context and no buffer.
      EXPECT_EQ(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
      EXPECT_EQ(e.len, kMsg);
      EXPECT_EQ(e.op_context, nullptr);
      EXPECT_EQ(e.buf, nullptr);
      ASSERT_GE(e.data, 0x5000u);
      ASSERT_LT(e.data, 0x5000u + n);
      seen[e.data - 0x5000]++;
    }
    for (int s : seen) EXPECT_EQ(s, 1);
    EXPECT_EQ(memcmp(local.data(), remote.data(), kMsg * n), 0);
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_read(&a_.xep, back.data() + g * kMsg, kMsg, &back.desc, &b_.peer,
                                       remote.addr() + g * kMsg, remote.key, ctx_of(g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    tx.clear();
    ASSERT_EQ(drain_cq(&a_.xcq, scope, n, &tx), 0);
    ASSERT_EQ(tx.size(), n);
    for (const auto& e : tx) {
      EXPECT_EQ(e.flags, FI_RMA | FI_READ);
      EXPECT_EQ(e.len, 0u);
    }
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(memcmp(local.data(), back.data(), kMsg * n), 0);
  }
}

// The same operations through a host EP pair and an XPU EP pair give the same CQ entries, in
// every format.
TEST_F(DeviceApi, EntriesMatchTheHostProviderInEveryFormat) {
  for (fi_cq_format fmt : {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA}) {
    SCOPED_TRACE(fmt);
    XpuEpSetup s;
    s.format = fmt;
    XpuEp xa, xb;
    ASSERT_EQ(w_.add_ep(&xa, s), "");
    ASSERT_EQ(w_.add_ep(&xb, s), "");
    ASSERT_EQ(w_.export_ep(&xa), "");
    ASSERT_EQ(w_.export_ep(&xb), "");
    fid_ep* h[2];
    fid_cq* hcq[2];
    fi_addr_t ha[2];
    for (int i = 0; i < 2; ++i) {
      fi_cq_attr ca{};
      ca.format = fmt;
      ASSERT_EQ(fi_cq_open(w_.domain(), &ca, &hcq[i], nullptr), 0);
      w_.own(&hcq[i]->fid);
      ASSERT_EQ(fi_endpoint(w_.domain(), w_.info(), &h[i], nullptr), 0);
      w_.own(&h[i]->fid);
      ASSERT_EQ(fi_ep_bind(h[i], &w_.av()->fid, 0), 0);
      ASSERT_EQ(fi_ep_bind(h[i], &hcq[i]->fid, FI_TRANSMIT | FI_RECV), 0);
      ASSERT_EQ(fi_enable(h[i]), 0);
      ASSERT_EQ(w_.insert(&h[i]->fid, &ha[i]), "");
    }
    XpuBuf sb, rb, wb;
    ASSERT_EQ(w_.reg(&sb, 64), "");
    ASSERT_EQ(w_.reg(&rb, 64), "");
    ASSERT_EQ(w_.reg(&wb, 64), "");
    memset(sb.data(), 0x3c, 64);
    void* rx_ctx = reinterpret_cast<void*>(0x7700);
    void* tx_ctx = reinterpret_cast<void*>(0x7701);
    void* wr_ctx = reinterpret_cast<void*>(0x7702);
    const size_t esz = fmt == FI_CQ_FORMAT_CONTEXT ? sizeof(fi_cq_entry)
                       : fmt == FI_CQ_FORMAT_MSG   ? sizeof(fi_cq_msg_entry)
                                                   : sizeof(fi_cq_data_entry);
    // Host: recv, senddata, writedata.
    ASSERT_EQ(fi_recv(h[1], rb.data(), 64, fi_mr_desc(rb.mr), FI_ADDR_UNSPEC, rx_ctx), 0);
    ASSERT_EQ(fi_senddata(h[0], sb.data(), 40, fi_mr_desc(sb.mr), 0x1234, ha[1], tx_ctx), 0);
    ASSERT_EQ(fi_writedata(h[0], sb.data(), 24, fi_mr_desc(sb.mr), 0x99, ha[1], wb.addr(), wb.key, wr_ctx),
              0);
    std::vector<uint8_t> host_tx(2 * esz), host_rx(2 * esz), dev_tx(2 * esz), dev_rx(2 * esz);
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(wait_cq(hcq[0], host_tx.data() + k * esz), 1);
      ASSERT_EQ(wait_cq(hcq[1], host_rx.data() + k * esz), 1);
    }
    // Device: the same three operations.
    ASSERT_EQ(fi_xpu_recv(&xb.xep, rb.data(), 64, &rb.desc, nullptr, rx_ctx, 0, FI_XPU_WORK_ITEM), 0);
    ASSERT_EQ(fi_xpu_send(&xa.xep, sb.data(), 40, &sb.desc, 0x1234, &xb.peer, tx_ctx, FI_REMOTE_CQ_DATA,
                          FI_XPU_WORK_ITEM),
              0);
    ASSERT_EQ(fi_xpu_write(&xa.xep, sb.data(), 24, &sb.desc, 0x99, &xb.peer, wb.addr(), wb.key, wr_ctx,
                           FI_REMOTE_CQ_DATA, FI_XPU_WORK_ITEM),
              0);
    auto read_dev = [&](XpuEp* x, std::vector<uint8_t>* out) {
      size_t got = 0;
      for (long spins = 0; got < 2 && spins < 4000000; ++spins) {
        int64_t r = fi_xpu_cq_read(&x->xcq, out->data() + got * esz, 2 - got, FI_XPU_WORK_ITEM);
        if (r > 0) got += static_cast<size_t>(r);
        else xpu_relax();
      }
      return got;
    };
    ASSERT_EQ(read_dev(&xa, &dev_tx), 2u);
    ASSERT_EQ(read_dev(&xb, &dev_rx), 2u);
    // Completion order between the send and the write may differ; compare as sets.
    auto same_set = [&](const std::vector<uint8_t>& x, const std::vector<uint8_t>& y) {
      return (memcmp(x.data(), y.data(), 2 * esz) == 0) ||
             (memcmp(x.data(), y.data() + esz, esz) == 0 && memcmp(x.data() + esz, y.data(), esz) == 0);
    };
    EXPECT_TRUE(same_set(host_tx, dev_tx));
    EXPECT_TRUE(same_set(host_rx, dev_rx));
  }
}

TEST_F(DeviceApi, ReadFromReportsTheSenderAsTheHostDoes) {
  XpuBuf sb, rb;
  ASSERT_EQ(w_.reg(&sb, 64), "");
  ASSERT_EQ(w_.reg(&rb, 64 * 4), "");
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(fi_xpu_recv(&b_.xep, rb.data() + 64 * i, 64, &rb.desc, nullptr, ctx_of(i), 0, FI_XPU_WORK_ITEM), 0);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(fi_xpu_send(&a_.xep, sb.data(), 64, &sb.desc, 0, &b_.peer, ctx_of(i), 0, FI_XPU_WORK_ITEM), 0);
  std::vector<fi_cq_data_entry> rx, tx;
  std::vector<fi_addr_t> src, tx_src;
  ASSERT_EQ(drain_cq(&b_.xcq, FI_XPU_WORK_GROUP, 2, &rx, &src), 0);
  ASSERT_EQ(src.size(), 2u);
  for (fi_addr_t s : src) EXPECT_EQ(s, a_.addr);
  ASSERT_EQ(drain_cq(&a_.xcq, FI_XPU_SUBGROUP, 2, &tx, &tx_src), 0);
  for (fi_addr_t s : tx_src) EXPECT_EQ(s, FI_ADDR_NOTAVAIL);
  // sread/sreadfrom wait for the threshold.
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(fi_xpu_send(&a_.xep, sb.data(), 64, &sb.desc, 0, &b_.peer, ctx_of(i), 0, FI_XPU_WORK_ITEM), 0);
  fi_cq_data_entry e[4];
  fi_addr_t from[4];
  int64_t got = 0;
  while (got < 2) {
    int64_t r = fi_xpu_cq_sreadfrom(&b_.xcq, e + got, 4 - got, from + got, 2 - got, FI_XPU_WORK_ITEM);
    ASSERT_GT(r, 0);
    got += r;
  }
  EXPECT_EQ(from[0], a_.addr);
  EXPECT_EQ(from[1], a_.addr);
  got = 0;
  while (got < 2) {
    int64_t r = fi_xpu_cq_sread(&a_.xcq, e + got, 4 - got, 2 - got, FI_XPU_WORK_ITEM);
    ASSERT_GT(r, 0);
    got += r;
  }
  EXPECT_EQ(e[0].flags, FI_MSG | FI_SEND);
}

TEST_F(DeviceApi, BadKeyWriteIsReadThroughReaderr) {
  XpuBuf local, remote;
  ASSERT_EQ(w_.reg(&local, 128), "");
  ASSERT_EQ(w_.reg(&remote, 128), "");
  void* ctx = reinterpret_cast<void*>(0xbad0);
  // A good send first: successes before the error come out first.
  XpuBuf rb;
  ASSERT_EQ(w_.reg(&rb, 128), "");
  ASSERT_EQ(fi_xpu_recv(&b_.xep, rb.data(), 128, &rb.desc, nullptr, ctx_of(1), 0, FI_XPU_WORK_ITEM), 0);
  ASSERT_EQ(fi_xpu_send(&a_.xep, local.data(), 8, &local.desc, 0, &b_.peer, ctx_of(2), 0, FI_XPU_WORK_ITEM), 0);
  std::vector<fi_cq_data_entry> tx;
  ASSERT_EQ(drain_cq(&a_.xcq, FI_XPU_WORK_ITEM, 1, &tx), 0);
  ASSERT_EQ(fi_xpu_write(&a_.xep, local.data(), 64, &local.desc, 0, &b_.peer, remote.addr(),
                         remote.key ^ 0x5a5a00, ctx, 0, FI_XPU_WORK_ITEM),
            0);
  fi_cq_data_entry e;
  int64_t r = -FI_EAGAIN;
  for (long i = 0; i < 4000000 && r == -FI_EAGAIN; ++i) {
    r = fi_xpu_cq_read(&a_.xcq, &e, 1, FI_XPU_WORK_ITEM);
    if (r == -FI_EAGAIN) xpu_relax();
  }
  ASSERT_EQ(r, -FI_EAVAIL);
  EXPECT_EQ(fi_xpu_cq_read(&a_.xcq, &e, 1, FI_XPU_WORK_ITEM), -FI_EAVAIL);  // stays staged
  fi_cq_err_entry err;
  memset(&err, 0xee, sizeof(err));
  EXPECT_EQ(fi_xpu_cq_readerr(&a_.xcq, &err, 1, FI_XPU_WORK_ITEM), -FI_EINVAL);  // flags must be 0
  std::atomic<int64_t> rc{0};
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_GROUP),
                   [&](const WorkItem&) {
                     int64_t v = fi_xpu_cq_readerr(&a_.xcq, &err, 0, FI_XPU_WORK_GROUP);
                     if (xpu_scope_is_leader(FI_XPU_WORK_GROUP)) rc = v;
                   }),
            0);
  ASSERT_EQ(rc.load(), 1);
  EXPECT_EQ(err.op_context, ctx);
  EXPECT_EQ(err.flags, FI_RMA | FI_WRITE);
  EXPECT_EQ(err.len, 0u);
  EXPECT_EQ(err.err, FI_EINVAL);
  EXPECT_EQ(err.prov_errno, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
  EXPECT_EQ(err.olen, 0u);
  EXPECT_EQ(err.err_data_size, 0u);
  EXPECT_EQ(fi_xpu_cq_readerr(&a_.xcq, &err, 0, FI_XPU_WORK_ITEM), -FI_EAGAIN);
  EXPECT_EQ(fi_xpu_cq_read(&a_.xcq, &e, 1, FI_XPU_WORK_ITEM), -FI_EAGAIN);
  EXPECT_EQ(fi_xpu_cntr_readerr(&a_.xtx, FI_XPU_WORK_ITEM), 1u);
  EXPECT_EQ(fi_xpu_cntr_read(&a_.xtx, FI_XPU_WORK_ITEM), 1u);
  // The receive side saw the one good send.
  std::vector<fi_cq_data_entry> rx;
  ASSERT_EQ(drain_cq(&b_.xcq, FI_XPU_WORK_ITEM, 1, &rx), 0);
  EXPECT_EQ(rx[0].len, 8u);
}

TEST_F(DeviceApi, CounterWaitHonoursItsTimeout) {
  using Clock = std::chrono::steady_clock;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const auto t0 = Clock::now();
    ASSERT_EQ(launch(one_group(scope), [&](const WorkItem&) { fi_xpu_cntr_wait(&a_.xtx, 1000, 60, scope); }), 0);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_GE(ms, 60);
    EXPECT_LT(ms, 5000);
  }
  // Reached thresholds return at once; a grown error count ends the wait too.
  const auto t0 = Clock::now();
  fi_xpu_cntr_wait(&a_.xtx, 0, -1, FI_XPU_WORK_ITEM);
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), 1000);
  std::atomic<bool> waiting{false};
  std::thread bump([&] {
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fi_xpu_cntr_adderr(&a_.xtx, 1, FI_XPU_WORK_ITEM), 0);
  });
  waiting = true;
  fi_xpu_cntr_wait(&a_.xtx, 1000, -1, FI_XPU_WORK_ITEM);
  bump.join();
  EXPECT_EQ(fi_xpu_cntr_readerr(&a_.xtx, FI_XPU_WORK_ITEM), 1u);
}

TEST_F(DeviceApi, CounterAddSetAtEveryScopeChangeTheCounterOncePerScope) {
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(one_group(scope),
                     [&](const WorkItem&) {
                       bad += fi_xpu_cntr_set(&b_.xtx, 10, scope) != 0;
                       bad += fi_xpu_cntr_add(&b_.xtx, 5, scope) != 0;
                       bad += fi_xpu_cntr_seterr(&b_.xtx, 3, scope) != 0;
                       bad += fi_xpu_cntr_adderr(&b_.xtx, 2, scope) != 0;
                       bad += fi_xpu_cntr_read(&b_.xtx, scope) != 15;
                       bad += fi_xpu_cntr_readerr(&b_.xtx, scope) != 5;
                     }),
              0);
    EXPECT_EQ(bad.load(), 0);
  }
}

TEST_F(DeviceApi, FullSendQueueGivesEagainUntilCompletionsAreRead) {
  XpuEpSetup small;
  small.tx_size = 16;
  XpuEp s;
  ASSERT_EQ(w_.add_ep(&s, small), "");
  ASSERT_EQ(w_.export_ep(&s), "");
  const auto* st = reinterpret_cast<const efa_xpu_ep*>(s.xep.fid.prov_ctx);
  const uint32_t depth = st->sq.ring.num_entries;
  ASSERT_GE(depth, 2u);
  ASSERT_LE(depth, 64u);
  XpuBuf sb, rb;
  ASSERT_EQ(w_.reg(&sb, 8), "");
  ASSERT_EQ(w_.reg(&rb, 8 * (depth + 8)), "");
  // No receives yet: the sends wait in RNR retry and keep their slots.
  for (uint32_t i = 0; i < depth; ++i)
    ASSERT_EQ(fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &b_.peer, ctx_of(i), 0, FI_XPU_WORK_ITEM), 0) << i;
  EXPECT_EQ(fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &b_.peer, ctx_of(99), 0, FI_XPU_WORK_ITEM),
            -FI_EAGAIN);
  // A whole subgroup is refused together; nothing is claimed.
  std::atomic<int> eagain{0};
  ASSERT_EQ(launch(one_group(FI_XPU_SUBGROUP),
                   [&](const WorkItem&) {
                     eagain += fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &b_.peer, nullptr, 0,
                                           FI_XPU_SUBGROUP) == -FI_EAGAIN;
                   }),
            0);
  EXPECT_EQ(eagain.load(), 4);
  EXPECT_EQ(xpu_load_acquire_u32(&st->sq.ring.claimed), depth);
  // Receives let the sends complete; reading their completions gives the slots back.
  for (uint32_t i = 0; i < depth + 1; ++i)
    ASSERT_EQ(fi_xpu_recv(&b_.xep, rb.data() + 8 * i, 8, &rb.desc, nullptr, nullptr, 0, FI_XPU_WORK_ITEM), 0);
  std::vector<fi_cq_data_entry> tx, rx;
  ASSERT_EQ(drain_cq(&s.xcq, FI_XPU_WORK_ITEM, depth, &tx), 0);
  EXPECT_EQ(tx.size(), depth);
  EXPECT_EQ(fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &b_.peer, ctx_of(99), 0, FI_XPU_WORK_ITEM), 0);
  ASSERT_EQ(drain_cq(&s.xcq, FI_XPU_WORK_ITEM, 1, &tx), 0);
  ASSERT_EQ(drain_cq(&b_.xcq, FI_XPU_WORK_ITEM, depth + 1, &rx), 0);
  EXPECT_EQ(rx.size(), depth + 1);
}

TEST_F(DeviceApi, HostReceivesADeviceSendAndTheDeviceReceivesAHostSend) {
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_DATA;
  fid_cq* hcq = nullptr;
  ASSERT_EQ(fi_cq_open(w_.domain(), &ca, &hcq, nullptr), 0);
  w_.own(&hcq->fid);
  fid_ep* h = nullptr;
  ASSERT_EQ(fi_endpoint(w_.domain(), w_.info(), &h, nullptr), 0);
  w_.own(&h->fid);
  ASSERT_EQ(fi_ep_bind(h, &w_.av()->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(h, &hcq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(h), 0);
  fi_addr_t ha;
  ASSERT_EQ(w_.insert(&h->fid, &ha), "");
  efa_xpu_peer hpeer{};
  size_t len = sizeof(hpeer);
  ASSERT_EQ(fi_av_lookup2(w_.av(), ha, &hpeer, &len, FI_XPU, w_.ctx()), 0);
  ASSERT_EQ(fi_ep_export_xpu(a_.ep, 0, &a_.xep), 0);  // refreshes the AV mirror (readfrom)
  XpuBuf db, hb;
  ASSERT_EQ(w_.reg(&db, 512), "");
  ASSERT_EQ(w_.reg(&hb, 512), "");
  for (int i = 0; i < 512; ++i) db.bytes[i] = static_cast<uint8_t>(i * 13);
  // Device -> host.
  ASSERT_EQ(fi_recv(h, hb.data(), 512, fi_mr_desc(hb.mr), FI_ADDR_UNSPEC, ctx_of(5)), 0);
  ASSERT_EQ(fi_xpu_send(&a_.xep, db.data(), 300, &db.desc, 77, &hpeer, ctx_of(6), FI_REMOTE_CQ_DATA,
                        FI_XPU_WORK_ITEM),
            0);
  fi_cq_data_entry e{};
  fi_addr_t from = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(hcq, &e, 5000, &from), 1);
  EXPECT_EQ(e.op_context, ctx_of(5));
  EXPECT_EQ(e.flags, FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(e.len, 300u);
  EXPECT_EQ(e.data, 77u);
  EXPECT_EQ(from, a_.addr);
  EXPECT_EQ(memcmp(hb.data(), db.data(), 300), 0);
  // Host -> device.
  for (int i = 0; i < 512; ++i) hb.bytes[i] = static_cast<uint8_t>(255 - i);
  memset(db.data(), 0, 512);
  ASSERT_EQ(fi_xpu_recv(&a_.xep, db.data(), 512, &db.desc, nullptr, ctx_of(7), 0, FI_XPU_WORK_ITEM), 0);
  ASSERT_EQ(fi_senddata(h, hb.data(), 200, fi_mr_desc(hb.mr), 91, a_.addr, ctx_of(8)), 0);
  ASSERT_EQ(wait_cq(hcq, &e), 1);
  EXPECT_EQ(e.op_context, ctx_of(8));
  std::vector<fi_cq_data_entry> got;
  std::vector<fi_addr_t> src;
  ASSERT_EQ(drain_cq(&a_.xcq, FI_XPU_WORK_ITEM, 2, &got, &src), 0);  // the device send + this receive
  bool saw_recv = false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i].flags & FI_RECV)) continue;
    saw_recv = true;
    EXPECT_EQ(got[i].op_context, ctx_of(7));
    EXPECT_EQ(got[i].flags, FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(got[i].len, 200u);
    EXPECT_EQ(got[i].data, 91u);
    EXPECT_EQ(got[i].buf, db.data());
    EXPECT_EQ(src[i], ha);
  }
  EXPECT_TRUE(saw_recv);
  EXPECT_EQ(memcmp(hb.data(), db.data(), 200), 0);
}

TEST_F(DeviceApi, RefusalsComeBeforeAnySlotIsClaimed) {
  XpuBuf b;
  ASSERT_EQ(w_.reg(&b, 64), "");
  const auto* st = reinterpret_cast<const efa_xpu_ep*>(a_.xep.fid.prov_ctx);
  const uint32_t claimed0 = xpu_load_acquire_u32(&st->sq.ring.claimed);
  // Not in efa-direct: tagged and atomics.
  EXPECT_EQ(fi_xpu_tsend(&a_.xep, b.data(), 8, &b.desc, 0, &b_.peer, 1, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_trecv(&a_.xep, b.data(), 8, &b.desc, nullptr, 1, 0, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_atomic(&a_.xep, b.data(), 1, &b.desc, &b_.peer, b.addr(), b.key, FI_UINT64, FI_SUM, nullptr,
                          0, FI_XPU_WORK_ITEM),
            -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_fetch_atomic(&a_.xep, b.data(), 1, &b.desc, b.data() + 8, &b.desc, &b_.peer, b.addr(), b.key,
                                FI_UINT64, FI_SUM, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_compare_atomic(&a_.xep, b.data(), 1, &b.desc, b.data() + 8, &b.desc, b.data() + 16, &b.desc,
                                  &b_.peer, b.addr(), b.key, FI_UINT64, FI_CSWAP, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_ENOSYS);
  // Unknown scope; bad flags, sizes, descriptors and addresses.
  EXPECT_EQ(fi_xpu_send(&a_.xep, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0, 9), -FI_EINVAL);
  EXPECT_EQ(fi_xpu_send(&a_.xep, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, FI_INJECT, FI_XPU_WORK_ITEM),
            -FI_EBADFLAGS);
  EXPECT_EQ(fi_xpu_send(&a_.xep, b.data(), st->mtu + 1, &b.desc, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EMSGSIZE);
  EXPECT_EQ(fi_xpu_send(&a_.xep, b.data(), 8, nullptr, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EINVAL);
  EXPECT_EQ(fi_xpu_send(&a_.xep, b.data(), 8, &b.desc, 0, nullptr, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EINVAL);
  EXPECT_EQ(fi_xpu_read(&a_.xep, b.data(), 8, &b.desc, &b_.peer, b.addr(), b.key, nullptr, FI_REMOTE_CQ_DATA,
                        FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_recv(&a_.xep, nullptr, 8, &b.desc, nullptr, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EINVAL);
  int64_t dummy;
  EXPECT_EQ(fi_xpu_cq_read(&a_.xcq, nullptr, 1, FI_XPU_WORK_ITEM), -FI_EINVAL);
  EXPECT_EQ(fi_xpu_cq_read(&a_.xcq, &dummy, 1, 9), -FI_EINVAL);
  // Handles: none, of the wrong class, or of another layout version.
  fid_xpu_ep none{};
  none.fid.fclass = FI_CLASS_EP;
  none.fid.prov_id = FI_XPU_PROV_EFA;
  EXPECT_EQ(fi_xpu_send(&none, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EINVAL);
  fid_xpu_ep as_cq = a_.xep;
  as_cq.fid.fclass = FI_CLASS_CQ;
  EXPECT_EQ(fi_xpu_send(&as_cq, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EINVAL);
  efa_xpu_ep old = *st;
  old.version = (2u << 16) | 6u;
  fid_xpu_ep old_h = a_.xep;
  old_h.fid.prov_ctx = reinterpret_cast<uintptr_t>(&old);
  EXPECT_EQ(fi_xpu_send(&old_h, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM), -FI_EOPNOTSUPP);
  // RDMA on an endpoint whose device lacks it (a first-generation device; fi_getinfo does not
  // offer FI_RMA there, so the state is edited here).
  efa_xpu_ep no_rdma = *st;
  no_rdma.caps &= ~(EFA_XPU_EP_CAP_RDMA_READ | EFA_XPU_EP_CAP_RDMA_WRITE);
  fid_xpu_ep no_rdma_h = a_.xep;
  no_rdma_h.fid.prov_ctx = reinterpret_cast<uintptr_t>(&no_rdma);
  EXPECT_EQ(fi_xpu_write(&no_rdma_h, b.data(), 8, &b.desc, 0, &b_.peer, b.addr(), b.key, nullptr, 0,
                         FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_xpu_read(&no_rdma_h, b.data(), 8, &b.desc, &b_.peer, b.addr(), b.key, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  fid_xpu_cntr nc = a_.xtx;
  nc.fid.prov_ctx = 0;
  EXPECT_EQ(fi_xpu_cntr_add(&nc, 1, FI_XPU_WORK_ITEM), -FI_EINVAL);
  EXPECT_EQ(fi_xpu_cntr_read(&nc, FI_XPU_WORK_ITEM), 0u);
  // A provider this build does not know.
  fid_xpu_ep other = a_.xep;
  other.fid.prov_id = 77;
  EXPECT_EQ(fi_xpu_send(&other, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
  // DEVICE scope in a launch that cannot synchronize the grid.
  LaunchConfig nc_cfg = shape(2, 4, 4);
  nc_cfg.cooperative = false;
  std::atomic<int> refused{0};
  ASSERT_EQ(launch(nc_cfg,
                   [&](const WorkItem&) {
                     refused += fi_xpu_send(&a_.xep, b.data(), 8, &b.desc, 0, &b_.peer, nullptr, 0,
                                            FI_XPU_DEVICE) == -FI_EOPNOTSUPP;
                     refused += fi_xpu_cq_read(&a_.xcq, &dummy, 1, FI_XPU_DEVICE) == -FI_EOPNOTSUPP;
                     refused += fi_xpu_cntr_set(&a_.xtx, 5, FI_XPU_DEVICE) == -FI_EOPNOTSUPP;
                   }),
            0);
  EXPECT_EQ(refused.load(), 3 * 8);
  EXPECT_EQ(xpu_load_acquire_u32(&st->sq.ring.claimed), claimed0);
  EXPECT_EQ(fi_xpu_cntr_read(&a_.xtx, FI_XPU_WORK_ITEM), 0u);
}

TEST_F(DeviceApi, AMemberWithBadArgumentsFailsAloneInItsGroup) {
  XpuBuf sb, rb;
  ASSERT_EQ(w_.reg(&sb, 64 * 8), "");
  ASSERT_EQ(w_.reg(&rb, 64 * 8), "");
  const auto* st = reinterpret_cast<const efa_xpu_ep*>(a_.xep.fid.prov_ctx);
  std::vector<int> rc(8, 1);
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_GROUP),
                   [&](const WorkItem& it) {
                     const uint32_t i = it.local_id;
                     const size_t len = i == 3 ? size_t{st->mtu} + 1 : 64;
                     fi_xpu_recv(&b_.xep, rb.data() + 64 * i, 64, &rb.desc, nullptr, ctx_of(i), 0,
                                 FI_XPU_WORK_GROUP);
                     rc[i] = fi_xpu_send(&a_.xep, sb.data() + 64 * i, len, &sb.desc, 0, &b_.peer, ctx_of(i), 0,
                                         FI_XPU_WORK_GROUP);
                   }),
            0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rc[i], i == 3 ? -FI_EMSGSIZE : 0) << i;
  std::vector<fi_cq_data_entry> tx, rx;
  ASSERT_EQ(drain_cq(&a_.xcq, FI_XPU_WORK_ITEM, 7, &tx), 0);
  ASSERT_EQ(drain_cq(&b_.xcq, FI_XPU_WORK_ITEM, 7, &rx), 0);
  for (const auto& e : tx) EXPECT_NE(e.op_context, ctx_of(3));
  fi_cq_data_entry e;
  EXPECT_EQ(fi_xpu_cq_read(&a_.xcq, &e, 1, FI_XPU_WORK_ITEM), -FI_EAGAIN);
}

}  // namespace
}  // namespace xpufab::testing
