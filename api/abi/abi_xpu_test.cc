// The 2.7 FI_XPU additions, checked against the offsets and values of the
// libfabric FI_XPU reference (LP64).
#include <cstddef>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_profile.h>
#include <rdma/fi_xpu.h>

#include "gtest/gtest.h"

namespace {

TEST(AbiXpu, Constants) {
  EXPECT_EQ(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(2, 7));
  EXPECT_EQ(FI_XPU, 1ULL << 44);
  EXPECT_EQ(FI_CLASS_XPU_CTX, 31);
  EXPECT_EQ(FI_CLASS_PROFILE, 30);
  EXPECT_EQ(FI_MR_XPU_DESC, 1 << 12);
  EXPECT_EQ(FI_GET_FD, 20);
  EXPECT_EQ(FI_GET_MR_XPU_DESC, 21);
  EXPECT_EQ(FI_XPU_WORK_ITEM, 0);
  EXPECT_EQ(FI_XPU_SUBGROUP, 1);
  EXPECT_EQ(FI_XPU_WORK_GROUP, 2);
  EXPECT_EQ(FI_XPU_DEVICE, 3);
  EXPECT_EQ(FI_XPU_ALLOC_DMABUF, 1ULL << 0);
  EXPECT_EQ(FI_XPU_IMPORT_IOMEMORY, 1ULL << 0);
  EXPECT_EQ(FI_XPU_IMPORT_DEVICEMAP, 1ULL << 1);
  EXPECT_EQ(FI_XPU_CAP_EP, 1ULL << 0);
  EXPECT_EQ(FI_XPU_CAP_CQ, 1ULL << 1);
  EXPECT_EQ(FI_XPU_CAP_CNTR, 1ULL << 2);
  // The extension bits stay clear of the bit upstream's later FI_XPU_CAP_WR takes (1ULL << 3) and of
  // the bits next to it.
  EXPECT_EQ(FI_XPU_CAP_TAGGED & 0xffffffffULL, 0u);
  EXPECT_EQ(FI_XPU_CAP_ATOMIC & 0xffffffffULL, 0u);
  EXPECT_NE(FI_XPU_CAP_TAGGED, FI_XPU_CAP_ATOMIC);
  EXPECT_EQ(FI_XPU_PROV_EFA, 1);
  EXPECT_EQ(FI_ENOMR, 270);
}

TEST(AbiXpu, XpuStructs) {
  EXPECT_EQ(sizeof(fi_xpu_ops), 32u);
  EXPECT_EQ(offsetof(fi_xpu_ops, alloc), 8u);
  EXPECT_EQ(offsetof(fi_xpu_ops, import), 16u);
  EXPECT_EQ(offsetof(fi_xpu_ops, free), 24u);
  EXPECT_EQ(sizeof(fi_xpu_ops_unimport), 40u);
  EXPECT_EQ(offsetof(fi_xpu_ops_unimport, unimport), 24u);
  EXPECT_EQ(offsetof(fi_xpu_ops_unimport, free), 32u);
  EXPECT_EQ(sizeof(fi_xpu_attr), 24u);
  EXPECT_EQ(offsetof(fi_xpu_attr, device), 8u);
  EXPECT_EQ(offsetof(fi_xpu_attr, ops), 16u);
  EXPECT_EQ(sizeof(fi_xpu_ctx_attr), 24u);
  EXPECT_EQ(offsetof(fi_xpu_ctx_attr, av_addr_size), 8u);
  EXPECT_EQ(offsetof(fi_xpu_ctx_attr, mr_desc_size), 16u);
  EXPECT_EQ(sizeof(fi_ops_xpu_ctx), 16u);
  EXPECT_EQ(sizeof(fid_xpu_ctx), 32u);
  EXPECT_EQ(offsetof(fid_xpu_ctx, ops), 24u);
  EXPECT_EQ(sizeof(fid_xpu), 16u);
  EXPECT_EQ(offsetof(fid_xpu, prov_id), 4u);
  EXPECT_EQ(offsetof(fid_xpu, prov_ctx), 8u);
  EXPECT_EQ(sizeof(fid_xpu_ep), 16u);
  EXPECT_EQ(sizeof(fid_xpu_cq), 16u);
  EXPECT_EQ(sizeof(fid_xpu_cntr), 16u);
  EXPECT_EQ(sizeof(fi_mr_xpu_desc), 32u);
  EXPECT_EQ(offsetof(fi_mr_xpu_desc, ctx), 24u);
}

// Appended members sit last, right after the member the reference names.
TEST(AbiXpu, AppendedFieldsAreLast) {
  EXPECT_EQ(offsetof(fi_ep_attr, xpu_ctx), offsetof(fi_ep_attr, auth_key) + 8);
  EXPECT_EQ(sizeof(fi_ep_attr), offsetof(fi_ep_attr, xpu_ctx) + 8);
  EXPECT_EQ(offsetof(fi_domain_attr, max_xpu_ctx_cnt),
            offsetof(fi_domain_attr, max_err_cntr_value) + 8);
  EXPECT_EQ(sizeof(fi_domain_attr), offsetof(fi_domain_attr, max_xpu_ctx_cnt) + 8);
  EXPECT_EQ(offsetof(fi_cq_attr, xpu_ctx), offsetof(fi_cq_attr, wait_set) + 8);
  EXPECT_EQ(sizeof(fi_cq_attr), offsetof(fi_cq_attr, xpu_ctx) + 8);
  EXPECT_EQ(offsetof(fi_cntr_attr, xpu_ctx), offsetof(fi_cntr_attr, flags) + 8);
  EXPECT_EQ(sizeof(fi_cntr_attr), offsetof(fi_cntr_attr, xpu_ctx) + 8);
  EXPECT_EQ(offsetof(fi_ops_domain, xpu_ctx), offsetof(fi_ops_domain, endpoint2) + 8);
  EXPECT_EQ(sizeof(fi_ops_domain), offsetof(fi_ops_domain, xpu_ctx) + 8);
  EXPECT_EQ(offsetof(fi_ops_ep, export_xpu), offsetof(fi_ops_ep, tx_size_left) + 8);
  EXPECT_EQ(sizeof(fi_ops_ep), offsetof(fi_ops_ep, export_xpu) + 8);
  EXPECT_EQ(offsetof(fi_ops_cq, export_xpu), offsetof(fi_ops_cq, strerror) + 8);
  EXPECT_EQ(sizeof(fi_ops_cq), offsetof(fi_ops_cq, export_xpu) + 8);
  EXPECT_EQ(offsetof(fi_ops_cntr, export_xpu), offsetof(fi_ops_cntr, seterr) + 8);
  EXPECT_EQ(sizeof(fi_ops_cntr), offsetof(fi_ops_cntr, export_xpu) + 8);
  EXPECT_EQ(offsetof(fi_ops_av, lookup2), offsetof(fi_ops_av, set_user_id) + 8);
  EXPECT_EQ(sizeof(fi_ops_av), offsetof(fi_ops_av, lookup2) + 8);
  // 1.17 layouts end where the 2.x additions begin.
  EXPECT_EQ(offsetof(fi_ep_attr, xpu_ctx), 96u);
  EXPECT_EQ(offsetof(fi_domain_attr, max_ep_auth_key), 192u);
  EXPECT_EQ(offsetof(fi_cq_attr, xpu_ctx), 40u);
  EXPECT_EQ(offsetof(fi_cntr_attr, xpu_ctx), 24u);
  EXPECT_EQ(offsetof(fi_ops_domain, xpu_ctx), 96u);
  EXPECT_EQ(offsetof(fi_ops_ep, export_xpu), 64u);
  EXPECT_EQ(offsetof(fi_ops_cq, export_xpu), 64u);
  EXPECT_EQ(offsetof(fi_ops_cntr, export_xpu), 64u);
}

// fi_ext.h: the EFA options 2.x appended after the one 1.17 had (which
// abi_compare_test checks against 1.17).
TEST(AbiXpu, EfaOptionsOf2x) {
  EXPECT_EQ(FI_OPT_EFA_RNR_RETRY, -(0xefa << 16));
  EXPECT_EQ(FI_OPT_EFA_EMULATED_READ, FI_OPT_EFA_RNR_RETRY + 1);
  EXPECT_EQ(FI_OPT_EFA_EMULATED_WRITE, FI_OPT_EFA_RNR_RETRY + 2);
  EXPECT_EQ(FI_OPT_EFA_EMULATED_ATOMICS, FI_OPT_EFA_RNR_RETRY + 3);
  EXPECT_EQ(FI_OPT_EFA_USE_DEVICE_RDMA, FI_OPT_EFA_RNR_RETRY + 4);
  EXPECT_EQ(FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES, FI_OPT_EFA_RNR_RETRY + 5);
  EXPECT_EQ(FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES, FI_OPT_EFA_RNR_RETRY + 6);
  EXPECT_EQ(FI_OPT_EFA_HOMOGENEOUS_PEERS, FI_OPT_EFA_RNR_RETRY + 7);
  EXPECT_EQ(FI_OPT_EFA_USE_UNSOLICITED_WRITE_RECV, FI_OPT_EFA_RNR_RETRY + 8);
}

// fi_profile.h (new in 2.x), LP64.
TEST(AbiXpu, ProfileStructs) {
  EXPECT_EQ(FI_VAR_UNEXP_MSG_CNT, 0);
  EXPECT_EQ(FI_VAR_OFI_MEM, 7);
  EXPECT_EQ(FI_EVENT_UNEXP_MSG_MATCHED, 1);
  EXPECT_EQ(fi_defined_type, 1);
  EXPECT_EQ(offsetof(fi_profile_desc, datatype_sel), 4u);
  EXPECT_EQ(offsetof(fi_profile_desc, datatype), 8u);
  EXPECT_EQ(offsetof(fi_profile_desc, flags), 16u);
  EXPECT_EQ(offsetof(fi_profile_desc, size), 24u);
  EXPECT_EQ(offsetof(fi_profile_desc, name), 32u);
  EXPECT_EQ(offsetof(fi_profile_desc, desc), 40u);
  EXPECT_EQ(sizeof(fi_profile_desc), 48u);
  EXPECT_EQ(sizeof(fi_profile_ops), 64u);
  EXPECT_EQ(offsetof(fi_profile_ops, read_var), 32u);
  EXPECT_EQ(offsetof(fi_profile_ops, end_reads), 56u);
  EXPECT_EQ(sizeof(fid_profile), 32u);
  EXPECT_EQ(offsetof(fid_profile, ops), 24u);
}

}  // namespace
