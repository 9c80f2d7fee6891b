// GPU threads drive XPU endpoints of the emulated EFA device: queues, doorbells, CQ rings and
// counters live in host memory mapped into the GPU through the FI_HMEM_CUDA fi_xpu_ops. Needs a
// CUDA GPU (tag "gpu"); fails, rather than skips, without one.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "testing/xpu/cuda_xpu_ops.h"
#include "testing/xpu/xpu_cuda_kernels.h"
#include "testing/xpu/xpu_fixture.h"

namespace xpufab::testing {
namespace {

template <typename T>
T* mapped_copy(const T& v) {
  auto* p = static_cast<T*>(cuda::host_alloc(sizeof(T)));
  if (p) memcpy(p, &v, sizeof(T));
  return p;
}

TEST(XpuCuda, GpuWarpsSendAndReceiveThroughTheEmulatedDevice) {
  ASSERT_GT(cuda::device_count(), 0) << "this test needs a CUDA GPU";
  fi_xpu_attr xa{};
  xa.iface = FI_HMEM_CUDA;
  xa.device = 0;
  xa.ops = reinterpret_cast<fi_xpu_ops*>(cuda::xpu_ops());
  XpuWorld w;
  ASSERT_EQ(w.open(&xa), "");
  XpuEp a, b;
  ASSERT_EQ(w.add_ep(&a), "");
  ASSERT_EQ(w.add_ep(&b), "");
  ASSERT_EQ(w.export_ep(&a), "");
  ASSERT_EQ(w.export_ep(&b), "");

  constexpr uint32_t kThreads = 64;
  constexpr uint32_t kLen = 512;
  auto* src = static_cast<uint8_t*>(cuda::host_alloc(kThreads * kLen));
  auto* dst = static_cast<uint8_t*>(cuda::host_alloc(kThreads * kLen));
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  for (uint32_t i = 0; i < kThreads * kLen; ++i) src[i] = static_cast<uint8_t>(i * 11 + 3);
  fid_mr* mr[2];
  efa_xpu_desc desc[2];
  uint8_t* bufs[2] = {src, dst};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_mr_reg(w.domain(), bufs[i], kThreads * kLen, FI_SEND | FI_RECV, 0, 0, 0, &mr[i], nullptr), 0);
    size_t len = sizeof(desc[i]);
    ASSERT_EQ(fi_mr_get_xpu_desc(mr[i], &desc[i], &len, FI_XPU, w.ctx()), 0);
  }
  cuda::SendRecvArgs args{};
  args.sender = mapped_copy(a.xep);
  args.receiver = mapped_copy(b.xep);
  args.sender_cq = mapped_copy(a.xcq);
  args.receiver_cq = mapped_copy(b.xcq);
  args.sender_cntr = mapped_copy(a.xtx);
  args.receiver_peer = mapped_copy(b.peer);
  args.src_desc = mapped_copy(desc[0]);
  args.dst_desc = mapped_copy(desc[1]);
  args.src = src;
  args.dst = dst;
  args.len = kLen;
  args.post_rc = static_cast<int64_t*>(cuda::host_alloc(kThreads * sizeof(int64_t)));
  args.rx_data = static_cast<uint64_t*>(cuda::host_alloc(kThreads * sizeof(uint64_t)));
  args.counts = static_cast<int64_t*>(cuda::host_alloc(4 * sizeof(int64_t)));
  ASSERT_EQ(cuda::run_send_recv(&args, kThreads), 0);
  for (uint32_t t = 0; t < kThreads; ++t) EXPECT_EQ(args.post_rc[t], 0) << t;
  EXPECT_EQ(args.counts[0], kThreads);
  EXPECT_EQ(args.counts[1], kThreads);
  EXPECT_EQ(args.counts[2], kThreads);
  std::vector<int> seen(kThreads);
  for (uint32_t t = 0; t < kThreads; ++t) {
    ASSERT_LT(args.rx_data[t], kThreads);
    seen[args.rx_data[t]]++;
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  // Receives match sends in any order: every sender's bytes are in exactly one receive buffer.
  std::vector<int> found(kThreads);
  for (uint32_t r = 0; r < kThreads; ++r)
    for (uint32_t s = 0; s < kThreads; ++s)
      if (memcmp(dst + r * kLen, src + s * kLen, kLen) == 0) found[s]++;
  for (int f : found) EXPECT_EQ(f, 1);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(fi_close(&mr[i]->fid), 0);
  EXPECT_EQ(w.close(), 0);
  for (void* p : {static_cast<void*>(args.sender), static_cast<void*>(args.receiver),
                  static_cast<void*>(args.sender_cq), static_cast<void*>(args.receiver_cq),
                  static_cast<void*>(args.sender_cntr), args.receiver_peer, args.src_desc, args.dst_desc,
                  static_cast<void*>(args.post_rc), static_cast<void*>(args.rx_data),
                  static_cast<void*>(args.counts), static_cast<void*>(src), static_cast<void*>(dst)})
    cuda::host_free(p);
}

}  // namespace
}  // namespace xpufab::testing
