// The provider registry and FI_PROVIDER filtering.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/core/provider.h"
#include "api/core/test_provider.h"
#include "gtest/gtest.h"

namespace xpufab::core::testing {
namespace {

std::set<std::string> provider_names() {
  std::set<std::string> names;
  fi_info* info = nullptr;
  if (fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, nullptr, &info) == 0) {
    for (fi_info* i = info; i; i = i->next) names.insert(i->fabric_attr->prov_name);
    fi_freeinfo(info);
  }
  return names;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("FI_PROVIDER"); }
  void TearDown() override { unsetenv("FI_PROVIDER"); }
  TestProvider a_{"alpha", 1, default_offer("afab", "adom")};
  TestProvider b_{"beta", 1, default_offer("bfab", "bdom")};
};

TEST_F(RegistryTest, StaticRegistrationHappened) {
  ASSERT_NE(find_provider("statictest"), nullptr);
  EXPECT_EQ(find_provider("STATICTEST"), find_provider("statictest"));
  EXPECT_TRUE(provider_names().count("statictest"));
}

TEST_F(RegistryTest, RegisterRejectsBadAndDuplicateProviders) {
  EXPECT_EQ(register_provider(nullptr), -FI_EINVAL);
  TestProvider unnamed("", 1, nullptr);
  EXPECT_EQ(register_provider(&unnamed), -FI_EINVAL);
  TestProvider ancient("ancient", 1, nullptr, FI_VERSION(1, 2));
  EXPECT_EQ(register_provider(&ancient), -FI_EINVAL);

  ScopedProvider ra(&a_);
  ASSERT_EQ(ra.status(), 0);
  EXPECT_EQ(register_provider(&a_), -FI_EALREADY);
  TestProvider same_version("ALPHA", 1, nullptr);
  EXPECT_EQ(register_provider(&same_version), -FI_EALREADY);
  EXPECT_EQ(find_provider("alpha"), &a_);
  // A newer version of the same name replaces the older one.
  TestProvider newer("alpha", 2, default_offer("nfab", "ndom"));
  ASSERT_EQ(register_provider(&newer), 0);
  EXPECT_EQ(find_provider("alpha"), &newer);
  EXPECT_EQ(unregister_provider(&newer), 0);
  EXPECT_EQ(newer.cleanups_, 1);
  EXPECT_EQ(unregister_provider(&newer), -FI_ENOENT);
  EXPECT_EQ(find_provider("alpha"), nullptr);
  ASSERT_EQ(register_provider(&a_), 0);  // put it back for ScopedProvider
}

TEST_F(RegistryTest, FiProviderFilters) {
  ScopedProvider ra(&a_), rb(&b_);
  auto all = provider_names();
  EXPECT_TRUE(all.count("alpha") && all.count("beta") && all.count("statictest"));

  setenv("FI_PROVIDER", "alpha", 1);
  EXPECT_EQ(provider_names(), (std::set<std::string>{"alpha"}));
  setenv("FI_PROVIDER", "BETA,alpha", 1);
  EXPECT_EQ(provider_names(), (std::set<std::string>{"alpha", "beta"}));
  setenv("FI_PROVIDER", "^alpha", 1);
  auto rest = provider_names();
  EXPECT_FALSE(rest.count("alpha"));
  EXPECT_TRUE(rest.count("beta") && rest.count("statictest"));
  setenv("FI_PROVIDER", "^alpha,beta", 1);
  rest = provider_names();
  EXPECT_FALSE(rest.count("alpha") || rest.count("beta"));
  setenv("FI_PROVIDER", "nosuch", 1);
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, nullptr, &info), -FI_ENODATA);
  EXPECT_EQ(info, nullptr);

  // fi_fabric honours the filter too.
  setenv("FI_PROVIDER", "beta", 1);
  fi_fabric_attr attr{};
  attr.name = const_cast<char*>("afab");
  attr.prov_name = const_cast<char*>("alpha");
  fid_fabric* fab = nullptr;
  EXPECT_EQ(fi_fabric(&attr, &fab, nullptr), -FI_ENODEV);
  unsetenv("FI_PROVIDER");
  ASSERT_EQ(fi_fabric(&attr, &fab, nullptr), 0);
  EXPECT_EQ(fi_close(&fab->fid), 0);
}

TEST_F(RegistryTest, ConcurrentGetinfoAndRegistration) {
  ScopedProvider ra(&a_);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      fi_info* hints = fi_allocinfo();
      hints->mode = FI_CONTEXT;
      hints->domain_attr->mr_mode = 0x1ffc;
      hints->fabric_attr->prov_name = strdup("statictest");
      for (int i = 0; i < 50; ++i) {
        fi_info* info = nullptr;
        if (fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info) != 0) failures++;
        fi_freeinfo(info);
      }
      fi_freeinfo(hints);
    });
  }
  // Registration churn of another provider while lookups run.
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(register_provider(&b_), 0);
    ASSERT_EQ(unregister_provider(&b_), 0);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RegistryTest, EnvListParsing) {
  setenv("FI_PROVIDER", ",efa,,shm,", 1);
  EXPECT_TRUE(provider_enabled_by_env("efa"));
  EXPECT_TRUE(provider_enabled_by_env("SHM"));
  EXPECT_FALSE(provider_enabled_by_env("tcp"));
  EXPECT_FALSE(provider_enabled_by_env(""));
  setenv("FI_PROVIDER", "^", 1);
  EXPECT_TRUE(provider_enabled_by_env("efa"));
  setenv("FI_PROVIDER", "", 1);
  EXPECT_TRUE(provider_enabled_by_env("efa"));
}

TEST_F(RegistryTest, GetparamsListsCoreVariables) {
  setenv("FI_PROVIDER", "alpha", 1);
  fi_param* params = nullptr;
  int count = 0;
  ASSERT_EQ(fi_getparams(&params, &count), 0);
  bool found = false;
  for (int i = 0; i < count; ++i) {
    if (strcmp(params[i].name, "FI_PROVIDER") == 0) {
      found = true;
      ASSERT_NE(params[i].value, nullptr);
      EXPECT_STREQ(params[i].value, "alpha");
      EXPECT_EQ(params[i].type, FI_PARAM_STRING);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(params[count].name, nullptr);
  fi_freeparams(params);
  EXPECT_EQ(fi_getparams(nullptr, &count), -FI_EINVAL);
  fi_freeparams(nullptr);
}

}  // namespace
}  // namespace xpufab::core::testing
