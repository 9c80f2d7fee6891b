// Instructions of the provider and the emulated NIC per 64 B round trip and per idle CQ read,
// counted, not timed: a clock on a virtual machine moves with its neighbours, an instruction
// count under callgrind does not. One thread, two endpoints of one domain on the in-process
// fabric, no engine thread: every pass of the NIC is one the program asked for, so two runs of
// N and 3N rounds differ by exactly 2N rounds' work.
//
//   provider_count FABRIC THREADING WORK ROUNDS
//     FABRIC     efa-direct (fi_send/fi_recv) or efa (fi_tsend/fi_trecv, the protocol core)
//     THREADING  domain (FI_THREAD_DOMAIN) or safe (FI_THREAD_SAFE)
//     WORK       pingpong (ROUNDS round trips, each waiting for both completions of both hops)
//                or idle (ROUNDS * 10 fi_cq_read calls on an empty CQ)
//
// tools/bench/provider_count.sh runs it under callgrind and prints the differences.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void die(const char* what, long rc) {
  std::fprintf(stderr, "provider_count: %s: %ld (%s)\n", what, rc,
               fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
  std::exit(1);
}

#define CHECK(call)               \
  do {                            \
    const long rc_ = (call);      \
    if (rc_ < 0) die(#call, rc_); \
  } while (0)

constexpr size_t kBytes = 64;

struct Side {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_mr* mr = nullptr;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  char buf[2 * kBytes] = {};
};

struct Pair {
  bool tagged = false;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  Side side[2];
};

void open_pair(const std::string& fabric, bool safe, Pair* p) {
  p->tagged = fabric == "efa";
  fi_info* h = fi_allocinfo();
  h->caps = p->tagged ? FI_TAGGED : FI_MSG;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = safe ? FI_THREAD_SAFE : FI_THREAD_DOMAIN;
  h->fabric_attr->prov_name = strdup("efa");
  h->fabric_attr->name = strdup(fabric.c_str());
  CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &p->info));
  fi_freeinfo(h);
  CHECK(fi_fabric(p->info->fabric_attr, &p->fabric, nullptr));
  CHECK(fi_domain(p->fabric, p->info, &p->domain, nullptr));
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  CHECK(fi_av_open(p->domain, &aa, &p->av, nullptr));
  fi_cq_attr ca{};
  ca.format = p->tagged ? FI_CQ_FORMAT_TAGGED : FI_CQ_FORMAT_DATA;
  ca.size = 128;
  for (Side& s : p->side) {
    CHECK(fi_endpoint(p->domain, p->info, &s.ep, nullptr));
    CHECK(fi_cq_open(p->domain, &ca, &s.cq, nullptr));
    CHECK(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_ep_bind(s.ep, &p->av->fid, 0));
    CHECK(fi_enable(s.ep));
    char name[64];
    size_t len = sizeof(name);
    CHECK(fi_getname(&s.ep->fid, name, &len));
    CHECK(fi_av_insert(p->av, name, 1, &s.addr, 0, nullptr));
    CHECK(fi_mr_reg(p->domain, s.buf, sizeof(s.buf), FI_SEND | FI_RECV, 0, 0, 0, &s.mr, nullptr));
  }
}

void close_pair(Pair* p) {
  for (Side& s : p->side) {
    fi_close(&s.ep->fid);
    fi_close(&s.mr->fid);
    fi_close(&s.cq->fid);
  }
  fi_close(&p->av->fid);
  fi_close(&p->domain->fid);
  fi_close(&p->fabric->fid);
  fi_freeinfo(p->info);
}

void wait_one(fid_cq* cq) {
  fi_cq_tagged_entry e;
  ssize_t n;
  while ((n = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN) {
  }
  if (n != 1) die("fi_cq_read", n);
}

// One hop: `to` posts its receive, `from` sends; then both completions.
void hop(Pair* p, int from, int to) {
  Side& s = p->side[from];
  Side& r = p->side[to];
  if (p->tagged) {
    CHECK(fi_trecv(r.ep, r.buf, kBytes, fi_mr_desc(r.mr), s.addr, 7, 0, nullptr));
    CHECK(fi_tsend(s.ep, s.buf + kBytes, kBytes, fi_mr_desc(s.mr), r.addr, 7, nullptr));
  } else {
    CHECK(fi_recv(r.ep, r.buf, kBytes, fi_mr_desc(r.mr), s.addr, nullptr));
    CHECK(fi_send(s.ep, s.buf + kBytes, kBytes, fi_mr_desc(s.mr), r.addr, nullptr));
  }
  wait_one(r.cq);
  wait_one(s.cq);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: provider_count efa-direct|efa domain|safe pingpong|idle ROUNDS\n");
    return 2;
  }
  const std::string fabric = argv[1], threading = argv[2], work = argv[3];
  const int rounds = std::atoi(argv[4]);
  if ((fabric != "efa-direct" && fabric != "efa") || (threading != "domain" && threading != "safe") ||
      (work != "pingpong" && work != "idle") || rounds <= 0) {
    std::fprintf(stderr, "provider_count: bad arguments\n");
    return 2;
  }
  // Only this thread moves the NIC, so that each run's work is the same.
  setenv("FI_EFA_BACKEND", "emu", 1);
  setenv("FI_EFA_EMU_FABRIC", "inproc", 1);
  setenv("FI_EFA_EMU_ENGINE_THREAD", "0", 1);
  Pair p;
  open_pair(fabric, threading == "safe", &p);
  hop(&p, 0, 1);  // first use of every path
  hop(&p, 1, 0);
  if (work == "pingpong") {
    for (int i = 0; i < rounds; ++i) {
      hop(&p, 0, 1);
      hop(&p, 1, 0);
    }
  } else {
    fi_cq_tagged_entry e;
    for (int i = 0; i < rounds * 10; ++i) {
      const ssize_t n = fi_cq_read(p.side[0].cq, &e, 1);
      if (n != -FI_EAGAIN) die("idle fi_cq_read", n);
    }
  }
  close_pair(&p);
  return 0;
}
