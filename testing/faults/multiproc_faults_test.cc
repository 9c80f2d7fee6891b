// Fault plans between processes: fault_peer processes talk through the emulated EFA over the
// shared-memory fabric, each with its own FI_EFA_EMU_FAULTS.
//   MixedOpsSurviveLossReorderingDuplicationCorruption: 10% drop, 5% duplication, 20%
//     reordering, 2% corruption on both sides; every operation completes once, every message
//     arrives once, data verified (fault_peer mixed). XPUFAB_FAULT_MP_OPS overrides the count
//     (the 10^5: --test_env=XPUFAB_FAULT_MP_OPS=100000).
//   KillPeerFailsOutstandingOpsAndOtherPeersKeepWorking: kill_peer on the survivor's device
//     (fault_peer kill).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "testing/support/process_util.h"

namespace {

using xpufab::testing::free_port;
using xpufab::testing::spawn;
using xpufab::testing::tmpdir;
using xpufab::testing::wait_exit;

const char kPeer[] = "testing/faults/fault_peer";

std::vector<std::string> base_env(const std::string& test, const std::string& timeout_ms) {
  return {"FI_EFA_BACKEND=emu", "FI_EFA_EMU_FABRIC=shm", "FI_EFA_EMU_SHM_DIR=" + tmpdir(),
          "FI_EFA_EMU_FABRIC_KEY=faults-" + test + "-" + std::to_string(getpid()),
          "FI_EFA_EMU_TIMEOUT_MS=" + timeout_ms};
}

TEST(MultiProcFaults, MixedOpsSurviveLossReorderingDuplicationCorruption) {
  std::string ops = "10000";
  if (const char* o = std::getenv("XPUFAB_FAULT_MP_OPS")) ops = o;
  const std::string port = std::to_string(free_port());
  const std::string plan = "drop=0.1;dup=0.05;reorder=0.2;window=8;corrupt=0.02";
  auto se = base_env("mixed", "1500"), ce = se;
  // Different seeds: both devices are named efa_emu0, and the same seed would make them choose alike.
  se.push_back("FI_EFA_EMU_FAULTS=seed=7;" + plan);
  ce.push_back("FI_EFA_EMU_FAULTS=seed=8;" + plan);
  pid_t s = spawn({kPeer, "mixed", "server", port, ops, "64"}, se);
  pid_t c = spawn({kPeer, "mixed", "client", port, ops, "64"}, ce);
  ASSERT_GT(s, 0);
  ASSERT_GT(c, 0);
  EXPECT_EQ(wait_exit(c, 600), 0);
  EXPECT_EQ(wait_exit(s, 30), 0);
}

TEST(MultiProcFaults, KillPeerFailsOutstandingOpsAndOtherPeersKeepWorking) {
  const std::string port = std::to_string(free_port());
  auto env = base_env("kill", "1500");
  // Every process also loses and duplicates packets: the survivor's errors must still be exactly
  // the dead peer's.
  auto survivor_env = env;
  survivor_env.push_back("FI_EFA_EMU_FAULTS=seed=3;dup=0.05;reorder=0.1");
  pid_t s = spawn({kPeer, "kill", "survivor", port, "3000", "-"}, survivor_env);
  pid_t v = spawn({kPeer, "kill", "victim", port, "3000", "-"}, env);
  pid_t o = spawn({kPeer, "kill", "other", port, "3000", "-"}, env);
  ASSERT_GT(s, 0);
  ASSERT_GT(v, 0);
  ASSERT_GT(o, 0);
  EXPECT_EQ(wait_exit(s, 120), 0);
  EXPECT_EQ(wait_exit(v, 30), 0);
  EXPECT_EQ(wait_exit(o, 30), 0);
}

}  // namespace
