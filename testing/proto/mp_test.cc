// The protocol core between processes of the emulated EFA: active messages with a receiver that
// starts late, tagged matching of unexpected messages with ignore masks and 4 MiB messages, and
// atomics from three processes on one word with a CSWAP race, over the shm fabric (the default)
// and UDP, clean and under packet loss with reordering, on the newest generation and on gen1
// (no RDMA read: rendezvous pushes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "testing/support/process_util.h"

namespace {

using xpufab::testing::free_port;
using xpufab::testing::spawn;
using xpufab::testing::tmpdir;
using xpufab::testing::wait_exit;

const char kPeer[] = "testing/proto/proto_peer";

std::vector<std::string> env_for(const std::string& fabric, const std::string& tag, const std::string& extra) {
  // A generous unresponsive-peer timeout: on a loaded 2-core machine a 4 MiB RDMA read over UDP
  // can take longer than the device's own timeout allows.
  std::vector<std::string> env = {"FI_EFA_EMU_SHM_DIR=" + tmpdir(),
                                  "FI_EFA_EMU_FABRIC_KEY=proto-" + tag + "-" + std::to_string(getpid()),
                                  "FI_EFA_EMU_TIMEOUT_MS=60000"};
  if (fabric == "udp") {
    env.push_back("FI_EFA_EMU_FABRIC=udp");
    env.push_back("FI_EFA_EMU_UDP_ADDR=127.0.0.1");
  }
  if (!extra.empty()) env.push_back(extra);
  return env;
}

// Exit statuses of the server and then each client.
std::vector<int> run(int nprocs, const std::vector<std::string>& args, const std::vector<std::string>& env) {
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < nprocs; ++r) {
    std::vector<std::string> a = {kPeer, r == 0 ? "server" : "client", port, std::to_string(nprocs)};
    a.insert(a.end(), args.begin(), args.end());
    pids.push_back(spawn(a, env));
    EXPECT_GT(pids.back(), 0);
  }
  std::vector<int> st;
  for (pid_t p : pids) st.push_back(p > 0 ? wait_exit(p, 90) : -2);
  return st;
}

void expect_all_zero(const std::vector<int>& st, const std::string& what) {
  for (size_t i = 0; i < st.size(); ++i) EXPECT_EQ(st[i], 0) << what << " process " << i;
}

const char kFaults[] = "FI_EFA_EMU_FAULTS=seed=1;drop=0.1;reorder=0.2";

TEST(ProtoMultiProc, ActiveMessagesWithALateReceiver) {
  expect_all_zero(run(2, {"am"}, env_for("shm", "am", "")), "am shm");
  expect_all_zero(run(2, {"am"}, env_for("udp", "amu", "")), "am udp");
  expect_all_zero(run(2, {"am"}, env_for("shm", "amf", kFaults)), "am shm faults");
}

TEST(ProtoMultiProc, TaggedUnexpectedMasksAndFourMebibytes) {
  expect_all_zero(run(2, {"tag"}, env_for("shm", "tag", "")), "tag shm");
  expect_all_zero(run(2, {"tag"}, env_for("udp", "tagu", "")), "tag udp");
  expect_all_zero(run(2, {"tag"}, env_for("shm", "tagg1", "FI_EFA_EMU_PROFILE=gen1")), "tag gen1");
  expect_all_zero(run(2, {"tag"}, env_for("shm", "tagf", kFaults)), "tag shm faults");
}

TEST(ProtoMultiProc, ThreeProcessesFetchAddOneWordAndRaceACswap) {
  expect_all_zero(run(4, {"atomic", "300"}, env_for("shm", "amo", "")), "atomic shm");
  expect_all_zero(run(4, {"atomic", "200"}, env_for("udp", "amou", "")), "atomic udp");
  expect_all_zero(run(4, {"atomic", "200"}, env_for("shm", "amof", kFaults)), "atomic shm faults");
}

}  // namespace
