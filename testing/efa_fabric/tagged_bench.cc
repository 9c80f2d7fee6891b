// Tagged-message and atomic figures of one libfabric provider, measured by a plain libfabric
// program (Debian's headers, linked against libfabric.so.1): the same binary runs on xpufab's
// library (LD_LIBRARY_PATH at an install prefix, provider efa, fabric efa) and on Debian's own
// libfabric (providers shm and "tcp;ofi_rxm"), so the figures compare like with like.
//
//   tagged_bench PROVIDER [FABRIC]
//
// TAGGED_BENCH_PARTS (a comma-separated subset of lat,bw,sum,wbw; all by default) and
// TAGGED_BENCH_ITERS (ping-pong and FI_SUM iterations, 20000 by default) narrow a run, e.g. to
// count the instructions of a fixed number of round trips under callgrind. Both loops first run
// a tenth as many untimed: a provider's first round trips fault in its queues' pages. The
// ping-pong runs at least kLatencyWarm untimed: a provider's helper threads (the emulated
// device's engine and mailbox threads) check on their callers more often in the first
// milliseconds of traffic, and each check preempts a busy-polling rank on a machine with few
// cores; what the ping-pong reports is the steady state.
// TAGGED_BENCH_CAPS=msg opens the endpoint with FI_MSG instead of FI_TAGGED and makes the
// ping-pong fi_send/fi_recv (the other parts, tagged, then print -1): the message latency of a
// provider that need not match tags (xpufab's efa-direct fabric, what fi_pingpong measures).
//
// The process forks into two ranks that exchange addresses over a socketpair and prints one line:
//   RESULT provider P lat64_us X bw1m_MBps Y sum8_rtt_us Z wbw1m_MBps W lat64_median_us M
//          lat64_p99_us Q
// (W: 1 MiB fi_write bandwidth). X is the mean one-way latency over the timed round trips; M is
// half the median round trip, which a preempted round trip on a shared machine does not move;
// Q half the 99th percentile round trip.
// (a figure the provider cannot give is printed as -1, with the reason on stderr). The driver,
// tagged_bench.sh, runs it per provider and prints the ratios.
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, long rc) {
  fprintf(stderr, "tagged_bench [pid %d]: %s: %ld (%s)\n", getpid(), what, rc,
          fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
  _exit(1);
}

#define CHECK(call)                   \
  do {                                \
    const long rc_ = (call);          \
    if (rc_ < 0) die(#call, rc_);     \
  } while (0)

constexpr size_t kBig = 1u << 20;
constexpr int kWindow = 8;
constexpr int kLatencyWarm = 20000;  // round trips, tens of milliseconds on any provider here

struct Blob {
  uint64_t addr = 0, key = 0;
  size_t name_len = 0;
  char name[64] = {};
};

void xchg(int fd, const Blob& mine, Blob* theirs) {
  if (write(fd, &mine, sizeof(mine)) != static_cast<ssize_t>(sizeof(mine))) die("write", -1);
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(theirs);
  while (got < sizeof(*theirs)) {
    const ssize_t n = read(fd, p + got, sizeof(*theirs) - got);
    if (n <= 0) die("read", -1);
    got += static_cast<size_t>(n);
  }
}

void sync(int fd) {
  Blob b, o;
  xchg(fd, b, &o);
}

struct Rank {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kWindow * kBig + 4096);
  fi_addr_t peer = FI_ADDR_UNSPEC;
  bool atomics = false;
  bool rma = false;
  uint64_t remote_addr = 0, remote_key = 0;

  int reaped = 0;  // completions read while a post waited for room

  void* desc() const { return fi_mr_desc(mr); }

  // Reads what completed (progress is the reader's).
  void poll() {
    fi_cq_tagged_entry e[8];  // room for either format
    const ssize_t r = fi_cq_read(cq, e, 8);
    if (r > 0) {
      reaped += static_cast<int>(r);
    } else if (r == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      die("completion error", -err.err);
    } else if (r != -FI_EAGAIN) {
      die("fi_cq_read", r);
    }
  }
  // n completions.
  void wait(int n = 1) {
    while (reaped < n) poll();
    reaped -= n;
  }
};

// Posts, retrying while the provider is out of room (its completions make room).
#define POST(r, call)                                   \
  do {                                                  \
    long rc_;                                           \
    while ((rc_ = (call)) == -FI_EAGAIN) (r)->poll();   \
    if (rc_ < 0) die(#call, rc_);                       \
  } while (0)

// TAGGED_BENCH_CAPS=msg: FI_MSG endpoints and a fi_send/fi_recv ping-pong. Read once: every post
// of the timed ping-pong asks, and getenv scans the whole environment.
bool msg_only() {
  static const bool msg = [] {
    const char* c = getenv("TAGGED_BENCH_CAPS");
    return c != nullptr && strcmp(c, "msg") == 0;
  }();
  return msg;
}

fi_info* hints_for(const char* prov, const char* fabric, uint64_t caps) {
  fi_info* h = fi_allocinfo();
  h->caps = (msg_only() ? FI_MSG : FI_TAGGED) | caps;
  h->ep_attr->type = FI_EP_RDM;
  h->mode = FI_CONTEXT;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->fabric_attr->prov_name = strdup(prov);
  if (fabric) h->fabric_attr->name = strdup(fabric);
  return h;
}

void open_rank(Rank* r, const char* prov, const char* fabric) {
  // What the provider offers of atomics and RMA beside tagged messages, most first.
  const uint64_t tries[] = {FI_ATOMIC | FI_RMA, FI_ATOMIC, FI_RMA, 0};
  int rc = -FI_ENODATA;
  for (uint64_t caps : tries) {
    if (msg_only() && caps != 0) continue;
    fi_info* h = hints_for(prov, fabric, caps);
    rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &r->info);
    fi_freeinfo(h);
    if (rc == 0) {
      r->atomics = caps & FI_ATOMIC;
      r->rma = caps & FI_RMA;
      break;
    }
  }
  if (rc) die("fi_getinfo", rc);
  CHECK(fi_fabric(r->info->fabric_attr, &r->fabric, nullptr));
  CHECK(fi_domain(r->fabric, r->info, &r->domain, nullptr));
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  CHECK(fi_av_open(r->domain, &aa, &r->av, nullptr));
  fi_cq_attr ca{};
  // A provider without FI_TAGGED may refuse the tagged format (efa-direct does, as upstream).
  ca.format = msg_only() ? FI_CQ_FORMAT_DATA : FI_CQ_FORMAT_TAGGED;
  ca.size = 1024;
  CHECK(fi_cq_open(r->domain, &ca, &r->cq, nullptr));
  CHECK(fi_endpoint(r->domain, r->info, &r->ep, nullptr));
  CHECK(fi_ep_bind(r->ep, &r->av->fid, 0));
  CHECK(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_enable(r->ep));
  CHECK(fi_mr_reg(r->domain, r->buf.data(), r->buf.size(),
                  FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                  0, &r->mr, nullptr));
}

void connect_rank(Rank* r, int fd) {
  Blob mine, theirs;
  mine.name_len = sizeof(mine.name);
  CHECK(fi_getname(&r->ep->fid, mine.name, &mine.name_len));
  mine.addr = (r->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
                  ? reinterpret_cast<uintptr_t>(r->buf.data())
                  : 0;
  mine.key = fi_mr_key(r->mr);
  xchg(fd, mine, &theirs);
  if (fi_av_insert(r->av, theirs.name, 1, &r->peer, 0, nullptr) != 1) die("fi_av_insert", -1);
  r->remote_addr = theirs.addr;
  r->remote_key = theirs.key;
  sync(fd);  // both AVs hold their peer before anything is sent
}

void close_rank(Rank* r) {
  fi_close(&r->mr->fid);
  fi_close(&r->ep->fid);
  fi_close(&r->cq->fid);
  fi_close(&r->av->fid);
  fi_close(&r->domain->fid);
  fi_close(&r->fabric->fid);
  fi_freeinfo(r->info);
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Latency {
  double mean_us = -1;    // one way: the timed loop's time over twice its round trips
  double median_us = -1;  // one way: half the median round trip (the client's; -1 at the server)
  double p99_us = -1;     // one way: half the 99th percentile round trip (the client's)
};

// The receive of a 64 B ping-pong round: tagged (tag 1), or plain with TAGGED_BENCH_CAPS=msg.
long post_recv64(Rank* r, fi_context* ctx) {
  if (msg_only()) return fi_recv(r->ep, r->buf.data(), 64, r->desc(), r->peer, ctx);
  return fi_trecv(r->ep, r->buf.data(), 64, r->desc(), r->peer, 1, 0, ctx);
}

long post_send64(Rank* r, fi_context* ctx) {
  if (msg_only()) return fi_send(r->ep, r->buf.data() + 4096, 64, r->desc(), r->peer, ctx);
  return fi_tsend(r->ep, r->buf.data() + 4096, 64, r->desc(), r->peer, 1, ctx);
}

// A tick count for stamping each round trip: the TSC where there is one (a read costs a few ns;
// clock_gettime costs 30-80 ns on this project's virtual machines, and a stamp in the loop adds
// to every round trip it times, of both providers alike). Ticks become ns by the loop's total
// time on the steady clock over its total ticks.
uint64_t ticks() {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return static_cast<uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

// 64 B ping-pong with a receive always posted ahead, as fi_pingpong keeps one: the server posts
// its next receive before it answers (on efa-direct a message that met no receive would wait out
// an RNR retry). Completions are counted, not told apart. The client clocks every round trip.
Latency latency(Rank* r, bool client, int iters) {
  fi_context rctx, sctx;
  Clock::time_point t0;
  const int warm = std::max(iters / 10 + 10, kLatencyWarm);
  if (!client) POST(r, post_recv64(r, &rctx));
  std::vector<double> rtt_ticks;
  if (client) rtt_ticks.reserve(static_cast<size_t>(iters));
  uint64_t tick0 = 0, last = 0;
  for (int i = 0; i < warm + iters; ++i) {
    if (i == warm) {
      t0 = Clock::now();
      tick0 = last = ticks();
    }
    if (client) {
      POST(r, post_recv64(r, &rctx));
      POST(r, post_send64(r, &sctx));
      r->wait(2);
      if (i >= warm) {
        const uint64_t now = ticks();
        rtt_ticks.push_back(static_cast<double>(now - last));
        last = now;
      }
    } else {
      r->wait(1);
      if (i + 1 < warm + iters) POST(r, post_recv64(r, &rctx));
      POST(r, post_send64(r, &sctx));
      r->wait(1);
    }
  }
  Latency l;
  const double total_us = seconds(t0, Clock::now()) * 1e6;
  l.mean_us = total_us / (2.0 * iters);
  if (!rtt_ticks.empty() && last != tick0) {
    const double us_per_tick = total_us / static_cast<double>(last - tick0);
    auto at = [&](size_t k) {
      auto it = rtt_ticks.begin() + static_cast<std::ptrdiff_t>(k);
      std::nth_element(rtt_ticks.begin(), it, rtt_ticks.end());
      return *it * us_per_tick / 2.0;
    };
    l.median_us = at(rtt_ticks.size() / 2);
    l.p99_us = at(rtt_ticks.size() * 99 / 100);
  }
  return l;
}

// 1 MiB tagged messages, kWindow in flight, then a 64 B acknowledgement: MB/s one way.
double bandwidth(Rank* r, bool client, int rounds) {
  fi_context ctx[kWindow + 1];
  Clock::time_point t0 = Clock::now();
  for (int round = 0; round < rounds + 1; ++round) {
    if (round == 1) t0 = Clock::now();  // the first round warms up
    if (client) {
      for (int w = 0; w < kWindow; ++w)
        POST(r, fi_tsend(r->ep, r->buf.data() + w * kBig, kBig, r->desc(), r->peer, 2, &ctx[w]));
      POST(r, fi_trecv(r->ep, r->buf.data() + kWindow * kBig, 64, r->desc(), r->peer, 3, 0,
                     &ctx[kWindow]));
      r->wait(kWindow + 1);
    } else {
      for (int w = 0; w < kWindow; ++w)
        POST(r, fi_trecv(r->ep, r->buf.data() + w * kBig, kBig, r->desc(), r->peer, 2, 0, &ctx[w]));
      r->wait(kWindow);
      POST(r, fi_tsend(r->ep, r->buf.data() + kWindow * kBig, 64, r->desc(), r->peer, 3,
                     &ctx[kWindow]));
      r->wait(1);
    }
  }
  return static_cast<double>(rounds) * kWindow * kBig / seconds(t0, Clock::now()) / 1e6;
}

// The initiator's tagged "done" to a target that reads its CQ until it arrives. Sent with a
// completion, which is read before the caller stops calling into the provider: under manual
// progress (the protocol fabric's) a message may wait in the sender for credits that only its
// own progress takes in, so an inject followed by a blocking socket read could stay unsent.
void send_done(Rank* r, uint64_t tag, fi_context* ctx) {
  POST(r, fi_tsend(r->ep, r->buf.data(), 8, r->desc(), r->peer, tag, ctx));
  r->wait(1);
}

// 1 MiB fi_write, kWindow in flight, each round waited for: MB/s. The target reads its CQ (its
// progress may have to apply the writes) until the initiator's tagged "done".
double write_bandwidth(Rank* r, bool client, int rounds, int fd) {
  fi_context ctx[kWindow];
  double mbps = -1;
  if (client) {
    Clock::time_point t0 = Clock::now();
    for (int round = 0; round < rounds + 1; ++round) {
      if (round == 1) t0 = Clock::now();
      for (int w = 0; w < kWindow; ++w)
        POST(r, fi_write(r->ep, r->buf.data() + w * kBig, kBig, r->desc(), r->peer,
                         r->remote_addr + w * kBig, r->remote_key, &ctx[w]));
      r->wait(kWindow);
    }
    mbps = static_cast<double>(rounds) * kWindow * kBig / seconds(t0, Clock::now()) / 1e6;
    send_done(r, 10, &ctx[0]);
  } else {
    POST(r, fi_trecv(r->ep, r->buf.data() + kWindow * kBig, 8, r->desc(), r->peer, 10, 0,
                     &ctx[0]));
    r->wait(1);
  }
  sync(fd);
  return mbps;
}

// 8-byte FI_SUM with the prior value fetched, one at a time: round trip in microseconds. The
// target keeps reading its CQ (its progress executes them) until the initiator says done.
double sum_rtt(Rank* r, bool client, int iters, int fd) {
  fi_context ctx;
  double us = -1;
  if (client) {
    uint64_t one = 1;
    memcpy(r->buf.data() + 64, &one, 8);
    Clock::time_point t0 = Clock::now();
    const int warm = iters / 10 + 10;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) t0 = Clock::now();
      POST(r, fi_fetch_atomic(r->ep, r->buf.data() + 64, 1, r->desc(), r->buf.data() + 128,
                            r->desc(), r->peer, r->remote_addr, r->remote_key, FI_UINT64, FI_SUM,
                            &ctx));
      r->wait(1);
    }
    us = seconds(t0, Clock::now()) * 1e6 / iters;
    send_done(r, 9, &ctx);
  } else {
    POST(r, fi_trecv(r->ep, r->buf.data() + 256, 8, r->desc(), r->peer, 9, 0, &ctx));
    r->wait(1);
  }
  sync(fd);
  return us;
}

bool part_wanted(const char* name) {
  const char* parts = getenv("TAGGED_BENCH_PARTS");
  if (!parts || !*parts) return true;
  const std::string list = std::string(",") + parts + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

int iterations() {
  const char* s = getenv("TAGGED_BENCH_ITERS");
  const int n = s ? atoi(s) : 0;
  return n > 0 ? n : 20000;
}

void run(const char* prov, const char* fabric, bool client, int fd) {
  Rank r;
  open_rank(&r, prov, fabric);
  connect_rank(&r, fd);
  const int iters = iterations();
  Latency lat;
  double bw = -1;
  if (part_wanted("lat")) lat = latency(&r, client, iters);
  sync(fd);
  // The other parts are tagged (or atomic) by their nature.
  const bool tagged = !msg_only();
  if (tagged && part_wanted("bw")) bw = bandwidth(&r, client, 20);
  sync(fd);
  double sum = -1;
  if (!tagged || !part_wanted("sum")) {
  } else if (r.atomics) {
    size_t count = 0;
    if (fi_fetch_atomicvalid(r.ep, FI_UINT64, FI_SUM, &count) == 0 && count >= 1) {
      sum = sum_rtt(&r, client, iters, fd);
    } else if (client) {
      fprintf(stderr, "tagged_bench: %s: no fetching FI_SUM on FI_UINT64\n", prov);
    }
  } else if (client) {
    fprintf(stderr, "tagged_bench: %s offers no FI_ATOMIC with FI_TAGGED\n", prov);
  }
  double wbw = -1;
  if (!tagged || !part_wanted("wbw")) {
  } else if (r.rma) {
    wbw = write_bandwidth(&r, client, 20, fd);
  } else if (client) {
    fprintf(stderr, "tagged_bench: %s offers no FI_RMA with FI_TAGGED\n", prov);
  }
  if (client)
    printf("RESULT provider %s lat64_us %.3f bw1m_MBps %.1f sum8_rtt_us %.3f wbw1m_MBps %.1f "
           "lat64_median_us %.3f lat64_p99_us %.3f\n",
           prov, lat.mean_us, bw, sum, wbw, lat.median_us, lat.p99_us);
  fflush(stdout);
  sync(fd);
  close_rank(&r);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tagged_bench PROVIDER [FABRIC]\n");
    return 2;
  }
  const char* prov = argv[1];
  const char* fabric = argc > 2 ? argv[2] : nullptr;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    run(prov, fabric, false, sv[1]);
    _exit(0);
  }
  close(sv[1]);
  run(prov, fabric, true, sv[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
