// Multi-process conformance: two mp_peer processes talk through the emulated EFA over the
// shared-memory fabric, over UDP on loopback and over UDP between two network namespaces joined
// by a veth pair this test creates (skipped where namespaces cannot be made).
#include <gtest/gtest.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "testing/support/process_util.h"

namespace {

using xpufab::testing::free_port;
using xpufab::testing::spawn;
using xpufab::testing::tmpdir;
using xpufab::testing::wait_exit;

const char kPeer[] = "testing/multiproc/mp_peer";

std::vector<std::string> base_env(const std::string& fabric, const std::string& test) {
  return {"FI_EFA_BACKEND=emu", "FI_EFA_EMU_FABRIC=" + fabric, "FI_EFA_EMU_SHM_DIR=" + tmpdir(),
          "FI_EFA_EMU_FABRIC_KEY=mp-" + test + "-" + std::to_string(getpid()), "FI_EFA_EMU_TIMEOUT_MS=1500"};
}

// Runs a server and a client; returns their exit statuses.
std::pair<int, int> run_pair(const std::string& mode, const std::vector<std::string>& server_env,
                             const std::vector<std::string>& client_env,
                             const std::vector<std::string>& server_prefix = {},
                             const std::vector<std::string>& client_prefix = {},
                             const std::string& server_host = "127.0.0.1") {
  std::string port = std::to_string(free_port());
  std::vector<std::string> sa = server_prefix, ca = client_prefix;
  for (const std::string& s : {std::string(kPeer), std::string("server"), port, mode, server_host}) sa.push_back(s);
  for (const std::string& s : {std::string(kPeer), std::string("client"), port, mode, server_host}) ca.push_back(s);
  pid_t s = spawn(sa, server_env);
  pid_t c = spawn(ca, client_env);
  EXPECT_GT(s, 0);
  EXPECT_GT(c, 0);
  int cs = c > 0 ? wait_exit(c, 60) : -2;
  int ss = s > 0 ? wait_exit(s, 10) : -2;
  return {ss, cs};
}

// A directory of the test's own for the shm fabric's files, in place of base_env's.
std::string own_shm_dir(std::vector<std::string>* env, const std::string& test) {
  const std::string dir = tmpdir() + "/shm-" + test;
  mkdir(dir.c_str(), 0700);
  for (std::string& v : *env) {
    if (v.rfind("FI_EFA_EMU_SHM_DIR=", 0) == 0) v = "FI_EFA_EMU_SHM_DIR=" + dir;
  }
  return dir;
}

// What a directory holds, but . and ..
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// Programs that exit leave nothing in the shm directory, though the provider never destroys its
// fabric: each leaves it at exit.
TEST(MultiProc, ShmAllOpsWithDataVerified) {
  auto env = base_env("shm", "ops");
  const std::string dir = own_shm_dir(&env, "ops");
  auto r = run_pair("ops", env, env);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.second, 0);
  EXPECT_EQ(entries(dir), std::vector<std::string>());
}

TEST(MultiProc, UdpLoopbackAllOpsWithDataVerified) {
  auto se = base_env("udp", "udp"), ce = se;
  se.push_back("FI_EFA_EMU_UDP_ADDR=127.0.0.1");
  ce.push_back("FI_EFA_EMU_UDP_ADDR=127.0.0.1");
  auto r = run_pair("ops", se, ce);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.second, 0);
}

// The server kills itself after one verified exchange: the client's operations complete with
// UNRESP_REMOTE / UNREACH_REMOTE (checked by the client) and the client exits cleanly.
// The survivor, leaving at exit, also takes the killed peer's mailbox and their directory.
TEST(MultiProc, ShmKilledPeerGivesErrorCompletions) {
  auto env = base_env("shm", "kill");
  const std::string dir = own_shm_dir(&env, "kill");
  auto r = run_pair("kill", env, env);
  EXPECT_EQ(r.first, 128 + SIGKILL);
  EXPECT_EQ(r.second, 0);
  EXPECT_EQ(entries(dir), std::vector<std::string>());
}

TEST(MultiProc, UdpKilledPeerGivesErrorCompletions) {
  auto env = base_env("udp", "ukill");
  env.push_back("FI_EFA_EMU_UDP_ADDR=127.0.0.1");
  auto r = run_pair("kill", env, env);
  EXPECT_EQ(r.first, 128 + SIGKILL);
  EXPECT_EQ(r.second, 0);
}

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Two "hosts": namespaces joined by a veth pair with addresses only this test uses.
TEST(MultiProc, UdpBetweenNetworkNamespaces) {
  std::string tag = std::to_string(getpid() % 100000);
  std::string a = "xpfa" + tag, b = "xpfb" + tag;
  if (sh("ip netns add " + a) != 0) GTEST_SKIP() << "network namespaces unavailable";
  bool ok = sh("ip netns add " + b) == 0 &&
            sh("ip link add va" + tag + " netns " + a + " type veth peer name vb" + tag + " netns " + b) == 0 &&
            sh("ip -n " + a + " addr add 10.213.7.1/30 dev va" + tag) == 0 &&
            sh("ip -n " + b + " addr add 10.213.7.2/30 dev vb" + tag) == 0 &&
            sh("ip -n " + a + " link set va" + tag + " up") == 0 &&
            sh("ip -n " + b + " link set vb" + tag + " up") == 0 && sh("ip -n " + a + " link set lo up") == 0 &&
            sh("ip -n " + b + " link set lo up") == 0;
  if (ok) {
    auto se = base_env("udp", "netns"), ce = se;
    se.push_back("FI_EFA_EMU_UDP_ADDR=10.213.7.1");
    ce.push_back("FI_EFA_EMU_UDP_ADDR=10.213.7.2");
    auto r = run_pair("ops", se, ce, {"ip", "netns", "exec", a}, {"ip", "netns", "exec", b}, "10.213.7.1");
    EXPECT_EQ(r.first, 0);
    EXPECT_EQ(r.second, 0);
  }
  sh("ip netns del " + a);  // the veth pair goes with it
  sh("ip netns del " + b);
  ASSERT_TRUE(ok) << "could not set up the veth pair";
}

}  // namespace
