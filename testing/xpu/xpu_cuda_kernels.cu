// GPU kernels over rdma/fi_xpu_device.h (see xpu_cuda_kernels.h).
#include "testing/xpu/xpu_cuda_kernels.h"

#include <cuda_runtime.h>
#include <rdma/fi_xpu_device.h>

namespace xpufab::cuda {
namespace {

// Reads `want` completions at subgroup scope into per-warp scratch; returns how many arrived.
__device__ int64_t read_all(fid_xpu_cq* cq, fi_cq_data_entry* scratch, int64_t want, uint64_t* data_out) {
  int64_t got = 0;
  for (long polls = 0; got < want && polls < 20000000; ++polls) {
    int64_t n = fi_xpu_cq_read(cq, scratch, 8, FI_XPU_SUBGROUP);
    if (n == -FI_EAGAIN) {
      xpu_relax();
      continue;
    }
    if (n < 0) break;
    if (data_out && xpu_lane_id() == 0)
      for (int64_t i = 0; i < n; ++i) data_out[got + i] = scratch[i].data;
    got += n;
  }
  return got;
}

__global__ void send_recv_kernel(SendRecvArgs a) {
  __shared__ fi_cq_data_entry scratch[32][8];
  const uint32_t t = threadIdx.x;
  const uint32_t warp = t / 32;
  const int rrc = fi_xpu_recv(a.receiver, a.dst + t * a.len, a.len, a.dst_desc, nullptr,
                              reinterpret_cast<void*>(uintptr_t{t} + 1), 0, FI_XPU_SUBGROUP);
  __syncthreads();
  const int src = fi_xpu_send(a.sender, a.src + t * a.len, a.len, a.src_desc, t, a.receiver_peer,
                              reinterpret_cast<void*>(uintptr_t{t} + 1), FI_REMOTE_CQ_DATA, FI_XPU_SUBGROUP);
  a.post_rc[t] = rrc * 1000 + src;
  fi_xpu_cntr_wait(a.sender_cntr, blockDim.x, 5000, FI_XPU_WORK_GROUP);
  // Warp 0 reads both CQs for the whole block.
  if (warp == 0) {
    const int64_t tx = read_all(a.sender_cq, scratch[0], blockDim.x, nullptr);
    const int64_t rx = read_all(a.receiver_cq, scratch[0], blockDim.x, a.rx_data);
    if (t == 0) {
      a.counts[0] = tx;
      a.counts[1] = rx;
      a.counts[2] = static_cast<int64_t>(fi_xpu_cntr_read(a.sender_cntr, FI_XPU_WORK_ITEM));
    }
  }
}

}  // namespace

int run_send_recv(SendRecvArgs* args, uint32_t threads) {
  if (threads == 0 || threads % 32 != 0 || threads > 1024) return static_cast<int>(cudaErrorInvalidValue);
  send_recv_kernel<<<1, threads>>>(*args);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  return static_cast<int>(cudaDeviceSynchronize());
}

}  // namespace xpufab::cuda
