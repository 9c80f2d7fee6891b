// xpu_scope_cuda_kernels.h - runs a CUDA kernel that exercises every scope
// primitive and reports what each thread saw. No CUDA types, so the test
// that calls it builds with the host compiler.
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_KERNELS_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace xpufab::runtime {

// What one GPU thread saw; the broadcast sources are fixed by the kernel:
// lane 1, work-group rank 3 and device rank 5 (each modulo the scope size),
// broadcasting kSubgroupTag/kWorkgroupTag/kDeviceTag + their device rank.
struct CudaScopeRecord {
  uint32_t lane, subgroup_size, subgroup_id, num_subgroups;
  uint32_t wg_rank, wg_size, wg_id, num_wg;
  uint32_t dev_rank, dev_size;
  int32_t device_supported;
  int32_t device_barrier_rc;       // xpu_scope_barrier(XPU_SCOPE_DEVICE)
  uint32_t arrived_after_barrier;  // arrivals seen after the device barrier
  uint32_t sg_bcast32;
  uint64_t sg_bcast, wg_bcast, dev_bcast;
};

inline constexpr uint64_t kSubgroupTag = 1ull << 40;
inline constexpr uint64_t kWorkgroupTag = 2ull << 40;
inline constexpr uint64_t kDeviceTag = 3ull << 40;

// Launches blocks x threads (cooperatively if asked) and fills `out` with
// one record per thread in device-rank order. Returns "" or the CUDA error.
std::string run_cuda_scope_kernel(uint32_t blocks, uint32_t threads, bool cooperative,
                                  std::vector<CudaScopeRecord>* out);

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_CUDA_KERNELS_H_
