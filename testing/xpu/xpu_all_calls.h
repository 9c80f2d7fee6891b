/*
 * xpu_all_calls.h - one device function that makes every fi_xpu_* call of
 * rdma/fi_xpu_device.h at a given scope, for the compile checks (strict C11
 * and nvcc for sm_90). Valid C11, C++17 and CUDA.
 */
#ifndef XPUFAB_TESTING_XPU_XPU_ALL_CALLS_H_
#define XPUFAB_TESTING_XPU_XPU_ALL_CALLS_H_

#include <rdma/fi_xpu_device.h>

#if !FI_XPU_HAVE_EFA
#error "the compile checks need the efa device implementation (FI_XPU_HAVE_EFA)"
#endif

/* Sums the results so that no call is dropped. `buf` holds at least 256 bytes. */
FI_XPU_FUNC int64_t xpu_all_calls(struct fid_xpu_ep *ep, struct fid_xpu_cq *cq, struct fid_xpu_cntr *cntr,
                                  void *peer, void *desc, uint8_t *buf, int scope) {
  int64_t s = 0;
  s += fi_xpu_send(ep, buf, 8, desc, 1, peer, buf, FI_REMOTE_CQ_DATA, scope);
  s += fi_xpu_recv(ep, buf, 8, desc, peer, buf, 0, scope);
  s += fi_xpu_write(ep, buf, 8, desc, 2, peer, 0x1000, 7, buf, FI_REMOTE_CQ_DATA | FI_MORE, scope);
  s += fi_xpu_read(ep, buf, 8, desc, peer, 0x1000, 7, buf, 0, scope);
  s += fi_xpu_tsend(ep, buf, 8, desc, 0, peer, 5, buf, 0, scope);
  s += fi_xpu_trecv(ep, buf, 8, desc, peer, 5, 0, buf, 0, scope);
  s += fi_xpu_atomic(ep, buf, 1, desc, peer, 0x1000, 7, FI_UINT64, FI_SUM, buf, 0, scope);
  s += fi_xpu_fetch_atomic(ep, buf, 1, desc, buf + 8, desc, peer, 0x1000, 7, FI_UINT64, FI_SUM, buf, 0, scope);
  s += fi_xpu_compare_atomic(ep, buf, 1, desc, buf + 16, desc, buf + 24, desc, peer, 0x1000, 7, FI_UINT64,
                             FI_CSWAP, buf, 0, scope);
  s += fi_xpu_cq_read(cq, buf + 32, 1, scope);
  s += fi_xpu_cq_readfrom(cq, buf + 32, 1, buf + 96, scope);
  s += fi_xpu_cq_readerr(cq, buf + 128, 0, scope);
  s += fi_xpu_cq_sread(cq, buf + 32, 1, 1, scope);
  s += fi_xpu_cq_sreadfrom(cq, buf + 32, 1, buf + 96, 1, scope);
  s += (int64_t)fi_xpu_cntr_read(cntr, scope);
  s += (int64_t)fi_xpu_cntr_readerr(cntr, scope);
  fi_xpu_cntr_wait(cntr, 1, 10, scope);
  s += fi_xpu_cntr_add(cntr, 1, scope);
  s += fi_xpu_cntr_set(cntr, 2, scope);
  s += fi_xpu_cntr_adderr(cntr, 3, scope);
  s += fi_xpu_cntr_seterr(cntr, 4, scope);
  return s;
}

#endif /* XPUFAB_TESTING_XPU_XPU_ALL_CALLS_H_ */
