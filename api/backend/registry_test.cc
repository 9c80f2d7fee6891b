#include <cerrno>

#include <algorithm>

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

// The names of `all` that start with `prefix`, in their order.
std::vector<std::string> with_prefix(const std::vector<std::string>& all,
                                     const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& n : all)
    if (n.compare(0, prefix.size(), prefix) == 0) out.push_back(n);
  return out;
}

TEST(Registry, RegistersOpensAndRejectsDuplicates) {
  ASSERT_EQ(register_backend({"test_null", probe_ok, open_null}), 0);
  EXPECT_EQ(register_backend({"test_null", probe_ok, open_null}), -EEXIST);
  EXPECT_EQ(register_backend({"test_null", probe_ok, open_null}, kPriorityEmulator), -EEXIST);
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
  EXPECT_EQ(register_backend({"x", probe_ok, open_null, nullptr, 2}), -EINVAL);
}

TEST(Registry, ListsEveryBackendsSettingsInRegistrationOrder) {
  static const BackendSetting kFirst[] = {{"FI_EFA_TEST_A", SettingType::kInt, "a"},
                                          {"FI_EFA_TEST_B", SettingType::kBool, "b"}};
  static const BackendSetting kSecond[] = {{"FI_EFA_TEST_C", SettingType::kString, "c"}};
  ASSERT_EQ(register_backend({"test_settings_1", probe_ok, open_null, kFirst, 2}), 0);
  ASSERT_EQ(register_backend({"test_settings_2", probe_ok, open_null, kSecond, 1}), 0);
  std::vector<std::string> names;
  for (const BackendSetting& s : backend_settings()) {
    if (std::string(s.env_name).compare(0, 12, "FI_EFA_TEST_") == 0) names.push_back(s.env_name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"FI_EFA_TEST_A", "FI_EFA_TEST_B", "FI_EFA_TEST_C"}));
}

TEST(Registry, RejectsNegativePrioritiesAndTheNameAuto) {
  EXPECT_EQ(register_backend({"test_negative", probe_ok, open_null}, -1), -EINVAL);
  EXPECT_EQ(register_backend({"auto", probe_ok, open_null}, kPriorityEmulator), -EINVAL);
  const std::vector<std::string> names = registered_backends();
  EXPECT_EQ(std::count(names.begin(), names.end(), "test_negative"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "auto"), 0);
}

TEST(Registry, AutoOrderIsByPriorityThenRegistrationOrder) {
  ASSERT_EQ(register_backend({"order_low", probe_ok, open_null}, 10), 0);
  ASSERT_EQ(register_backend({"order_named", probe_ok, open_null}, kPriorityByNameOnly), 0);
  ASSERT_EQ(register_backend({"order_tie_first", probe_ok, open_null}, 150), 0);
  ASSERT_EQ(register_backend({"order_high", probe_ok, open_null}, 300), 0);
  ASSERT_EQ(register_backend({"order_tie_second", probe_ok, open_null}, 150), 0);
  // order_named is missing: a backend registered at kPriorityByNameOnly is used by name only.
  EXPECT_EQ(with_prefix(backends_by_priority(), "order_"),
            (std::vector<std::string>{"order_high", "order_tie_first", "order_tie_second",
                                      "order_low"}));
  // Registration order is still what registered_backends() reports, by-name-only ones included.
  EXPECT_EQ(with_prefix(registered_backends(), "order_"),
            (std::vector<std::string>{"order_low", "order_named", "order_tie_first", "order_high",
                                      "order_tie_second"}));
}

}  // namespace
}  // namespace backend
}  // namespace xpufab
