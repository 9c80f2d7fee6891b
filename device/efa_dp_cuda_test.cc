// GPU threads post to and poll host-mapped queues through the same data path
// the host uses; the host checks the bytes and plays the NIC. Needs a GPU
// (tag "gpu"); fails, rather than skips, without one.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/efa_dp.h"
#include "device/efa_dp_cuda_kernels.h"

namespace {

constexpr uint32_t kDepth = 512;
constexpr uint32_t kPosts = 384;

struct Mapped {
  efa_sq sq;
  efa_cq cq;
  uint32_t sq_db;
  uint32_t errors;
  uint32_t seen[kPosts];
  alignas(64) uint8_t sq_ring[kDepth * 64];
  alignas(64) uint8_t cq_ring[kDepth * 32];
  alignas(8) uint8_t scratch[kDepth * 20];
};

TEST(EfaDpCuda, GpuThreadsPostAndPoll) {
  ASSERT_GT(efa_dp_cuda_device_count(), 0) << "this test needs a CUDA GPU";
  auto* m = static_cast<Mapped*>(efa_dp_cuda_host_alloc(sizeof(Mapped)));
  ASSERT_NE(m, nullptr);
  efa_dp_wq_attr sa{m->sq_ring, 64, kDepth, &m->sq_db, 16};
  ASSERT_EQ(efa_sq_init(&m->sq, &sa, 2, m->scratch, sizeof(m->scratch)), 0);
  efa_dp_cq_attr ca{m->cq_ring, 32, kDepth, nullptr};
  ASSERT_EQ(efa_cq_init(&m->cq, &ca), 0);

  ASSERT_EQ(efa_dp_cuda_post_sends(&m->sq, kPosts, &m->errors), 0);
  EXPECT_EQ(m->errors, 0u);
  EXPECT_EQ(m->sq_db, kPosts);
  std::vector<int> addr_seen(kPosts, 0);
  for (uint32_t i = 0; i < kPosts; ++i) {
    const auto* w = reinterpret_cast<const efa_io_tx_wqe*>(m->sq_ring + i * 64);
    EXPECT_EQ(efa_io_tx_meta_desc_get_meta_desc(&w->meta), 1);
    EXPECT_EQ(efa_io_tx_meta_desc_get_phase(&w->meta), 0);
    const uint64_t a = efa_io_tx_buf_desc_get_addr(&w->data.sgl[0]);
    ASSERT_LT(a, kPosts);
    ++addr_seen[a];
    // Play the NIC: complete in reverse slot order.
    efa_io_rx_cdesc_ex c;
    std::memset(&c, 0, sizeof(c));
    c.base.common.req_id = w->meta.req_id;
    efa_io_cdesc_common_set_q_type(&c.base.common, EFA_IO_SEND_QUEUE);
    const uint32_t k = kPosts - 1 - i;
    efa_dp_nic_write_cqe(m->cq_ring + k * 32, &c, efa_dp_cq_phase(k, m->cq.log2_entries));
  }
  for (int s : addr_seen) EXPECT_EQ(s, 1);

  ASSERT_EQ(efa_dp_cuda_poll_completions(&m->cq, &m->sq, kPosts, m->seen, &m->errors), 0);
  EXPECT_EQ(m->errors, 0u);
  for (uint32_t i = 0; i < kPosts; ++i) EXPECT_EQ(m->seen[i], 1u) << i;
  EXPECT_EQ(efa_dp_ring_inflight(&m->sq.ring), 0u);
  efa_dp_cuda_host_free(m);
}

}  // namespace
