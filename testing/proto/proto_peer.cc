// One process of a multi-process run of the protocol core on the emulated EFA (the fabric, the
// profile and a fault plan come from FI_EFA_EMU_* in the environment):
//
//   proto_peer server|client PORT NPROCS am
//     Two processes. Each streams active messages to the other (sequence numbers and patterns
//     checked at the receiver, which must see them in order), then an echo of every AM size.
//     The server neither progresses nor knows the client for the first 300 ms: the client's
//     first packets wait at the server for their sender to become a peer, the rest wait for
//     credits, and none may fail (the QPs run without RNR retry, so an RNR would be an error).
//   proto_peer server|client PORT NPROCS tag
//     Two processes. The client sends tagged messages (several tags, the same tag repeatedly,
//     a 4 MiB one) and untagged ones (a 4 MiB one); the server posts its receives only after
//     they all arrived, in another order and with ignore masks, and checks every byte and that
//     same-tag messages matched in the sender's order.
//   proto_peer server|client PORT NPROCS atomic
//     NPROCS >= 2. The server holds one 64-bit word; every client adds 1 to it ITERS times with
//     fetching FI_SUM and then races one FI_CSWAP 0 -> its rank on a second word. The server
//     checks the exact total, that the fetched values are distinct, and that one CSWAP won.
//   proto_peer server|client PORT 2 bench
//     Prints 64 B AM and tagged ping-pong latency, 1 MiB tagged bandwidth, 8-byte fetching
//     FI_SUM round trip.
//
// Exit status 0 on success, 1 on a failed check (with a line naming it).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/proto/harness.h"
#include "tools/oob/oob.h"

namespace {

using namespace xpufab::proto_test;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "proto_peer[%d]: %s:%d: check failed: %s\n", getpid(), __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr uint32_t kStream = 1, kEcho = 2, kEchoBack = 3, kDone = 4;
constexpr uint32_t kKey = 0x7171;
constexpr int kWaitMs = 30000;

struct World {
  xpufab::oob::Session s;
  Stack stack;
  Node* node = nullptr;
  std::vector<NodeAddress> addrs;
  std::vector<uint32_t> peer;  // by rank
  // Registered buffers, freed only after the node: memory must outlive its registration, since
  // the device serves a peer's late repeat of a read (its answer lost or slow) from it.
  std::vector<std::vector<uint8_t>> registered;
  int rank() const { return s.rank(); }
};

void dump(World& w) {
  const proto_ep* ep = w.node->ep();
  const proto_stats& st = ep->stats;
  std::fprintf(stderr,
               "proto_peer[%d] rank %d: tx %lu rx %lu credit_packets %lu stalls %lu reordered %lu unknown %lu "
               "tx_errors %lu rx_errors %lu txq %u tx_free %u comps %u stalled %u\n",
               getpid(), w.rank(), (unsigned long)st.tx_packets, (unsigned long)st.rx_packets,
               (unsigned long)st.credit_packets, (unsigned long)st.credit_stalls, (unsigned long)st.reordered,
               (unsigned long)st.unknown_src, (unsigned long)st.tx_errors, (unsigned long)st.rx_errors, ep->txq.count,
               ep->tx_free_count, ep->comp_count, ep->stalled);
  for (uint32_t i = 0; i < ep->cfg.max_peers; ++i) {
    const proto_peer& p = ep->peers[i];
    if (!p.in_use) continue;
    std::fprintf(stderr, "  peer %u: tx_credits %u tx_seq %u rx_next %u owed %u\n", i, p.tx_credits, p.tx_seq,
                 p.rx_next, p.owed);
  }
}

template <typename Done>
void wait_for(World& w, Done done) {
  if (!pump({w.node}, done, kWaitMs)) {
    dump(w);
    CHECK(!"a wait timed out");
  }
}

proto_comp take(World& w, uint64_t ctx) {
  proto_comp out{};
  wait_for(w, [&] {
    auto& v = w.node->comps();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].op_context != ctx) continue;
      out = v[i];
      v.erase(v.begin() + static_cast<long>(i));
      return true;
    }
    return false;
  });
  return out;
}

void add_peers(World& w) {
  for (size_t r = 0; r < w.addrs.size(); ++r)
    if (static_cast<int>(r) != w.rank()) CHECK(w.node->add_peer(w.addrs[r], &w.peer[r]) == 0);
}

// late_peers: the caller adds the peers itself later (add_peers).
void setup(World& w, bool server, uint16_t port, int nprocs, uint64_t word_addr, bool late_peers) {
  xpufab::oob::Options o;
  o.server = server;
  o.port = port;
  o.size = nprocs;
  CHECK(w.s.open(o) == 0);
  CHECK(w.stack.open() == 0);
  proto_config cfg;
  proto_config_default(&cfg);
  cfg.max_peers = 8;
  cfg.credits = 32;
  if (const char* c = std::getenv("PROTO_RDMA_CHUNK")) cfg.rdma_chunk = static_cast<uint32_t>(std::atoi(c));
  w.node = new Node(&w.stack);
  CHECK(w.node->open(cfg) == 0);
  NodeAddress mine = w.node->address();
  mine.addr = word_addr;
  mine.key = kKey;
  std::vector<std::string> all;
  CHECK(w.s.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), &all) == 0);
  w.addrs.resize(all.size());
  w.peer.assign(all.size(), PROTO_NONE);
  for (size_t r = 0; r < all.size(); ++r) {
    CHECK(all[r].size() == sizeof(NodeAddress));
    std::memcpy(&w.addrs[r], all[r].data(), sizeof(NodeAddress));
  }
  if (!late_peers) add_peers(w);
  CHECK(w.s.barrier() == 0);
}

// Progresses until every packet of ours left (its send completed), then meets the others: a
// process that exits earlier takes its queued packets with it.
void drain(World& w) {
  proto_ep* ep = w.node->ep();
  wait_for(w, [&] { return proto_ep_idle(ep) != 0; });
  CHECK(w.s.barrier() == 0);
}

void expect_clean(World& w) {
  const proto_stats& st = w.node->ep()->stats;
  if (st.tx_errors || st.rx_errors) {
    std::fprintf(stderr, "proto_peer[%d]: tx_errors %lu (last status %u) rx_errors %lu\n", getpid(),
                 static_cast<unsigned long>(st.tx_errors), st.last_tx_status, static_cast<unsigned long>(st.rx_errors));
  }
  CHECK(st.tx_errors == 0 && st.rx_errors == 0);
}

// ---- am ----

struct Stream {
  uint32_t next = 0, got = 0, bad = 0;
  static int on(void* arg, uint32_t, const void* p, uint32_t len) {
    Stream* s = static_cast<Stream*>(arg);
    uint32_t seq = ~0u;
    if (len >= 4) std::memcpy(&seq, p, 4);
    if (seq != s->next || !has_pattern(static_cast<const uint8_t*>(p) + 4, len - 4, seq)) ++s->bad;
    s->next = seq + 1;
    ++s->got;
    return 0;
  }
};

struct EchoBack {
  proto_ep* ep;
  static int on(void* arg, uint32_t src, const void* p, uint32_t len) {
    return proto_am_send(static_cast<EchoBack*>(arg)->ep, src, kEchoBack, p, len, nullptr, 0);
  }
};

struct Last {
  std::vector<uint8_t> data;
  int n = 0;
  static int on(void* arg, uint32_t, const void* p, uint32_t len) {
    Last* l = static_cast<Last*>(arg);
    l->data.assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + len);
    ++l->n;
    return 0;
  }
};

int run_am(World& w) {
  proto_ep* ep = w.node->ep();
  Stream in;
  EchoBack echo{ep};
  Last back;
  CHECK(proto_am_set_handler(ep, kStream, Stream::on, &in) == 0);
  CHECK(proto_am_set_handler(ep, kEcho, EchoBack::on, &echo) == 0);
  CHECK(proto_am_set_handler(ep, kEchoBack, Last::on, &back) == 0);
  if (w.rank() == 0) {
    // The client's first packets arrive from a sender we have neither an AH nor a peer for.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    w.node->poll();
    add_peers(w);
  }
  const uint32_t other = w.peer[w.rank() == 0 ? 1 : 0];
  const uint32_t n = 3000, max = 6000;
  uint32_t sent = 0;
  std::vector<uint8_t> buf(max);
  wait_for(w, [&] {
    while (sent < n) {
      const uint32_t len = 4 + (sent * 977u) % (max - 4);
      std::memcpy(buf.data(), &sent, 4);
      fill(buf.data() + 4, len - 4, sent);
      if (proto_am_send(ep, other, kStream, buf.data(), len, nullptr, 0)) break;
      ++sent;
    }
    // Our own packets must be out too: the peer cannot take them while we wait in a barrier.
    return in.got == n && sent == n && ep->txq.count == 0;
  });
  CHECK(in.bad == 0);
  if (w.rank() == 1) CHECK(ep->stats.credit_stalls > 0);
  if (w.rank() == 0) CHECK(ep->stats.orphans > 0 && ep->norphans == 0);
  CHECK(w.s.barrier() == 0);
  if (w.rank() == 1) {
    for (uint32_t len : {0u, 1u, 64u, 4096u, proto_am_max(ep)}) {
      std::vector<uint8_t> p(len);
      fill(p.data(), len, len + 1);
      const int before = back.n;
      CHECK(proto_am_send(ep, other, kEcho, p.data(), len, nullptr, 0) == 0);
      wait_for(w, [&] { return back.n == before + 1; });
      CHECK(back.data.size() == len && has_pattern(back.data.data(), len, len + 1));
    }
    CHECK(proto_am_send(ep, other, kDone, nullptr, 0, nullptr, 0) == 0);
  } else {
    Last done;
    CHECK(proto_am_set_handler(ep, kDone, Last::on, &done) == 0);
    wait_for(w, [&] { return done.n == 1; });
  }
  drain(w);
  expect_clean(w);
  return 0;
}

// ---- tag ----

int run_tag(World& w) {
  proto_ep* ep = w.node->ep();
  const uint32_t other = w.peer[w.rank() == 0 ? 1 : 0];
  constexpr size_t kBig = 4u << 20;
  constexpr int kSame = 50;
  std::vector<uint8_t>& big = w.registered.emplace_back(kBig);
  uint32_t lkey = 0, rkey = 0;
  CHECK(w.node->reg(big.data(), big.size(), &lkey, &rkey) == 0);
  if (w.rank() == 1) {
    // Tags 0x100..0x10f, then kSame messages of tag 0x7, then the big ones.
    std::vector<std::vector<uint8_t>> small;
    uint64_t ctx = 1;
    for (uint32_t i = 0; i < 16; ++i) small.push_back(std::vector<uint8_t>(100 + i));
    for (uint32_t i = 0; i < kSame; ++i) small.push_back(std::vector<uint8_t>(8 + i));
    for (size_t i = 0; i < small.size(); ++i) {
      fill(small[i].data(), small[i].size(), static_cast<uint32_t>(i));
      proto_buf b{small[i].data(), small[i].size(), 0, 0};
      const uint64_t tag = i < 16 ? 0x100 + i : 0x7;
      wait_for(w, [&] { return proto_send(ep, other, &b, tag, i, FI_TAGGED | FI_REMOTE_CQ_DATA, ctx) == 0; });
      ++ctx;
    }
    fill(big.data(), kBig, 4242);
    proto_buf bb{big.data(), kBig, lkey, rkey};
    CHECK(proto_send(ep, other, &bb, 0xb16, 0, FI_TAGGED, 900) == 0);
    CHECK(proto_send(ep, other, &bb, 0, 0, FI_MSG, 901) == 0);
    for (uint64_t c = 1; c < ctx; ++c) CHECK(take(w, c).err == 0);
    CHECK(take(w, 900).err == 0);
    CHECK(take(w, 901).err == 0);
  } else {
    // Everything small is here before any receive is posted.
    wait_for(w, [&] { return proto_match_unexpected_count(&ep->tm) >= 16 + kSame; });
    std::vector<uint8_t> rx(256);
    // Tags 0x108..0x10f exactly, in reverse; then 0x100..0x107 through an ignore mask, which
    // must take them in arrival order.
    for (int k = 0; k < 16; ++k) {
      const bool masked = k >= 8;
      const uint32_t idx = masked ? static_cast<uint32_t>(k - 8) : static_cast<uint32_t>(15 - k);
      proto_buf b{rx.data(), rx.size(), 0, 0};
      CHECK(proto_recv(ep, w.peer[1], &b, masked ? 0x100 : 0x100 + idx, masked ? 0x7 : 0, FI_TAGGED, 5000 + k) == 0);
      proto_comp c = take(w, 5000 + k);
      CHECK(c.err == 0 && c.tag == 0x100 + idx);
      CHECK(c.len == 100 + idx && c.data == idx && has_pattern(rx.data(), c.len, idx));
      CHECK((c.flags & FI_REMOTE_CQ_DATA) != 0);
    }
    for (int i = 0; i < kSame; ++i) {
      proto_buf b{rx.data(), rx.size(), 0, 0};
      CHECK(proto_recv(ep, PROTO_ADDR_ANY, &b, 0x7, 0, FI_TAGGED, 6000 + i) == 0);
      proto_comp c = take(w, 6000 + i);
      CHECK(c.err == 0 && c.data == static_cast<uint64_t>(16 + i) && c.len == static_cast<uint64_t>(8 + i));
      CHECK(has_pattern(rx.data(), c.len, 16 + i));
    }
    for (uint64_t flags : {FI_TAGGED, FI_MSG}) {
      std::memset(big.data(), 0, kBig);
      proto_buf bb{big.data(), kBig, lkey, rkey};
      CHECK(proto_recv(ep, PROTO_ADDR_ANY, &bb, 0xb16, 0, flags, 7000) == 0);
      proto_comp c = take(w, 7000);
      if (c.err) std::fprintf(stderr, "proto_peer: big receive: err %d prov_errno %d len %lu\n", c.err, c.prov_errno,
                              static_cast<unsigned long>(c.len));
      CHECK(c.err == 0 && c.len == kBig && has_pattern(big.data(), kBig, 4242));
    }
  }
  drain(w);
  expect_clean(w);
  return 0;
}

// ---- atomic ----

alignas(64) uint64_t g_words[8];

int run_atomic(World& w, int iters) {
  proto_ep* ep = w.node->ep();
  if (w.rank() == 0) {
    CHECK(proto_mr_add(ep, reinterpret_cast<uint64_t>(g_words), sizeof(g_words), kKey,
                       FI_REMOTE_READ | FI_REMOTE_WRITE) == 0);
    CHECK(w.s.barrier() == 0);  // the region is there
    Last done;
    CHECK(proto_am_set_handler(ep, kDone, Last::on, &done) == 0);
    const int clients = w.s.size() - 1;
    wait_for(w, [&] { return done.n == clients; });
    std::vector<std::string> all;
    CHECK(w.s.allgather("", &all) == 0);
    std::set<uint64_t> fetched;
    int winners = 0;
    for (int r = 1; r <= clients; ++r) {
      const std::string& blob = all[r];
      CHECK(blob.size() == (static_cast<size_t>(iters) + 1) * 8);
      for (int i = 0; i < iters; ++i) {
        uint64_t v;
        std::memcpy(&v, blob.data() + i * 8, 8);
        fetched.insert(v);
      }
      uint64_t old;
      std::memcpy(&old, blob.data() + iters * 8, 8);
      winners += old == 0;
    }
    CHECK(g_words[0] == static_cast<uint64_t>(clients) * iters);
    CHECK(fetched.size() == static_cast<size_t>(clients) * iters);
    CHECK(*fetched.rbegin() == static_cast<uint64_t>(clients) * iters - 1);
    CHECK(winners == 1);
    CHECK(g_words[1] >= 1 && g_words[1] <= static_cast<uint64_t>(clients));
    std::printf("atomic: total %lu over %d clients, cswap winner rank %lu\n", static_cast<unsigned long>(g_words[0]),
                clients, static_cast<unsigned long>(g_words[1]));
  } else {
    CHECK(w.s.barrier() == 0);
    const uint32_t target = w.peer[0];
    const uint64_t base = w.addrs[0].addr, one = 1;
    std::vector<uint64_t> got(static_cast<size_t>(iters) + 1, ~0ull);
    int posted = 0;
    wait_for(w, [&] {
      while (posted < iters && proto_atomic(ep, target, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &one, nullptr, 1, base,
                                            kKey, &got[posted], 0, 100 + posted) == 0)
        ++posted;
      return static_cast<int>(w.node->comps().size()) == iters;
    });
    for (auto& c : w.node->comps()) CHECK(c.err == 0);
    w.node->comps().clear();
    const uint64_t zero = 0, me = static_cast<uint64_t>(w.rank());
    CHECK(proto_atomic(ep, target, PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT64, &me, &zero, 1, base + 8, kKey,
                       &got[iters], 0, 1) == 0);
    CHECK(take(w, 1).err == 0);
    CHECK(proto_am_send(ep, target, kDone, nullptr, 0, nullptr, 0) == 0);
    std::vector<std::string> all;
    CHECK(w.s.allgather(std::string(reinterpret_cast<const char*>(got.data()), got.size() * 8), &all) == 0);
  }
  drain(w);
  expect_clean(w);
  return 0;
}

// ---- bench ----

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run_bench(World& w) {
  proto_ep* ep = w.node->ep();
  const bool server = w.rank() == 0;
  const uint32_t other = w.peer[server ? 1 : 0];
  const int iters = 2000, warm = 200;
  // AM ping-pong, 64 B.
  {
    Last got;
    CHECK(proto_am_set_handler(ep, kEcho, Last::on, &got) == 0);
    std::vector<uint8_t> p(64, 1);
    double t0 = 0;
    for (int i = 0; i < iters + warm; ++i) {
      if (i == warm) t0 = now_us();
      if (!server) CHECK(proto_am_send(ep, other, kEcho, p.data(), 64, nullptr, 0) == 0);
      wait_for(w, [&] { return got.n == i + 1; });
      if (server) CHECK(proto_am_send(ep, other, kEcho, p.data(), 64, nullptr, 0) == 0);
    }
    if (!server) std::printf("am_pingpong_64B_us %.2f\n", (now_us() - t0) / iters / 2);
  }
  CHECK(w.s.barrier() == 0);
  // Tagged ping-pong, 64 B.
  {
    std::vector<uint8_t> rx(64), tx(64, 2);
    proto_buf rb{rx.data(), 64, 0, 0}, tb{tx.data(), 64, 0, 0};
    double t0 = 0;
    for (int i = 0; i < iters + warm; ++i) {
      if (i == warm) t0 = now_us();
      CHECK(proto_recv(ep, other, &rb, 0x64, 0, FI_TAGGED, 1) == 0);
      if (!server) CHECK(proto_send(ep, other, &tb, 0x64, 0, FI_TAGGED | FI_INJECT, 2) == 0);
      CHECK(take(w, 1).err == 0);
      if (server) CHECK(proto_send(ep, other, &tb, 0x64, 0, FI_TAGGED | FI_INJECT, 2) == 0);
    }
    if (!server) std::printf("tagged_pingpong_64B_us %.2f\n", (now_us() - t0) / iters / 2);
  }
  CHECK(w.s.barrier() == 0);
  // Tagged bandwidth, 1 MiB, window 8: the client sends, the server receives and acks each window.
  {
    const size_t len = 1u << 20;
    const int window = 8, rounds = 40;
    std::vector<uint8_t>& buf = w.registered.emplace_back(len * window);
    uint32_t lkey = 0, rkey = 0;
    CHECK(w.node->reg(buf.data(), buf.size(), &lkey, &rkey) == 0);
    std::vector<uint8_t> ack(8);
    proto_buf ab{ack.data(), 8, 0, 0};
    double t0 = now_us();
    for (int r = 0; r < rounds + 2; ++r) {
      if (r == 2) t0 = now_us();
      if (server) {
        for (int k = 0; k < window; ++k) {
          proto_buf b{buf.data() + k * len, len, lkey, rkey};
          CHECK(proto_recv(ep, other, &b, 0x1, 0, FI_TAGGED, 10 + k) == 0);
        }
        for (int k = 0; k < window; ++k) CHECK(take(w, 10 + k).err == 0);
        CHECK(proto_send(ep, other, &ab, 0x2, 0, FI_TAGGED | FI_INJECT, 0) == 0);
      } else {
        CHECK(proto_recv(ep, other, &ab, 0x2, 0, FI_TAGGED, 3) == 0);
        for (int k = 0; k < window; ++k) {
          proto_buf b{buf.data() + k * len, len, lkey, rkey};
          CHECK(proto_send(ep, other, &b, 0x1, 0, FI_TAGGED, 10 + k) == 0);
        }
        for (int k = 0; k < window; ++k) CHECK(take(w, 10 + k).err == 0);
        CHECK(take(w, 3).err == 0);
      }
    }
    if (!server) {
      const double s = (now_us() - t0) / 1e6;
      std::printf("tagged_bw_1MiB_MBps %.1f\n", static_cast<double>(len) * window * rounds / s / 1e6);
    }
  }
  CHECK(w.s.barrier() == 0);
  // Fetching FI_SUM round trip, 8 bytes, client to server.
  {
    if (server) CHECK(proto_mr_add(ep, reinterpret_cast<uint64_t>(g_words), sizeof(g_words), kKey,
                                   FI_REMOTE_READ | FI_REMOTE_WRITE) == 0);
    CHECK(w.s.barrier() == 0);
    if (!server) {
      const uint64_t one = 1;
      uint64_t old = 0;
      double t0 = 0;
      for (int i = 0; i < iters + warm; ++i) {
        if (i == warm) t0 = now_us();
        CHECK(proto_atomic(ep, other, PROTO_ATOMIC_FETCH, FI_SUM, FI_UINT64, &one, nullptr, 1, w.addrs[0].addr, kKey,
                           &old, 0, 5) == 0);
        CHECK(take(w, 5).err == 0);
      }
      CHECK(old == static_cast<uint64_t>(iters + warm - 1));
      std::printf("fetch_sum_8B_roundtrip_us %.2f\n", (now_us() - t0) / iters);
      CHECK(proto_am_send(ep, other, kDone, nullptr, 0, nullptr, 0) == 0);
    } else {
      Last done;
      CHECK(proto_am_set_handler(ep, kDone, Last::on, &done) == 0);
      wait_for(w, [&] { return done.n == 1; });
    }
  }
  drain(w);
  expect_clean(w);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s server|client PORT NPROCS am|tag|atomic [ITERS]|bench\n", argv[0]);
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  const uint16_t port = static_cast<uint16_t>(std::atoi(argv[2]));
  const int nprocs = std::atoi(argv[3]);
  const std::string mode = argv[4];
  World w;
  // In `am` the server adds its peer only when it starts progressing, 300 ms late.
  setup(w, server, port, nprocs, reinterpret_cast<uint64_t>(g_words), mode == "am" && server);
  int rc = 2;
  if (mode == "am") rc = run_am(w);
  else if (mode == "tag") rc = run_tag(w);
  else if (mode == "atomic") rc = run_atomic(w, argc > 5 ? std::atoi(argv[5]) : 500);
  else if (mode == "bench") rc = run_bench(w);
  delete w.node;
  return rc;
}
