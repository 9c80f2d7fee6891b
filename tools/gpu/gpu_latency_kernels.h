// GPU kernels that time device-initiated operations on XPU endpoints (for gpu_latency). No CUDA
// types, so the host side builds with the host compiler.
#ifndef XPUFAB_TOOLS_GPU_GPU_LATENCY_KERNELS_H_
#define XPUFAB_TOOLS_GPU_GPU_LATENCY_KERNELS_H_

#include <rdma/fi_xpu.h>

#include <cstddef>
#include <cstdint>

namespace xpufab::gpu {

enum class LatencyOp : uint32_t { kSend = 0, kWrite = 1 };

// Everything lives in mapped host memory: handles, raw peer/descriptors, buffers and results.
struct LatencyArgs {
  fid_xpu_ep* sender;
  fid_xpu_ep* receiver;
  fid_xpu_cq* sender_cq;
  fid_xpu_cq* receiver_cq;
  void* receiver_peer;  // efa_xpu_peer of the receiver
  void* src_desc;       // efa_xpu_desc of src
  void* dst_desc;       // efa_xpu_desc of dst
  uint8_t* src;
  uint8_t* dst;         // receive buffers, or the RDMA write target
  uint64_t dst_key;     // remote key of dst
  uint32_t len;         // bytes per member per round
  LatencyOp op;
  int scope;            // FI_XPU_WORK_ITEM (one thread), FI_XPU_SUBGROUP (a warp), FI_XPU_WORK_GROUP
  uint32_t rounds;
  uint64_t* round_ns;   // [rounds]: post to last completion read, by the scope's leader
  int64_t* errors;      // [1]: failed posts, short or failed completion reads
};

// One block of `threads` threads (1 for FI_XPU_WORK_ITEM, 32 for FI_XPU_SUBGROUP, a multiple of
// 32 up to 1024 for FI_XPU_WORK_GROUP) runs args->rounds rounds: every member posts one
// operation of args->len bytes (a send with its matching receive posted first, or an RDMA
// write), then the scope reads every completion. Returns a cudaError_t.
int run_latency(LatencyArgs* args, uint32_t threads);

}  // namespace xpufab::gpu

#endif  // XPUFAB_TOOLS_GPU_GPU_LATENCY_KERNELS_H_
