// Built with FI_XPU_EFA_POST_SPIN: a post to a full SQ waits for room instead of returning
// -FI_EAGAIN (what upstream kernels expect), and succeeds once completions are read.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "testing/xpu/xpu_fixture.h"
#include "testing/xpu/xpu_test_util.h"

#ifndef FI_XPU_EFA_POST_SPIN
#error "build this test with -DFI_XPU_EFA_POST_SPIN"
#endif

namespace xpufab::testing {
namespace {

TEST(PostSpin, FullSendQueueWaitsForCompletionsInsteadOfFailing) {
  XpuWorld w;
  ASSERT_EQ(w.open(), "");
  XpuEpSetup small;
  small.tx_size = 16;
  XpuEp s, r;
  ASSERT_EQ(w.add_ep(&s, small), "");
  ASSERT_EQ(w.add_ep(&r), "");
  ASSERT_EQ(w.export_ep(&s), "");
  ASSERT_EQ(w.export_ep(&r), "");
  const auto* st = reinterpret_cast<const efa_xpu_ep*>(s.xep.fid.prov_ctx);
  const uint32_t depth = st->sq.ring.num_entries;
  XpuBuf sb, rb;
  ASSERT_EQ(w.reg(&sb, 8), "");
  ASSERT_EQ(w.reg(&rb, 8 * (depth + 1)), "");
  for (uint32_t i = 0; i < depth; ++i)
    ASSERT_EQ(fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &r.peer, nullptr, 0, FI_XPU_WORK_ITEM), 0);
  // The queue is full and nothing can complete until receives are posted 50 ms from now.
  std::atomic<bool> posted{false};
  std::thread helper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (uint32_t i = 0; i < depth + 1; ++i)
      EXPECT_EQ(fi_xpu_recv(&r.xep, rb.data() + 8 * i, 8, &rb.desc, nullptr, nullptr, 0, FI_XPU_WORK_ITEM), 0);
    posted = true;
    std::vector<fi_cq_data_entry> tx;
    EXPECT_EQ(drain_cq(&s.xcq, FI_XPU_WORK_ITEM, depth, &tx), 0);
  });
  // A slot frees only when the helper drains the send CQ, after `posted`: a post that returned
  // early (instead of spinning) sees `posted` still false. No clock is involved.
  EXPECT_EQ(fi_xpu_send(&s.xep, sb.data(), 8, &sb.desc, 0, &r.peer, nullptr, 0, FI_XPU_WORK_ITEM), 0);
  EXPECT_TRUE(posted.load());
  helper.join();
  std::vector<fi_cq_data_entry> tx, rx;
  ASSERT_EQ(drain_cq(&s.xcq, FI_XPU_WORK_ITEM, 1, &tx), 0);
  ASSERT_EQ(drain_cq(&r.xcq, FI_XPU_WORK_ITEM, depth + 1, &rx), 0);
  EXPECT_EQ(rx.size(), depth + 1);
  EXPECT_EQ(w.close(), 0);
}

}  // namespace
}  // namespace xpufab::testing
