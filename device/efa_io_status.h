/*
 * efa_io_status.h - what each EFA completion status means to libfabric and verbs.
 *
 * EFA_IO_COMP_STATUS_TABLE is the one table: for every status byte a CQE can
 * carry, the libfabric error reported in fi_cq_err_entry.err (a positive FI_E*
 * value; the raw status goes to prov_errno), the ibv_wc_status rdma-core
 * reports, and a description. The fi errors follow libfabric's efa provider
 * (prov/efa/src/efa_errno.h to_fi_errno); the verbs statuses follow rdma-core
 * to_ibv_status (reference/efa-queues.md 1.2). Statuses the table does not
 * list (16, 17, 19..255) map to FI_EOTHER and IBV_WC_GENERAL_ERR.
 *
 * The lookup functions are switches generated from the table, usable from host
 * and device code:
 *
 *   int err = efa_io_status_to_fi_errno(cqe->status);   // 0 for OK
 *   entry.prov_errno = cqe->status;
 *
 * efa_io_status_table[] (efa_io_status.c, host only) lists the rows in order
 * for tools and tests.
 */
#ifndef XPUFAB_DEVICE_EFA_IO_STATUS_H_
#define XPUFAB_DEVICE_EFA_IO_STATUS_H_

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_errno.h>

#include "device/efa_io_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The numeric values of enum ibv_wc_status (infiniband/verbs.h) this table
 * uses, so device code needs no verbs header. A test compares them with
 * verbs.h.
 */
enum efa_io_ibv_wc_status {
  EFA_IO_IBV_WC_SUCCESS = 0,
  EFA_IO_IBV_WC_LOC_LEN_ERR = 1,
  EFA_IO_IBV_WC_LOC_QP_OP_ERR = 2,
  EFA_IO_IBV_WC_LOC_PROT_ERR = 4,
  EFA_IO_IBV_WC_WR_FLUSH_ERR = 5,
  EFA_IO_IBV_WC_BAD_RESP_ERR = 7,
  EFA_IO_IBV_WC_REM_INV_REQ_ERR = 9,
  EFA_IO_IBV_WC_REM_ACCESS_ERR = 10,
  EFA_IO_IBV_WC_REM_OP_ERR = 11,
  EFA_IO_IBV_WC_RNR_RETRY_EXC_ERR = 13,
  EFA_IO_IBV_WC_REM_INV_RD_REQ_ERR = 15,
  EFA_IO_IBV_WC_REM_ABORT_ERR = 16,
  EFA_IO_IBV_WC_RESP_TIMEOUT_ERR = 20,
  EFA_IO_IBV_WC_GENERAL_ERR = 21,
};

/*
 * X(NAME, FI_ERR, IBV_WC, description): one row per EFA_IO_COMP_STATUS_##NAME,
 * FI_ERR a positive libfabric error (FI_SUCCESS for OK), IBV_WC a suffix of
 * EFA_IO_IBV_WC_.
 *
 * 18 (FEATURE_MISMATCH) is not in libfabric's to_fi_errno, which therefore
 * reports FI_EOTHER; rdma-core reports GENERAL_ERR for it while libfabric's
 * direct path reports REM_INV_REQ_ERR. We follow rdma-core, the verbs source.
 */
#define EFA_IO_COMP_STATUS_TABLE(X)                                                          \
  X(OK, FI_SUCCESS, SUCCESS, "Success")                                                    \
  X(FLUSHED, FI_ECANCELED, WR_FLUSH_ERR, "Flushed during queue pair destroy")              \
  X(LOCAL_ERROR_QP_INTERNAL_ERROR, FI_EINVAL, LOC_QP_OP_ERR, "Internal queue pair error")  \
  X(LOCAL_ERROR_UNSUPPORTED_OP, FI_EINVAL, LOC_QP_OP_ERR, "Unsupported operation")         \
  X(LOCAL_ERROR_INVALID_AH, FI_EINVAL, LOC_QP_OP_ERR, "Invalid address handle")            \
  X(LOCAL_ERROR_INVALID_LKEY, FI_EINVAL, LOC_PROT_ERR,                                     \
    "Local key not registered or does not match the address")                              \
  X(LOCAL_ERROR_BAD_LENGTH, FI_EMSGSIZE, LOC_LEN_ERR, "Message too long")                  \
  X(REMOTE_ERROR_BAD_ADDRESS, FI_EINVAL, REM_ACCESS_ERR,                                   \
    "Remote key not registered or does not match the remote address")                      \
  X(REMOTE_ERROR_ABORT, FI_ECONNABORTED, REM_ABORT_ERR, "Connection reset by remote peer")  \
  X(REMOTE_ERROR_BAD_DEST_QPN, FI_ENOTCONN, REM_INV_RD_REQ_ERR,                            \
    "Destination queue pair missing or in error")                                          \
  X(REMOTE_ERROR_RNR, FI_ENORX, RNR_RETRY_EXC_ERR, "Receiver not ready (no receive posted)") \
  X(REMOTE_ERROR_BAD_LENGTH, FI_EMSGSIZE, REM_INV_REQ_ERR, "Remote receive buffer too short") \
  X(REMOTE_ERROR_BAD_STATUS, FI_EREMOTEIO, BAD_RESP_ERR, "Unexpected status from responder") \
  X(LOCAL_ERROR_UNRESP_REMOTE, FI_ECONNABORTED, RESP_TIMEOUT_ERR,                          \
    "Remote stopped responding")                                                           \
  X(REMOTE_ERROR_UNKNOWN_PEER, FI_ENOTCONN, REM_OP_ERR,                                    \
    "No valid address handle at the remote")                                               \
  X(LOCAL_ERROR_UNREACH_REMOTE, FI_EHOSTUNREACH, RESP_TIMEOUT_ERR,                         \
    "Remote never responded")                                                              \
  X(REMOTE_ERROR_FEATURE_MISMATCH, FI_EOTHER, GENERAL_ERR, "Remote feature mismatch")

/* The fallback for statuses not in the table. */
#define EFA_IO_STATUS_UNKNOWN_FI_ERRNO FI_EOTHER
#define EFA_IO_STATUS_UNKNOWN_IBV_WC EFA_IO_IBV_WC_GENERAL_ERR

/* Nonzero when status is one of the table's rows. */
XPU_FUNC int efa_io_status_is_known(uint32_t status) {
  switch (status) {
#define EFA_IO_X_(name, fi, wc, desc) case EFA_IO_COMP_STATUS_##name:
    EFA_IO_COMP_STATUS_TABLE(EFA_IO_X_)
#undef EFA_IO_X_
    return 1;
    default:
      return 0;
  }
}

/* Positive FI_E* for fi_cq_err_entry.err; 0 for OK; FI_EOTHER when unknown. */
XPU_FUNC int efa_io_status_to_fi_errno(uint32_t status) {
  switch (status) {
#define EFA_IO_X_(name, fi, wc, desc) \
  case EFA_IO_COMP_STATUS_##name:     \
    return (fi);
    EFA_IO_COMP_STATUS_TABLE(EFA_IO_X_)
#undef EFA_IO_X_
    default:
      return EFA_IO_STATUS_UNKNOWN_FI_ERRNO;
  }
}

/* Numeric enum ibv_wc_status; IBV_WC_GENERAL_ERR when unknown. */
XPU_FUNC int efa_io_status_to_ibv_wc_status(uint32_t status) {
  switch (status) {
#define EFA_IO_X_(name, fi, wc, desc) \
  case EFA_IO_COMP_STATUS_##name:     \
    return EFA_IO_IBV_WC_##wc;
    EFA_IO_COMP_STATUS_TABLE(EFA_IO_X_)
#undef EFA_IO_X_
    default:
      return EFA_IO_STATUS_UNKNOWN_IBV_WC;
  }
}

/* "EFA_IO_COMP_STATUS_<NAME>", or "EFA_IO_COMP_STATUS_UNKNOWN". Never NULL. */
XPU_FUNC const char *efa_io_status_name(uint32_t status) {
  switch (status) {
#define EFA_IO_X_(name, fi, wc, desc) \
  case EFA_IO_COMP_STATUS_##name:     \
    return "EFA_IO_COMP_STATUS_" #name;
    EFA_IO_COMP_STATUS_TABLE(EFA_IO_X_)
#undef EFA_IO_X_
    default:
      return "EFA_IO_COMP_STATUS_UNKNOWN";
  }
}

/* A human-readable description ("Unknown status" when unknown). Never NULL. */
XPU_FUNC const char *efa_io_status_str(uint32_t status) {
  switch (status) {
#define EFA_IO_X_(name, fi, wc, desc) \
  case EFA_IO_COMP_STATUS_##name:     \
    return desc;
    EFA_IO_COMP_STATUS_TABLE(EFA_IO_X_)
#undef EFA_IO_X_
    default:
      return "Unknown status";
  }
}

/* One row of the table as data, for host tools and tests. */
struct efa_io_status_entry {
  uint8_t status;
  const char *name;        /* "EFA_IO_COMP_STATUS_FLUSHED" */
  const char *description;
  int fi_errno;            /* positive FI_E*, 0 for OK */
  const char *fi_errno_name; /* "FI_ECANCELED" */
  int ibv_wc_status;
  const char *ibv_wc_name; /* "IBV_WC_WR_FLUSH_ERR" */
};

/* The rows in table order (host only; defined in efa_io_status.c). */
extern const struct efa_io_status_entry efa_io_status_table[];
extern const size_t efa_io_status_table_len;

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_IO_STATUS_H_ */
