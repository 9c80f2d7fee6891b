// Set-up steps every test of Debian's libibverbs/libefa under the uverbs shim repeats: find the
// emulated device, walk a QP to RTS as the kernel expects, and address the device itself.
#ifndef XPUFAB_TESTING_SUPPORT_VERBS_UTIL_H_
#define XPUFAB_TESTING_SUPPORT_VERBS_UTIL_H_

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace xpufab::testing {

// The emulated device's context ("efa_0"), or nullptr when not running under the shim.
inline ibv_context* open_efa_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && ctx == nullptr; ++i)
    if (std::string(ibv_get_device_name(list[i])) == "efa_0") ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

// An SRD QP through libefa's driver-QP entry (16 send and receive WRs, one SGE each), or nullptr
// with errno set.
inline ibv_qp* create_srd_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq) {
  ibv_qp_init_attr qa{};
  qa.send_cq = send_cq;
  qa.recv_cq = recv_cq;
  qa.cap.max_send_wr = 16;
  qa.cap.max_recv_wr = 16;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_DRIVER;
  return efadv_create_driver_qp(pd, &qa, EFADV_QP_DRIVER_TYPE_SRD);
}

// RESET -> INIT (port 1, pkey 0, qkey) -> RTR -> RTS; `rnr_retry` is set on RTS unless negative
// (SRD takes it, UD refuses it). Returns 0 or the errno of the first refused step.
inline int qp_to_rts(ibv_qp* qp, uint32_t qkey, int rnr_retry) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = qkey;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return rc;
  a.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return rc;
  a.qp_state = IBV_QPS_RTS;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (rnr_retry >= 0) {
    a.rnr_retry = static_cast<uint8_t>(rnr_retry);
    mask |= IBV_QP_RNR_RETRY;
  }
  return ibv_modify_qp(qp, &a, mask);
}

// An address handle for the device's own GID (port 1, index 0), or nullptr with errno set.
inline ibv_ah* ah_to_self(ibv_context* ctx, ibv_pd* pd) {
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  if (int rc = ibv_query_gid(ctx, 1, 0, &aa.grh.dgid)) {
    errno = rc < 0 ? -rc : rc;
    return nullptr;
  }
  return ibv_create_ah(pd, &aa);
}

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_SUPPORT_VERBS_UTIL_H_
