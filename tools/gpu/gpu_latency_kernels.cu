// Device-initiated latency kernels (see gpu_latency_kernels.h).
#include "tools/gpu/gpu_latency_kernels.h"

#include <cuda_runtime.h>
#include <rdma/fi_xpu_device.h>

namespace xpufab::gpu {
namespace {

constexpr int kScratch = 16;
constexpr long kMaxPolls = 20000000;

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Reads `want` completions collectively at `scope`; returns how many arrived (or an error).
__device__ int64_t read_n(fid_xpu_cq* cq, fi_cq_data_entry* scratch, int64_t want, int scope) {
  int64_t got = 0;
  for (long polls = 0; got < want && polls < kMaxPolls; ++polls) {
    int64_t n = fi_xpu_cq_read(cq, scratch, kScratch, scope);
    if (n == -FI_EAGAIN) {
      xpu_relax();
      continue;
    }
    if (n < 0) return n;
    got += n;
  }
  return got;
}

__global__ void latency_kernel(LatencyArgs a) {
  // One scratch area for the whole block: every scope used here spans the block.
  __shared__ fi_cq_data_entry scratch[kScratch];
  const uint32_t t = threadIdx.x;
  const int64_t members = blockDim.x;
  const bool leader = t == 0;
  uint8_t* src = a.src + size_t{t} * a.len;
  uint8_t* dst = a.dst + size_t{t} * a.len;
  int64_t errors = 0;
  for (uint32_t r = 0; r < a.rounds; ++r) {
    __syncthreads();
    const uint64_t t0 = now_ns();
    if (a.op == LatencyOp::kSend) {
      if (fi_xpu_recv(a.receiver, dst, a.len, a.dst_desc, nullptr, nullptr, 0, a.scope) != 0) ++errors;
      if (fi_xpu_send(a.sender, src, a.len, a.src_desc, 0, a.receiver_peer, nullptr, 0, a.scope) != 0) ++errors;
      if (read_n(a.receiver_cq, scratch, members, a.scope) != members) ++errors;
    } else {
      if (fi_xpu_write(a.sender, src, a.len, a.src_desc, 0, a.receiver_peer,
                       reinterpret_cast<uintptr_t>(dst), a.dst_key, nullptr, 0, a.scope) != 0)
        ++errors;
    }
    if (read_n(a.sender_cq, scratch, members, a.scope) != members) ++errors;
    const uint64_t t1 = now_ns();
    if (leader) a.round_ns[r] = t1 - t0;
  }
  if (errors) atomicAdd(reinterpret_cast<unsigned long long*>(a.errors), static_cast<unsigned long long>(errors));
}

}  // namespace

int run_latency(LatencyArgs* args, uint32_t threads) {
  const bool ok = (args->scope == FI_XPU_WORK_ITEM && threads == 1) ||
                  (args->scope == FI_XPU_SUBGROUP && threads == 32) ||
                  (args->scope == FI_XPU_WORK_GROUP && threads % 32 == 0 && threads > 0 && threads <= 1024);
  if (!ok || args->rounds == 0) return static_cast<int>(cudaErrorInvalidValue);
  latency_kernel<<<1, threads>>>(*args);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  return static_cast<int>(cudaDeviceSynchronize());
}

}  // namespace xpufab::gpu
