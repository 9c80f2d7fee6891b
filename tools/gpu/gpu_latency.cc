// Device-initiated latency on the emulated EFA: GPU threads post through rdma/fi_xpu_device.h into
// queues, doorbells and CQ rings in host memory mapped into the GPU (FI_HMEM_CUDA), the emulator's
// engine threads run the NIC. For a 64 B send (receive posted by the same kernel) and an 8 KiB RDMA
// write, from one thread, one warp (FI_XPU_SUBGROUP) and one block (FI_XPU_WORK_GROUP), prints the
// median and best round time (every member posts one operation, the scope reads all completions).
//   gpu_latency [rounds]      (default 2000; the first tenth is warm-up, not counted)
// Exit status 0, 2 when there is no CUDA GPU, 1 on any failure.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "testing/xpu/cuda_xpu_ops.h"
#include "testing/xpu/xpu_fixture.h"
#include "tools/gpu/gpu_latency_kernels.h"

namespace xpufab::gpu {
namespace {

constexpr uint32_t kBlockThreads = 128;
constexpr uint32_t kMaxLen = 8192;

template <typename T>
T* mapped_copy(const T& v) {
  auto* p = static_cast<T*>(cuda::host_alloc(sizeof(T)));
  if (p) memcpy(p, &v, sizeof(T));
  return p;
}

struct Shape {
  const char* name;
  int scope;
  uint32_t threads;
};

int run(uint32_t rounds) {
  const int devices = cuda::device_count();
  if (devices <= 0) {
    fprintf(stderr, "gpu_latency: no CUDA GPU (cudaGetDeviceCount: %d); this benchmark needs one\n", devices);
    return 2;
  }
  fi_xpu_attr xa{};
  xa.iface = FI_HMEM_CUDA;
  xa.device = 0;
  xa.ops = reinterpret_cast<fi_xpu_ops*>(cuda::xpu_ops());
  testing::XpuWorld w;
  std::string err = w.open(&xa);
  testing::XpuEpSetup setup;
  setup.tx_size = 2 * kBlockThreads;
  setup.rx_size = 2 * kBlockThreads;
  setup.cq_size = 4 * kBlockThreads;
  testing::XpuEp a, b;
  if (err.empty()) err = w.add_ep(&a, setup);
  if (err.empty()) err = w.add_ep(&b, setup);
  if (err.empty()) err = w.export_ep(&a);
  if (err.empty()) err = w.export_ep(&b);
  if (!err.empty()) {
    fprintf(stderr, "gpu_latency: setup: %s\n", err.c_str());
    return 1;
  }
  const size_t bytes = size_t{kBlockThreads} * kMaxLen;
  auto* src = static_cast<uint8_t*>(cuda::host_alloc(bytes));
  auto* dst = static_cast<uint8_t*>(cuda::host_alloc(bytes));
  if (!src || !dst) {
    fprintf(stderr, "gpu_latency: cudaHostAlloc of %zu B failed\n", bytes);
    return 1;
  }
  for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  fid_mr* mr[2];
  efa_xpu_desc desc[2];
  uint8_t* bufs[2] = {src, dst};
  const uint64_t access = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
  for (int i = 0; i < 2; ++i) {
    size_t len = sizeof(desc[i]);
    if (fi_mr_reg(w.domain(), bufs[i], bytes, access, 0, 0, 0, &mr[i], nullptr) != 0 ||
        fi_mr_get_xpu_desc(mr[i], &desc[i], &len, FI_XPU, w.ctx()) != 0) {
      fprintf(stderr, "gpu_latency: memory registration failed\n");
      return 1;
    }
  }
  LatencyArgs args{};
  args.sender = mapped_copy(a.xep);
  args.receiver = mapped_copy(b.xep);
  args.sender_cq = mapped_copy(a.xcq);
  args.receiver_cq = mapped_copy(b.xcq);
  args.receiver_peer = mapped_copy(b.peer);
  args.src_desc = mapped_copy(desc[0]);
  args.dst_desc = mapped_copy(desc[1]);
  args.src = src;
  args.dst = dst;
  args.dst_key = fi_mr_key(mr[1]);
  args.rounds = rounds;
  args.round_ns = static_cast<uint64_t*>(cuda::host_alloc(rounds * sizeof(uint64_t)));
  args.errors = static_cast<int64_t*>(cuda::host_alloc(sizeof(int64_t)));
  if (!args.sender || !args.receiver || !args.sender_cq || !args.receiver_cq || !args.receiver_peer ||
      !args.src_desc || !args.dst_desc || !args.round_ns || !args.errors) {
    fprintf(stderr, "gpu_latency: cudaHostAlloc failed\n");
    return 1;
  }

  const Shape shapes[] = {{"1 thread", FI_XPU_WORK_ITEM, 1},
                          {"1 warp", FI_XPU_SUBGROUP, 32},
                          {"1 block", FI_XPU_WORK_GROUP, kBlockThreads}};
  const struct {
    const char* name;
    LatencyOp op;
    uint32_t len;
  } ops[] = {{"64 B send", LatencyOp::kSend, 64}, {"8 KiB write", LatencyOp::kWrite, kMaxLen}};
  int failures = 0;
  printf("device-initiated latency through the emulated EFA (%u rounds, median / best round, "
         "every member posts one operation per round)\n",
         rounds);
  printf("%-12s %-9s %8s %14s %12s %14s\n", "operation", "shape", "members", "median us", "best us",
         "ops/s (median)");
  for (const auto& op : ops) {
    for (const Shape& s : shapes) {
      args.op = op.op;
      args.len = op.len;
      args.scope = s.scope;
      *args.errors = 0;
      memset(dst, 0, bytes);
      const int rc = run_latency(&args, s.threads);
      bool ok = rc == 0 && *args.errors == 0;
      if (ok) {
        // The data of the last round is where it should be.
        for (uint32_t t = 0; t < s.threads && ok; ++t)
          ok = memcmp(dst + size_t{t} * kMaxLen, src + size_t{t} * kMaxLen, op.len) == 0;
      }
      if (!ok) {
        printf("%-12s %-9s %8u FAILED (cuda error %d, %lld failed calls or data mismatch)\n", op.name, s.name,
               s.threads, rc, static_cast<long long>(*args.errors));
        ++failures;
        continue;
      }
      std::vector<uint64_t> ns(args.round_ns + rounds / 10, args.round_ns + rounds);
      std::sort(ns.begin(), ns.end());
      const double med = ns[ns.size() / 2] / 1e3, best = ns.front() / 1e3;
      printf("%-12s %-9s %8u %14.2f %12.2f %14.0f\n", op.name, s.name, s.threads, med, best,
             s.threads / (med > 0 ? med : 1e-3) * 1e6);
    }
  }
  for (int i = 0; i < 2; ++i) fi_close(&mr[i]->fid);
  if (w.close() != 0) ++failures;
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace xpufab::gpu

int main(int argc, char** argv) {
  const unsigned long rounds = argc > 1 ? strtoul(argv[1], nullptr, 0) : 2000;
  if (rounds < 10 || rounds > 1000000) {
    fprintf(stderr, "usage: %s [rounds: 10..1000000]\n", argv[0]);
    return 2;
  }
  return xpufab::gpu::run(static_cast<uint32_t>(rounds));
}
