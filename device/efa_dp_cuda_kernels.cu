// The data path run by GPU threads on host-mapped queues (efa_dp_cuda_test).
#include "device/efa_dp_cuda_kernels.h"

#include <cuda_runtime.h>

#include "device/efa_dp.h"

namespace {

__global__ void post_sends_kernel(efa_sq* sq, uint32_t n, uint32_t* errors) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  efa_dp_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.op = EFA_DP_OP_SEND;
  wr.num_sge = 1;
  wr.sge[0].addr = i;
  wr.sge[0].length = 64;
  wr.context = i;
  int rc;
  while ((rc = efa_sq_post(sq, &wr)) == -FI_EAGAIN) xpu_relax();
  if (rc != 0) atomicAdd(errors, 1u);
}

__global__ void poll_kernel(efa_cq* cq, efa_sq* sq, uint32_t n, uint32_t* seen, uint32_t* errors) {
  efa_dp_cqe c;
  while (efa_cq_consumed(cq) < n) {
    if (efa_cq_poll(cq, &c) != 0) {
      xpu_relax();
      continue;
    }
    uint64_t ctx = 0;
    if (efa_sq_complete(sq, c.req_id, &ctx) != 0 || ctx >= n) {
      atomicAdd(errors, 1u);
      continue;
    }
    xpu_fetch_add_u32(&seen[ctx], 1);
  }
}

int finish(cudaError_t launch) {
  if (launch != cudaSuccess) return static_cast<int>(launch);
  return static_cast<int>(cudaDeviceSynchronize());
}

}  // namespace

int efa_dp_cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  return e == cudaSuccess ? n : -static_cast<int>(e);
}

void* efa_dp_cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped) != cudaSuccess) return nullptr;
  memset(p, 0, bytes);
  return p;
}

void efa_dp_cuda_host_free(void* p) { cudaFreeHost(p); }

int efa_dp_cuda_post_sends(efa_sq* sq, uint32_t n, uint32_t* errors) {
  post_sends_kernel<<<(n + 63) / 64, 64>>>(sq, n, errors);
  return finish(cudaGetLastError());
}

int efa_dp_cuda_poll_completions(efa_cq* cq, efa_sq* sq, uint32_t n, uint32_t* seen, uint32_t* errors) {
  poll_kernel<<<(n + 63) / 64, 64>>>(cq, sq, n, seen, errors);
  return finish(cudaGetLastError());
}
