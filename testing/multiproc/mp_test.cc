// Multi-process conformance: two mp_peer processes talk through the emulated EFA over the
// shared-memory fabric, over UDP on loopback and over UDP between two network namespaces joined
// by a veth pair this test creates (skipped where namespaces cannot be made).
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

extern char** environ;

namespace {

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t sl = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sl);
  close(fd);
  return ntohs(sa.sin_port);
}

std::string tmpdir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> e;
  for (char** p = environ; *p; ++p) e.push_back(*p);
  for (const auto& s : env) e.push_back(s);
  std::vector<char*> a, ev;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (auto& s : e) ev.push_back(const_cast<char*>(s.c_str()));
  ev.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), ev.data()) != 0) return -1;
  return pid;
}

// Exit status, or -1 after killing a process that outlived the limit.
int wait_exit(pid_t pid, int seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

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

TEST(MultiProc, ShmAllOpsWithDataVerified) {
  auto env = base_env("shm", "ops");
  auto r = run_pair("ops", env, env);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.second, 0);
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
TEST(MultiProc, ShmKilledPeerGivesErrorCompletions) {
  auto env = base_env("shm", "kill");
  auto r = run_pair("kill", env, env);
  EXPECT_EQ(r.first, 128 + SIGKILL);
  EXPECT_EQ(r.second, 0);
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
