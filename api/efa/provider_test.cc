// The provider's backend choice seen through fi_getinfo: FI_EFA_BACKEND=auto offers the devices
// of the highest-priority backend that has any, a name picks that backend alone, and an unknown
// name offers nothing and says why.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/backend/backend.h"
#include "api/backend/unsupported_device.h"
#include "api/core/log.h"

namespace xpufab {
namespace {

// Devices that answer query() only: fi_getinfo opens each device to read its attributes.
class QueryOnlyDevice : public backend::UnsupportedDevice {
 public:
  explicit QueryOnlyDevice(const std::string& name) : name_(name) {}
  int query(backend::DeviceAttr* attr) const override {
    *attr = backend::DeviceAttr{};
    attr->name = name_;
    attr->max_qp = attr->max_cq = attr->max_mr = 16;
    attr->max_sq_wr = attr->max_rq_wr = 64;
    attr->max_sq_sge = attr->max_rq_sge = 1;
    attr->inline_buf_size = 32;
    attr->mtu = 8192;
    return 0;
  }

 private:
  std::string name_;
};

// Device counts per fake backend, set by each test.
int g_hw_devices = 0;
int g_emu_devices = 0;
int g_named_devices = 0;

class CountedBackend : public backend::Backend {
 public:
  CountedBackend(const char* name, const int* count) : name_(name), count_(count) {}
  const char* name() const override { return name_; }
  int enumerate(std::vector<backend::DeviceInfo>* devices_p) override {
    devices_p->clear();
    for (int i = 0; i < *count_; ++i) {
      backend::DeviceInfo d{};
      d.name = std::string(name_) + std::to_string(i);
      devices_p->push_back(d);
    }
    return 0;
  }
  int open_device(const std::string& name, std::unique_ptr<backend::Device>* device_p) override {
    for (int i = 0; i < *count_; ++i) {
      if (name != std::string(name_) + std::to_string(i)) continue;
      device_p->reset(new QueryOnlyDevice(name));
      return 0;
    }
    return -ENODEV;
  }

 private:
  const char* name_;
  const int* count_;
};

int probe_ok() { return 0; }
int open_hw(std::unique_ptr<backend::Backend>* b) {
  b->reset(new CountedBackend("fakehw", &g_hw_devices));
  return 0;
}
int open_emu(std::unique_ptr<backend::Backend>* b) {
  b->reset(new CountedBackend("fakeemu", &g_emu_devices));
  return 0;
}
int open_named(std::unique_ptr<backend::Backend>* b) {
  b->reset(new CountedBackend("fakenamed", &g_named_devices));
  return 0;
}

XPUFAB_REGISTER_BACKEND(g_emu, (backend::BackendFactory{"fakeemu", probe_ok, open_emu}),
                        backend::kPriorityEmulator);
XPUFAB_REGISTER_BACKEND(g_hw, (backend::BackendFactory{"fakehw", probe_ok, open_hw}),
                        backend::kPriorityHardware);
XPUFAB_REGISTER_BACKEND(g_named, (backend::BackendFactory{"fakenamed", probe_ok, open_named}));

class ProviderBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    g_hw_devices = g_emu_devices = g_named_devices = 0;
    unsetenv("FI_EFA_BACKEND");
    setenv("FI_LOG_LEVEL", "info", 1);
    core::log_reload_env();
    core::log_set_sink([this](const std::string& line) { log_ += line; });
  }
  void TearDown() override {
    core::log_set_sink(nullptr);
    unsetenv("FI_LOG_LEVEL");
    unsetenv("FI_EFA_BACKEND");
    core::log_reload_env();
  }

  // fi_getinfo for provider efa; the domain names offered, or the error.
  int offers(std::vector<std::string>* names) {
    fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup("efa");
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    names->clear();
    for (fi_info* i = info; i; i = i->next) names->emplace_back(i->domain_attr->name);
    fi_freeinfo(info);
    return rc;
  }

  std::string log_;
};

TEST_F(ProviderBackend, AutoOffersTheHighestPriorityBackendWithDevices) {
  g_hw_devices = 2;
  g_emu_devices = 1;
  std::vector<std::string> names;
  ASSERT_EQ(offers(&names), 0) << log_;
  EXPECT_EQ(names, (std::vector<std::string>{"fakehw0", "fakehw0-rdm", "fakehw1", "fakehw1-rdm"}));

  g_hw_devices = 0;
  ASSERT_EQ(offers(&names), 0) << log_;
  EXPECT_EQ(names, (std::vector<std::string>{"fakeemu0", "fakeemu0-rdm"}));

  setenv("FI_EFA_BACKEND", "auto", 1);
  ASSERT_EQ(offers(&names), 0) << log_;
  EXPECT_EQ(names, (std::vector<std::string>{"fakeemu0", "fakeemu0-rdm"}));
}

TEST_F(ProviderBackend, AutoSkipsByNameOnlyBackends) {
  g_named_devices = 1;
  std::vector<std::string> names;
  EXPECT_EQ(offers(&names), -FI_ENODATA);
  EXPECT_TRUE(names.empty());
  EXPECT_NE(log_.find("FI_EFA_BACKEND=auto: fakehw: no devices; fakeemu: no devices"),
            std::string::npos)
      << log_;
  EXPECT_EQ(log_.find("fakenamed"), std::string::npos) << log_;
}

TEST_F(ProviderBackend, ANameSelectsThatBackendAlone) {
  g_hw_devices = 1;
  g_emu_devices = 1;
  g_named_devices = 1;
  std::vector<std::string> names;
  setenv("FI_EFA_BACKEND", "fakeemu", 1);
  ASSERT_EQ(offers(&names), 0) << log_;
  EXPECT_EQ(names, (std::vector<std::string>{"fakeemu0", "fakeemu0-rdm"}));
  setenv("FI_EFA_BACKEND", "fakenamed", 1);
  ASSERT_EQ(offers(&names), 0) << log_;
  EXPECT_EQ(names, (std::vector<std::string>{"fakenamed0", "fakenamed0-rdm"}));
  // A named backend without devices does not fall back to another one.
  g_emu_devices = 0;
  setenv("FI_EFA_BACKEND", "fakeemu", 1);
  EXPECT_EQ(offers(&names), -FI_ENODATA);
  EXPECT_NE(log_.find("FI_EFA_BACKEND=fakeemu: fakeemu: no devices"), std::string::npos) << log_;
}

TEST_F(ProviderBackend, AnUnknownNameOffersNothingAndSaysWhy) {
  g_hw_devices = 1;
  setenv("FI_EFA_BACKEND", "fakehw_typo", 1);
  std::vector<std::string> names;
  EXPECT_EQ(offers(&names), -FI_ENODATA);
  EXPECT_TRUE(names.empty());
  EXPECT_NE(log_.find("FI_EFA_BACKEND=fakehw_typo names no backend"), std::string::npos) << log_;
  EXPECT_NE(log_.find("fakehw, "), std::string::npos) << log_;
}

}  // namespace
}  // namespace xpufab
