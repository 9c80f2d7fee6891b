// Many processes on one host, all-to-all over the shared-memory fabric with the default
// timeouts: on few cores each process runs a fraction of the time, and a peer that is merely
// behind must be waited for, not reported unresponsive (a failing rank's error completion is
// printed by a2a_peer). `--nproc=N --per_peer=M` size the run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "testing/support/process_util.h"

namespace {

using xpufab::testing::free_port;
using xpufab::testing::spawn;
using xpufab::testing::tmpdir;
using xpufab::testing::wait_exit;

int g_nproc = 32;
int g_per_peer = 20;

TEST(ManyProcesses, AllToAllOverShmWithDefaultTimeouts) {
  const std::string port = std::to_string(free_port());
  const std::vector<std::string> env = {
      "FI_EFA_BACKEND=emu", "FI_EFA_EMU_FABRIC=shm", "FI_EFA_EMU_SHM_DIR=" + tmpdir(),
      "FI_EFA_EMU_FABRIC_KEY=a2a-" + std::to_string(getpid())};
  std::vector<pid_t> ps;
  for (int r = 0; r < g_nproc; ++r) {
    ps.push_back(spawn({"testing/multiproc/a2a_peer", port, std::to_string(g_nproc),
                        std::to_string(g_per_peer), r == 0 ? "server" : "client"},
                       env));
    ASSERT_GT(ps.back(), 0);
    if (r == 0) usleep(100000);  // the rendezvous listens first
  }
  int failed = 0;
  for (pid_t p : ps) {
    if (wait_exit(p, 120) != 0) ++failed;
  }
  EXPECT_EQ(failed, 0) << "of " << g_nproc << " processes";
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--nproc=", 8) == 0) g_nproc = std::atoi(argv[i] + 8);
    if (std::strncmp(argv[i], "--per_peer=", 11) == 0) g_per_peer = std::atoi(argv[i] + 11);
  }
  return RUN_ALL_TESTS();
}
