// One process of a multi-process conformance run, through the public libfabric API only:
//   mp_peer server|client PORT ops       every op type with data verified (client active)
//   mp_peer server|client PORT kill      the server dies after the handshake; the client
//                                        expects UNRESP/UNREACH error completions
//   mp_peer server|client PORT pingpong  64 B send and 1 MiB write round trips, figures printed
// Addresses, MR keys and buffer addresses travel through the OOB rendezvous (tools/oob).
// Exit status 0 means every check passed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/efa_io_defs.h"
#include "testing/support/peer.h"
#include "tools/oob/oob.h"

namespace {

using xpufab::peer::Address;
using xpufab::peer::Clock;
using xpufab::peer::Endpoint;
using xpufab::peer::expect_one;
using xpufab::peer::fill;
using xpufab::peer::has_pattern;

constexpr size_t kBig = 1u << 20;
constexpr int kWaitMs = 20000;
// Buffer layout: [0, kBig) is where the peer writes, [kBig, 2 kBig) what this side sends.
constexpr size_t kTarget = 0;
constexpr size_t kSource = kBig;

struct Pair {
  Endpoint& ep;
  xpufab::oob::Session& s;
  fi_addr_t peer;
  Address remote;
  bool server() const { return s.rank() == 0; }
};

void run_ops(Pair& p) {
  Endpoint& c = p.ep;
  const bool server = p.server();
  uint8_t* tgt = c.at(kTarget);
  uint8_t* src = c.at(kSource);
  fi_cq_data_entry e{};
  // SEND/RECV, 64 B and a full MTU-sized message.
  for (size_t len : {size_t{64}, size_t{8192}}) {
    if (server) {
      std::memset(tgt, 0, len);
      PEER_CHECK(fi_recv(c.ep(), tgt, len, c.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
      PEER_CHECK(p.s.barrier() == 0);
      expect_one(c, &e, kWaitMs);
      PEER_CHECK((e.flags & FI_RECV) && e.len == len && has_pattern(tgt, len, 1));
    } else {
      fill(src, len, 1);
      PEER_CHECK(p.s.barrier() == 0);
      PEER_CHECK(fi_send(c.ep(), src, len, c.desc(), p.peer, nullptr) == 0);
      expect_one(c, &e, kWaitMs);
      PEER_CHECK(e.flags & FI_SEND);
    }
    PEER_CHECK(p.s.barrier() == 0);
  }
  // RDMA WRITE of 1 MiB.
  if (!server) {
    fill(src, kBig, 2);
    PEER_CHECK(fi_write(c.ep(), src, kBig, c.desc(), p.peer, p.remote.addr + kTarget, p.remote.key,
                        nullptr) == 0);
    expect_one(c, &e, kWaitMs);
    PEER_CHECK(e.flags & FI_WRITE);
  }
  PEER_CHECK(p.s.barrier() == 0);
  if (server) PEER_CHECK(has_pattern(tgt, kBig, 2));
  // RDMA WRITE with immediate data: the target sees FI_REMOTE_CQ_DATA.
  if (server) {
    PEER_CHECK(fi_recv(c.ep(), tgt + kBig - 64, 64, c.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  }
  PEER_CHECK(p.s.barrier() == 0);
  if (server) {
    expect_one(c, &e, kWaitMs);
    PEER_CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xabc);
    PEER_CHECK(has_pattern(tgt + 4096, 4096, 3));
  } else {
    fill(src, 4096, 3);
    PEER_CHECK(fi_writedata(c.ep(), src, 4096, c.desc(), 0xabc, p.peer, p.remote.addr + 4096,
                            p.remote.key, nullptr) == 0);
    expect_one(c, &e, kWaitMs);
  }
  PEER_CHECK(p.s.barrier() == 0);
  // RDMA READ of 1 MiB.
  if (server) fill(tgt, kBig, 4);
  PEER_CHECK(p.s.barrier() == 0);
  if (!server) {
    std::memset(src, 0, kBig);
    PEER_CHECK(fi_read(c.ep(), src, kBig, c.desc(), p.peer, p.remote.addr + kTarget, p.remote.key,
                       nullptr) == 0);
    expect_one(c, &e, kWaitMs);
    PEER_CHECK((e.flags & FI_READ) && has_pattern(src, kBig, 4));
  }
  PEER_CHECK(p.s.barrier() == 0);
  std::printf("rank %d: ops ok\n", p.s.rank());
}

// The server dies after one verified exchange; the client's later operations must fail with
// the status hardware gives for a dead peer.
void run_kill(Pair& p) {
  Endpoint& c = p.ep;
  uint8_t* src = c.at(kSource);
  fi_cq_data_entry e{};
  if (p.server()) {
    PEER_CHECK(fi_recv(c.ep(), c.at(kTarget), 64, c.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  }
  PEER_CHECK(p.s.barrier() == 0);
  if (p.server()) {
    expect_one(c, &e, kWaitMs);
    PEER_CHECK(p.s.barrier() == 0);
    raise(SIGKILL);
  }
  PEER_CHECK(fi_send(c.ep(), src, 64, c.desc(), p.peer, nullptr) == 0);
  expect_one(c, &e, kWaitMs);
  PEER_CHECK(p.s.barrier() == 0);
  usleep(200000);  // let it die
  const auto t0 = Clock::now();
  PEER_CHECK(fi_write(c.ep(), src, 4096, c.desc(), p.peer, p.remote.addr, p.remote.key, nullptr) == 0);
  PEER_CHECK(fi_send(c.ep(), src, 64, c.desc(), p.peer, nullptr) == 0);
  for (int i = 0; i < 2; ++i) {
    fi_cq_err_entry err{};
    const int rc = xpufab::peer::wait_one(c, &e, &err, 30000);
    PEER_CHECK(rc == -FI_EAVAIL);
    std::printf("error completion: err %d prov_errno %d after %.0f ms\n", err.err, err.prov_errno,
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    PEER_CHECK(err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE ||
               err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  }
  std::printf("rank %d: kill ok\n", p.s.rank());
}

void run_pingpong(Pair& p) {
  const int iters = 2000, warm = 200;
  const double us =
      xpufab::peer::send_pingpong(p.ep, p.s, p.peer, 64, kTarget, kSource, iters, warm);
  PEER_CHECK(p.s.barrier() == 0);
  // 1 MiB writes, one way, each acknowledged by a 64 B send (a ping-pong of writes).
  const int witers = 100;
  const double sec =
      xpufab::peer::write_pingpong(p.ep, p.s, p.peer, p.remote, kBig, kSource, kSource, witers);
  const double gbs = 2.0 * witers * kBig / sec / 1e9;
  if (!p.server()) std::printf("pingpong 64B_latency_us %.2f write_1MiB_GBps %.3f\n", us, gbs);
  PEER_CHECK(p.s.barrier() == 0);
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
  PEER_CHECK(s.open(o) == 0);
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = 2 * kBig;
  Endpoint ep(eo);
  const std::vector<Address> all = xpufab::peer::exchange(s, ep.address());
  PEER_CHECK(all.size() == 2);
  const Address& remote = all[s.rank() == 0 ? 1 : 0];
  Pair p{ep, s, ep.insert(remote), remote};
  const std::string mode = argv[3];
  if (mode == "ops") {
    run_ops(p);
  } else if (mode == "kill") {
    run_kill(p);
  } else if (mode == "pingpong") {
    run_pingpong(p);
  } else {
    return 2;
  }
  return 0;
}
