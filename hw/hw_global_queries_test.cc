// Debian's libefa lacks efadv_query_qp_wqs/efadv_query_cq; the preload shim supplies them in the
// global namespace. This executable exports its own two (linked with -rdynamic) to play the
// shim's part: the loader must pick them up, so the remaining absence reason is the device.
#include <dlfcn.h>

#include <cerrno>
#include <cstring>

#include "api/backend/backend.h"
#include "gtest/gtest.h"
#include "hw/efadv_compat.h"
#include "hw/hw_backend.h"
#include "hw/rdma_loader.h"

extern "C" {

__attribute__((visibility("default"))) int efadv_query_qp_wqs(struct ibv_qp*,
                                                                struct efadv_compat_wq_attr*,
                                                                struct efadv_compat_wq_attr*,
                                                                uint32_t) {
  return EOPNOTSUPP;
}

__attribute__((visibility("default"))) int efadv_query_cq(struct ibv_cq*,
                                                            struct efadv_compat_cq_attr*,
                                                            uint32_t) {
  return EOPNOTSUPP;
}

}  // extern "C"

namespace xpufab {
namespace hw {
namespace {

bool libraries_present() {
  return dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr &&
         dlopen("libefa.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr;
}

bool libefa_has_queries() {
  void* efa = dlopen("libefa.so.1", RTLD_NOW | RTLD_GLOBAL);
  return efa != nullptr && dlsym(efa, "efadv_query_qp_wqs") != nullptr;
}

TEST(HwGlobalQueries, LoaderFindsThemOutsideLibefa) {
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  const int rc = load_rdma(LibraryNames(), &api, &reason);
  if (!libraries_present()) {
    EXPECT_EQ(rc, -ENOENT);
    return;
  }
  ASSERT_EQ(rc, 0) << reason;
  if (libefa_has_queries()) {
    EXPECT_STREQ(api->queries_from, "libefa");
  } else {
    EXPECT_STREQ(api->queries_from, "global");
    EXPECT_EQ(api->efadv_query_qp_wqs, &efadv_query_qp_wqs);
    EXPECT_EQ(api->efadv_query_cq, &efadv_query_cq);
  }
}

TEST(HwGlobalQueries, NoDeviceIsTheRemainingReason) {
  if (!libraries_present()) {
    EXPECT_EQ(probe_hw(LibraryNames(), nullptr), -ENOENT);
    return;
  }
  std::unique_ptr<backend::Backend> b;
  std::string reason;
  ASSERT_EQ(make_hw_backend(LibraryNames(), &b, &reason), 0) << reason;
  std::vector<backend::DeviceInfo> devices;
  ASSERT_EQ(b->enumerate(&devices), 0);
  const int rc = probe_hw(LibraryNames(), &reason);
  if (devices.empty()) {
    EXPECT_EQ(rc, -ENODEV);
    EXPECT_NE(reason.find("no EFA device"), std::string::npos) << reason;
  } else {
    EXPECT_EQ(rc, 0) << reason;
  }
  std::unique_ptr<backend::Device> d;
  EXPECT_EQ(b->open_device("xpufab-no-such-device", &d), -ENODEV);
  EXPECT_EQ(d, nullptr);
}

}  // namespace
}  // namespace hw
}  // namespace xpufab
