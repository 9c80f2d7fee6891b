// Every device call at every scope, compiled by nvcc for sm_90 (CI builds it; no GPU needed).
#include "testing/xpu/xpu_all_calls.h"

__global__ void xpu_all_calls_kernel(fid_xpu_ep* ep, fid_xpu_cq* cq, fid_xpu_cntr* cntr, void* peer, void* desc,
                                     uint8_t* buf, int64_t* out) {
  int64_t s = xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_WORK_ITEM);
  s += xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_SUBGROUP);
  s += xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_WORK_GROUP);
  s += xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_DEVICE);
  out[threadIdx.x] = s;
}
