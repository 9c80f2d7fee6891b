#include "hw/bringup/profile_match.h"

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

}  // namespace
}  // namespace xpufab::bringup
