// The hw backend where no EFA is present (any CI machine): each absence reason is reported by the
// registry probe and in the log, opening fails cleanly, and a loaded backend lists no devices.
#include "hw/hw_backend.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "api/core/log.h"
#include "gtest/gtest.h"

namespace xpufab {
namespace hw {
namespace {

// The reason the installed rdma-core must give, found without the code under test: -ENOENT,
// -ENOSYS, or 1 for "loads; the answer depends on the devices present".
int expected_absence() {
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
  void* efa = dlopen("libefa.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (verbs == nullptr || efa == nullptr) return -ENOENT;
  if (dlsym(efa, "efadv_query_qp_wqs") == nullptr || dlsym(efa, "efadv_query_cq") == nullptr) {
    return -ENOSYS;
  }
  return 1;
}

class LogCapture {
 public:
  LogCapture() {
    setenv("FI_LOG_LEVEL", "warn", 1);
    core::log_reload_env();
    core::log_set_sink([this](const std::string& line) { lines_.push_back(line); });
  }
  ~LogCapture() {
    core::log_set_sink(nullptr);
    unsetenv("FI_LOG_LEVEL");
    core::log_reload_env();
  }
  std::string all() const {
    std::string s;
    for (const auto& l : lines_) s += l;
    return s;
  }

 private:
  std::vector<std::string> lines_;
};

TEST(HwBackend, RegisteredAsHw) {
  std::vector<std::string> names = backend::registered_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "hw"), names.end());
}

TEST(HwBackend, ProbeReportsTheAbsenceReason) {
  const int expected = expected_absence();
  std::string reason;
  const int rc = probe_hw(LibraryNames(), &reason);
  if (expected < 0) {
    EXPECT_EQ(rc, expected) << reason;
  } else {
    EXPECT_TRUE(rc == 0 || rc == -ENODEV) << rc << " " << reason;
  }
  if (rc != 0) {
    EXPECT_FALSE(reason.empty());
  }
}

TEST(HwBackend, RegistryOpenFailsCleanlyAndLogsWhy) {
  std::string reason;
  const int probe_rc = probe_hw(LibraryNames(), &reason);
  if (probe_rc == 0) {
    // An EFA host: the registry must hand out a working backend instead.
    std::unique_ptr<backend::Backend> b;
    EXPECT_EQ(backend::open_backend("hw", &b), 0);
    EXPECT_NE(b, nullptr);
    return;
  }
  LogCapture log;
  std::unique_ptr<backend::Backend> b;
  EXPECT_EQ(backend::open_backend("hw", &b), probe_rc);
  EXPECT_EQ(b, nullptr);
  const std::string text = log.all();
  const char* what = probe_rc == -ENOENT   ? "library missing"
                     : probe_rc == -ENOSYS ? "too old"
                                           : "no EFA device";
  EXPECT_NE(text.find(what), std::string::npos) << text;
  EXPECT_NE(text.find(reason), std::string::npos) << text;
}

TEST(HwBackend, MissingLibraryReported) {
  LibraryNames names;
  names.verbs = "libxpufab-no-such-verbs.so.1";
  std::string reason;
  EXPECT_EQ(probe_hw(names, &reason), -ENOENT);
  EXPECT_NE(reason.find("libxpufab-no-such-verbs.so.1"), std::string::npos) << reason;
  std::unique_ptr<backend::Backend> b;
  EXPECT_EQ(make_hw_backend(names, &b, &reason), -ENOENT);
  EXPECT_EQ(b, nullptr);
}

TEST(HwBackend, MakeBackendMatchesProbe) {
  const int expected = expected_absence();
  std::unique_ptr<backend::Backend> b;
  std::string reason;
  const int rc = make_hw_backend(LibraryNames(), &b, &reason);
  if (expected < 0) {
    EXPECT_EQ(rc, expected);
    EXPECT_EQ(b, nullptr);
    return;
  }
  ASSERT_EQ(rc, 0) << reason;
  EXPECT_STREQ(b->name(), "hw");
  std::vector<backend::DeviceInfo> devices;
  EXPECT_EQ(b->enumerate(&devices), 0);
  std::unique_ptr<backend::Device> d;
  EXPECT_EQ(b->open_device("xpufab-no-such-device", &d), -ENODEV);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(b->enumerate(nullptr), -EINVAL);
  EXPECT_EQ(b->open_device("x", nullptr), -EINVAL);
}

TEST(HwBackend, NullArguments) {
  EXPECT_EQ(make_hw_backend(LibraryNames(), nullptr, nullptr), -EINVAL);
  // probe_hw tolerates a null reason.
  const int rc = probe_hw(LibraryNames(), nullptr);
  EXPECT_TRUE(rc == 0 || rc == -ENOENT || rc == -ENOSYS || rc == -ENODEV) << rc;
}

}  // namespace
}  // namespace hw
}  // namespace xpufab
