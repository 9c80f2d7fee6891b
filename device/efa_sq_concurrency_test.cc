// Many threads post to one SQ while a fake NIC drains it through the doorbell
// and answers with out-of-order CQEs that a poller thread consumes. Checks that
// every WQE reaches the NIC exactly once, fully written, with the right phase,
// that doorbells only move forward, and that every context comes back exactly
// once. Built to run under --config=tsan as well.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "device/efa_dp.h"

namespace {

constexpr uint32_t kDepth = 64;
constexpr uint32_t kMaxBatch = 8;
constexpr uint32_t kThreads = 8;
constexpr uint32_t kPerThread = 1500;
constexpr uint32_t kTotal = kThreads * kPerThread;

uint64_t Ctx(uint32_t t, uint32_t seq) { return (uint64_t{t} << 32) | seq; }

TEST(SqConcurrency, ManyPostersOneNicOnePoller) {
  std::vector<uint8_t> sq_ring(kDepth * 64, 0);
  std::vector<uint8_t> cq_ring(kDepth * 32, 0);
  std::vector<uint64_t> scratch(efa_sq_scratch_size(kDepth) / 8 + 1);
  uint32_t sq_db = 0;
  efa_dp_wq_attr sa{sq_ring.data(), 64, kDepth, &sq_db, kMaxBatch};
  efa_sq sq;
  ASSERT_EQ(efa_sq_init(&sq, &sa, 2, scratch.data(), efa_sq_scratch_size(kDepth)), 0);
  efa_dp_cq_attr ca{cq_ring.data(), 32, kDepth, nullptr};
  efa_cq cq;
  ASSERT_EQ(efa_cq_init(&cq, &ca), 0);

  std::vector<std::atomic<uint8_t>> nic_seen(kTotal);
  std::vector<std::atomic<uint8_t>> completed(kTotal);
  std::atomic<uint32_t> errors{0};
  std::atomic<uint32_t> done_count{0};
  // What the NIC saw for each req_id, for the poller to compare with the returned context.
  std::vector<std::atomic<uint64_t>> nic_ctx_of_req(65536);

  std::thread nic([&] {
    uint32_t fetched = 0;  // absolute count of WQEs read
    uint32_t last_db = 0;
    uint32_t cq_produced = 0;
    std::vector<efa_io_rx_cdesc_ex> pending;
    while (done_count.load(std::memory_order_acquire) < kTotal) {
      const uint32_t db = xpu_load_acquire_u32(&sq_db);
      const uint32_t delta = (db - last_db) & 0xffffu;
      if (delta >= 0x8000u || delta > kDepth) errors.fetch_add(1);  // went backwards or overran
      last_db = db;
      for (uint32_t k = 0; k < delta; ++k, ++fetched) {
        const uint8_t* slot = sq_ring.data() + (fetched % kDepth) * 64;
        efa_io_tx_wqe w;
        std::memcpy(&w, slot, sizeof(w));
        if (efa_io_tx_meta_desc_get_phase(&w.meta) != ((fetched / kDepth) & 1)) errors.fetch_add(1);
        if (!efa_io_tx_meta_desc_get_meta_desc(&w.meta) || !efa_io_tx_meta_desc_get_first(&w.meta) ||
            !efa_io_tx_meta_desc_get_last(&w.meta) || !efa_io_tx_meta_desc_get_comp_req(&w.meta))
          errors.fetch_add(1);
        // The context travels in the SGE address; the imm must agree with it.
        const uint64_t ctx = efa_io_tx_buf_desc_get_addr(&w.data.sgl[0]);
        const uint32_t t = static_cast<uint32_t>(ctx >> 32), seq = static_cast<uint32_t>(ctx);
        if (t >= kThreads || seq >= kPerThread || w.meta.immediate_data != (t << 16 | seq)) {
          errors.fetch_add(1);
          continue;
        }
        if (nic_seen[t * kPerThread + seq].fetch_add(1) != 0) errors.fetch_add(1);
        nic_ctx_of_req[w.meta.req_id].store(ctx, std::memory_order_relaxed);
        efa_io_rx_cdesc_ex c;
        std::memset(&c, 0, sizeof(c));
        c.base.common.req_id = w.meta.req_id;
        c.base.common.qp_num = 1;
        efa_io_cdesc_common_set_q_type(&c.base.common, EFA_IO_SEND_QUEUE);
        pending.push_back(c);
      }
      // Complete out of order: newest first, in bursts.
      if (pending.size() >= 3 || (delta == 0 && !pending.empty())) {
        while (!pending.empty()) {
          // The CQ is as deep as the SQ, so it has room whenever the SQ had a slot.
          if (cq_produced - efa_cq_consumed(&cq) >= kDepth) errors.fetch_add(1);
          efa_dp_nic_write_cqe(cq_ring.data() + (cq_produced % kDepth) * 32, &pending.back(),
                               efa_dp_cq_phase(cq_produced, cq.log2_entries));
          ++cq_produced;
          pending.pop_back();
        }
      }
      if (delta == 0) std::this_thread::yield();
    }
  });

  std::thread poller([&] {
    efa_dp_cqe out;
    while (done_count.load(std::memory_order_relaxed) < kTotal) {
      if (efa_cq_poll(&cq, &out) != 0) {
        std::this_thread::yield();
        continue;
      }
      const uint64_t expect = nic_ctx_of_req[out.req_id].load(std::memory_order_relaxed);
      uint64_t ctx = 0;
      if (efa_sq_complete(&sq, out.req_id, &ctx) != 0 || ctx != expect) errors.fetch_add(1);
      const uint32_t t = static_cast<uint32_t>(ctx >> 32), seq = static_cast<uint32_t>(ctx);
      if (t < kThreads && seq < kPerThread && completed[t * kPerThread + seq].fetch_add(1) != 0)
        errors.fetch_add(1);
      done_count.fetch_add(1, std::memory_order_release);
    }
  });

  std::vector<std::thread> posters;
  for (uint32_t t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      auto make = [&](uint32_t seq) {
        efa_dp_wr wr{};
        wr.op = EFA_DP_OP_SEND;
        wr.flags = EFA_DP_WR_IMM | (seq % 3 == 1 ? EFA_DP_WR_MORE : 0u);
        wr.imm = t << 16 | seq;
        wr.num_sge = 1;
        wr.sge[0] = {Ctx(t, seq), 64, 1};
        wr.context = Ctx(t, seq);
        return wr;
      };
      uint32_t seq = 0;
      while (seq < kPerThread) {
        // Mix single posts and small batches (one claim, one doorbell).
        const uint32_t n = (seq % 7 == 0 && seq + 3 <= kPerThread) ? 3 : 1;
        efa_dp_wr wrs[3];
        for (uint32_t i = 0; i < n; ++i) wrs[i] = make(seq + i);
        int rc;
        if (n == 1) {
          rc = efa_sq_post(&sq, &wrs[0]);
        } else if (seq % 2 == 0) {
          rc = efa_sq_post_batch(&sq, wrs, n, 0);
        } else {
          // The group path, with the claimer descheduled between its steps so that
          // later claims are written and waiting to publish before this one is.
          uint32_t first = 0;
          rc = efa_sq_claim(&sq, n, &first);
          if (rc == 0) {
            std::this_thread::yield();
            for (uint32_t i = 0; i < n; ++i) efa_sq_write(&sq, first + i, &wrs[i]);
            std::this_thread::yield();
            efa_sq_publish(&sq, first, n, 0);
          }
        }
        if (rc == -FI_EAGAIN) {
          efa_sq_flush(&sq);  // deferred posts of others may hold the slots we wait for
          std::this_thread::yield();
          continue;
        }
        if (rc != 0) {
          errors.fetch_add(1);
          return;
        }
        seq += n;
      }
      efa_sq_flush(&sq);
    });
  }
  for (auto& p : posters) p.join();
  efa_sq_flush(&sq);
  nic.join();
  poller.join();

  EXPECT_EQ(errors.load(), 0u);
  for (uint32_t i = 0; i < kTotal; ++i) {
    ASSERT_EQ(nic_seen[i].load(), 1) << i;
    ASSERT_EQ(completed[i].load(), 1) << i;
  }
  EXPECT_EQ(sq_db, kTotal & 0xffffu);
  EXPECT_EQ(efa_dp_ring_inflight(&sq.ring), 0u);
}

}  // namespace
