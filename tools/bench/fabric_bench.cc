// Side-by-side figures for DESIGN.md §8, measured in one run on one machine:
//  - two-process ping-pong through the emulated EFA (public libfabric API, efa provider,
//    FI_EFA_EMU_FABRIC=shm): 64 B send/recv latency with a receive always posted ahead, as
//    fi_pingpong keeps one (and, for comparison, with each receive posted only after the round
//    completed, where a send may meet an empty receive queue), and 1 MiB RDMA write bandwidth;
//  - Debian libfabric's own fi_pingpong, `-p shm -e rdm` and `-p tcp -e rdm`, at 64 B and 1 MiB;
//  - the same fi_pingpong, `-p efa -e rdm`, on the project's library as installed (the
//    libxpufab.so this binary carries in its runfiles, built as //tools:install builds it and
//    reached as libfabric.so.1) over the emulated EFA: the
//    target's own program on both sides. fi_pingpong times its first iterations too, where the
//    emulator's queues and mailboxes still fault in their pages; it runs N and N/10 times and
//    the steady-state latency is the slope between the two (shm is measured the same way);
//  - fi_pingpong on both as a user first runs it, with its defaults (10 round trips at each
//    size up to the smaller of the two fabrics' largest messages, timed from the first): the
//    per-size medians and the ratio of the medians of all sizes' round trips together;
//  - 16 processes all-to-all (64 B messages/s), 1,000 QPs on one device (latency vs one QP),
//    the CPU an idle device costs (getrusage over a few seconds), and the CPU the device's own
//    threads (engine, mailbox receive) take while the application drives it in the ping-pong.
// Each figure is printed with its ratio against the target. The full run alternates Debian's shm
// and the emulated EFA three times and compares each side's best run (lowest latency, highest
// bandwidth; the CPU figures are medians), printing every run's figures too: on a shared machine
// both providers have slow stretches, and a ratio of two runs would measure those. fi_pingpong's
// steady state runs seven rounds of one run each; it is compared both ways, best against best
// and by the median of the rounds' ratios.
//
//   bazel run -c opt //tools/bench:fabric_bench [-- --quick]
//   bazel run -c opt //tools/bench:fabric_bench -- --scale [--quick]
//   bazel run -c opt //tools/bench:fabric_bench -- --helpers [--quick]
// --helpers measures only the device's engine and shm receive threads (CPU and wakeups, each
// thread apart) during three 64 B ping-pongs, and the idle device's CPU.
// --scale measures only scale (issue 17 item 6): 64 B latency with 0, 1,000, 2,000 and 10,000 extra QPs
// on the sending device (ratio to one QP), the memory each QP costs (resident set growth of the
// process that opened them, over their count), and 64 processes all-to-all over the shm fabric.
//
// The binary is also its own peer: `fabric_bench --peer pingpong|alltoall|idle PORT RANK NPROC
// [EXTRA_QPS]` (started by the driver; addresses travel through tools/oob).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/support/peer.h"

#include <fstream>
#include "tools/oob/oob.h"

namespace {

using xpufab::peer::Address;
using xpufab::peer::Clock;
using xpufab::peer::Endpoint;

constexpr size_t kBig = 1u << 20;
// Buffer layout: [0, kBig) is where peers send to, [kBig, 2 kBig) what this side sends, and
// [2 kBig, 3 kBig) where peers write, apart from both as fi_pingpong keeps its receive and send
// buffers apart (a write landing where the peer sends from next would move every line it wrote
// between the cores, which no peer benchmark pays).
constexpr size_t kTarget = 0;
constexpr size_t kSource = kBig;
constexpr size_t kWriteTarget = 2 * kBig;

// ---------------------------------------------------------------- peer side

// The endpoint and every rank's address (and AV entry, except this rank's own).
struct Group {
  Endpoint& ep;
  xpufab::oob::Session& s;
  std::vector<Address> addrs;
  std::vector<fi_addr_t> peers;
};

// CPU time (ns) of this process's threads other than the calling one (the emulated device's
// engine and receive threads), from the scheduler's per-thread run time, and how many times
// they were scheduled in (wakeups); also by thread, for the two the emulator names.
struct ThreadCpu {
  uint64_t ns = 0, wakeups = 0;
};
struct HelperCpu {
  ThreadCpu all, engine, rx;
};

HelperCpu helper_cpu() {
  const long self = syscall(SYS_gettid);
  HelperCpu sum;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return sum;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atol(e->d_name) == self) continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream f(dir + "/schedstat");
    uint64_t run = 0, wait = 0, slices = 0;
    if (!(f >> run >> wait >> slices)) continue;
    std::string comm;
    std::ifstream c(dir + "/comm");
    std::getline(c, comm);
    for (ThreadCpu* t : {&sum.all, comm == "efa-engine" ? &sum.engine : comm == "shm-rx" ? &sum.rx : nullptr}) {
      if (t == nullptr) continue;
      t->ns += run;
      t->wakeups += slices;
    }
  }
  closedir(d);
  return sum;
}

// % of a core and wakeups per second of `t1 - t0` over `us` microseconds.
struct HelperRate {
  double percent = 0, wakeups_per_s = 0;
};
HelperRate helper_rate(const ThreadCpu& t0, const ThreadCpu& t1, double us) {
  HelperRate r;
  r.percent = 100.0 * static_cast<double>(t1.ns - t0.ns) / 1000.0 / us;
  r.wakeups_per_s = static_cast<double>(t1.wakeups - t0.wakeups) / us * 1e6;
  return r;
}

// Completions of a ping-pong so far. A receive may complete before this side's own send does
// (the peer answered before this side read the send's completion).
struct Rounds {
  int tx = 0, rx = 0;
};

// Reads completions until `tx` sends and `rx` receives have completed in all, posting the next
// receive (while `repost`) the moment one lands.
void complete_until(Endpoint& e, Rounds* done, int tx, int rx, int repost) {
  fi_cq_data_entry c[2];
  const auto end = Clock::now() + std::chrono::seconds(30);
  uint32_t polls = 0;
  while (done->tx < tx || done->rx < rx) {
    const ssize_t n = fi_cq_read(e.cq(), c, 2);
    if (n == -FI_EAGAIN) {
      if (++polls % xpufab::peer::kPollsPerClock == 0) PEER_CHECK(Clock::now() < end);
      continue;
    }
    PEER_CHECK(n > 0);
    for (ssize_t i = 0; i < n; ++i) {
      if (c[i].flags & FI_RECV) {
        if (++done->rx < repost) {
          PEER_CHECK(fi_recv(e.ep(), e.at(kTarget), 64, e.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
        }
      } else {
        ++done->tx;
      }
    }
  }
}

constexpr int kLatencyWarm = 20000;  // round trips, tens of milliseconds

// 64 B ping-pong as Debian's fi_pingpong (fabtests) runs it: a receive is always posted before
// the peer can send, the next one as soon as a receive completes, so that no message meets an
// empty receive queue (an RNR NAK and the sender's retry delay). One-way latency in us; the CPU
// the other threads of this process took meanwhile, in % of a core, and their wakeups per second.
double posted_pingpong(Group& g, fi_addr_t peer, int iters, int warm, HelperRate* helper,
                       HelperRate* engine, HelperRate* rx) {
  Endpoint& e = g.ep;
  const bool server = g.s.rank() == 0;
  const int rounds = iters + warm;
  PEER_CHECK(fi_recv(e.ep(), e.at(kTarget), 64, e.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  PEER_CHECK(g.s.barrier() == 0);
  Rounds done;
  Clock::time_point t0 = Clock::now();
  HelperCpu helper0;
  for (int i = 0; i < rounds; ++i) {
    if (i == warm) {
      t0 = Clock::now();
      helper0 = helper_cpu();
    }
    if (server) {
      complete_until(e, &done, i, i + 1, rounds);
      PEER_CHECK(fi_send(e.ep(), e.at(kSource), 64, e.desc(), peer, nullptr) == 0);
    } else {
      PEER_CHECK(fi_send(e.ep(), e.at(kSource), 64, e.desc(), peer, nullptr) == 0);
      complete_until(e, &done, i + 1, i + 1, rounds);
    }
  }
  if (server) complete_until(e, &done, rounds, rounds, rounds);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const HelperCpu helper1 = helper_cpu();
  *helper = helper_rate(helper0.all, helper1.all, us);
  *engine = helper_rate(helper0.engine, helper1.engine, us);
  *rx = helper_rate(helper0.rx, helper1.rx, us);
  return us / iters / 2;
}

// Rank 1 prints: one-way 64 B latency (us) with a receive posted ahead (as fi_pingpong runs)
// and with each receive posted only after the previous round completed (the send may meet an
// empty receive queue and wait out an RNR retry), and 1 MiB write bandwidth (MB/s, as
// fi_pingpong counts it: bytes moved both ways over the time).
void run_pingpong(Group& g, int iters, int witers) {
  const int other = g.s.rank() == 0 ? 1 : 0;
  HelperRate helper, engine, rx;
  // At least kLatencyWarm untimed round trips: in the first milliseconds of traffic the emulated
  // device's engine and mailbox threads check on their callers often, and on two cores each
  // check preempts a busy-polling rank; the figure is the steady state's.
  const int warm = std::max(iters / 10 + 10, kLatencyWarm);
  const double posted = posted_pingpong(g, g.peers[other], iters, warm, &helper, &engine, &rx);
  PEER_CHECK(g.s.barrier() == 0);
  const double us = xpufab::peer::send_pingpong(g.ep, g.s, g.peers[other], 64, kTarget, kSource,
                                                iters, iters / 10 + 10);
  PEER_CHECK(g.s.barrier() == 0);
  if (g.s.rank() != 0) {
    std::printf("RESULT posted_lat_us %.3f helper_cpu_percent %.3f helper_wakeups_per_s %.0f engine_cpu_percent %.3f "
                "engine_wakeups_per_s %.0f rx_cpu_percent %.3f rx_wakeups_per_s %.0f\n",
                posted, helper.percent, helper.wakeups_per_s, engine.percent, engine.wakeups_per_s, rx.percent,
                rx.wakeups_per_s);
  }
  // 1 MiB writes, one each way per round, each announced by a 64 B send.
  const double sec = xpufab::peer::write_pingpong(g.ep, g.s, g.peers[other], g.addrs[other], kBig,
                                                  kSource, kWriteTarget, witers);
  const double mbs = 2.0 * witers * kBig / sec / 1e6;
  if (g.s.rank() != 0) std::printf("RESULT latency_us %.3f bandwidth_MBps %.1f\n", us, mbs);
  std::fflush(stdout);
  PEER_CHECK(g.s.barrier() == 0);
}

// Every rank sends `per_peer` 64 B messages to every other rank, a window at a time; rank 0
// prints the aggregate rate. False after an error completion (reported with the peer it came
// from); the endpoint then closes normally, so that FI_EFA_EMU_STATS / FI_EFA_EMU_TRACE files of
// the failing rank are written.
bool run_alltoall(Group& g, int per_peer) {
  Endpoint& c = g.ep;
  const int n = g.s.size();
  const int me = g.s.rank();
  const int expect = per_peer * (n - 1);
  const int window = 64;
  uint8_t* tgt = c.at(kTarget);
  uint8_t* src = c.at(kSource);
  int posted_rx = 0;
  for (; posted_rx < std::min(expect, 1024); ++posted_rx) {
    PEER_CHECK(fi_recv(c.ep(), tgt + (posted_rx % 1024) * 64, 64, c.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  }
  PEER_CHECK(g.s.barrier() == 0);
  auto t0 = Clock::now();
  int sent = 0, tx_done = 0, rx_done = 0;
  const int total_tx = per_peer * (n - 1);
  fi_cq_data_entry e[16];
  auto end = Clock::now() + std::chrono::seconds(60);
  uint32_t polls = 0;
  while (tx_done < total_tx || rx_done < expect) {
    while (sent < total_tx && sent - tx_done < window) {
      int dst = (me + 1 + sent % (n - 1)) % n;
      // The context names the destination rank, for the report of an error completion.
      void* ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(dst) + 1);
      ssize_t rc = fi_send(c.ep(), src, 64, c.desc(), g.peers[dst], ctx);
      if (rc == -FI_EAGAIN) break;
      PEER_CHECK(rc == 0);
      ++sent;
    }
    ssize_t got = fi_cq_read(c.cq(), e, 16);
    if (got == -FI_EAGAIN) {
      if (++polls % xpufab::peer::kPollsPerClock == 0) PEER_CHECK(Clock::now() < end);
      continue;
    }
    if (got == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq(), &err, 0);
      const double at = std::chrono::duration<double>(Clock::now() - t0).count();
      const long to = (err.flags & FI_SEND) ? static_cast<long>(reinterpret_cast<uintptr_t>(err.op_context)) - 1 : -1;
      std::fprintf(stderr, "alltoall: rank %d: error completion err %d prov_errno %d, send to rank %ld, %.3f s in\n",
                   me, err.err, err.prov_errno, to, at);
      return false;
    }
    PEER_CHECK(got > 0);
    for (ssize_t i = 0; i < got; ++i) {
      if (e[i].flags & FI_RECV) {
        ++rx_done;
        if (posted_rx < expect) {
          PEER_CHECK(fi_recv(c.ep(), tgt + (posted_rx % 1024) * 64, 64, c.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
          ++posted_rx;
        }
      } else {
        ++tx_done;
      }
    }
  }
  PEER_CHECK(g.s.barrier() == 0);
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (me == 0) std::printf("RESULT messages_per_s %.0f\n", static_cast<double>(total_tx) * n / sec);
  std::fflush(stdout);
  PEER_CHECK(g.s.barrier() == 0);
  return true;
}

// An opened, enabled, unused device: the CPU its threads take over a few seconds.
void run_idle(Group& g, double seconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past any spin phase
  rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  getrusage(RUSAGE_SELF, &r1);
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  double cpu = tv(r1.ru_utime) - tv(r0.ru_utime) + tv(r1.ru_stime) - tv(r0.ru_stime);
  if (g.s.rank() == 0) std::printf("RESULT idle_core_percent %.3f\n", 100.0 * cpu / wall);
  std::fflush(stdout);
  PEER_CHECK(g.s.barrier() == 0);
}

// Resident set of this process, in KiB (0 if unknown).
long rss_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int peer_main(int argc, char** argv) {
  // --peer MODE PORT RANK NPROC [ARG]
  if (argc < 6) return 2;
  std::string mode = argv[2];
  xpufab::oob::Options o;
  o.port = static_cast<uint16_t>(std::atoi(argv[3]));
  o.server = std::atoi(argv[4]) == 0;
  o.size = std::atoi(argv[5]);
  int arg = argc > 6 ? std::atoi(argv[6]) : 0;
  o.timeout_ms = 30000;
  xpufab::oob::Session s;
  PEER_CHECK(s.open(o) == 0);
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = 3 * kBig;
  eo.cq_size = 4096;
  // Idle endpoints share the CQ: the figure is about QPs on the device, not CQs to drain.
  eo.extra_eps = mode == "pingpong" ? arg : 0;
  const long rss_before = rss_kib();
  Endpoint ep(eo);
  const long rss_after = rss_kib();
  if (mode == "pingpong") {
    std::printf("RESULT extra_qps %zu endpoint_rss_kib %ld\n", ep.extra_eps(), rss_after - rss_before);
  }
  Group g{ep, s, xpufab::peer::exchange(s, ep.address()), {}};
  g.peers.assign(g.addrs.size(), FI_ADDR_UNSPEC);
  for (size_t r = 0; r < g.addrs.size(); ++r) {
    if (static_cast<int>(r) != s.rank()) g.peers[r] = ep.insert(g.addrs[r]);
  }
  if (mode == "pingpong") {
    run_pingpong(g, std::atoi(std::getenv("BENCH_ITERS") ? std::getenv("BENCH_ITERS") : "5000"),
                 std::atoi(std::getenv("BENCH_WITERS") ? std::getenv("BENCH_WITERS") : "100"));
  } else if (mode == "alltoall") {
    if (!run_alltoall(g, arg > 0 ? arg : 1000)) return 1;
  } else if (mode == "idle") {
    run_idle(g, arg > 0 ? arg : 3);
  } else {
    return 2;
  }
  return 0;
}

// ---------------------------------------------------------------- driver side

struct Proc {
  pid_t pid = -1;
  int out_fd = -1;
};

// Starts argv with env additions, stdout to a pipe.
Proc spawn(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  int p[2];
  PEER_CHECK(pipe(p) == 0);
  pid_t pid = fork();
  PEER_CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> av;
    for (const std::string& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  close(p[1]);
  return Proc{pid, p[0]};
}

// Waits up to `timeout_s`, killing it after that; returns its stdout ("" on failure). Blocks on
// the child's stdout until the child closes it, rather than looking every few milliseconds: on a
// machine with fewer cores than busy threads, a harness that keeps waking on the idle core takes
// it from the measured processes' threads, and changes where the kernel places them.
std::string finish(Proc p, int timeout_s, bool* ok) {
  std::string out;
  char b[4096];
  const auto end = Clock::now() + std::chrono::seconds(timeout_s);
  auto timed_out = [&] {
    kill(p.pid, SIGKILL);
    waitpid(p.pid, nullptr, 0);
    *ok = false;
    close(p.out_fd);
    return out;
  };
  fcntl(p.out_fd, F_SETFL, fcntl(p.out_fd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return timed_out();
    pollfd pfd{p.out_fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;  // EINTR, or the time is up (above)
    const ssize_t n = read(p.out_fd, b, sizeof(b));
    if (n > 0) {
      out.append(b, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      break;  // the child closed its stdout: it is exiting
    }
  }
  int status = 0;
  while (waitpid(p.pid, &status, WNOHANG) != p.pid) {
    if (Clock::now() > end) return timed_out();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  close(p.out_fd);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) *ok = false;
  return out;
}

// The value after `key` in `text`, or -1.
double field(const std::string& text, const std::string& key) {
  size_t at = text.find(key + " ");
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + at + key.size() + 1);
}

std::string self_exe() {
  char b[4096];
  ssize_t n = readlink("/proc/self/exe", b, sizeof(b) - 1);
  PEER_CHECK(n > 0);
  b[n] = 0;
  return b;
}

int g_port = 0;
int next_port() { return g_port++; }
// A run's first control port: from 20,000 up, below Linux's ephemeral ports (32,768 and up by
// default) with room for the few hundred a run takes. A port in that range may be an earlier
// client connection's, lingering in TIME_WAIT, and a server's bind to it fails (EADDRINUSE).
int first_port() { return 20000 + getpid() % 12000; }

std::vector<std::string> emu_env(const std::string& key) {
  return {"FI_EFA_BACKEND=emu", "FI_EFA_EMU_FABRIC=shm", "FI_EFA_EMU_FABRIC_KEY=" + key,
          "FI_PROVIDER=efa"};
}

// Runs NPROC peers of MODE; returns rank `report`'s stdout.
std::string run_peers(const std::string& mode, int nproc, int arg, int report, int timeout_s,
                      const std::vector<std::string>& extra_env, bool* ok) {
  int port = next_port();
  std::vector<std::string> env = emu_env("bench" + std::to_string(getpid()) + "-" + std::to_string(port));
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<Proc> ps;
  for (int r = 0; r < nproc; ++r) {
    ps.push_back(spawn({self_exe(), "--peer", mode, std::to_string(port), std::to_string(r),
                        std::to_string(nproc), std::to_string(arg)},
                       env));
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string out;
  for (int r = 0; r < nproc; ++r) {
    std::string o = finish(ps[r], timeout_s, ok);
    if (r == report) out = o;
  }
  return out;
}

struct PpResult {
  double lat_us = -1, bw_mbs = -1;
};

// The client's table of a Debian fi_pingpong server and client pair with `args` (after `-p prov
// -e rdm`), on Debian's libfabric, or with `env` on another (the project's library:
// LD_LIBRARY_PATH and the emulator's settings); empty when a side failed.
std::string run_fi_pingpong(const std::string& prov, const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  std::string port = std::to_string(next_port());
  std::vector<std::string> common = {"fi_pingpong", "-p", prov, "-e", "rdm"};
  common.insert(common.end(), args.begin(), args.end());
  std::vector<std::string> sv = common, cl = common;
  sv.insert(sv.end(), {"-B", port});
  cl.insert(cl.end(), {"-P", port, "127.0.0.1"});
  std::vector<std::string> e = env;
  if (!env.empty()) e.push_back("FI_EFA_EMU_FABRIC_KEY=bench-fi-pingpong-" + std::to_string(getpid()) + "-" + port);
  Proc s = spawn(sv, e);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Proc c = spawn(cl, e);
  bool ok = true;
  std::string out = finish(c, 60, &ok);
  finish(s, 10, &ok);
  return ok ? out : std::string();
}

// The rows of a fi_pingpong table (bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec),
// in its order: the size's label ("64", "1k", ...), MB/sec and usec/xfer (one-way).
struct PpRow {
  std::string size;
  double mbs, us;
};
std::vector<PpRow> pingpong_rows(const std::string& table) {
  std::vector<PpRow> rows;
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    char size[32], b1[32], b2[32], b3[32], b4[32];
    double mbs, us;
    if (std::sscanf(line.c_str(), "%31s %31s %31s %31s %31s %lf %lf", size, b1, b2, b3, b4, &mbs, &us) == 7 &&
        std::isdigit(static_cast<unsigned char>(size[0]))) {
      rows.push_back({size, mbs, us});
    }
  }
  return rows;
}

// fi_pingpong at one size and count: usec/xfer and MB/sec from its table.
PpResult fi_pingpong(const std::string& prov, size_t size, int iters,
                     const std::vector<std::string>& env = {}) {
  PpResult r;
  const std::vector<PpRow> rows =
      pingpong_rows(run_fi_pingpong(prov, {"-S", std::to_string(size), "-I", std::to_string(iters)}, env));
  if (!rows.empty()) {
    r.lat_us = rows.back().us;
    r.bw_mbs = rows.back().mbs;
  }
  return r;
}

// fi_pingpong as a user first runs it, with neither a size nor a count: 10 round trips at each
// size up to the fabric's largest message, each timed from its first. One-way usec/xfer by the
// size's label; empty when a run failed.
std::map<std::string, double> fi_pingpong_default(const std::string& prov, const std::vector<std::string>& env = {}) {
  std::map<std::string, double> by_size;
  for (const PpRow& row : pingpong_rows(run_fi_pingpong(prov, {}, env))) by_size[row.size] = row.us;
  return by_size;
}

// One-way 64 B latency of fi_pingpong in its steady state: runs of `iters` and `iters` / 10
// round trips, and the slope between their total times (usec/xfer is a one-way figure, over
// twice the iterations). -1 when a run failed.
double fi_pingpong_steady(const std::string& prov, int iters, const std::vector<std::string>& env = {}) {
  const int few = iters / 10;
  const double many_us = fi_pingpong(prov, 64, iters, env).lat_us;
  const double few_us = fi_pingpong(prov, 64, few, env).lat_us;
  if (many_us < 0 || few_us < 0) return -1;
  return (many_us * 2.0 * iters - few_us * 2.0 * few) / (2.0 * (iters - few));
}

// The environment that runs Debian's fi_pingpong on the project's library over the emulated EFA:
// a directory where libfabric.so.1 is the runfiles' libxpufab.so. Empty when it is not there.
std::vector<std::string> xpufab_env(const std::string& dir) {
  std::string lib = self_exe() + ".runfiles/xpufab/api/lib/libxpufab.so";
  if (access(lib.c_str(), R_OK) != 0) lib = "api/lib/libxpufab.so";  // bazel run: the runfiles
  char real[4096];
  if (realpath(lib.c_str(), real) == nullptr) return {};
  const std::string link = dir + "/libfabric.so.1";
  unlink(link.c_str());
  if (symlink(real, link.c_str()) != 0) return {};
  return {"LD_LIBRARY_PATH=" + dir, "FI_EFA_BACKEND=emu", "FI_EFA_EMU_FABRIC=shm"};
}

void row(const char* what, double value, const char* unit) {
  if (value < 0) {
    std::printf("%-46s %12s %s\n", what, "failed", unit);
  } else {
    std::printf("%-46s %12.3f %s\n", what, value, unit);
  }
}

// A ratio against its target; `le`: the target is an upper bound.
void ratio_row(const char* what, double a, double b, double target, bool le) {
  if (a <= 0 || b <= 0) {
    std::printf("%-46s %12s\n", what, "n/a");
    return;
  }
  double r = a / b;
  bool met = le ? r <= target : r >= target;
  std::printf("%-46s %12.3f x    target %s %.2f  %s\n", what, r, le ? "<=" : ">=", target,
              met ? "MET" : "MISSED");
}

// Of what a figure read in each run, sorted: the median, the lowest, the highest (-1, failed,
// where any run failed).
std::vector<double> sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}
double median(const std::vector<double>& v) {
  const auto s = sorted(v);
  return s.empty() || s.front() < 0 ? -1 : s[s.size() / 2];
}
double lowest(const std::vector<double>& v) {
  const auto s = sorted(v);
  return s.empty() || s.front() < 0 ? -1 : s.front();
}
double highest(const std::vector<double>& v) {
  const auto s = sorted(v);
  return s.empty() || s.front() < 0 ? -1 : s.back();
}

std::string joined(const std::vector<double>& v) {
  std::string s;
  char b[32];
  for (double x : v) {
    std::snprintf(b, sizeof(b), "%s%.3f", s.empty() ? "" : " ", x);
    s += b;
  }
  return s;
}

// Ping-pong round trips: enough for tens of milliseconds, so that the helper threads' first
// parks (200 us, doubling to 4 ms: a fixed handful of wakeups) do not make their rates.
int pingpong_iters(bool quick) { return quick ? 10000 : 40000; }

int driver_main(bool quick) {
  g_port = first_port();
  const int iters = pingpong_iters(quick);
  const int witers = quick ? 50 : 200;
  // The shm reference and the emulated EFA take turns; each side's best run is compared.
  const int runs = quick ? 1 : 3;
  bool ok = true;
  std::printf("fabric_bench: %s run; one-way latency = round trip / 2; bandwidth = bytes both ways / time; "
              "shm and the emulated EFA alternate, best of %d runs each\n",
              quick ? "quick" : "full", runs);
  std::fflush(stdout);

  PpResult tcp64 = fi_pingpong("tcp", 64, iters / 2);
  PpResult tcp1m = fi_pingpong("tcp", kBig, witers / 2);
  std::vector<double> shm_lats, shm_bws;
  std::vector<std::string> emu_outs;  // each run's RESULT lines
  std::vector<std::string> pp_env = {"BENCH_ITERS=" + std::to_string(iters),
                                     "BENCH_WITERS=" + std::to_string(witers)};
  char libdir[] = "/tmp/fabric_bench.XXXXXX";
  const bool have_dir = mkdtemp(libdir) != nullptr;
  const std::vector<std::string> ours = have_dir ? xpufab_env(libdir) : std::vector<std::string>{};
  // The same program on both: fi_pingpong's steady state, more round trips than the rest.
  const int pp_iters = quick ? 20000 : 50000;
  for (int r = 0; r < runs; ++r) {
    shm_lats.push_back(fi_pingpong("shm", 64, iters).lat_us);
    shm_bws.push_back(fi_pingpong("shm", kBig, witers).bw_mbs);
    emu_outs.push_back(run_peers("pingpong", 2, 0, 1, 120, pp_env, &ok));
  }
  // Rounds of one shm run and one efa run, back to back: each round's ratio is taken in one
  // stretch of the machine, and their median does not hang on a single lucky run of either.
  const int steady_rounds = quick ? 1 : 7;
  std::vector<double> shm_steady, ours_steady, steady_ratios;
  for (int r = 0; r < steady_rounds; ++r) {
    shm_steady.push_back(fi_pingpong_steady("shm", pp_iters));
    ours_steady.push_back(ours.empty() ? -1 : fi_pingpong_steady("efa", pp_iters, ours));
    const bool both = shm_steady.back() > 0 && ours_steady.back() > 0;
    steady_ratios.push_back(both ? ours_steady.back() / shm_steady.back() : -1);
  }
  // fi_pingpong with its defaults: what its first round trips cost, at the sizes both run.
  // Twelve runs: a size with a stall of milliseconds (more than kStalledUs a message, over its
  // 20) is rare enough that fewer would not tell the two providers' rates apart.
  const int first_runs = quick ? 1 : 12;
  constexpr double kStalledUs = 20;
  std::map<std::string, std::vector<double>> shm_first, ours_first;
  std::vector<double> shm_first_total, ours_first_total;
  int sizes_run = 0, shm_stalled = 0, ours_stalled = 0;
  for (int r = 0; r < first_runs && !ours.empty(); ++r) {
    const std::map<std::string, double> a = fi_pingpong_default("shm"), b = fi_pingpong_default("efa", ours);
    double ta = 0, tb = 0;
    for (const auto& kv : b) {
      auto it = a.find(kv.first);
      if (it == a.end()) continue;
      shm_first[kv.first].push_back(it->second);
      ours_first[kv.first].push_back(kv.second);
      ++sizes_run;
      shm_stalled += it->second > kStalledUs;
      ours_stalled += kv.second > kStalledUs;
      ta += it->second * 20;  // usec/xfer is one-way: 10 round trips are 20 of it
      tb += kv.second * 20;
    }
    if (tb > 0) {
      shm_first_total.push_back(ta);
      ours_first_total.push_back(tb);
    }
  }
  if (have_dir) {
    unlink((std::string(libdir) + "/libfabric.so.1").c_str());
    rmdir(libdir);
  }
  // What one RESULT field read in each run.
  auto per_run = [&emu_outs](const char* name) {
    std::vector<double> v;
    for (const std::string& out : emu_outs) v.push_back(field(out, name));
    return v;
  };
  PpResult shm64, shm1m;
  shm64.lat_us = lowest(shm_lats);
  shm1m.bw_mbs = highest(shm_bws);
  const std::vector<double> emu_lats = per_run("posted_lat_us"), emu_bws = per_run("bandwidth_MBps");
  const double emu_lat = lowest(emu_lats), emu_bw = highest(emu_bws), emu_lat_late = lowest(per_run("latency_us"));
  const double helper_pct = median(per_run("helper_cpu_percent"));
  const double helper_wakeups = median(per_run("helper_wakeups_per_s"));
  bool ok1000 = true;
  std::vector<std::string> env1000 = {"BENCH_ITERS=" + std::to_string(iters / 2), "BENCH_WITERS=1"};
  std::string out1000 = run_peers("pingpong", 2, 1000, 1, 120, env1000, &ok1000);
  double lat1000 = field(out1000, "posted_lat_us");
  bool ok_a2a = true;
  std::string a2a = run_peers("alltoall", 16, quick ? 200 : 1000, 0, 120, {}, &ok_a2a);
  double msgs = field(a2a, "messages_per_s");
  bool ok_idle = true;
  std::string idle = run_peers("idle", 1, quick ? 2 : 3, 0, 60, {}, &ok_idle);
  double idle_pct = field(idle, "idle_core_percent");

  std::printf("\n");
  row("libfabric shm fi_pingpong 64 B latency", shm64.lat_us, "us");
  row("libfabric tcp fi_pingpong 64 B latency", tcp64.lat_us, "us");
  row("libfabric shm fi_pingpong 1 MiB bandwidth", shm1m.bw_mbs, "MB/s");
  row("libfabric tcp fi_pingpong 1 MiB bandwidth", tcp1m.bw_mbs, "MB/s");
  row("fi_pingpong -p shm, steady state, 64 B", lowest(shm_steady), "us");
  row("fi_pingpong -p efa on xpufab, steady state", lowest(ours_steady), "us");
  row("emulated EFA 64 B send latency", emu_lat, "us");
  row("  the same, receive posted after the round", emu_lat_late, "us");
  row("emulated EFA 1 MiB RDMA write bandwidth", emu_bw, "MB/s");
  row("emulated EFA 64 B latency, 1,000 extra QPs", lat1000, "us");
  row("16 processes all-to-all, 64 B", msgs, "msg/s");
  row("idle device CPU", idle_pct, "% of a core");
  row("engine + receive threads during the ping-pong", helper_pct, "% of a core");
  row("  their wakeups", helper_wakeups, "per s");
  row("  engine thread", median(per_run("engine_cpu_percent")), "% of a core");
  row("  engine thread wakeups", median(per_run("engine_wakeups_per_s")), "per s");
  row("  shm receive thread", median(per_run("rx_cpu_percent")), "% of a core");
  row("  shm receive thread wakeups", median(per_run("rx_wakeups_per_s")), "per s");
  if (runs > 1) {
    std::printf("\nper run: shm 64 B latency %s us; emulated %s us\n", joined(shm_lats).c_str(),
                joined(emu_lats).c_str());
    std::printf("per run: shm 1 MiB bandwidth %s MB/s; emulated %s MB/s\n", joined(shm_bws).c_str(),
                joined(emu_bws).c_str());
  }
  if (steady_rounds > 1) {
    std::printf("per round: fi_pingpong steady state, shm %s us; efa on xpufab %s us; ratio %s\n",
                joined(shm_steady).c_str(), joined(ours_steady).c_str(), joined(steady_ratios).c_str());
  }
  if (!ours_first_total.empty()) {
    std::printf("\nfi_pingpong with its defaults (10 round trips a size, timed from the first), median of %d runs:\n",
                first_runs);
    std::printf("%-10s %10s %10s\n", "size", "shm us", "efa us");
    // By size, smallest first (the labels are 64, 256, 1k, 4k, ...).
    std::vector<std::pair<double, std::string>> order;
    for (const auto& kv : ours_first) {
      const char unit = kv.first.back();
      order.push_back({std::atof(kv.first.c_str()) * (unit == 'k' ? 1024.0 : unit == 'm' ? 1048576.0 : 1.0), kv.first});
    }
    std::sort(order.begin(), order.end());
    for (const auto& o : order) {
      std::printf("%-10s %10.2f %10.2f\n", o.second.c_str(), median(shm_first[o.second]), median(ours_first[o.second]));
    }
    std::printf("per run: all sizes' round trips, shm %s us; efa on xpufab %s us\n", joined(shm_first_total).c_str(),
                joined(ours_first_total).c_str());
    std::printf("sizes with a stall (more than %.0f us a message): shm %d of %d, efa on xpufab %d of %d\n", kStalledUs,
                shm_stalled, sizes_run, ours_stalled, sizes_run);
  }
  std::printf("\n");
  ratio_row("fi_pingpong efa / shm, 64 B, steady state", lowest(ours_steady), lowest(shm_steady), 1.5, true);
  ratio_row("  the same, median of the rounds' ratios", median(steady_ratios), 1.0, 1.5, true);
  ratio_row("fi_pingpong defaults efa / shm, all sizes", ours_first_total.empty() ? -1 : median(ours_first_total),
            shm_first_total.empty() ? -1 : median(shm_first_total), 1.5, true);
  ratio_row("emu / shm latency, 64 B", emu_lat, shm64.lat_us, 1.5, true);
  ratio_row("emu / tcp latency, 64 B", emu_lat, tcp64.lat_us, 0.3, true);
  ratio_row("emu / shm bandwidth, 1 MiB", emu_bw, shm1m.bw_mbs, 0.8, false);
  ratio_row("1,000 QPs / 1 QP latency", lat1000, emu_lat, 2.0, true);
  ratio_row("idle device CPU / 1% of a core", idle_pct, 1.0, 1.0, true);
  ratio_row("ping-pong helper threads / 1% of a core", helper_pct, 1.0, 1.0, true);
  if (!ok || !ok1000 || !ok_a2a || !ok_idle) {
    std::printf("\nsome runs failed (see stderr)\n");
    return 1;
  }
  return 0;
}

// Only the device's own threads: the ping-pong `runs` times (their CPU and wakeups while the
// callers drive, and the latency beside, so that a cut in wakeups that costs latency shows),
// then the idle device.
int helpers_main(bool quick) {
  g_port = first_port();
  const int iters = pingpong_iters(quick);
  const int runs = 3;
  std::printf("fabric_bench --helpers: %s run; 64 B posted ping-pong over shm, %d iterations, %d runs\n",
              quick ? "quick" : "full", iters, runs);
  std::printf("%-5s %10s %10s %12s %10s %12s %10s %12s\n", "run", "lat us", "helpers %", "wakeups/s",
              "engine %", "wakeups/s", "shm-rx %", "wakeups/s");
  bool all_ok = true;
  const std::vector<std::string> env = {"BENCH_ITERS=" + std::to_string(iters), "BENCH_WITERS=1"};
  for (int r = 0; r < runs; ++r) {
    bool ok = true;
    std::string out = run_peers("pingpong", 2, 0, 1, 120, env, &ok);
    all_ok = all_ok && ok;
    std::printf("%-5d %10.3f %10.3f %12.0f %10.3f %12.0f %10.3f %12.0f\n", r, field(out, "posted_lat_us"),
                field(out, "helper_cpu_percent"), field(out, "helper_wakeups_per_s"), field(out, "engine_cpu_percent"),
                field(out, "engine_wakeups_per_s"), field(out, "rx_cpu_percent"), field(out, "rx_wakeups_per_s"));
    std::fflush(stdout);
  }
  bool ok_idle = true;
  std::string idle = run_peers("idle", 1, quick ? 2 : 3, 0, 60, {}, &ok_idle);
  row("idle device CPU", field(idle, "idle_core_percent"), "% of a core");
  return all_ok && ok_idle ? 0 : 1;
}

// 64 B latency and memory with many QPs per device, and many processes on one host.
int scale_main(bool quick) {
  g_port = first_port();
  const int iters = quick ? 1000 : 4000;
  std::printf("fabric_bench --scale: %s run; two processes over the shm fabric, each device with N extra "
              "idle QPs (sharing the CQ); one-way 64 B latency = round trip / 2\n",
              quick ? "quick" : "full");
  std::fflush(stdout);
  // A device numbers up to FI_EFA_EMU_MAX_QP QPs (default 2,048): room for the largest point.
  std::vector<std::string> env = {"BENCH_ITERS=" + std::to_string(iters), "BENCH_WITERS=1",
                                  "FI_EFA_EMU_MAX_QP=10240"};
  bool all_ok = true;
  struct Point {
    int asked;
    double lat_us, qps, rss_kib;
    bool ok;
  };
  std::vector<Point> pts;
  // BENCH_SCALE_MAX caps the points, for a quick look at the small ones.
  const char* cap_env = std::getenv("BENCH_SCALE_MAX");
  const int cap = cap_env != nullptr ? std::atoi(cap_env) : 10000;
  for (int n : {0, 1000, 2000, 10000}) {
    if (n > cap) continue;
    bool ok = true;
    std::string out = run_peers("pingpong", 2, n, 1, 300, env, &ok);
    pts.push_back({n, field(out, "latency_us"), field(out, "extra_qps"), field(out, "endpoint_rss_kib"), ok});
    all_ok = all_ok && ok;
  }
  const int nproc = 64;
  bool ok_a2a = true;
  std::string a2a = run_peers("alltoall", nproc, quick ? 20 : 100, 0, 300, {}, &ok_a2a);
  const double msgs = field(a2a, "messages_per_s");
  all_ok = all_ok && ok_a2a;

  std::printf("\n%-12s %10s %14s %16s %16s\n", "extra QPs", "opened", "64 B lat us", "vs 1 QP", "KiB per QP");
  const Point& base = pts[0];
  for (const Point& p : pts) {
    std::printf("%-12d %10.0f ", p.asked, p.qps < 0 ? 0 : p.qps);
    if (!p.ok || p.lat_us <= 0) {
      std::printf("%14s  (a process failed: see its message above; the emulated device has max_qp QPs)\n",
                  "failed");
      continue;
    }
    std::printf("%14.3f ", p.lat_us);
    if (base.lat_us > 0) {
      const double r = p.lat_us / base.lat_us;
      std::printf("%10.2f x %-4s", r, p.asked == 0 ? "" : r <= 2.0 ? "MET" : "MISS");
    } else {
      std::printf("%16s", "n/a");
    }
    if (p.qps > 0 && base.rss_kib >= 0) {
      std::printf(" %16.1f", (p.rss_kib - base.rss_kib) / p.qps);
    } else {
      std::printf(" %16s", "-");
    }
    std::printf("\n");
    if (p.asked > 0 && p.qps >= 0 && p.qps < p.asked)
      std::printf("  only %.0f of %d QPs could be opened on the device\n", p.qps, p.asked);
  }
  std::printf("\n%d processes all-to-all over shm, 64 B: ", nproc);
  if (ok_a2a && msgs > 0) {
    std::printf("%.0f msg/s\n", msgs);
  } else {
    std::printf("failed\n");
  }
  std::printf("(latency target: within 2x of one QP; memory is the growth of the resident set while the "
              "endpoint and its extra QPs were opened)\n");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--peer") == 0) return peer_main(argc, argv);
  bool quick = false, scale = false, helpers = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--scale") == 0) {
      scale = true;
    } else if (std::strcmp(argv[i], "--helpers") == 0) {
      helpers = true;
    } else {
      std::fprintf(stderr, "usage: %s [--scale | --helpers] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (helpers) return helpers_main(quick);
  return scale ? scale_main(quick) : driver_main(quick);
}
