/* Every device call at every scope, compiled as strict C11 (-pedantic-errors). */
#include "testing/xpu/xpu_all_calls.h"

int64_t xpu_all_calls_c11(struct fid_xpu_ep *ep, struct fid_xpu_cq *cq, struct fid_xpu_cntr *cntr, void *peer,
                          void *desc, uint8_t *buf);

int64_t xpu_all_calls_c11(struct fid_xpu_ep *ep, struct fid_xpu_cq *cq, struct fid_xpu_cntr *cntr, void *peer,
                          void *desc, uint8_t *buf) {
  return xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_WORK_ITEM) +
         xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_SUBGROUP) +
         xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_WORK_GROUP) +
         xpu_all_calls(ep, cq, cntr, peer, desc, buf, FI_XPU_DEVICE);
}
