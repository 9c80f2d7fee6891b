// Compile check: fi_xpu_device.h builds as CUDA device code (sm_90).
#include <rdma/fi_xpu_device.h>

__global__ void xpufab_device_header_check(struct fid_xpu_ep* ep,
                                           struct fid_xpu_cq* cq,
                                           struct fid_xpu_cntr* cntr,
                                           int* out) {
  char buf[16];
  out[0] = fi_xpu_send(ep, buf, sizeof(buf), nullptr, 0, nullptr, nullptr, 0,
                       FI_XPU_WORK_ITEM);
  out[1] = static_cast<int>(fi_xpu_cq_read(cq, buf, 1, FI_XPU_WORK_ITEM));
  out[2] = static_cast<int>(fi_xpu_cntr_read(cntr, FI_XPU_WORK_ITEM));
}
