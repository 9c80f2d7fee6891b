// Side-by-side figures for DESIGN.md §8, measured in one run on one machine:
//  - two-process ping-pong through the emulated EFA (public libfabric API, efa provider,
//    FI_EFA_EMU_FABRIC=shm): 64 B send/recv latency and 1 MiB RDMA write bandwidth;
//  - Debian libfabric's own fi_pingpong, `-p shm -e rdm` and `-p tcp -e rdm`, at 64 B and 1 MiB;
//  - 16 processes all-to-all (64 B messages/s), 1,000 QPs on one device (latency vs one QP),
//    and the CPU an idle device costs (getrusage over a few seconds).
// Each figure is printed with its ratio against the target.
//
//   bazel run -c opt //tools/bench:fabric_bench [-- --quick]
//
// The binary is also its own peer: `fabric_bench --peer pingpong|alltoall|idle PORT RANK NPROC
// [EXTRA_QPS]` (started by the driver; addresses travel through tools/oob).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tools/oob/oob.h"

namespace {

constexpr size_t kBig = 1u << 20;
using Clock = std::chrono::steady_clock;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "fabric_bench %d: %s:%d: check failed: %s\n", getpid(),   \
                   __FILE__, __LINE__, #cond);                                        \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// ---------------------------------------------------------------- peer side

struct Blob {
  uint64_t key, addr;
  size_t name_len;
  char name[64];
};

struct Ctx {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(2 * kBig);  // [0, kBig) target, rest source
  std::vector<fi_addr_t> peers;  // by rank
  std::vector<Blob> blobs;       // by rank
  // Idle endpoints, each with its own QP on the same device.
  std::vector<fid_ep*> extra;
};

void ok_cq(Ctx& c, fi_cq_data_entry* e) {
  auto end = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    ssize_t n = fi_cq_read(c.cq, e, 1);
    if (n == 1) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq, &err, 0);
      std::fprintf(stderr, "error completion: err %d prov_errno %d\n", err.err, err.prov_errno);
      std::exit(1);
    }
    CHECK(n == -FI_EAGAIN);
    CHECK(Clock::now() < end);
  }
}

void setup(Ctx& c, xpufab::oob::Session& s, int extra_qps) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup("efa");
  CHECK(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &c.info) == 0);
  fi_freeinfo(hints);
  CHECK(fi_fabric(c.info->fabric_attr, &c.fabric, nullptr) == 0);
  CHECK(fi_domain(c.fabric, c.info, &c.domain, nullptr) == 0);
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  CHECK(fi_av_open(c.domain, &aa, &c.av, nullptr) == 0);
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_DATA;
  ca.size = 4096;
  CHECK(fi_cq_open(c.domain, &ca, &c.cq, nullptr) == 0);
  CHECK(fi_endpoint(c.domain, c.info, &c.ep, nullptr) == 0);
  CHECK(fi_ep_bind(c.ep, &c.av->fid, 0) == 0);
  CHECK(fi_ep_bind(c.ep, &c.cq->fid, FI_TRANSMIT | FI_RECV) == 0);
  CHECK(fi_enable(c.ep) == 0);
  // Idle endpoints share the CQ: the figure is about QPs on the device, not CQs to drain.
  for (int i = 0; i < extra_qps; ++i) {
    fid_ep* ep = nullptr;
    if (fi_endpoint(c.domain, c.info, &ep, nullptr) != 0) break;
    c.extra.push_back(ep);
    CHECK(fi_ep_bind(ep, &c.av->fid, 0) == 0);
    CHECK(fi_ep_bind(ep, &c.cq->fid, FI_TRANSMIT | FI_RECV) == 0);
    CHECK(fi_enable(ep) == 0);
  }
  if (static_cast<int>(c.extra.size()) != extra_qps) {
    std::fprintf(stderr, "fabric_bench: only %zu of %d extra endpoints\n", c.extra.size(), extra_qps);
  }
  CHECK(fi_mr_reg(c.domain, c.buf.data(), c.buf.size(),
                  FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &c.mr,
                  nullptr) == 0);
  Blob mine{};
  mine.key = fi_mr_key(c.mr);
  mine.addr = reinterpret_cast<uint64_t>(c.buf.data());
  mine.name_len = sizeof(mine.name);
  CHECK(fi_getname(&c.ep->fid, mine.name, &mine.name_len) == 0);
  std::vector<std::string> all;
  CHECK(s.allgather(std::string(reinterpret_cast<char*>(&mine), sizeof(mine)), &all) == 0);
  c.peers.assign(all.size(), FI_ADDR_UNSPEC);
  c.blobs.resize(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    CHECK(all[r].size() == sizeof(Blob));
    std::memcpy(&c.blobs[r], all[r].data(), sizeof(Blob));
    if (static_cast<int>(r) == s.rank()) continue;
    CHECK(fi_av_insert(c.av, c.blobs[r].name, 1, &c.peers[r], 0, nullptr) == 1);
  }
}

void teardown(Ctx& c) {
  for (fid_ep* ep : c.extra) fi_close(&ep->fid);
  fi_close(&c.ep->fid);
  fi_close(&c.mr->fid);
  fi_close(&c.cq->fid);
  fi_close(&c.av->fid);
  fi_close(&c.domain->fid);
  fi_close(&c.fabric->fid);
  fi_freeinfo(c.info);
}

void* desc(Ctx& c) { return fi_mr_desc(c.mr); }

// Rank 1 prints: one-way 64 B latency (us) and 1 MiB write bandwidth (MB/s, as fi_pingpong
// counts it: bytes moved both ways over the time).
void run_pingpong(Ctx& c, xpufab::oob::Session& s, int iters, int witers) {
  bool server = s.rank() == 0;
  fi_addr_t peer = c.peers[server ? 1 : 0];
  const Blob& pb = c.blobs[server ? 1 : 0];
  uint8_t* tgt = c.buf.data();
  uint8_t* src = c.buf.data() + kBig;
  fi_cq_data_entry e{};
  const int warm = iters / 10 + 10;
  Clock::time_point t0;
  for (int i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    CHECK(fi_recv(c.ep, tgt, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
    if (i == 0) CHECK(s.barrier() == 0);
    if (server) {
      ok_cq(c, &e);
      CHECK(fi_send(c.ep, src, 64, desc(c), peer, nullptr) == 0);
      ok_cq(c, &e);
    } else {
      CHECK(fi_send(c.ep, src, 64, desc(c), peer, nullptr) == 0);
      ok_cq(c, &e);
      ok_cq(c, &e);
    }
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters / 2;
  CHECK(s.barrier() == 0);
  // 1 MiB writes, one each way per round, each announced by a 64 B send.
  t0 = Clock::now();
  for (int i = 0; i < witers; ++i) {
    CHECK(fi_recv(c.ep, tgt, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
    if (i == 0) CHECK(s.barrier() == 0);
    if (server) ok_cq(c, &e);
    CHECK(fi_write(c.ep, src, kBig, desc(c), peer, pb.addr + kBig, pb.key, nullptr) == 0);
    ok_cq(c, &e);
    CHECK(fi_send(c.ep, src, 64, desc(c), peer, nullptr) == 0);
    ok_cq(c, &e);
    if (!server) ok_cq(c, &e);
  }
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  double mbs = 2.0 * witers * kBig / sec / 1e6;
  if (!server) std::printf("RESULT latency_us %.3f bandwidth_MBps %.1f\n", us, mbs);
  std::fflush(stdout);
  CHECK(s.barrier() == 0);
}

// Every rank sends `per_peer` 64 B messages to every other rank, a window at a time; rank 0
// prints the aggregate rate.
void run_alltoall(Ctx& c, xpufab::oob::Session& s, int per_peer) {
  const int n = s.size();
  const int me = s.rank();
  const int expect = per_peer * (n - 1);
  const int window = 64;
  uint8_t* tgt = c.buf.data();
  uint8_t* src = c.buf.data() + kBig;
  int posted_rx = 0;
  for (; posted_rx < std::min(expect, 1024); ++posted_rx) {
    CHECK(fi_recv(c.ep, tgt + (posted_rx % 1024) * 64, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
  }
  CHECK(s.barrier() == 0);
  auto t0 = Clock::now();
  int sent = 0, tx_done = 0, rx_done = 0;
  const int total_tx = per_peer * (n - 1);
  fi_cq_data_entry e[16];
  auto end = Clock::now() + std::chrono::seconds(60);
  while (tx_done < total_tx || rx_done < expect) {
    while (sent < total_tx && sent - tx_done < window) {
      int dst = (me + 1 + sent % (n - 1)) % n;
      ssize_t rc = fi_send(c.ep, src, 64, desc(c), c.peers[dst], nullptr);
      if (rc == -FI_EAGAIN) break;
      CHECK(rc == 0);
      ++sent;
    }
    ssize_t got = fi_cq_read(c.cq, e, 16);
    if (got == -FI_EAGAIN) {
      CHECK(Clock::now() < end);
      continue;
    }
    if (got == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq, &err, 0);
      std::fprintf(stderr, "alltoall: error completion err %d prov_errno %d\n", err.err, err.prov_errno);
      std::exit(1);
    }
    CHECK(got > 0);
    for (ssize_t i = 0; i < got; ++i) {
      if (e[i].flags & FI_RECV) {
        ++rx_done;
        if (posted_rx < expect) {
          CHECK(fi_recv(c.ep, tgt + (posted_rx % 1024) * 64, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
          ++posted_rx;
        }
      } else {
        ++tx_done;
      }
    }
  }
  CHECK(s.barrier() == 0);
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (me == 0) std::printf("RESULT messages_per_s %.0f\n", static_cast<double>(total_tx) * n / sec);
  std::fflush(stdout);
  CHECK(s.barrier() == 0);
}

// An opened, enabled, unused device: the CPU its threads take over a few seconds.
void run_idle(Ctx& c, xpufab::oob::Session& s, double seconds) {
  (void)c;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past any spin phase
  rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  getrusage(RUSAGE_SELF, &r1);
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  double cpu = tv(r1.ru_utime) - tv(r0.ru_utime) + tv(r1.ru_stime) - tv(r0.ru_stime);
  if (s.rank() == 0) std::printf("RESULT idle_core_percent %.3f\n", 100.0 * cpu / wall);
  std::fflush(stdout);
  CHECK(s.barrier() == 0);
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
  CHECK(s.open(o) == 0);
  Ctx c;
  setup(c, s, mode == "pingpong" ? arg : 0);
  if (mode == "pingpong") {
    run_pingpong(c, s, std::atoi(std::getenv("BENCH_ITERS") ? std::getenv("BENCH_ITERS") : "5000"),
                 std::atoi(std::getenv("BENCH_WITERS") ? std::getenv("BENCH_WITERS") : "100"));
  } else if (mode == "alltoall") {
    run_alltoall(c, s, arg > 0 ? arg : 1000);
  } else if (mode == "idle") {
    run_idle(c, s, arg > 0 ? arg : 3);
  } else {
    return 2;
  }
  teardown(c);
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
  CHECK(pipe(p) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
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

// Waits up to `timeout_s`, killing it after that; returns its stdout ("" on failure).
std::string finish(Proc p, int timeout_s, bool* ok) {
  std::string out;
  char b[4096];
  auto end = Clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  bool done = false;
  fcntl(p.out_fd, F_SETFL, fcntl(p.out_fd, F_GETFL) | O_NONBLOCK);
  while (!done) {
    ssize_t n;
    while ((n = read(p.out_fd, b, sizeof(b))) > 0) out.append(b, static_cast<size_t>(n));
    pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid) {
      done = true;
      while ((n = read(p.out_fd, b, sizeof(b))) > 0) out.append(b, static_cast<size_t>(n));
      break;
    }
    if (Clock::now() > end) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      *ok = false;
      close(p.out_fd);
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
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
  CHECK(n > 0);
  b[n] = 0;
  return b;
}

int g_port = 0;
int next_port() { return g_port++; }

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

// Debian libfabric's fi_pingpong at one size; usec/xfer and MB/sec from its table.
PpResult fi_pingpong(const std::string& prov, size_t size, int iters) {
  PpResult r;
  std::string port = std::to_string(next_port());
  std::vector<std::string> common = {"fi_pingpong", "-p", prov, "-e", "rdm", "-S", std::to_string(size),
                                     "-I", std::to_string(iters)};
  std::vector<std::string> sv = common, cl = common;
  sv.insert(sv.end(), {"-B", port});
  cl.insert(cl.end(), {"-P", port, "127.0.0.1"});
  Proc s = spawn(sv, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Proc c = spawn(cl, {});
  bool ok = true;
  std::string out = finish(c, 60, &ok);
  finish(s, 10, &ok);
  if (!ok) return r;
  // Last line: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  size_t nl = out.find_last_of('\n', out.size() >= 2 ? out.size() - 2 : 0);
  std::string last = out.substr(nl == std::string::npos ? 0 : nl + 1);
  char b0[32], b1[32], b2[32], b3[32], b4[32];
  double mbs, us;
  if (std::sscanf(last.c_str(), "%31s %31s %31s %31s %31s %lf %lf", b0, b1, b2, b3, b4, &mbs, &us) == 7) {
    r.lat_us = us;
    r.bw_mbs = mbs;
  }
  return r;
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

int driver_main(bool quick) {
  g_port = 20000 + (getpid() % 20000);
  const int iters = quick ? 2000 : 10000;
  const int witers = quick ? 50 : 200;
  bool ok = true;
  std::printf("fabric_bench: %s run; one-way latency = round trip / 2; bandwidth = bytes both ways / time\n",
              quick ? "quick" : "full");
  std::fflush(stdout);

  PpResult shm64 = fi_pingpong("shm", 64, iters);
  PpResult tcp64 = fi_pingpong("tcp", 64, iters / 2);
  PpResult shm1m = fi_pingpong("shm", kBig, witers);
  PpResult tcp1m = fi_pingpong("tcp", kBig, witers / 2);

  std::vector<std::string> pp_env = {"BENCH_ITERS=" + std::to_string(iters),
                                     "BENCH_WITERS=" + std::to_string(witers)};
  std::string out = run_peers("pingpong", 2, 0, 1, 120, pp_env, &ok);
  double emu_lat = field(out, "latency_us"), emu_bw = field(out, "bandwidth_MBps");
  bool ok1000 = true;
  std::vector<std::string> env1000 = {"BENCH_ITERS=" + std::to_string(iters / 2), "BENCH_WITERS=1"};
  std::string out1000 = run_peers("pingpong", 2, 1000, 1, 120, env1000, &ok1000);
  double lat1000 = field(out1000, "latency_us");
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
  row("emulated EFA 64 B send latency", emu_lat, "us");
  row("emulated EFA 1 MiB RDMA write bandwidth", emu_bw, "MB/s");
  row("emulated EFA 64 B latency, 1,000 extra QPs", lat1000, "us");
  row("16 processes all-to-all, 64 B", msgs, "msg/s");
  row("idle device CPU", idle_pct, "% of a core");
  std::printf("\n");
  ratio_row("emu / shm latency, 64 B", emu_lat, shm64.lat_us, 1.5, true);
  ratio_row("emu / tcp latency, 64 B", emu_lat, tcp64.lat_us, 0.3, true);
  ratio_row("emu / shm bandwidth, 1 MiB", emu_bw, shm1m.bw_mbs, 0.8, false);
  ratio_row("1,000 QPs / 1 QP latency", lat1000, emu_lat, 2.0, true);
  ratio_row("idle device CPU / 1% of a core", idle_pct, 1.0, 1.0, true);
  if (!ok || !ok1000 || !ok_a2a || !ok_idle) {
    std::printf("\nsome runs failed (see stderr)\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--peer") == 0) return peer_main(argc, argv);
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return driver_main(quick);
}
