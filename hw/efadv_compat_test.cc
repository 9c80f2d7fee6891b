// The compat layouts against the documented ones, and against the installed (older) efadv.h for
// every struct both have: the prefix an old libefa reads must be byte-identical.
#include "hw/efadv_compat.h"

#include <infiniband/efadv.h>

#include <cstddef>

#include "gtest/gtest.h"

namespace {

TEST(EfadvCompat, DocumentedSizes) {
  EXPECT_EQ(sizeof(efadv_compat_device_attr), 32u);
  EXPECT_EQ(sizeof(efadv_compat_qp_init_attr), 24u);
  EXPECT_EQ(sizeof(efadv_compat_cq_init_attr), 56u);
  EXPECT_EQ(sizeof(efadv_compat_wq_attr), 40u);
  EXPECT_EQ(sizeof(efadv_compat_cq_attr), 32u);
  EXPECT_EQ(sizeof(efadv_compat_ah_attr), 16u);
  EXPECT_EQ(sizeof(efadv_compat_comp_cntr_init_attr), 80u);
  EXPECT_EQ(sizeof(ibv_compat_comp_cntr_init_attr), 72u);
  EXPECT_EQ(sizeof(ibv_compat_comp_cntr), 48u);
  EXPECT_EQ(sizeof(ibv_compat_comp_cntr_attach_attr), 8u);
}

TEST(EfadvCompat, DocumentedOffsets) {
  EXPECT_EQ(offsetof(efadv_compat_wq_attr, buffer), 8u);
  EXPECT_EQ(offsetof(efadv_compat_wq_attr, entry_size), 16u);
  EXPECT_EQ(offsetof(efadv_compat_wq_attr, num_entries), 20u);
  EXPECT_EQ(offsetof(efadv_compat_wq_attr, doorbell), 24u);
  EXPECT_EQ(offsetof(efadv_compat_wq_attr, max_batch), 32u);
  EXPECT_EQ(offsetof(efadv_compat_cq_attr, buffer), 8u);
  EXPECT_EQ(offsetof(efadv_compat_cq_attr, entry_size), 16u);
  EXPECT_EQ(offsetof(efadv_compat_cq_attr, num_entries), 20u);
  EXPECT_EQ(offsetof(efadv_compat_cq_attr, doorbell), 24u);
  EXPECT_EQ(offsetof(efadv_compat_cq_init_attr, ext_mem_dmabuf.buffer), 24u);
  EXPECT_EQ(offsetof(efadv_compat_cq_init_attr, ext_mem_dmabuf.length), 32u);
  EXPECT_EQ(offsetof(efadv_compat_cq_init_attr, ext_mem_dmabuf.offset), 40u);
  EXPECT_EQ(offsetof(efadv_compat_cq_init_attr, ext_mem_dmabuf.fd), 48u);
  EXPECT_EQ(offsetof(efadv_compat_comp_cntr_init_attr, comp_cntr_ext_mem), 16u);
  EXPECT_EQ(offsetof(efadv_compat_memory_location, dmabuf.fd), 16u);
  EXPECT_EQ(offsetof(efadv_compat_memory_location, type), 24u);
  EXPECT_EQ(offsetof(ibv_compat_comp_cntr_init_attr, comp_cntr_ext_mem), 8u);
  EXPECT_EQ(offsetof(ibv_compat_comp_cntr_init_attr, err_cntr_ext_mem), 40u);
  EXPECT_EQ(offsetof(ibv_compat_comp_cntr, comp_count), 16u);
  EXPECT_EQ(offsetof(ibv_compat_comp_cntr, err_count_max_value), 40u);
}

TEST(EfadvCompat, PrefixMatchesInstalledHeader) {
  EXPECT_EQ(sizeof(efadv_compat_device_attr), sizeof(efadv_device_attr));
  EXPECT_EQ(offsetof(efadv_compat_device_attr, max_sq_wr), offsetof(efadv_device_attr, max_sq_wr));
  EXPECT_EQ(offsetof(efadv_compat_device_attr, inline_buf_size),
            offsetof(efadv_device_attr, inline_buf_size));
  EXPECT_EQ(offsetof(efadv_compat_device_attr, device_caps),
            offsetof(efadv_device_attr, device_caps));
  EXPECT_EQ(offsetof(efadv_compat_device_attr, max_rdma_size),
            offsetof(efadv_device_attr, max_rdma_size));
  EXPECT_EQ(EFADV_COMPAT_QP_INIT_ATTR_INLEN_SL, sizeof(efadv_qp_init_attr));
  EXPECT_EQ(offsetof(efadv_compat_qp_init_attr, driver_qp_type),
            offsetof(efadv_qp_init_attr, driver_qp_type));
  EXPECT_EQ(EFADV_COMPAT_CQ_INIT_ATTR_INLEN_V43, sizeof(efadv_cq_init_attr));
  EXPECT_EQ(offsetof(efadv_compat_cq_init_attr, wc_flags), offsetof(efadv_cq_init_attr, wc_flags));
  EXPECT_EQ(sizeof(efadv_compat_ah_attr), sizeof(efadv_ah_attr));
  EXPECT_EQ(offsetof(efadv_compat_ah_attr, ahn), offsetof(efadv_ah_attr, ahn));
}

TEST(EfadvCompat, FlagValuesMatchInstalledHeader) {
  EXPECT_EQ(EFADV_COMPAT_DEVICE_ATTR_CAPS_RDMA_READ, EFADV_DEVICE_ATTR_CAPS_RDMA_READ);
  EXPECT_EQ(EFADV_COMPAT_DEVICE_ATTR_CAPS_RNR_RETRY, EFADV_DEVICE_ATTR_CAPS_RNR_RETRY);
  EXPECT_EQ(EFADV_COMPAT_DEVICE_ATTR_CAPS_CQ_WITH_SGID, EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID);
  EXPECT_EQ(EFADV_COMPAT_WC_EX_WITH_SGID, EFADV_WC_EX_WITH_SGID);
  EXPECT_EQ(EFADV_COMPAT_QP_DRIVER_TYPE_SRD, EFADV_QP_DRIVER_TYPE_SRD);
}

}  // namespace
