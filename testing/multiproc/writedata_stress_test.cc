// Many short two-process runs of the fi_writedata ping-pong (srd_peer writedata: 64 B then 1 MiB
// back to back, each side writing into the other's buffer with remote CQ data and waiting for the
// peer's FI_REMOTE_CQ_DATA completion), one or several pairs at a time on the default fabric.
// A lost write, immediate or completion leaves a peer waiting in vain: it exits 3 after
// SRD_PEER_WAIT_MS, and the run counts as a hang. Every failed run is named with its outcome.
//
//   writedata_stress_test [--runs=N] [--pairs=P] [--iters=I]   (gtest flags are accepted too)
//
// The unresponsive-peer timeout is raised far above anything a healthy run needs, so that a peer
// that only waits for a core on a loaded machine is not reported: what this test looks for is a
// message that never arrives, which no timeout makes arrive.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
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

const char kPeer[] = "testing/multiproc/srd_peer";

int g_runs = 8;
int g_pairs = 1;
int g_iters = 40;

struct Pair {
  pid_t server = -1, client = -1;
};

Pair start_pair(int run, int index) {
  const std::string tag = std::to_string(getpid()) + "-" + std::to_string(run) + "-" + std::to_string(index);
  const std::vector<std::string> env = {
      "FI_EFA_BACKEND=emu",           "FI_EFA_EMU_SHM_DIR=" + tmpdir(),
      "FI_EFA_EMU_FABRIC_KEY=wds-" + tag, "FI_EFA_EMU_TIMEOUT_MS=60000",
      "SRD_PEER_WAIT_MS=20000"};
  const std::string port = std::to_string(free_port());
  const std::string iters = std::to_string(g_iters);
  Pair p;
  p.server = spawn({kPeer, "server", port, "writedata", "64,1048576", iters}, env);
  p.client = spawn({kPeer, "client", port, "writedata", "64,1048576", iters}, env);
  return p;
}

const char* outcome(int status) {
  switch (status) {
    case 0: return "passed";
    case 1: return "a failed check (wrong data or flags)";
    case 3: return "a hang (a completion never came)";
    case 4: return "an error completion";
    case -1: return "killed at the deadline";
    default: return "another exit";
  }
}

TEST(WritedataStress, ShortRunsAllComplete) {
  int passed = 0, hangs = 0, other = 0;
  for (int run = 0; run < g_runs; ++run) {
    std::vector<Pair> pairs;
    for (int i = 0; i < g_pairs; ++i) pairs.push_back(start_pair(run, i));
    for (int i = 0; i < g_pairs; ++i) {
      ASSERT_GT(pairs[i].server, 0);
      ASSERT_GT(pairs[i].client, 0);
      const int cs = wait_exit(pairs[i].client, 120);
      const int ss = wait_exit(pairs[i].server, 30);
      if (cs == 0 && ss == 0) {
        ++passed;
        continue;
      }
      (cs == 3 || ss == 3 || cs == -1 || ss == -1) ? ++hangs : ++other;
      ADD_FAILURE() << "run " << run << " pair " << i << ": server " << outcome(ss) << " (" << ss
                    << "), client " << outcome(cs) << " (" << cs << ")";
    }
  }
  std::printf("writedata stress: %d runs x %d pairs x %d iterations (64 B + 1 MiB): %d passed, %d hung, %d failed otherwise\n",
              g_runs, g_pairs, g_iters, passed, hangs, other);
  EXPECT_EQ(passed, g_runs * g_pairs);
}

bool flag(const char* arg, const char* name, int* out) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *out = std::atoi(arg + n + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (!flag(argv[i], "--runs", &g_runs) && !flag(argv[i], "--pairs", &g_pairs) &&
        !flag(argv[i], "--iters", &g_iters)) {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (g_runs < 1 || g_pairs < 1 || g_iters < 1) return 2;
  return RUN_ALL_TESTS();
}
