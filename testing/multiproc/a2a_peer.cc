// One process of a many-process all-to-all over the emulated EFA, through the public libfabric
// API: `a2a_peer PORT NPROC PER_PEER SERVER|CLIENT`. Every rank sends PER_PEER 64 B messages to
// every other rank, a window at a time, and checks that each one arrived exactly once (the
// payload names its sender and sequence number). Exit status 0: every send completed without
// error and every expected message arrived. An error completion is printed with the rank it
// was sent to, and the endpoint is closed normally (stats and trace files get written).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "testing/support/peer.h"
#include "tools/oob/oob.h"

namespace {

using xpufab::peer::Clock;
using xpufab::peer::Endpoint;

constexpr size_t kMsg = 64;
constexpr int kPosted = 1024;  // receive buffers kept posted
constexpr int kWindow = 64;    // sends in flight per rank
constexpr size_t kSource = kPosted * kMsg;

struct Message {
  uint32_t from;
  uint32_t seq;
};

int run(Endpoint& c, xpufab::oob::Session& s, const std::vector<fi_addr_t>& peers, int per_peer) {
  const int n = s.size(), me = s.rank();
  const int expect = per_peer * (n - 1);
  uint8_t* src = c.at(kSource);
  std::vector<uint32_t> seen(static_cast<size_t>(n) * per_peer, 0);
  std::vector<int> from_count(static_cast<size_t>(n), 0);
  int posted = 0;
  auto post = [&](int slot) {
    PEER_CHECK(fi_recv(c.ep(), c.at(static_cast<size_t>(slot) * kMsg), kMsg, c.desc(), FI_ADDR_UNSPEC,
                       reinterpret_cast<void*>(static_cast<uintptr_t>(slot) + 1)) == 0);
    ++posted;
  };
  for (int i = 0; i < std::min(expect, kPosted); ++i) post(i);
  PEER_CHECK(s.barrier() == 0);
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(90);
  int sent = 0, tx_done = 0, rx_done = 0;
  fi_cq_data_entry e[16];
  while (tx_done < expect || rx_done < expect) {
    while (sent < expect && sent - tx_done < kWindow) {
      const int k = sent % (n - 1);
      const int dst = (me + 1 + k) % n;
      // Each send has its own bytes: the provider may read them until the completion.
      Message m{static_cast<uint32_t>(me), static_cast<uint32_t>(sent / (n - 1))};
      uint8_t* b = src + static_cast<size_t>(sent % kWindow) * kMsg;
      std::memset(b, 0, kMsg);
      std::memcpy(b, &m, sizeof(m));
      // Only sends still in flight share a slot, and at most kWindow are.
      ssize_t rc = fi_send(c.ep(), b, kMsg, c.desc(), peers[dst],
                           reinterpret_cast<void*>(static_cast<uintptr_t>(dst) + 1));
      if (rc == -FI_EAGAIN) break;
      PEER_CHECK(rc == 0);
      ++sent;
    }
    ssize_t got = fi_cq_read(c.cq(), e, 16);
    if (got == -FI_EAGAIN) {
      PEER_CHECK(Clock::now() < end);
      continue;
    }
    if (got == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq(), &err, 0);
      const long to = (err.flags & FI_SEND) ? static_cast<long>(reinterpret_cast<uintptr_t>(err.op_context)) - 1 : -1;
      std::fprintf(stderr, "a2a rank %d: error completion err %d prov_errno %d, send to rank %ld, %.3f s in\n",
                   me, err.err, err.prov_errno, to,
                   std::chrono::duration<double>(Clock::now() - t0).count());
      return 1;
    }
    PEER_CHECK(got > 0);
    for (ssize_t i = 0; i < got; ++i) {
      if (!(e[i].flags & FI_RECV)) {
        ++tx_done;
        continue;
      }
      const int slot = static_cast<int>(reinterpret_cast<uintptr_t>(e[i].op_context) - 1);
      PEER_CHECK(slot >= 0 && slot < kPosted && e[i].len == kMsg);
      Message m;
      std::memcpy(&m, c.at(static_cast<size_t>(slot) * kMsg), sizeof(m));
      PEER_CHECK(m.from < static_cast<uint32_t>(n) && m.from != static_cast<uint32_t>(me));
      PEER_CHECK(m.seq < static_cast<uint32_t>(per_peer));
      uint32_t& mark = seen[static_cast<size_t>(m.from) * per_peer + m.seq];
      PEER_CHECK(mark == 0);  // exactly once
      mark = 1;
      ++from_count[m.from];
      ++rx_done;
      if (posted < expect) post(slot);
    }
  }
  for (int r = 0; r < n; ++r) PEER_CHECK(r == me || from_count[r] == per_peer);
  PEER_CHECK(s.barrier() == 0);
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (me == 0) std::printf("a2a: %d processes, %.0f messages/s\n", n, static_cast<double>(expect) * n / sec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PORT NPROC PER_PEER server|client\n", argv[0]);
    return 2;
  }
  xpufab::oob::Options o;
  o.port = static_cast<uint16_t>(std::atoi(argv[1]));
  o.size = std::atoi(argv[2]);
  const int per_peer = std::atoi(argv[3]);
  o.server = std::strcmp(argv[4], "server") == 0;
  o.timeout_ms = 60000;
  PEER_CHECK(o.size >= 2 && per_peer >= 1);
  xpufab::oob::Session s;
  PEER_CHECK(s.open(o) == 0);
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = kSource + kWindow * kMsg;
  eo.cq_size = 4096;
  int rc;
  {
    Endpoint ep(eo);
    std::vector<xpufab::peer::Address> addrs = xpufab::peer::exchange(s, ep.address());
    std::vector<fi_addr_t> peers(addrs.size(), FI_ADDR_UNSPEC);
    for (size_t r = 0; r < addrs.size(); ++r) {
      if (static_cast<int>(r) != s.rank()) peers[r] = ep.insert(addrs[r]);
    }
    rc = run(ep, s, peers, per_peer);
  }
  return rc;
}
