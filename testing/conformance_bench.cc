// Host data-path speed through the public API on the selected backend (default emu): 64-byte
// send/recv ping-pong latency between two EPs of one process, and 1 MiB RDMA write bandwidth.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "testing/conformance_util.h"

namespace xpufab::testing {
namespace {

struct Pair {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq[2] = {};
  fid_ep* ep[2] = {};
  fi_addr_t addr[2] = {};
  std::vector<fid_mr*> mrs;
  bool ok = false;

  Pair() {
    if (!getenv("FI_EFA_BACKEND")) select_backend("emu");
    fi_info* h = make_hints(false);
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, h, &info);
    fi_freeinfo(h);
    if (rc || fi_fabric(info->fabric_attr, &fabric, nullptr) ||
        fi_domain(fabric, info, &domain, nullptr))
      return;
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    if (fi_av_open(domain, &aa, &av, nullptr)) return;
    for (int i = 0; i < 2; ++i) {
      fi_cq_attr ca{};
      ca.format = FI_CQ_FORMAT_CONTEXT;
      if (fi_cq_open(domain, &ca, &cq[i], nullptr) || fi_endpoint(domain, info, &ep[i], nullptr) ||
          fi_ep_bind(ep[i], &av->fid, 0) || fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV) ||
          fi_enable(ep[i]))
        return;
      char name[64];
      size_t len = sizeof(name);
      if (fi_getname(&ep[i]->fid, name, &len) || fi_av_insert(av, name, 1, &addr[i], 0, nullptr) != 1)
        return;
    }
    ok = true;
  }
  ~Pair() {
    for (fid_mr* m : mrs) fi_close(&m->fid);
    for (int i = 0; i < 2; ++i) {
      if (ep[i]) fi_close(&ep[i]->fid);
      if (cq[i]) fi_close(&cq[i]->fid);
    }
    if (av) fi_close(&av->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
  fid_mr* reg(void* b, size_t n, uint64_t access) {
    fid_mr* m = nullptr;
    if (fi_mr_reg(domain, b, n, access, 0, 0, 0, &m, nullptr)) return nullptr;
    mrs.push_back(m);
    return m;
  }
  // Spins until `n` completions arrived on cq[i]; false on an error completion.
  bool reap(int i, int n) {
    fi_cq_entry e[16];
    while (n > 0) {
      ssize_t got = fi_cq_read(cq[i], e, n < 16 ? n : 16);
      if (got > 0) n -= static_cast<int>(got);
      else if (got != -FI_EAGAIN) return false;
    }
    return true;
  }
};

void BM_PingPong64(benchmark::State& state) {
  Pair p;
  if (!p.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  std::vector<uint8_t> buf[2] = {std::vector<uint8_t>(64, 1), std::vector<uint8_t>(64, 2)};
  std::vector<uint8_t> rbuf[2] = {std::vector<uint8_t>(64), std::vector<uint8_t>(64)};
  fid_mr* sm[2] = {p.reg(buf[0].data(), 64, FI_SEND), p.reg(buf[1].data(), 64, FI_SEND)};
  fid_mr* rm[2] = {p.reg(rbuf[0].data(), 64, FI_RECV), p.reg(rbuf[1].data(), 64, FI_RECV)};
  for (int i = 0; i < 2; ++i)
    fi_recv(p.ep[i], rbuf[i].data(), 64, fi_mr_desc(rm[i]), FI_ADDR_UNSPEC, nullptr);
  for (auto _ : state) {
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      if (fi_send(p.ep[from], buf[from].data(), 64, fi_mr_desc(sm[from]), p.addr[to], nullptr) ||
          !p.reap(to, 1) || !p.reap(from, 1) ||
          fi_recv(p.ep[to], rbuf[to].data(), 64, fi_mr_desc(rm[to]), FI_ADDR_UNSPEC, nullptr)) {
        state.SkipWithError("ping-pong failed");
        return;
      }
    }
  }
  // One iteration is a round trip; half of it is the one-way latency.
  state.counters["one_way"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2, benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PingPong64)->UseRealTime();

void BM_RdmaWrite1MiB(benchmark::State& state) {
  Pair p;
  if (!p.ok || !(p.info->caps & FI_RMA)) {
    state.SkipWithError("setup failed or no RDMA write");
    return;
  }
  constexpr size_t kSize = 1 << 20;
  constexpr int kDepth = 8;
  std::vector<uint8_t> src(kSize, 0x11), dst(kSize, 0);
  fid_mr* lm = p.reg(src.data(), kSize, FI_WRITE);
  fid_mr* rm = p.reg(dst.data(), kSize, FI_REMOTE_WRITE);
  const uint64_t raddr = reinterpret_cast<uintptr_t>(dst.data());
  int inflight = 0;
  for (auto _ : state) {
    while (inflight >= kDepth) {
      if (!p.reap(0, 1)) {
        state.SkipWithError("write failed");
        return;
      }
      inflight--;
    }
    if (fi_write(p.ep[0], src.data(), kSize, fi_mr_desc(lm), p.addr[1], raddr, fi_mr_key(rm), nullptr)) {
      state.SkipWithError("post failed");
      return;
    }
    inflight++;
  }
  if (!p.reap(0, inflight)) state.SkipWithError("write failed");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kSize);
}
BENCHMARK(BM_RdmaWrite1MiB)->UseRealTime();

}  // namespace
}  // namespace xpufab::testing

BENCHMARK_MAIN();
