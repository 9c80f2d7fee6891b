// GPU kernels that drive XPU endpoints through rdma/fi_xpu_device.h (for xpu_cuda_test). No CUDA
// types, so the test builds with the host compiler.
#ifndef XPUFAB_TESTING_XPU_XPU_CUDA_KERNELS_H_
#define XPUFAB_TESTING_XPU_XPU_CUDA_KERNELS_H_

#include <rdma/fi_xpu.h>

#include <cstddef>
#include <cstdint>

namespace xpufab::cuda {

// Everything lives in mapped host memory (host_alloc): handles, raw peer/descriptor, buffers,
// and the per-thread results the kernel writes.
struct SendRecvArgs {
  fid_xpu_ep* sender;
  fid_xpu_ep* receiver;
  fid_xpu_cq* sender_cq;
  fid_xpu_cq* receiver_cq;
  fid_xpu_cntr* sender_cntr;
  void* receiver_peer;  // efa_xpu_peer of the receiver
  void* src_desc;       // efa_xpu_desc
  void* dst_desc;
  uint8_t* src;
  uint8_t* dst;
  uint32_t len;         // bytes per thread
  int64_t* post_rc;     // per thread: recv rc * 1000 + send rc
  uint64_t* rx_data;    // per thread slot: immediate data seen by the receiver's CQ reads
  int64_t* counts;      // [0] tx completions, [1] rx completions, [2] counter value
};

// One block of `threads` (a multiple of 32): receives and sends at FI_XPU_SUBGROUP scope, waits
// on the sender's counter, reads both CQs at FI_XPU_SUBGROUP scope. Returns a cudaError_t.
int run_send_recv(SendRecvArgs* args, uint32_t threads);

}  // namespace xpufab::cuda

#endif  // XPUFAB_TESTING_XPU_XPU_CUDA_KERNELS_H_
