#include "api/core/log.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "api/core/param.h"
#include "gtest/gtest.h"

namespace xpufab::core {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_set_sink([this](const std::string& line) { lines_.push_back(line); });
  }
  void TearDown() override {
    log_set_sink(nullptr);
    unsetenv("FI_LOG_LEVEL");
    unsetenv("FI_LOG_PROV");
    unsetenv("FI_LOG_SUBSYS");
    log_reload_env();
  }
  void emit_all() {
    XPUFAB_WARN("efa", LogSubsys::kCore, "w%d", 1);
    XPUFAB_TRACE("efa", LogSubsys::kCore, "t");
    XPUFAB_INFO("efa", LogSubsys::kCq, "i");
    XPUFAB_DEBUG("efa", LogSubsys::kCore, "d");
  }
  std::vector<std::string> lines_;
};

TEST_F(LogTest, SilentByDefault) {
  unsetenv("FI_LOG_LEVEL");
  log_reload_env();
  emit_all();
  EXPECT_TRUE(lines_.empty());
}

TEST_F(LogTest, LevelsAreCumulative) {
  const struct {
    const char* env;
    size_t n;
  } cases[] = {{"warn", 1}, {"trace", 2}, {"INFO", 3}, {"debug", 4}, {"bogus", 0}};
  for (const auto& c : cases) {
    lines_.clear();
    setenv("FI_LOG_LEVEL", c.env, 1);
    log_reload_env();
    emit_all();
    EXPECT_EQ(lines_.size(), c.n) << c.env;
  }
}

TEST_F(LogTest, LineFormat) {
  setenv("FI_LOG_LEVEL", "warn", 1);
  log_reload_env();
  XPUFAB_WARN("efa", LogSubsys::kDomain, "value %d", 42);
  ASSERT_EQ(lines_.size(), 1u);
  const std::string& l = lines_[0];
  EXPECT_EQ(l.rfind("xpufab:", 0), 0u) << l;
  EXPECT_NE(l.find(":efa:domain:"), std::string::npos) << l;
  EXPECT_NE(l.find("<warn> value 42\n"), std::string::npos) << l;
}

TEST_F(LogTest, ProviderAndSubsystemFilters) {
  setenv("FI_LOG_LEVEL", "debug", 1);
  setenv("FI_LOG_PROV", "shm", 1);
  log_reload_env();
  emit_all();
  EXPECT_TRUE(lines_.empty());
  setenv("FI_LOG_PROV", "^shm", 1);
  log_reload_env();
  emit_all();
  EXPECT_EQ(lines_.size(), 4u);
  lines_.clear();
  unsetenv("FI_LOG_PROV");
  setenv("FI_LOG_SUBSYS", "cq", 1);
  log_reload_env();
  emit_all();
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("<info> i"), std::string::npos);
}

TEST_F(LogTest, ParseLevel) {
  LogLevel l;
  EXPECT_TRUE(log_parse_level("Trace", &l));
  EXPECT_EQ(l, LogLevel::kTrace);
  EXPECT_FALSE(log_parse_level("verbose", &l));
  EXPECT_FALSE(log_parse_level(nullptr, &l));
  EXPECT_FALSE(log_parse_level("warn", nullptr));
}

TEST(ParamTest, DefineAndRead) {
  EXPECT_EQ(define_param("test", "some_knob", FI_PARAM_INT, "a knob"), 0);
  EXPECT_EQ(define_param("TEST", "SOME_KNOB", FI_PARAM_INT, "again"), -FI_EALREADY);
  EXPECT_EQ(define_param("test", nullptr, FI_PARAM_INT, "x"), -FI_EINVAL);
  setenv("FI_TEST_SOME_KNOB", "17", 1);
  long long v = 0;
  EXPECT_TRUE(get_param_int("test", "some_knob", &v));
  EXPECT_EQ(v, 17);
  setenv("FI_TEST_SOME_KNOB", "17x", 1);
  EXPECT_FALSE(get_param_int("test", "some_knob", &v));
  setenv("FI_TEST_FLAG", "Yes", 1);
  bool b = false;
  EXPECT_TRUE(get_param_bool("test", "flag", &b));
  EXPECT_TRUE(b);
  setenv("FI_TEST_FLAG", "maybe", 1);
  EXPECT_FALSE(get_param_bool("test", "flag", &b));
  unsetenv("FI_TEST_FLAG");
  unsetenv("FI_TEST_SOME_KNOB");
  std::string s;
  EXPECT_FALSE(get_param_str("test", "flag", &s));
}

}  // namespace
}  // namespace xpufab::core
