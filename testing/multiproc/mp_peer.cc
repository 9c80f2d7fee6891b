// One process of a multi-process conformance run, through the public libfabric API only:
//   mp_peer server|client PORT ops       every op type with data verified (client active)
//   mp_peer server|client PORT kill      the server dies after the handshake; the client
//                                        expects UNRESP/UNREACH error completions
//   mp_peer server|client PORT pingpong  64 B send and 1 MiB write round trips, figures printed
// Addresses, MR keys and buffer addresses travel through the OOB rendezvous (tools/oob).
// Exit status 0 means every check passed.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/efa_io_defs.h"
#include "tools/oob/oob.h"

namespace {

constexpr size_t kBig = 1u << 20;
using Clock = std::chrono::steady_clock;

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

struct Ctx {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(2 * kBig);  // [0, kBig) target, rest source
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t peer_key = 0, peer_addr = 0;
};

struct Blob {
  uint64_t key, addr;
  size_t name_len;
  char name[64];
};

// One completion; 1, or the negative error with *err filled for -FI_EAVAIL.
int wait_cq(Ctx& c, fi_cq_data_entry* e, fi_cq_err_entry* err, int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    ssize_t n = fi_cq_read(c.cq, e, 1);
    if (n == 1) return 1;
    if (n == -FI_EAVAIL) {
      CHECK(fi_cq_readerr(c.cq, err, 0) == 1);
      return -FI_EAVAIL;
    }
    CHECK(n == -FI_EAGAIN);
    if (Clock::now() > end) return -FI_ETIMEDOUT;
  }
}

void ok_cq(Ctx& c, fi_cq_data_entry* e) {
  fi_cq_err_entry err{};
  int rc = wait_cq(c, e, &err, 20000);
  if (rc != 1) std::fprintf(stderr, "completion: rc %d prov_errno %d\n", rc, err.prov_errno);
  CHECK(rc == 1);
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
}
bool same(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 9))) return false;
  return true;
}

void setup(Ctx& c, xpufab::oob::Session& s) {
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
  ca.size = 1024;
  CHECK(fi_cq_open(c.domain, &ca, &c.cq, nullptr) == 0);
  CHECK(fi_endpoint(c.domain, c.info, &c.ep, nullptr) == 0);
  CHECK(fi_ep_bind(c.ep, &c.av->fid, 0) == 0);
  CHECK(fi_ep_bind(c.ep, &c.cq->fid, FI_TRANSMIT | FI_RECV) == 0);
  CHECK(fi_enable(c.ep) == 0);
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
  Blob peer;
  const std::string& pb = all[s.rank() == 0 ? 1 : 0];
  CHECK(pb.size() == sizeof(peer));
  std::memcpy(&peer, pb.data(), sizeof(peer));
  CHECK(fi_av_insert(c.av, peer.name, 1, &c.peer, 0, nullptr) == 1);
  c.peer_key = peer.key;
  c.peer_addr = peer.addr;
}

void teardown(Ctx& c) {
  CHECK(fi_close(&c.ep->fid) == 0);
  CHECK(fi_close(&c.mr->fid) == 0);
  CHECK(fi_close(&c.cq->fid) == 0);
  CHECK(fi_close(&c.av->fid) == 0);
  CHECK(fi_close(&c.domain->fid) == 0);
  CHECK(fi_close(&c.fabric->fid) == 0);
  fi_freeinfo(c.info);
}

void* desc(Ctx& c) { return fi_mr_desc(c.mr); }

void run_ops(Ctx& c, xpufab::oob::Session& s) {
  bool server = s.rank() == 0;
  uint8_t* tgt = c.buf.data();
  uint8_t* src = c.buf.data() + kBig;
  fi_cq_data_entry e{};
  // SEND/RECV, 64 B and a full MTU-sized message.
  for (size_t len : {size_t{64}, size_t{8192}}) {
    if (server) {
      std::memset(tgt, 0, len);
      CHECK(fi_recv(c.ep, tgt, len, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
      CHECK(s.barrier() == 0);
      ok_cq(c, &e);
      CHECK((e.flags & FI_RECV) && e.len == len && same(tgt, len, 1));
    } else {
      fill(src, len, 1);
      CHECK(s.barrier() == 0);
      CHECK(fi_send(c.ep, src, len, desc(c), c.peer, nullptr) == 0);
      ok_cq(c, &e);
      CHECK(e.flags & FI_SEND);
    }
    CHECK(s.barrier() == 0);
  }
  // RDMA WRITE of 1 MiB.
  if (!server) {
    fill(src, kBig, 2);
    CHECK(fi_write(c.ep, src, kBig, desc(c), c.peer, c.peer_addr, c.peer_key, nullptr) == 0);
    ok_cq(c, &e);
    CHECK(e.flags & FI_WRITE);
  }
  CHECK(s.barrier() == 0);
  if (server) CHECK(same(tgt, kBig, 2));
  // RDMA WRITE with immediate data: the target sees FI_REMOTE_CQ_DATA.
  if (server) CHECK(fi_recv(c.ep, tgt + kBig - 64, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
  CHECK(s.barrier() == 0);
  if (server) {
    ok_cq(c, &e);
    CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xabc);
    CHECK(same(tgt + 4096, 4096, 3));
  } else {
    fill(src, 4096, 3);
    CHECK(fi_writedata(c.ep, src, 4096, desc(c), 0xabc, c.peer, c.peer_addr + 4096, c.peer_key, nullptr) == 0);
    ok_cq(c, &e);
  }
  CHECK(s.barrier() == 0);
  // RDMA READ of 1 MiB.
  if (server) fill(tgt, kBig, 4);
  CHECK(s.barrier() == 0);
  if (!server) {
    std::memset(src, 0, kBig);
    CHECK(fi_read(c.ep, src, kBig, desc(c), c.peer, c.peer_addr, c.peer_key, nullptr) == 0);
    ok_cq(c, &e);
    CHECK((e.flags & FI_READ) && same(src, kBig, 4));
  }
  CHECK(s.barrier() == 0);
  std::printf("rank %d: ops ok\n", s.rank());
}

// The server dies after one verified exchange; the client's later operations must fail with
// the status hardware gives for a dead peer.
void run_kill(Ctx& c, xpufab::oob::Session& s) {
  bool server = s.rank() == 0;
  uint8_t* src = c.buf.data() + kBig;
  fi_cq_data_entry e{};
  if (server) CHECK(fi_recv(c.ep, c.buf.data(), 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
  CHECK(s.barrier() == 0);
  if (server) {
    ok_cq(c, &e);
    CHECK(s.barrier() == 0);
    raise(SIGKILL);
  }
  CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
  ok_cq(c, &e);
  CHECK(s.barrier() == 0);
  usleep(200000);  // let it die
  auto t0 = Clock::now();
  CHECK(fi_write(c.ep, src, 4096, desc(c), c.peer, c.peer_addr, c.peer_key, nullptr) == 0);
  CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
  for (int i = 0; i < 2; ++i) {
    fi_cq_err_entry err{};
    int rc = wait_cq(c, &e, &err, 30000);
    CHECK(rc == -FI_EAVAIL);
    std::printf("error completion: err %d prov_errno %d after %.0f ms\n", err.err, err.prov_errno,
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    CHECK(err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE ||
          err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  }
  std::printf("rank %d: kill ok\n", s.rank());
}

void run_pingpong(Ctx& c, xpufab::oob::Session& s) {
  bool server = s.rank() == 0;
  uint8_t* tgt = c.buf.data();
  uint8_t* src = c.buf.data() + kBig;
  fi_cq_data_entry e{};
  const int iters = 2000, warm = 200;
  Clock::time_point t0;
  for (int i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    if (server) {
      CHECK(fi_recv(c.ep, tgt, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
      if (i == 0) CHECK(s.barrier() == 0);
      ok_cq(c, &e);
      CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
      ok_cq(c, &e);
    } else {
      CHECK(fi_recv(c.ep, tgt, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
      if (i == 0) CHECK(s.barrier() == 0);
      CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
      ok_cq(c, &e);
      ok_cq(c, &e);
    }
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters / 2;
  CHECK(s.barrier() == 0);
  // 1 MiB writes, one way, each acknowledged by a 64 B send (a ping-pong of writes).
  const int witers = 100;
  t0 = Clock::now();
  for (int i = 0; i < witers; ++i) {
    CHECK(fi_recv(c.ep, tgt, 64, desc(c), FI_ADDR_UNSPEC, nullptr) == 0);
    if (i == 0) CHECK(s.barrier() == 0);
    if (!server) {
      CHECK(fi_write(c.ep, src, kBig, desc(c), c.peer, c.peer_addr + kBig, c.peer_key, nullptr) == 0);
      ok_cq(c, &e);
      CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
      ok_cq(c, &e);
      ok_cq(c, &e);
    } else {
      ok_cq(c, &e);
      CHECK(fi_write(c.ep, src, kBig, desc(c), c.peer, c.peer_addr + kBig, c.peer_key, nullptr) == 0);
      ok_cq(c, &e);
      CHECK(fi_send(c.ep, src, 64, desc(c), c.peer, nullptr) == 0);
      ok_cq(c, &e);
    }
  }
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  double gbs = 2.0 * witers * kBig / sec / 1e9;
  if (!server) std::printf("pingpong 64B_latency_us %.2f write_1MiB_GBps %.3f\n", us, gbs);
  CHECK(s.barrier() == 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s server|client PORT ops|kill|pingpong [SERVER_HOST]\n", argv[0]);
    return 2;
  }
  xpufab::oob::Options o;
  o.server = std::strcmp(argv[1], "server") == 0;
  o.port = static_cast<uint16_t>(std::atoi(argv[2]));
  if (argc > 4) o.host = argv[4];
  o.timeout_ms = 20000;
  xpufab::oob::Session s;
  CHECK(s.open(o) == 0);
  Ctx c;
  setup(c, s);
  std::string mode = argv[3];
  if (mode == "ops") {
    run_ops(c, s);
  } else if (mode == "kill") {
    run_kill(c, s);
  } else if (mode == "pingpong") {
    run_pingpong(c, s);
  } else {
    return 2;
  }
  teardown(c);
  return 0;
}
