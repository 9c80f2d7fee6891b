#include <cerrno>

#include <gtest/gtest.h>

#include "api/backend/backend.h"

namespace xpufab {
namespace backend {
namespace {

class NullBackend : public Backend {
 public:
  const char* name() const override { return "test_null"; }
  int enumerate(std::vector<DeviceInfo>* devices_p) override {
    devices_p->clear();
    return 0;
  }
  int open_device(const std::string&, std::unique_ptr<Device>*) override { return -ENODEV; }
};

int probe_ok() { return 0; }
int probe_absent() { return -ENODEV; }
int open_null(std::unique_ptr<Backend>* b) {
  b->reset(new NullBackend());
  return 0;
}

TEST(Registry, RegistersOpensAndRejectsDuplicates) {
  ASSERT_EQ(register_backend({"test_null", probe_ok, open_null}), 0);
  EXPECT_EQ(register_backend({"test_null", probe_ok, open_null}), -EEXIST);
  std::unique_ptr<Backend> b;
  ASSERT_EQ(open_backend("test_null", &b), 0);
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->name(), "test_null");
  bool listed = false;
  for (const std::string& n : registered_backends()) listed |= (n == "test_null");
  EXPECT_TRUE(listed);
}

TEST(Registry, AbsentAndUnknownBackends) {
  ASSERT_EQ(register_backend({"test_absent", probe_absent, open_null}), 0);
  std::unique_ptr<Backend> b;
  EXPECT_EQ(open_backend("test_absent", &b), -ENODEV);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(open_backend("no_such_backend", &b), -ENOENT);
  EXPECT_EQ(open_backend("test_absent", nullptr), -EINVAL);
}

TEST(Registry, RejectsIncompleteFactories) {
  EXPECT_EQ(register_backend({nullptr, probe_ok, open_null}), -EINVAL);
  EXPECT_EQ(register_backend({"", probe_ok, open_null}), -EINVAL);
  EXPECT_EQ(register_backend({"x", nullptr, open_null}), -EINVAL);
  EXPECT_EQ(register_backend({"x", probe_ok, nullptr}), -EINVAL);
}

}  // namespace
}  // namespace backend
}  // namespace xpufab
