#include "tools/bringup/profile_match.h"

#include <gtest/gtest.h>

namespace xpufab::bringup {
namespace {

using namespace ::xpufab::backend;

TEST(ProfileMatch, NewestGenerationWhoseOpsTheDeviceOffers) {
  EXPECT_STREQ(matching_profile(0), "gen1");
  EXPECT_STREQ(matching_profile(kCapCqWithSgid | kCapRnrRetry), "gen1");
  // Debian 12's libefa reports read, RNR retry and SGID only.
  EXPECT_STREQ(matching_profile(kCapRdmaRead | kCapRnrRetry | kCapCqWithSgid), "gen2");
  EXPECT_STREQ(matching_profile(kCapRdmaRead | kCapRdmaWrite | kCapUnsolicitedWriteRecv), "gen3");
  EXPECT_STREQ(matching_profile(kCapRdmaRead | kCapRdmaWrite | kCapInlineWrite), "gen4");
}

TEST(ProfileMatch, CapsString) {
  EXPECT_EQ(caps_string(0), "none");
  EXPECT_EQ(caps_string(kCapRdmaRead | kCapRdmaWrite), "rdma_read,rdma_write");
  EXPECT_EQ(caps_string(kCapInlineWrite), "inline_write");
}

// What the emulator must drop to mirror the device; the names round-trip through
// FI_EFA_EMU_CAPS_CLEAR's parser.
TEST(ProfileMatch, CapsToClear) {
  // Debian 12's libefa over the emulator: no external-memory CQs, no completion counters.
  const uint32_t v44 = kCapRdmaRead | kCapRnrRetry | kCapCqWithSgid | kCapCqNotifications;
  const uint32_t clear = caps_to_clear(v44);
  EXPECT_EQ(emu::find_profile("gen2")->device_caps & ~clear, v44);
  EXPECT_EQ(clear & v44, 0u);
  uint32_t parsed = 0;
  ASSERT_EQ(emu::parse_caps(caps_string(clear), &parsed), 0);
  EXPECT_EQ(parsed, clear);
  ASSERT_EQ(emu::parse_caps(caps_string(0), &parsed), 0);
  EXPECT_EQ(parsed, 0u);
  const uint32_t gen4 = emu::find_profile("gen4")->device_caps;
  EXPECT_EQ(caps_to_clear(gen4), 0u);
  EXPECT_EQ(caps_to_clear(gen4 | (1u << 12)), 0u);  // extras cannot be added
}

}  // namespace
}  // namespace xpufab::bringup
