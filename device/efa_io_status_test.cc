// The status table is total and agrees with verbs.h and libfabric's efa provider.
#include "device/efa_io_status.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <set>
#include <string>

#include "device/efa_io_c11_check.h"

namespace {

// Every status efa_io_defs.h defines, listed independently of the table.
const uint32_t kDefinedStatuses[] = {
    EFA_IO_COMP_STATUS_OK,
    EFA_IO_COMP_STATUS_FLUSHED,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER,
    EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE,
    EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH,
};

TEST(EfaIoStatus, TableIsTotal) {
  ASSERT_EQ(efa_io_status_table_len, sizeof(kDefinedStatuses) / sizeof(kDefinedStatuses[0]));
  std::set<uint32_t> in_table;
  for (size_t i = 0; i < efa_io_status_table_len; ++i) {
    const efa_io_status_entry& e = efa_io_status_table[i];
    EXPECT_TRUE(in_table.insert(e.status).second) << "duplicate row " << int(e.status);
    EXPECT_TRUE(efa_io_status_is_known(e.status));
    EXPECT_EQ(e.fi_errno, efa_io_status_to_fi_errno(e.status));
    EXPECT_EQ(e.ibv_wc_status, efa_io_status_to_ibv_wc_status(e.status));
    EXPECT_STREQ(e.name, efa_io_status_name(e.status));
    EXPECT_STREQ(e.description, efa_io_status_str(e.status));
    EXPECT_EQ(std::string(e.fi_errno_name).rfind("FI_", 0), 0u);
    EXPECT_EQ(std::string(e.ibv_wc_name).rfind("IBV_WC_", 0), 0u);
    EXPECT_GE(e.fi_errno, 0) << "fi_cq_err_entry.err is positive";
    EXPECT_EQ(e.fi_errno == 0, e.status == EFA_IO_COMP_STATUS_OK);
  }
  for (uint32_t s : kDefinedStatuses) EXPECT_EQ(in_table.count(s), 1u) << s;
}

TEST(EfaIoStatus, UnknownStatusesHaveGenericErrors) {
  size_t known = 0;
  for (uint32_t s = 0; s < 1024; ++s) {
    if (efa_io_status_is_known(s)) {
      ++known;
      continue;
    }
    SCOPED_TRACE(s);
    EXPECT_EQ(efa_io_status_to_fi_errno(s), FI_EOTHER);
    EXPECT_EQ(efa_io_status_to_ibv_wc_status(s), IBV_WC_GENERAL_ERR);
    EXPECT_STREQ(efa_io_status_name(s), "EFA_IO_COMP_STATUS_UNKNOWN");
    EXPECT_STREQ(efa_io_status_str(s), "Unknown status");
  }
  EXPECT_EQ(known, efa_io_status_table_len);
  EXPECT_FALSE(efa_io_status_is_known(16));
  EXPECT_FALSE(efa_io_status_is_known(17));
  EXPECT_FALSE(efa_io_status_is_known(0xffffffffu));
}

// Our numeric ibv_wc_status values are verbs.h's.
TEST(EfaIoStatus, IbvWcValuesMatchVerbs) {
  EXPECT_EQ(EFA_IO_IBV_WC_SUCCESS, IBV_WC_SUCCESS);
  EXPECT_EQ(EFA_IO_IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_BAD_RESP_ERR, IBV_WC_BAD_RESP_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_REM_OP_ERR, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_INV_RD_REQ_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_REM_ABORT_ERR, IBV_WC_REM_ABORT_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_RESP_TIMEOUT_ERR);
  EXPECT_EQ(EFA_IO_IBV_WC_GENERAL_ERR, IBV_WC_GENERAL_ERR);
}

// rdma-core's to_ibv_status, row by row (reference/efa-queues.md 1.2).
TEST(EfaIoStatus, IbvMappingMatchesRdmaCore) {
  struct Row {
    uint32_t status;
    int wc;
  };
  const Row rows[] = {
      {EFA_IO_COMP_STATUS_OK, IBV_WC_SUCCESS},
      {EFA_IO_COMP_STATUS_FLUSHED, IBV_WC_WR_FLUSH_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR, IBV_WC_LOC_QP_OP_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP, IBV_WC_LOC_QP_OP_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH, IBV_WC_LOC_QP_OP_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY, IBV_WC_LOC_PROT_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH, IBV_WC_LOC_LEN_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS, IBV_WC_REM_ACCESS_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT, IBV_WC_REM_ABORT_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN, IBV_WC_REM_INV_RD_REQ_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR, IBV_WC_RNR_RETRY_EXC_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH, IBV_WC_REM_INV_REQ_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS, IBV_WC_BAD_RESP_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE, IBV_WC_RESP_TIMEOUT_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER, IBV_WC_REM_OP_ERR},
      {EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE, IBV_WC_RESP_TIMEOUT_ERR},
      {EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH, IBV_WC_GENERAL_ERR},
  };
  for (const Row& r : rows) EXPECT_EQ(efa_io_status_to_ibv_wc_status(r.status), r.wc) << r.status;
}

// libfabric's efa provider (to_fi_errno), row by row.
TEST(EfaIoStatus, FiErrnoMatchesLibfabricEfa) {
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_OK), FI_SUCCESS);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_FLUSHED), FI_ECANCELED);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH), FI_EMSGSIZE);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT), FI_ECONNABORTED);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN), FI_ENOTCONN);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR), FI_ENORX);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH), FI_EMSGSIZE);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS), FI_EREMOTEIO);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE), FI_ECONNABORTED);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER), FI_ENOTCONN);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE), FI_EHOSTUNREACH);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH), FI_EOTHER);
}

TEST(EfaIoStatus, CCompilationAgrees) {
  for (uint32_t s = 0; s < 300; ++s) EXPECT_EQ(efa_io_c11_status_to_fi_errno(s), efa_io_status_to_fi_errno(s));
}

}  // namespace
