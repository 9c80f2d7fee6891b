#include "api/backend/choice.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>

#include <gtest/gtest.h>

namespace xpufab {
namespace backend {
namespace {

// Fake backends whose availability each test sets: probe result, enumerate result and device
// count, by index into kFakes.
struct FakeState {
  int probe_rc = 0;
  int enumerate_rc = 0;
  int devices = 1;
  int opens = 0;
};

constexpr int kFakeCount = 5;
FakeState g_state[kFakeCount];

class FakeBackend : public Backend {
 public:
  FakeBackend(const char* name, FakeState* st) : name_(name), st_(st) {}
  const char* name() const override { return name_; }
  int enumerate(std::vector<DeviceInfo>* devices_p) override {
    if (st_->enumerate_rc != 0) return st_->enumerate_rc;
    devices_p->clear();
    for (int i = 0; i < st_->devices; ++i) {
      DeviceInfo d{};
      d.name = std::string(name_) + std::to_string(i);
      devices_p->push_back(d);
    }
    return 0;
  }
  int open_device(const std::string&, std::unique_ptr<Device>*) override { return -ENODEV; }

 private:
  const char* name_;
  FakeState* st_;
};

const char* const kNames[kFakeCount] = {"fake_hw", "fake_between", "fake_emu", "fake_last",
                                        "fake_named"};
constexpr int kHw = 0, kBetween = 1, kEmu = 2, kLast = 3, kNamed = 4;

template <int I>
int probe() {
  return g_state[I].probe_rc;
}
template <int I>
int open(std::unique_ptr<Backend>* b) {
  g_state[I].opens++;
  b->reset(new FakeBackend(kNames[I], &g_state[I]));
  return 0;
}

// Registered out of priority order on purpose.
XPUFAB_REGISTER_BACKEND(g_emu, (BackendFactory{kNames[kEmu], probe<kEmu>, open<kEmu>}),
                        kPriorityEmulator);
XPUFAB_REGISTER_BACKEND(g_named, (BackendFactory{kNames[kNamed], probe<kNamed>, open<kNamed>}));
XPUFAB_REGISTER_BACKEND(g_hw, (BackendFactory{kNames[kHw], probe<kHw>, open<kHw>}),
                        kPriorityHardware);
XPUFAB_REGISTER_BACKEND(g_last, (BackendFactory{kNames[kLast], probe<kLast>, open<kLast>}), 1);
XPUFAB_REGISTER_BACKEND(g_between,
                        (BackendFactory{kNames[kBetween], probe<kBetween>, open<kBetween>}), 150);

class Choice : public ::testing::Test {
 protected:
  void SetUp() override {
    for (FakeState& s : g_state) s = FakeState{};
    // By default only the two real-shaped backends offer devices.
    g_state[kBetween].probe_rc = -ENODEV;
    g_state[kLast].devices = 0;
    unsetenv("FI_EFA_BACKEND");
  }
  void TearDown() override { unsetenv("FI_EFA_BACKEND"); }

  // Opens through a per-test cache, as the provider does.
  int choose(const std::string& request) {
    BackendOpener opener = [this](const std::string& name, Backend** b) {
      auto it = cache_.find(name);
      if (it == cache_.end()) {
        std::unique_ptr<Backend> be;
        int rc = open_backend(name, &be);
        if (rc != 0) return rc;
        it = cache_.emplace(name, std::move(be)).first;
      }
      *b = it->second.get();
      return 0;
    };
    choice_ = BackendChoice{};
    why_.clear();
    return choose_backend(request, opener, &choice_, &why_);
  }

  std::map<std::string, std::unique_ptr<Backend>> cache_;
  BackendChoice choice_;
  std::string why_;
};

TEST_F(Choice, AutoOrderFollowsPriorities) {
  EXPECT_EQ(backends_by_priority(),
            (std::vector<std::string>{"fake_hw", "fake_between", "fake_emu", "fake_last"}));
}

TEST_F(Choice, AutoPrefersHardwareWhenItHasDevices) {
  g_state[kHw].devices = 2;
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_hw");
  ASSERT_EQ(choice_.devices.size(), 2u);
  EXPECT_EQ(choice_.devices[1].name, "fake_hw1");
  // Lower priorities are not even opened.
  EXPECT_EQ(g_state[kEmu].opens, 0);
  EXPECT_EQ(g_state[kBetween].opens, 0);
}

TEST_F(Choice, AutoFallsBackPastEmptyUnavailableAndFailingBackends) {
  g_state[kHw].devices = 0;
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_emu");
  EXPECT_EQ(g_state[kBetween].opens, 0);  // its probe failed
  EXPECT_EQ(g_state[kLast].opens, 0);

  g_state[kHw].devices = 1;
  g_state[kHw].enumerate_rc = -EIO;
  cache_.clear();
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_emu");

  g_state[kHw].probe_rc = -ENOENT;
  cache_.clear();
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_emu");
}

TEST_F(Choice, AutoTakesLowerPrioritiesInTurn) {
  g_state[kHw].devices = 0;
  g_state[kEmu].devices = 0;
  g_state[kBetween].probe_rc = 0;
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_between");

  g_state[kBetween].devices = 0;
  g_state[kLast].devices = 3;
  ASSERT_EQ(choose(kAutoBackend), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_last");
}

TEST_F(Choice, AutoNeverTakesAByNameOnlyBackend) {
  g_state[kHw].devices = 0;
  g_state[kEmu].devices = 0;
  g_state[kNamed].devices = 1;
  EXPECT_EQ(choose(kAutoBackend), -ENODEV);
  EXPECT_EQ(g_state[kNamed].opens, 0);
  // Every attempt is explained, in the order tried.
  EXPECT_NE(why_.find("fake_hw: no devices"), std::string::npos) << why_;
  EXPECT_NE(why_.find("fake_between: unavailable"), std::string::npos) << why_;
  EXPECT_LT(why_.find("fake_hw"), why_.find("fake_emu")) << why_;
  EXPECT_EQ(why_.find("fake_named"), std::string::npos) << why_;
}

TEST_F(Choice, AutoReportsTheLastError) {
  g_state[kHw].devices = 0;
  g_state[kEmu].enumerate_rc = -EIO;
  g_state[kLast].probe_rc = -ENOENT;
  EXPECT_EQ(choose(kAutoBackend), -ENOENT) << why_;
  EXPECT_NE(why_.find("fake_emu: enumerate failed"), std::string::npos) << why_;
}

TEST_F(Choice, ANamedBackendIsUsedWithoutFallback) {
  g_state[kHw].devices = 1;
  ASSERT_EQ(choose("fake_emu"), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_emu");
  EXPECT_EQ(g_state[kHw].opens, 0);

  ASSERT_EQ(choose("fake_named"), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_named");

  g_state[kHw].devices = 0;
  EXPECT_EQ(choose("fake_hw"), -ENODEV);
  EXPECT_NE(why_.find("fake_hw: no devices"), std::string::npos) << why_;
  EXPECT_EQ(choose("fake_between"), -ENODEV);  // the probe's error
  g_state[kHw].enumerate_rc = -EIO;
  EXPECT_EQ(choose("fake_hw"), -EIO);
  EXPECT_EQ(g_state[kEmu].opens, 1);  // only by the first choice
}

TEST_F(Choice, AnUnknownNameIsAnErrorThatListsTheBackends) {
  EXPECT_EQ(choose("fake_typo"), -EINVAL);
  EXPECT_NE(why_.find("FI_EFA_BACKEND=fake_typo"), std::string::npos) << why_;
  EXPECT_NE(why_.find("fake_hw"), std::string::npos) << why_;
  EXPECT_NE(why_.find("fake_named"), std::string::npos) << why_;
  EXPECT_NE(why_.find("auto"), std::string::npos) << why_;
  for (const FakeState& s : g_state) EXPECT_EQ(s.opens, 0);
  // Case matters, as it always has.
  EXPECT_EQ(choose("FAKE_HW"), -EINVAL);
  EXPECT_EQ(choose(""), -EINVAL);
}

TEST_F(Choice, RejectsMissingArguments) {
  EXPECT_EQ(choose_backend(kAutoBackend, BackendOpener(), &choice_, nullptr), -EINVAL);
  BackendOpener never = [](const std::string&, Backend**) { return -ENODEV; };
  EXPECT_EQ(choose_backend(kAutoBackend, never, nullptr, nullptr), -EINVAL);
  // A failure without a place for the reason is still a failure.
  EXPECT_EQ(choose_backend(kAutoBackend, never, &choice_, nullptr), -ENODEV);
}

TEST_F(Choice, EnvironmentNamesTheRequest) {
  EXPECT_EQ(requested_backend(), "auto");
  setenv("FI_EFA_BACKEND", "", 1);
  EXPECT_EQ(requested_backend(), "auto");
  setenv("FI_EFA_BACKEND", "auto", 1);
  EXPECT_EQ(requested_backend(), "auto");
  setenv("FI_EFA_BACKEND", "fake_emu", 1);
  EXPECT_EQ(requested_backend(), "fake_emu");
  g_state[kHw].devices = 1;
  ASSERT_EQ(choose(requested_backend()), 0) << why_;
  EXPECT_EQ(choice_.name, "fake_emu");
  setenv("FI_EFA_BACKEND", "nonsense", 1);
  EXPECT_EQ(choose(requested_backend()), -EINVAL);
}

}  // namespace
}  // namespace backend
}  // namespace xpufab
