// fi_allocinfo / fi_dupinfo / fi_freeinfo: deep copies, including the 2.7
// fields.  Run under ASan to prove no sharing and no leaks.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "api/core/info.h"
#include "api/core/test_provider.h"
#include "gtest/gtest.h"

namespace xpufab::core::testing {
namespace {

TEST(InfoTest, AllocinfoAllocatesAttributesZeroed) {
  fi_info* i = fi_allocinfo();
  ASSERT_NE(i, nullptr);
  ASSERT_NE(i->tx_attr, nullptr);
  ASSERT_NE(i->rx_attr, nullptr);
  ASSERT_NE(i->ep_attr, nullptr);
  ASSERT_NE(i->domain_attr, nullptr);
  ASSERT_NE(i->fabric_attr, nullptr);
  EXPECT_EQ(i->nic, nullptr);
  EXPECT_EQ(i->next, nullptr);
  EXPECT_EQ(i->caps, 0u);
  EXPECT_EQ(i->ep_attr->xpu_ctx, nullptr);
  EXPECT_EQ(i->domain_attr->max_xpu_ctx_cnt, 0u);
  EXPECT_EQ(i->domain_attr->mr_mode, 0);
  fi_freeinfo(i);
}

TEST(InfoTest, FreeinfoAcceptsNullAndPartialStructures) {
  fi_freeinfo(nullptr);
  fi_info* i = fi_allocinfo();
  free(i->tx_attr);
  i->tx_attr = nullptr;
  free(i->ep_attr);
  i->ep_attr = nullptr;
  i->fabric_attr->prov_name = strdup("app-owned string");  // freed by fi_freeinfo
  fi_freeinfo(i);
}

TEST(InfoTest, DupinfoIsDeep) {
  fi_info* src = default_offer("fab", "dom");
  ASSERT_NE(src, nullptr);
  src->caps |= FI_XPU;
  src->dest_addrlen = 3;
  src->dest_addr = malloc(3);
  memcpy(src->dest_addr, "xyz", 3);
  src->ep_attr->auth_key_size = 5;
  src->ep_attr->auth_key = static_cast<uint8_t*>(malloc(5));
  memcpy(src->ep_attr->auth_key, "abcde", 5);
  src->domain_attr->auth_key_size = 2;
  src->domain_attr->auth_key = static_cast<uint8_t*>(malloc(2));
  memcpy(src->domain_attr->auth_key, "kk", 2);
  auto* fake_ctx = reinterpret_cast<fid_xpu_ctx*>(0x1234);
  src->ep_attr->xpu_ctx = fake_ctx;
  src->domain_attr->max_xpu_ctx_cnt = 3;
  src->domain_attr->max_cntr_value = 99;
  src->fabric_attr->prov_name = strdup("p");
  src->next = fi_allocinfo();  // not copied: dupinfo copies one entry

  fi_info* d = fi_dupinfo(src);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->next, nullptr);
  EXPECT_EQ(d->caps, src->caps);
  EXPECT_NE(d->tx_attr, src->tx_attr);
  EXPECT_EQ(memcmp(d->tx_attr, src->tx_attr, sizeof(fi_tx_attr)), 0);
  EXPECT_NE(d->rx_attr, src->rx_attr);
  EXPECT_EQ(memcmp(d->rx_attr, src->rx_attr, sizeof(fi_rx_attr)), 0);
  ASSERT_NE(d->src_addr, src->src_addr);
  EXPECT_EQ(d->src_addrlen, 16u);
  EXPECT_EQ(memcmp(d->src_addr, src->src_addr, 16), 0);
  EXPECT_EQ(memcmp(d->dest_addr, "xyz", 3), 0);
  EXPECT_NE(d->ep_attr->auth_key, src->ep_attr->auth_key);
  EXPECT_EQ(memcmp(d->ep_attr->auth_key, "abcde", 5), 0);
  EXPECT_EQ(d->ep_attr->xpu_ctx, fake_ctx);
  EXPECT_EQ(d->ep_attr->type, FI_EP_RDM);
  EXPECT_NE(d->domain_attr->name, src->domain_attr->name);
  EXPECT_STREQ(d->domain_attr->name, "dom");
  EXPECT_EQ(memcmp(d->domain_attr->auth_key, "kk", 2), 0);
  EXPECT_EQ(d->domain_attr->max_xpu_ctx_cnt, 3u);
  EXPECT_EQ(d->domain_attr->max_cntr_value, 99u);
  EXPECT_NE(d->fabric_attr->name, src->fabric_attr->name);
  EXPECT_STREQ(d->fabric_attr->name, "fab");
  EXPECT_STREQ(d->fabric_attr->prov_name, "p");
  ASSERT_NE(d->nic, nullptr);
  EXPECT_NE(d->nic, src->nic);
  EXPECT_EQ(d->nic->fid.fclass, static_cast<size_t>(FI_CLASS_NIC));
  EXPECT_NE(d->nic->device_attr->name, src->nic->device_attr->name);
  EXPECT_STREQ(d->nic->device_attr->name, "dom");
  EXPECT_STREQ(d->nic->device_attr->vendor_id, "0x1d0f");
  EXPECT_EQ(d->nic->bus_attr->bus_type, FI_BUS_PCI);
  EXPECT_EQ(d->nic->bus_attr->attr.pci.bus_id, 0x10);
  EXPECT_STREQ(d->nic->link_attr->address, "fe80::1");
  EXPECT_EQ(d->nic->link_attr->mtu, 8928u);

  // Free the source first: any shared pointer would be a use-after-free.
  fi_freeinfo(src);
  EXPECT_STREQ(d->domain_attr->name, "dom");
  EXPECT_EQ(memcmp(d->ep_attr->auth_key, "abcde", 5), 0);
  EXPECT_STREQ(d->nic->link_attr->address, "fe80::1");
  fi_freeinfo(d);
}

TEST(InfoTest, NicDuplicatesThroughItsControlOp) {
  fid_nic* nic = nic_alloc();
  ASSERT_NE(nic, nullptr);
  nic->device_attr->driver = strdup("efa");
  fid* copy = nullptr;
  ASSERT_EQ(fi_control(&nic->fid, FI_DUP, &copy), 0);
  auto* c = reinterpret_cast<fid_nic*>(copy);
  EXPECT_STREQ(c->device_attr->driver, "efa");
  EXPECT_NE(c->device_attr->driver, nic->device_attr->driver);
  EXPECT_EQ(fi_control(&nic->fid, FI_DUP, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&nic->fid, FI_GETWAIT, &copy), -FI_ENOSYS);
  EXPECT_EQ(fi_close(copy), 0);
  EXPECT_EQ(fi_close(&nic->fid), 0);
}

TEST(InfoTest, DupOfSparseInfoKeepsNullAttributes) {
  fi_info src{};
  src.caps = FI_MSG;
  fi_info* d = fi_dupinfo(&src);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->caps, FI_MSG);
  EXPECT_EQ(d->tx_attr, nullptr);
  EXPECT_EQ(d->domain_attr, nullptr);
  EXPECT_EQ(d->nic, nullptr);
  fi_freeinfo(d);
}

TEST(InfoTest, GetinfoResultsSurviveDupAndFree) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_XPU;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = ~0 & 0x1ffc;
  hints->fabric_attr->prov_name = strdup("statictest");
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info), 0);
  fi_info* d = fi_dupinfo(info);
  fi_freeinfo(info);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->caps & FI_XPU);
  EXPECT_EQ(d->domain_attr->max_xpu_ctx_cnt, 1u);
  EXPECT_STREQ(d->fabric_attr->prov_name, "statictest");
  fi_freeinfo(d);
  fi_freeinfo(hints);
}

}  // namespace
}  // namespace xpufab::core::testing
