// Many work-items posting concurrently with mixed scopes: 8 work-groups x 64 work-items, each
// posting RDMA writes (with and without immediate data) and sends, on one XPU EP or on one EP per
// work-group. Senders read their own CQs when a post finds the SQ full; a host thread receives.
// Every completion is accounted for exactly once and every byte is checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/xpu/xpu_fixture.h"
#include "testing/xpu/xpu_test_util.h"

namespace xpufab::testing {
namespace {

#if defined(__SANITIZE_THREAD__)
#define XPU_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XPU_STRESS_TSAN 1
#endif
#endif

constexpr uint32_t kGroups = 8;
constexpr uint32_t kItems = 64;
constexpr uint32_t kSubgroup = 32;
#if defined(XPU_STRESS_TSAN)
constexpr uint32_t kIters = 30;  // ThreadSanitizer: same shape, fewer rounds
#else
constexpr uint32_t kIters = 200;
#endif
constexpr uint32_t kThreads = kGroups * kItems;
constexpr uint32_t kOps = kThreads * kIters;
constexpr size_t kLen = 64;
constexpr uint32_t kRecvSlots = 2048;

// The scope of round `iter` (the same for every work-item, so groups stay converged).
int scope_of(uint32_t iter) {
  if (iter % 25 == 24) return FI_XPU_DEVICE;
  switch (iter % 3) {
    case 0: return FI_XPU_WORK_ITEM;
    case 1: return FI_XPU_SUBGROUP;
    default: return FI_XPU_WORK_GROUP;
  }
}
bool is_send(uint32_t iter) { return iter % 4 == 3; }
bool has_imm(uint32_t iter) { return is_send(iter) || (iter % 2 == 1); }

uint8_t pattern(uint32_t op, size_t i) { return static_cast<uint8_t>(op * 131 + i * 7 + (op >> 8)); }

class Stress : public ::testing::TestWithParam<uint32_t> {};  // number of sending EPs

TEST_P(Stress, MixedScopesEveryCompletionAndByteAccountedFor) {
  const uint32_t num_eps = GetParam();
  XpuWorld w;
  ASSERT_EQ(w.open(), "");
  std::vector<XpuEp> senders(num_eps);
  XpuEp rcv;
  for (auto& s : senders) ASSERT_EQ(w.add_ep(&s), "");
  ASSERT_EQ(w.add_ep(&rcv), "");
  for (auto& s : senders) ASSERT_EQ(w.export_ep(&s), "");
  ASSERT_EQ(w.export_ep(&rcv), "");
  XpuBuf src, dst, rx;
  ASSERT_EQ(w.reg(&src, kLen * kOps), "");
  ASSERT_EQ(w.reg(&dst, kLen * kOps), "");
  ASSERT_EQ(w.reg(&rx, kLen * kRecvSlots), "");

  uint32_t expect_rx = 0;
  for (uint32_t it = 0; it < kIters; ++it) expect_rx += has_imm(it) ? kThreads : 0;
  std::vector<std::atomic<uint8_t>> tx_done(kOps), rx_done(kOps);
  for (uint32_t i = 0; i < kOps; ++i) tx_done[i] = 0, rx_done[i] = 0;
  std::atomic<int> errors{0};
  std::atomic<uint32_t> rx_count{0}, tx_count{0}, bad_bytes{0};

  // The receiver: keeps kRecvSlots receives posted and accounts for every arrival.
  std::atomic<bool> stop{false};
  std::thread receiver([&] {
    for (uint32_t k = 0; k < kRecvSlots; ++k)
      if (fi_xpu_recv(&rcv.xep, rx.data() + kLen * k, kLen, &rx.desc, nullptr, nullptr, 0, FI_XPU_WORK_ITEM))
        errors++;
    fi_cq_data_entry e[32];
    while (rx_count.load() < expect_rx && !stop.load()) {
      int64_t n = fi_xpu_cq_read(&rcv.xcq, e, 32, FI_XPU_WORK_ITEM);
      if (n == -FI_EAGAIN) {
        std::this_thread::yield();
        continue;
      }
      if (n < 0) {
        errors++;
        break;
      }
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t op = e[i].data;
        if (!(e[i].flags & FI_REMOTE_CQ_DATA) || op >= kOps || e[i].len != kLen) {
          errors++;
          continue;
        }
        rx_done[op]++;
        rx_count++;
        if (e[i].flags & FI_RECV) {
          auto* b = static_cast<uint8_t*>(e[i].buf);
          for (size_t j = 0; j < kLen; ++j) bad_bytes += b[j] != pattern(static_cast<uint32_t>(op), j);
          if (fi_xpu_recv(&rcv.xep, b, kLen, &rx.desc, nullptr, nullptr, 0, FI_XPU_WORK_ITEM)) errors++;
        } else if (e[i].flags != (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) {
          errors++;
        }
      }
    }
  });

  auto account_tx = [&](const fi_cq_data_entry* e, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const uintptr_t op = reinterpret_cast<uintptr_t>(e[i].op_context) - 1;
      if (op >= kOps) {
        errors++;
        continue;
      }
      const uint32_t iter = static_cast<uint32_t>(op % kIters);
      const uint64_t want = is_send(iter) ? (FI_MSG | FI_SEND) : (FI_RMA | FI_WRITE);
      if (e[i].flags != want) errors++;
      tx_done[op]++;
      tx_count++;
    }
  };

  // Per-group completion buffers: a group's members must all pass the same buffer.
  std::vector<fi_cq_data_entry> group_bufs((3 * kThreads + 1) * 16);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(runtime::launch(shape(kGroups, kItems, kSubgroup),
                            [&](const runtime::WorkItem& wi) {
                              for (uint32_t iter = 0; iter < kIters; ++iter) {
                                const int scope = scope_of(iter);
                                // A scope's members share one handle: device-scope rounds use EP 0.
                                XpuEp& s = senders[scope == FI_XPU_DEVICE ? 0 : wi.workgroup_id % num_eps];
                                const uint32_t op = wi.global_id * kIters + iter;
                                uint8_t* p = src.data() + kLen * op;
                                for (size_t j = 0; j < kLen; ++j) p[j] = pattern(op, j);
                                uint32_t group = 0;
                                switch (scope) {
                                  case FI_XPU_WORK_ITEM: group = wi.global_id; break;
                                  case FI_XPU_SUBGROUP:
                                    group = kThreads + wi.workgroup_id * (kItems / kSubgroup) + wi.subgroup_id;
                                    break;
                                  case FI_XPU_WORK_GROUP: group = 2 * kThreads + wi.workgroup_id; break;
                                  default: group = 3 * kThreads; break;
                                }
                                fi_cq_data_entry* cqbuf = &group_bufs[group * 16];
                                for (;;) {
                                  int rc;
                                  void* ctx = reinterpret_cast<void*>(uintptr_t{op} + 1);
                                  if (is_send(iter)) {
                                    rc = fi_xpu_send(&s.xep, p, kLen, &src.desc, op, &rcv.peer, ctx,
                                                     FI_REMOTE_CQ_DATA, scope);
                                  } else {
                                    rc = fi_xpu_write(&s.xep, p, kLen, &src.desc, op, &rcv.peer,
                                                      dst.addr() + kLen * op, dst.key, ctx,
                                                      has_imm(iter) ? FI_REMOTE_CQ_DATA : 0, scope);
                                  }
                                  if (rc == 0) break;
                                  if (rc != -FI_EAGAIN) {
                                    errors++;
                                    break;
                                  }
                                  // SQ full for the group: read completions to get slots back.
                                  int64_t n = fi_xpu_cq_read(&s.xcq, cqbuf, 16, scope);
                                  if (n > 0 && xpu_scope_is_leader(scope)) account_tx(cqbuf, n);
                                  if (n < 0 && n != -FI_EAGAIN) {
                                    errors++;
                                    break;
                                  }
                                  // Nothing to read yet: leave the cores to the NIC engine.
                                  if (n == -FI_EAGAIN) std::this_thread::sleep_for(std::chrono::microseconds(50));
                                }
                              }
                            }),
            0);
  // Whatever the kernel did not read.
  fi_cq_data_entry e[64];
  for (long spins = 0; tx_count.load() < kOps && spins < 20000000; ++spins) {
    bool any = false;
    for (auto& s : senders) {
      int64_t n = fi_xpu_cq_read(&s.xcq, e, 64, FI_XPU_WORK_ITEM);
      if (n > 0) account_tx(e, n), any = true;
      else if (n != -FI_EAGAIN) errors++;
    }
    if (!any) std::this_thread::yield();
  }
  for (long spins = 0; rx_count.load() < expect_rx && spins < 20000; ++spins)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  receiver.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%u EP(s): %u ops (%u completions at the receiver) in %.3f s\n", num_eps, kOps, rx_count.load(), secs);

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(tx_count.load(), kOps);
  EXPECT_EQ(rx_count.load(), expect_rx);
  EXPECT_EQ(bad_bytes.load(), 0u);
  uint32_t tx_wrong = 0, rx_wrong = 0, dst_wrong = 0;
  for (uint32_t op = 0; op < kOps; ++op) {
    const uint32_t iter = op % kIters;
    tx_wrong += tx_done[op].load() != 1;
    rx_wrong += rx_done[op].load() != (has_imm(iter) ? 1 : 0);
    if (!is_send(iter)) {
      const uint8_t* d = dst.data() + kLen * op;
      for (size_t j = 0; j < kLen; ++j) dst_wrong += d[j] != pattern(op, j);
    }
  }
  EXPECT_EQ(tx_wrong, 0u);
  EXPECT_EQ(rx_wrong, 0u);
  EXPECT_EQ(dst_wrong, 0u);
  // The counters saw every operation too.
  uint64_t tx_cntr = 0;
  for (auto& s : senders) tx_cntr += fi_xpu_cntr_read(&s.xtx, FI_XPU_WORK_ITEM);
  EXPECT_EQ(tx_cntr, kOps);
  // Receives and remote writes (the emulator also counts a write with immediate data as a receive).
  EXPECT_GE(fi_xpu_cntr_read(&rcv.xrx, FI_XPU_WORK_ITEM), uint64_t{kOps});
  EXPECT_EQ(w.close(), 0);
}

INSTANTIATE_TEST_SUITE_P(Eps, Stress, ::testing::Values(1u, 8u));

}  // namespace
}  // namespace xpufab::testing
