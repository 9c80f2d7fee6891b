// One process of a two-process SRD run over the public libfabric API (FI_EFA_EMU_FABRIC picks
// the fabric; a fault plan may come in FI_EFA_EMU_FAULTS):
//
//   srd_peer server|client PORT writedata SIZE[,SIZE...] ITERS
//     Ping-pong of SIZE-byte fi_writedata: each side writes into the other's buffer with remote
//     CQ data and waits for the peer's FI_REMOTE_CQ_DATA completion. The first and last 8 bytes
//     of each write carry the iteration.
//
//   srd_peer server|client PORT send SIZE ITERS [WINDOW]
//     The client keeps WINDOW SIZE-byte fi_send messages in flight (default 1: a ping-pong);
//     the server answers each with one of its own. Every message carries its sequence number.
//
//   srd_peer server|client PORT sendlate SIZE ITERS
//     A ping-pong of one SIZE-byte message where each side posts its receive only after its own
//     send completed (messages meet RNR and are retried).
//
//   srd_peer server|client PORT reopen SIZE ROUNDS
//     The server keeps one endpoint; the client opens a fresh one (fabric, domain, device) each
//     round and closes it at the end. Each round the server inserts the client's address as it
//     is now and sends first, then both exchange a message and an RDMA write each way: a device
//     reopened under the same GID must be reachable at once (a server serving clients one after
//     another).
//
// Every completion must arrive within SRD_PEER_WAIT_MS (default 10000) and succeed, and the data
// must be right. Exit status: 0 passed, 1 a failed check, 3 no completion in time (a hang), 4 an
// error completion. The client prints "RESULT ... us_per_roundtrip X".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "testing/support/peer.h"
#include "tools/oob/oob.h"

namespace {

using xpufab::peer::Address;
using xpufab::peer::Clock;
using xpufab::peer::Endpoint;

constexpr size_t kMaxWindow = 64;

struct Run {
  Endpoint* ep = nullptr;
  xpufab::oob::Session* s = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  Address remote;
  size_t half = 0;  // buffer: [0, half) target / receive slots, [half, 2 half) source
  int wait_ms = 10000;
  const char* role = "";
  bool server() const { return s->rank() == 0; }
  uint8_t* at(size_t off) { return ep->at(off); }
  void* desc() const { return ep->desc(); }
};

// The next completion; exits 3 when none comes in time and 4 on an error completion.
void next_cqe(Run& r, fi_cq_data_entry* e, uint64_t iter) {
  fi_cq_err_entry err{};
  const int rc = xpufab::peer::wait_one(*r.ep, e, &err, r.wait_ms);
  if (rc == 1) return;
  if (rc == -FI_EAVAIL) {
    std::fprintf(stderr, "srd_peer %s: iteration %llu: error completion err %d (%s) prov_errno %d\n", r.role,
                 static_cast<unsigned long long>(iter), err.err, fi_strerror(err.err), err.prov_errno);
    std::exit(4);
  }
  std::fprintf(stderr, "srd_peer %s: iteration %llu: no completion within %d ms\n", r.role,
               static_cast<unsigned long long>(iter), r.wait_ms);
  std::exit(3);
}

void stamp(uint8_t* p, size_t size, uint64_t v) {
  std::memcpy(p, &v, sizeof(v));
  std::memcpy(p + size - sizeof(v), &v, sizeof(v));
}

bool stamped(const uint8_t* p, size_t size, uint64_t v) {
  uint64_t a, b;
  std::memcpy(&a, p, sizeof(a));
  std::memcpy(&b, p + size - sizeof(b), sizeof(b));
  return a == v && b == v;
}

// Completions of a writedata run arrive in any order: this side's write of iteration i may
// complete after the peer's answer to it (and, with unsolicited write-recv, after the peer's
// next write) has arrived.
struct WriteRound {
  uint64_t rx = 0, tx = 0;
};

void next_write_cqe(Run& r, WriteRound* w, size_t size) {
  fi_cq_data_entry e{};
  next_cqe(r, &e, w->rx);
  if (e.flags & FI_REMOTE_CQ_DATA) {
    PEER_CHECK(e.data == (w->rx & 0xffffffffu));
    PEER_CHECK(stamped(r.at(0), size, w->rx + 1));
    ++w->rx;
  } else {
    PEER_CHECK((e.flags & FI_WRITE) != 0);
    ++w->tx;
  }
}

void run_writedata(Run& r, size_t size, uint64_t iters) {
  // Without unsolicited write-recv each write with immediate data consumes a posted receive.
  const bool post_rx = (r.ep->info()->rx_attr->mode & FI_RX_CQ_DATA) != 0;
  uint8_t* src = r.at(r.half);
  WriteRound w;
  PEER_CHECK(r.s->barrier() == 0);
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < iters; ++i) {
    if (post_rx) PEER_CHECK(fi_recv(r.ep->ep(), r.at(0), 0, r.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    if (r.server()) {
      while (w.rx <= i) next_write_cqe(r, &w, size);
    }
    stamp(src, size, i + 1);
    PEER_CHECK(fi_writedata(r.ep->ep(), src, size, r.desc(), i & 0xffffffffu, r.peer, r.remote.addr,
                            r.remote.key, nullptr) == 0);
    if (!r.server()) {
      while (w.rx <= i) next_write_cqe(r, &w, size);
    }
  }
  while (w.tx < iters) next_write_cqe(r, &w, size);
  PEER_CHECK(w.rx == iters);
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(iters);
  if (!r.server()) std::printf("RESULT writedata %zu us_per_roundtrip %.2f\n", size, us);
  std::fflush(stdout);
  PEER_CHECK(r.s->barrier() == 0);
}

void run_send(Run& r, size_t size, uint64_t iters, size_t window) {
  uint8_t* rx = r.at(0);
  uint8_t* tx = r.at(r.half);
  // Receive slot k is reposted once its message was checked. The client has at most WINDOW
  // messages out and the server answers each once, so WINDOW slots bound both directions.
  for (size_t k = 0; k < window; ++k) {
    PEER_CHECK(fi_recv(r.ep->ep(), rx + k * size, size, r.desc(), FI_ADDR_UNSPEC, reinterpret_cast<void*>(k)) == 0);
  }
  PEER_CHECK(r.s->barrier() == 0);
  auto post_send = [&](uint64_t seq) {
    size_t k = seq % window;
    stamp(tx + k * size, size, seq + 1);
    PEER_CHECK(fi_send(r.ep->ep(), tx + k * size, size, r.desc(), r.peer, nullptr) == 0);
  };
  auto t0 = Clock::now();
  uint64_t sent = 0, received = 0, tx_done = 0;
  if (!r.server()) {
    for (; sent < window && sent < iters; ++sent) post_send(sent);
  }
  std::vector<bool> seen(iters, false);
  while (received < iters || tx_done < iters) {
    fi_cq_data_entry e{};
    next_cqe(r, &e, received);
    if (e.flags & FI_RECV) {
      size_t k = reinterpret_cast<size_t>(e.op_context);
      PEER_CHECK(k < window && e.len == size);
      uint64_t v;
      std::memcpy(&v, rx + k * size, sizeof(v));
      PEER_CHECK(v >= 1 && v <= iters && !seen[v - 1] && stamped(rx + k * size, size, v));
      seen[v - 1] = true;
      ++received;
      PEER_CHECK(fi_recv(r.ep->ep(), rx + k * size, size, r.desc(), FI_ADDR_UNSPEC, reinterpret_cast<void*>(k)) == 0);
      if (r.server() || sent < iters) post_send(sent++);
    } else {
      PEER_CHECK((e.flags & FI_SEND) != 0);
      ++tx_done;
    }
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(iters);
  if (!r.server()) std::printf("RESULT send %zu us_per_roundtrip %.2f\n", size, us);
  std::fflush(stdout);
  PEER_CHECK(r.s->barrier() == 0);
}

// The plain ping-pong: each side posts its receive only once its own send completed, so a
// message often meets no receive (RNR) and is retried.
void run_send_late(Run& r, size_t size, uint64_t iters) {
  uint8_t* rx = r.at(0);
  uint8_t* tx = r.at(r.half);
  auto recv_one = [&](uint64_t i) {
    fi_cq_data_entry e{};
    next_cqe(r, &e, i);
    PEER_CHECK((e.flags & FI_RECV) && e.len == size && stamped(rx, size, i + 1));
  };
  auto send_one = [&](uint64_t i) {
    stamp(tx, size, i + 1);
    PEER_CHECK(fi_send(r.ep->ep(), tx, size, r.desc(), r.peer, nullptr) == 0);
    fi_cq_data_entry e{};
    next_cqe(r, &e, i);
    PEER_CHECK((e.flags & FI_SEND) != 0);
  };
  if (r.server()) PEER_CHECK(fi_recv(r.ep->ep(), rx, size, r.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  PEER_CHECK(r.s->barrier() == 0);
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < iters; ++i) {
    if (r.server()) {
      recv_one(i);
      send_one(i);
      if (i + 1 < iters) PEER_CHECK(fi_recv(r.ep->ep(), rx, size, r.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    } else {
      send_one(i);
      PEER_CHECK(fi_recv(r.ep->ep(), rx, size, r.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
      recv_one(i);
    }
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(iters);
  if (!r.server()) std::printf("RESULT sendlate %zu us_per_roundtrip %.2f\n", size, us);
  std::fflush(stdout);
  PEER_CHECK(r.s->barrier() == 0);
}

// One round of `reopen` on an endpoint that is new on the client side.
void reopen_round(Run& r, size_t size, uint64_t round) {
  uint8_t* rx = r.at(0);
  uint8_t* tx = r.at(r.half);
  fi_cq_data_entry e{};
  PEER_CHECK(fi_recv(r.ep->ep(), rx, size, r.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
  PEER_CHECK(r.s->barrier() == 0);  // both receives posted
  const uint64_t v = round * 4 + 1;
  // A send's completion and the peer's answer to it may come in either order.
  auto send_and_receive = [&](uint64_t out, uint64_t in) {
    stamp(tx, size, out);
    PEER_CHECK(fi_send(r.ep->ep(), tx, size, r.desc(), r.peer, nullptr) == 0);
    bool sent = false, got = in == 0;
    while (!sent || !got) {
      next_cqe(r, &e, round);
      if (e.flags & FI_RECV) {
        PEER_CHECK(!got && e.len == size && stamped(rx, size, in));
        got = true;
      } else {
        PEER_CHECK((e.flags & FI_SEND) != 0 && !sent);
        sent = true;
      }
    }
  };
  if (r.server()) {
    send_and_receive(v, v + 1);  // first, to the device that was just opened
  } else {
    next_cqe(r, &e, round);
    PEER_CHECK((e.flags & FI_RECV) && e.len == size && stamped(rx, size, v));
    send_and_receive(v + 1, 0);
  }
  // An RDMA write each way, into the third part of the peer's buffer (nothing else uses it).
  const size_t dst = 2 * r.half;
  stamp(tx, size, v + 2 + (r.server() ? 0 : 1));
  PEER_CHECK(fi_write(r.ep->ep(), tx, size, r.desc(), r.peer, r.remote.addr + dst, r.remote.key, nullptr) == 0);
  next_cqe(r, &e, round);
  PEER_CHECK((e.flags & FI_WRITE) != 0);
  PEER_CHECK(r.s->barrier() == 0);
  PEER_CHECK(stamped(r.at(dst), size, v + 2 + (r.server() ? 1 : 0)));
  PEER_CHECK(r.s->barrier() == 0);
}

void run_reopen(xpufab::oob::Session& s, Run base, size_t size, uint64_t rounds) {
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = 3 * base.half;
  std::unique_ptr<Endpoint> keep;
  if (s.rank() == 0) keep.reset(new Endpoint(eo));
  Address last{};
  bool have_last = false;
  auto t0 = Clock::now();
  for (uint64_t round = 0; round < rounds; ++round) {
    std::unique_ptr<Endpoint> fresh;
    if (s.rank() != 0) fresh.reset(new Endpoint(eo));
    Endpoint* ep = keep ? keep.get() : fresh.get();
    const std::vector<Address> all = xpufab::peer::exchange(s, ep->address());
    PEER_CHECK(all.size() == 2);
    Run r = base;
    r.ep = ep;
    r.remote = all[s.rank() == 0 ? 1 : 0];
    if (s.rank() == 0) {
      // The client's address may stay the same (same GID, same QP number and key): the entry
      // inserted for it already serves.
      const bool same = have_last && r.remote.name_len == last.name_len &&
                        std::memcmp(r.remote.name, last.name, last.name_len) == 0;
      r.peer = same ? base.peer : ep->insert(r.remote);
      base.peer = r.peer;
      last = r.remote;
      have_last = true;
    } else {
      r.peer = ep->insert(r.remote);
    }
    reopen_round(r, size, round);
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(rounds);
  if (s.rank() != 0) std::printf("RESULT reopen %zu us_per_round %.0f\n", size, us);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s server|client PORT writedata|send|sendlate|reopen SIZE ITERS [WINDOW]\n",
                 argv[0]);
    return 2;
  }
  Run r;
  r.role = argv[1];
  if (const char* w = std::getenv("SRD_PEER_WAIT_MS")) r.wait_ms = std::atoi(w);
  std::string mode = argv[3];
  std::vector<size_t> sizes;
  for (const char* p = argv[4];;) {
    char* end = nullptr;
    sizes.push_back(std::strtoull(p, &end, 10));
    if (end == p || (*end != ',' && *end != '\0')) return 2;
    if (*end == '\0') break;
    p = end + 1;
  }
  size_t size = 0;
  for (size_t v : sizes) size = std::max(size, v);
  uint64_t iters = std::strtoull(argv[5], nullptr, 10);
  size_t window = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 1;
  for (size_t v : sizes) PEER_CHECK(v >= 16);
  PEER_CHECK(size >= 16 && iters >= 1 && window >= 1 && window <= kMaxWindow);
  xpufab::oob::Options o;
  o.server = std::string(argv[1]) == "server";
  o.port = static_cast<uint16_t>(std::atoi(argv[2]));
  o.size = 2;
  o.timeout_ms = 30000;
  xpufab::oob::Session s;
  PEER_CHECK(s.open(o) == 0);
  r.s = &s;
  r.half = mode == "send" ? size * window : size;
  if (mode == "reopen") {
    run_reopen(s, r, size, iters);
    return 0;
  }
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = 2 * r.half;
  Endpoint ep(eo);
  const std::vector<Address> all = xpufab::peer::exchange(s, ep.address());
  PEER_CHECK(all.size() == 2);
  r.ep = &ep;
  r.remote = all[s.rank() == 0 ? 1 : 0];
  r.peer = ep.insert(r.remote);
  if (mode == "writedata") {
    for (size_t v : sizes) run_writedata(r, v, iters);
  } else if (mode == "sendlate") {
    run_send_late(r, size, iters);
  } else if (mode == "send") {
    run_send(r, size, iters, window);
  } else {
    return 2;
  }
  return 0;
}
