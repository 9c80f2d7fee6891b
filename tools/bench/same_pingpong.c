// A 64 B two-process ping-pong that makes the same libfabric calls on every provider: each side
// keeps a receive posted ahead, sends with fi_send and waits for that send's completion and for
// the peer's message, on an RDM endpoint with FI_THREAD_DOMAIN. Debian's fi_pingpong does not:
// below its provider's inject_size it sends with fi_inject and never waits for a send
// completion, so on `shm` (inject_size 4096) its 64 B run skips work that it does on `efa`
// (efa-direct's inject_size is the device's 32 B of inline data).
//
// Built against Debian's libfabric (libfabric.so.1); LD_LIBRARY_PATH picks the library. The
// process forks its peer and the two exchange endpoint names over pipes. Prints one line:
//   PROVIDER one-way us: mean M p10 A p50 B p90 C p99 D slice-p50 LO-HI
// Each round trip is timed on its own (CLOCK_MONOTONIC), so the percentiles show the spread
// that fi_pingpong's single mean hides; LO and HI are the lowest and highest p50 of the run's
// slices of 2,000 round trips (a quarter of the run when it is shorter than 40,000).
//   same_pingpong PROVIDER [ROUND_TRIPS]
// The line ends with ` line-ns L`: the one-way time of one cache line passed back and forth
// between the two processes, right before and after the timed loop (the higher of the two, so
// that a run during which the CPUs moved apart shows it). It tells the host's state: on a
// virtual machine the two CPUs' distance moves under the guest, and with it every
// cross-process latency.
//   same_pingpong PROVIDER ROUND_TRIPS first|second IN OUT
// runs one side only, without the fork, talking to the other side through the files IN and OUT
// (FIFOs: `first` opens OUT and then IN, `second` IN and then OUT), so that one side can run
// under a tool such as callgrind; it prints no line-ns (`line-ns -`).
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kSize = 64, kWarm = 2000, kSlice = 2000, kLineTrips = 20000 };

#define CHECK(call)                                                                  \
  do {                                                                               \
    int rc_ = (int)(call);                                                           \
    if (rc_ != 0) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fi_strerror(-rc_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

struct side {
  struct fid_ep* ep;
  struct fid_cq* txcq;
  struct fid_cq* rxcq;
  fi_addr_t peer;
  char* sbuf;
  char* rbuf;
  void* sdesc;
  void* rdesc;
  struct fi_context sctx, rctx;
};

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void full_write(int fd, const void* p, size_t n) {
  if (write(fd, p, n) != (ssize_t)n) {
    perror("write");
    exit(1);
  }
}

static void full_read(int fd, void* p, size_t n) {
  if (read(fd, p, n) != (ssize_t)n) {
    perror("read");
    exit(1);
  }
}

static void wait_one(struct fid_cq* cq) {
  struct fi_cq_entry e;
  for (;;) {
    ssize_t n = fi_cq_read(cq, &e, 1);
    if (n == 1) return;
    if (n != -FI_EAGAIN) {
      fprintf(stderr, "fi_cq_read: %s\n", fi_strerror((int)-n));
      exit(1);
    }
  }
}

static void post_recv(struct side* s) {
  CHECK(fi_recv(s->ep, s->rbuf, kSize, s->rdesc, s->peer, &s->rctx));
}

static void send_and_complete(struct side* s) {
  ssize_t rc;
  while ((rc = fi_send(s->ep, s->sbuf, kSize, s->sdesc, s->peer, &s->sctx)) == -FI_EAGAIN) {
    (void)fi_cq_read(s->txcq, NULL, 0);
  }
  CHECK(rc);
  wait_one(s->txcq);
}

// One cache line's one-way time between the two processes, in ns (the parent's figure): each
// side waits for the other's count, then writes its own on a line of its own.
static double line_one_way_ns(volatile uint64_t* lines, int second) {
  volatile uint64_t* mine = lines + (second ? 8 : 0);
  volatile uint64_t* theirs = lines + (second ? 0 : 8);
  const uint64_t base = *mine;
  uint64_t t0 = 0;
  for (uint64_t i = 1; i <= kLineTrips; ++i) {
    if (i == kLineTrips / 10) t0 = now_ns();
    if (second) {
      while (__atomic_load_n(theirs, __ATOMIC_ACQUIRE) != base + i) {
      }
      __atomic_store_n(mine, base + i, __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(mine, base + i, __ATOMIC_RELEASE);
      while (__atomic_load_n(theirs, __ATOMIC_ACQUIRE) != base + i) {
      }
    }
  }
  return (double)(now_ns() - t0) / (kLineTrips - kLineTrips / 10 + 1) / 2;
}

// The timed loop, kWarm untimed round trips first; rtt[i] gets round trip i's ns. Not inlined:
// the script's --count has callgrind count this function only (--toggle-collect), so that the
// statistics after it do not count as the round trips' work.
__attribute__((noinline)) static void round_trips(struct side* s, int second, int n, uint32_t* rtt) {
  for (int i = -kWarm; i < n; ++i) {
    const uint64_t t0 = now_ns();
    if (!second) {
      send_and_complete(s);
      wait_one(s->rxcq);
      post_recv(s);
    } else {
      wait_one(s->rxcq);
      post_recv(s);
      send_and_complete(s);
    }
    if (i >= 0) rtt[i] = (uint32_t)(now_ns() - t0);
  }
}

static int by_value(const void* a, const void* b) {
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 2 || (argc > 3 && argc != 6)) {
    fprintf(stderr, "usage: %s PROVIDER [ROUND_TRIPS [first|second IN OUT]]\n", argv[0]);
    return 2;
  }
  const char* prov = argv[1];
  const int n = argc > 2 ? atoi(argv[2]) : 20000;
  if (n < 100) {
    fprintf(stderr, "at least 100 round trips\n");
    return 2;
  }
  int second, in, out;
  pid_t pid = -1;  // the forked peer's, in the parent
  volatile uint64_t* lines = NULL;
  if (argc == 6) {
    second = strcmp(argv[3], "second") == 0;
    if (!second && strcmp(argv[3], "first") != 0) {
      fprintf(stderr, "the side is first or second, not %s\n", argv[3]);
      return 2;
    }
    // Opened in opposite orders on the two sides: a FIFO's open waits for its other end.
    if (second) {
      in = open(argv[4], O_RDONLY);
      out = open(argv[5], O_WRONLY);
    } else {
      out = open(argv[5], O_WRONLY);
      in = open(argv[4], O_RDONLY);
    }
    if (in < 0 || out < 0) {
      perror("open");
      return 1;
    }
  } else {
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) return 1;
    // Two lines (a count each) shared with the forked peer, for the host's line-ns.
    lines = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lines == MAP_FAILED) return 1;
    const pid_t parent = getpid();
    pid = fork();
    if (pid < 0) return 1;
    second = pid == 0;
    // A side whose peer died stops too. The child dies with its parent (killed by a timeout,
    // say; the second test covers a parent gone before the first). Each side closes the pipe
    // ends it does not use, so that a read from a peer that died sees the end of the pipe.
    if (second && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)) return 1;
    out = second ? to_parent[1] : to_child[1];
    in = second ? to_child[0] : to_parent[0];
    close(second ? to_parent[0] : to_child[0]);
    close(second ? to_child[1] : to_parent[1]);
  }

  struct fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT;
  hints->fabric_attr->prov_name = strdup(prov);
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  struct fi_info* info;
  CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
  struct fid_fabric* fabric;
  struct fid_domain* domain;
  struct fid_av* av;
  struct side s = {0};
  CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
  CHECK(fi_domain(fabric, info, &domain, NULL));
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
  CHECK(fi_cq_open(domain, &cq_attr, &s.txcq, NULL));
  CHECK(fi_cq_open(domain, &cq_attr, &s.rxcq, NULL));
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
  CHECK(fi_av_open(domain, &av_attr, &av, NULL));
  CHECK(fi_endpoint(domain, info, &s.ep, NULL));
  CHECK(fi_ep_bind(s.ep, &av->fid, 0));
  CHECK(fi_ep_bind(s.ep, &s.txcq->fid, FI_TRANSMIT));
  CHECK(fi_ep_bind(s.ep, &s.rxcq->fid, FI_RECV));
  CHECK(fi_enable(s.ep));

  char name[256], peer_name[256];
  size_t len = sizeof(name), peer_len;
  CHECK(fi_getname(&s.ep->fid, name, &len));
  full_write(out, &len, sizeof(len));
  full_write(out, name, len);
  full_read(in, &peer_len, sizeof(peer_len));
  if (peer_len > sizeof(peer_name)) return 1;
  full_read(in, peer_name, peer_len);
  if (fi_av_insert(av, peer_name, 1, &s.peer, 0, NULL) != 1) {
    fprintf(stderr, "fi_av_insert failed\n");
    return 1;
  }

  // One page each, so that the two buffers share no line.
  char* buf = aligned_alloc(4096, 2 * 4096);
  memset(buf, second ? 'c' : 'p', 2 * 4096);
  s.sbuf = buf;
  s.rbuf = buf + 4096;
  struct fid_mr* mr;
  CHECK(fi_mr_reg(domain, buf, 2 * 4096, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
  s.sdesc = s.rdesc = fi_mr_desc(mr);

  post_recv(&s);
  char sync;
  full_write(out, "r", 1);  // a receive is posted here before the peer sends
  full_read(in, &sync, 1);

  uint32_t* rtt = calloc((size_t)n, sizeof(*rtt));
  const double line_before = lines ? line_one_way_ns(lines, second) : 0;
  round_trips(&s, second, n, rtt);
  if (s.rbuf[0] != (second ? 'p' : 'c')) {
    fprintf(stderr, "the peer's bytes did not arrive\n");
    return 1;
  }
  full_write(out, "d", 1);
  full_read(in, &sync, 1);  // the peer's last receive is reposted: both may close
  const double line_after = lines ? line_one_way_ns(lines, second) : 0;

  int status = 0;
  if (!second) {
    // The lowest and highest median of consecutive slices: on a shared host the level of a
    // compute-bound path moves within a run, where a transfer-bound one (shm) barely does.
    const int slice = n >= 20 * kSlice ? kSlice : n / 4;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int at = 0; at + slice <= n; at += slice) {
      qsort(rtt + at, (size_t)slice, sizeof(*rtt), by_value);
      const uint32_t m = rtt[at + slice / 2];
      lo = m < lo ? m : lo;
      hi = m > hi ? m : hi;
    }
    qsort(rtt, (size_t)n, sizeof(*rtt), by_value);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += rtt[i];
    // One-way: half a round trip.
    printf("%s one-way us: mean %.3f p10 %.3f p50 %.3f p90 %.3f p99 %.3f slice-p50 %.3f-%.3f line-ns ", prov,
           sum / n / 2000.0, rtt[n / 10] / 2000.0, rtt[n / 2] / 2000.0, rtt[(long)n * 9 / 10] / 2000.0,
           rtt[(long)n * 99 / 100] / 2000.0, lo / 2000.0, hi / 2000.0);
    if (lines) {
      printf("%.1f\n", line_before > line_after ? line_before : line_after);
    } else {
      printf("-\n");
    }
    if (pid > 0 && (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)) status = 1;
  }
  fi_close(&s.ep->fid);
  fi_close(&mr->fid);
  fi_close(&av->fid);
  fi_close(&s.rxcq->fid);
  fi_close(&s.txcq->fid);
  fi_close(&domain->fid);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  free(rtt);
  free(buf);
  return status;
}
