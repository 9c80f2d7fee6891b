// A kernel that calls every scope primitive, compiled by nvcc for sm_90 in
// every build; the gpu-tagged test runs it.
#include "device/runtime/xpu_scope_cuda_kernels.h"

#include <cuda_runtime.h>

#include "device/runtime/xpu_scope.h"

namespace xpufab::runtime {
namespace {

__global__ void scope_kernel(CudaScopeRecord* out, unsigned int* arrivals) {
  CudaScopeRecord r = {};
  r.lane = xpu_lane_id();
  r.subgroup_size = xpu_subgroup_size();
  r.subgroup_id = xpu_subgroup_id();
  r.num_subgroups = xpu_num_subgroups();
  r.wg_rank = xpu_workgroup_rank();
  r.wg_size = xpu_workgroup_size();
  r.wg_id = xpu_workgroup_id();
  r.num_wg = xpu_num_workgroups();
  r.dev_rank = xpu_device_rank();
  r.dev_size = xpu_device_size();
  r.device_supported = xpu_scope_supported(XPU_SCOPE_DEVICE);

  xpu_subgroup_barrier();
  r.sg_bcast = xpu_subgroup_broadcast_u64(kSubgroupTag + r.dev_rank, 1);
  r.sg_bcast32 = xpu_scope_broadcast_u32(XPU_SCOPE_SUBGROUP, r.dev_rank, 1);
  xpu_workgroup_barrier();
  r.wg_bcast = xpu_scope_broadcast_u64(XPU_SCOPE_WORK_GROUP, kWorkgroupTag + r.dev_rank, 3);
  atomicAdd(arrivals, 1u);
  r.device_barrier_rc = xpu_scope_barrier(XPU_SCOPE_DEVICE);
  r.arrived_after_barrier = atomicAdd(arrivals, 0u);
  r.dev_bcast = xpu_device_broadcast_u64(kDeviceTag + r.dev_rank, 5);
  out[r.dev_rank] = r;
}

std::string cuda_error(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

}  // namespace

std::string run_cuda_scope_kernel(uint32_t blocks, uint32_t threads, bool cooperative,
                                  std::vector<CudaScopeRecord>* out) {
  const size_t n = size_t{blocks} * threads;
  CudaScopeRecord* d_out = nullptr;
  unsigned int* d_arrivals = nullptr;
  cudaError_t err = cudaMalloc(&d_out, n * sizeof(CudaScopeRecord));
  if (err != cudaSuccess) return cuda_error("cudaMalloc", err);
  err = cudaMalloc(&d_arrivals, sizeof(unsigned int));
  if (err == cudaSuccess) err = cudaMemset(d_arrivals, 0, sizeof(unsigned int));
  if (err == cudaSuccess) {
    if (cooperative) {
      void* args[] = {&d_out, &d_arrivals};
      err = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(&scope_kernel), dim3(blocks), dim3(threads),
                                        args, 0, nullptr);
    } else {
      scope_kernel<<<blocks, threads>>>(d_out, d_arrivals);
      err = cudaGetLastError();
    }
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) {
    out->resize(n);
    err = cudaMemcpy(out->data(), d_out, n * sizeof(CudaScopeRecord), cudaMemcpyDeviceToHost);
  }
  cudaFree(d_arrivals);
  cudaFree(d_out);
  return err == cudaSuccess ? std::string() : cuda_error("scope kernel", err);
}

}  // namespace xpufab::runtime
