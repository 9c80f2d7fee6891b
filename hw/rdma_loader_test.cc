#include "hw/rdma_loader.h"

#include <dlfcn.h>

#include <cerrno>

#include "gtest/gtest.h"

namespace xpufab {
namespace hw {
namespace {

constexpr char kMissing[] = "libxpufab-no-such-library.so.1";

// What the installed rdma-core should make load_rdma() say, found independently of it.
int expected_load_result() {
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
  void* efa = dlopen("libefa.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (verbs == nullptr || efa == nullptr) return -ENOENT;
  if (dlsym(efa, "efadv_query_qp_wqs") == nullptr || dlsym(efa, "efadv_query_cq") == nullptr) {
    return -ENOSYS;
  }
  return 0;
}

TEST(RdmaLoader, MissingVerbsLibrary) {
  LibraryNames names;
  names.verbs = kMissing;
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  EXPECT_EQ(load_rdma(names, &api, &reason), -ENOENT);
  EXPECT_EQ(api, nullptr);
  EXPECT_NE(reason.find(kMissing), std::string::npos) << reason;
}

TEST(RdmaLoader, MissingEfaLibrary) {
  LibraryNames names;
  names.efa = kMissing;
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  int rc = load_rdma(names, &api, &reason);
  EXPECT_EQ(rc, -ENOENT);
  EXPECT_EQ(api, nullptr);
  EXPECT_NE(reason.find("cannot load"), std::string::npos) << reason;
}

TEST(RdmaLoader, LibraryWithoutVerbsIsMissing) {
  LibraryNames names;
  names.verbs = "libc.so.6";
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  EXPECT_EQ(load_rdma(names, &api, &reason), -ENOENT);
  EXPECT_NE(reason.find("ibv_"), std::string::npos) << reason;
}

TEST(RdmaLoader, LibraryWithoutEfadvIsTooOld) {
  LibraryNames names;
  names.efa = "libc.so.6";
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  if (expected_load_result() == -ENOENT) {
    // No libibverbs here: that is found first.
    EXPECT_EQ(load_rdma(names, &api, &reason), -ENOENT);
    return;
  }
  EXPECT_EQ(load_rdma(names, &api, &reason), -ENOSYS);
  EXPECT_NE(reason.find("efadv_query_device"), std::string::npos) << reason;
}

TEST(RdmaLoader, InstalledRdmaCoreClassifiedCorrectly) {
  std::shared_ptr<const RdmaApi> api;
  std::string reason;
  const int expected = expected_load_result();
  const int rc = load_rdma(LibraryNames(), &api, &reason);
  EXPECT_EQ(rc, expected) << reason;
  if (rc == 0) {
    ASSERT_NE(api, nullptr);
    EXPECT_NE(api->efadv_query_qp_wqs, nullptr);
    EXPECT_NE(api->efadv_query_cq, nullptr);
    EXPECT_STREQ(api->queries_from, "libefa");
    EXPECT_TRUE(reason.empty());
  } else {
    EXPECT_EQ(api, nullptr);
    EXPECT_FALSE(reason.empty());
  }
  if (rc == -ENOSYS) {
    EXPECT_NE(reason.find("v59"), std::string::npos) << reason;
  }
}

TEST(RdmaLoader, NullOutputIsInvalid) {
  std::string reason;
  EXPECT_EQ(load_rdma(LibraryNames(), nullptr, &reason), -EINVAL);
}

TEST(RdmaLoader, ErrorConversion) {
  EXPECT_EQ(rdma_error(0), 0);
  EXPECT_EQ(rdma_error(EBUSY), -EBUSY);
  EXPECT_EQ(rdma_error(-EINVAL), -EINVAL);
  errno = ENOMEM;
  EXPECT_EQ(rdma_error(-1), -ENOMEM);
  errno = 0;
  EXPECT_EQ(rdma_error(-1), -EIO);
}

}  // namespace
}  // namespace hw
}  // namespace xpufab
