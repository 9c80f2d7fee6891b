// NIC engine figures: message rate (64 B SEND, 64 B RDMA WRITE), CQE latency of one WQE, a 64 B
// ping-pong across shared-memory mailboxes, CPU of an idle device and the effect of 1,000 idle
// QPs. Work is posted and completed through the
// device data path (device/efa_sq.h, efa_rq.h, efa_cq.h), as the provider and kernels do.
//
//   bazel run -c opt //emu:engine_bench
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "device/efa_dp.h"
#include "emu/clock.h"
#include "emu/device.h"
#include "emu/net/shm_fabric.h"
#include "emu/options_env.h"

namespace xpufab {
namespace emu {
namespace {

using namespace ::xpufab::backend;

struct Side {
  std::unique_ptr<EmuDevice> dev;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20);
  efa_sq sq{};
  efa_rq rq{};
  efa_cq cqp{};
  std::vector<uint64_t> scratch_s, scratch_r;
  std::vector<Qp*> idle;
};

bool setup(Side* s, std::shared_ptr<Fabric> fabric, bool engine_thread, int idle_qps) {
  DeviceOptions o;
  o.fabric = std::move(fabric);
  o.engine_thread = engine_thread;
  o.reorder = false;
  o.log = log_to_stderr;
  if (device_options_from_env(&o, nullptr) != 0) return false;
  if (create_device(o, &s->dev) != 0) return false;
  s->dev->alloc_pd(&s->pd);
  MrInitAttr m;
  m.addr = s->buf.data();
  m.length = s->buf.size();
  m.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  s->dev->reg_mr(s->pd, m, &s->mr);
  CqInitAttr c;
  c.entries = 4096;
  s->dev->create_cq(c, &s->cq);
  QpInitAttr q;
  q.pd = s->pd;
  q.send_cq = s->cq;
  q.recv_cq = s->cq;
  q.max_send_wr = 1024;
  q.max_recv_wr = 1024;
  if (s->dev->create_qp(q, &s->qp) != 0) return false;
  auto up = [](Qp* qp) {
    QpAttr a;
    a.state = QpState::kInit;
    a.qkey = 1;
    qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey);
    a.state = QpState::kRtr;
    qp->modify(a, kQpAttrState);
    a.state = QpState::kRts;
    qp->modify(a, kQpAttrState | kQpAttrSqPsn);
  };
  up(s->qp);
  q.max_send_wr = 8;
  q.max_recv_wr = 8;
  for (int i = 0; i < idle_qps; ++i) {
    Qp* qp = nullptr;
    if (s->dev->create_qp(q, &qp) != 0) return false;
    up(qp);
    s->idle.push_back(qp);
  }
  WqAttr sq, rq;
  s->qp->query_wqs(&sq, &rq);
  efa_dp_wq_attr sa = {sq.buffer, sq.entry_size, sq.num_entries, sq.doorbell, sq.max_batch};
  efa_dp_wq_attr ra = {rq.buffer, rq.entry_size, rq.num_entries, rq.doorbell, rq.max_batch};
  s->scratch_s.resize(efa_sq_scratch_size(sa.num_entries) / 8 + 1);
  s->scratch_r.resize(efa_rq_scratch_size(ra.num_entries) / 8 + 1);
  efa_sq_init(&s->sq, &sa, 2, s->scratch_s.data(), s->scratch_s.size() * 8);
  efa_rq_init(&s->rq, &ra, 1, s->scratch_r.data(), s->scratch_r.size() * 8);
  CqAttr ca;
  s->cq->query(&ca);
  efa_dp_cq_attr cqa = {ca.buffer, ca.entry_size, ca.num_entries, ca.doorbell};
  efa_cq_init(&s->cqp, &cqa);
  return true;
}

// Consumes every available CQE, giving slots back; returns how many were TX completions.
int drain(Side* s) {
  int tx = 0;
  efa_dp_cqe c;
  uint64_t ctx;
  while (efa_cq_poll(&s->cqp, &c) == 0) {
    if (c.q_type == EFA_IO_SEND_QUEUE) {
      efa_sq_complete(&s->sq, c.req_id, &ctx);
      ++tx;
    } else {
      efa_rq_complete(&s->rq, c.req_id, &ctx);
      efa_dp_sge sge = {reinterpret_cast<uint64_t>(s->buf.data()), 64, s->mr->lkey()};
      efa_rq_post(&s->rq, &sge, 1, 0);
    }
  }
  return tx;
}

struct Pair {
  Side a, b;
  Ah* ah = nullptr;
  bool ok = false;
  Pair(bool engine_thread, int idle_qps) {
    auto fabric = std::make_shared<InProcFabric>();
    ok = setup(&a, fabric, engine_thread, idle_qps) && setup(&b, fabric, engine_thread, 0);
    if (!ok) return;
    Gid g = b.dev->gid();
    a.dev->create_ah(a.pd, g.data(), &ah);
    Ah* back = nullptr;
    Gid ga = a.dev->gid();
    b.dev->create_ah(b.pd, ga.data(), &back);
    efa_dp_sge sge = {reinterpret_cast<uint64_t>(b.buf.data()), 64, b.mr->lkey()};
    for (int i = 0; i < 1024; ++i) efa_rq_post(&b.rq, &sge, 1, 0);
  }
  efa_dp_wr wr(uint32_t op) {
    efa_dp_wr w;
    std::memset(&w, 0, sizeof(w));
    w.op = op;
    w.ah = ah->ahn();
    w.dest_qpn = static_cast<uint16_t>(b.qp->qpn());
    w.qkey = 1;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(a.buf.data()), 64, a.mr->lkey()};
    w.remote_addr = reinterpret_cast<uint64_t>(b.buf.data() + 4096);
    w.rkey = b.mr->rkey();
    return w;
  }
};

// Message rate with one thread driving both engines (inline mode): the engine work per WQE on
// both ends, plus posting and polling. The thread's time in each device's engine is clocked
// apart: requester_/responder_wqes_per_s are the rates one engine thread sustains doing only
// that end's work (the requester's: fetching and executing WQEs, sending, taking answers and
// writing TX CQEs; the responder's: taking requests, RQ WQEs, RX CQEs and answering).
void rate(benchmark::State& state, uint32_t op) {
  Pair p(false, static_cast<int>(state.range(0)));
  if (!p.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  efa_dp_wr w = p.wr(op);
  constexpr int kBatch = 256;
  std::vector<efa_dp_wr> batch(kBatch, w);
  int64_t done = 0;
  uint64_t requester_ns = 0, responder_ns = 0;
  for (auto _ : state) {
    if (efa_sq_post_batch(&p.a.sq, batch.data(), kBatch, 0) != 0) {
      state.SkipWithError("post failed");
      break;
    }
    int got = 0;
    while (got < kBatch) {
      const uint64_t t0 = clock::mono_ns();
      p.a.dev->step(1024);
      const uint64_t t1 = clock::mono_ns();
      p.b.dev->step(1024);
      const uint64_t t2 = clock::mono_ns();
      requester_ns += t1 - t0;
      responder_ns += t2 - t1;
      drain(&p.b);
      got += drain(&p.a);
    }
    done += kBatch;
  }
  state.SetItemsProcessed(done);
  state.counters["wqes_per_s"] = benchmark::Counter(static_cast<double>(done), benchmark::Counter::kIsRate);
  if (requester_ns != 0 && responder_ns != 0) {
    state.counters["requester_wqes_per_s"] = static_cast<double>(done) * 1e9 / static_cast<double>(requester_ns);
    state.counters["responder_wqes_per_s"] = static_cast<double>(done) * 1e9 / static_cast<double>(responder_ns);
  }
}

// Message rate with each device driven by a thread of its own, as two processes' pollers (or two
// engine threads) drive theirs: this thread posts, drives the requester and takes its CQEs; the
// other drives the responder and reposts its receives. The SQ is kept kDepth deep (a WQE posted
// for each completion), so that both engines work at once: the pair goes at the pace of the
// busier one.
void rate_two_threads(benchmark::State& state, uint32_t op) {
  Pair p(false, 0);
  if (!p.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  std::atomic<bool> stop{false};
  std::thread responder([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (p.b.dev->step(1024) == 0) std::this_thread::yield();
      drain(&p.b);
    }
  });
  efa_dp_wr w = p.wr(op);
  constexpr int kBatch = 256, kDepth = 512;
  std::vector<efa_dp_wr> batch(kDepth, w);
  int64_t done = 0;
  int outstanding = 0;
  bool failed = false;
  for (auto _ : state) {
    int got = 0;
    while (got < kBatch && !failed) {
      if (outstanding < kDepth) {
        const int n = kDepth - outstanding;
        failed = efa_sq_post_batch(&p.a.sq, batch.data(), n, 0) != 0;
        outstanding += n;
      }
      p.a.dev->step(1024);
      const int c = drain(&p.a);
      got += c;
      outstanding -= c;
    }
    if (failed) {
      state.SkipWithError("post failed");
      break;
    }
    done += got;
  }
  while (outstanding > 0 && !failed) {  // the last ones in, before the devices go
    p.a.dev->step(1024);
    outstanding -= drain(&p.a);
  }
  stop.store(true);
  responder.join();
  state.SetItemsProcessed(done);
  state.counters["wqes_per_s"] = benchmark::Counter(static_cast<double>(done), benchmark::Counter::kIsRate);
}

void BM_Send64Rate(benchmark::State& state) { rate(state, EFA_DP_OP_SEND); }
void BM_Write64Rate(benchmark::State& state) { rate(state, EFA_DP_OP_RDMA_WRITE); }
BENCHMARK(BM_Send64Rate)->Arg(0)->Arg(1000);
BENCHMARK(BM_Write64Rate)->Arg(0)->Arg(1000);
void BM_Send64RateTwoThreads(benchmark::State& state) { rate_two_threads(state, EFA_DP_OP_SEND); }
void BM_Write64RateTwoThreads(benchmark::State& state) { rate_two_threads(state, EFA_DP_OP_RDMA_WRITE); }
BENCHMARK(BM_Send64RateTwoThreads)->UseRealTime();
BENCHMARK(BM_Write64RateTwoThreads)->UseRealTime();
// Fixed work for instruction counts, which a loaded machine does not disturb: run each under
// valgrind --tool=callgrind with --benchmark_filter='Count/0/iterations:100$' and ':300$'; the
// difference of the totals over 200 x 256 is the cost of one WQE, setup and start-up excluded.
BENCHMARK(BM_Send64Rate)->Name("BM_Send64Count")->Arg(0)->Iterations(100);
BENCHMARK(BM_Send64Rate)->Name("BM_Send64Count")->Arg(0)->Iterations(300);
BENCHMARK(BM_Write64Rate)->Name("BM_Write64Count")->Arg(0)->Iterations(100);
BENCHMARK(BM_Write64Rate)->Name("BM_Write64Count")->Arg(0)->Iterations(300);

// Post one 64 B RDMA write and wait for its CQE. Arg 0: idle QPs on the requester. Arg 1:
// 0 = the polling thread drives both engines (inline mode); 1 = engine threads do all the work
// while the poller only reads CQ memory and yields its CPU (as a device kernel would); 2 = the
// poller drives its own device through progress() and the peer's engine thread does the rest
// (a host provider).
void BM_CqeLatency(benchmark::State& state) {
  int mode = static_cast<int>(state.range(1));
  bool threads = mode != 0;
  Pair p(threads, static_cast<int>(state.range(0)));
  if (!p.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  efa_dp_wr w = p.wr(EFA_DP_OP_RDMA_WRITE);
  for (auto _ : state) {
    efa_sq_post(&p.a.sq, &w);
    while (drain(&p.a) == 0) {
      if (mode == 0) {
        p.a.dev->step(64);
        p.b.dev->step(64);
      } else if (mode == 1) {
        std::this_thread::yield();
      } else {
        p.a.dev->progress(64);
      }
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CqeLatency)
    ->Args({0, 0})
    ->Args({1000, 0})
    ->Args({0, 1})
    ->Args({1000, 1})
    ->Args({0, 2})
    ->Args({1000, 2})
    ->UseRealTime();

// Drains a CQ, reposting receives and giving SQ slots back; returns the RX completions.
int drain_rx(Side* s) {
  int rx = 0;
  efa_dp_cqe c;
  uint64_t ctx;
  while (efa_cq_poll(&s->cqp, &c) == 0) {
    if (c.q_type == EFA_IO_SEND_QUEUE) {
      efa_sq_complete(&s->sq, c.req_id, &ctx);
    } else {
      efa_rq_complete(&s->rq, c.req_id, &ctx);
      efa_dp_sge sge = {reinterpret_cast<uint64_t>(s->buf.data()), 64, s->mr->lkey()};
      efa_rq_post(&s->rq, &sge, 1, 0);
      ++rx;
    }
  }
  return rx;
}

// 64 B SEND ping-pong between two devices whose packets cross shared-memory mailboxes (two
// ShmFabric objects, as between two processes), one thread driving both: the engine's and the
// fabric's work per round trip without a scheduler in it. The ...Count variants run fixed
// iteration counts for callgrind (as above, the difference of 100 and 300 over 200 round trips).
void BM_ShmPingPong(benchmark::State& state) {
  net::ShmFabricOptions fo;
  const char* tmp = std::getenv("TMPDIR");
  fo.base_dir = tmp != nullptr ? tmp : "/tmp";
  fo.key = "engine_bench" + std::to_string(getpid());
  std::shared_ptr<net::ShmFabric> fa, fb;
  if (net::ShmFabric::create(fo, &fa) != 0 || net::ShmFabric::create(fo, &fb) != 0) {
    state.SkipWithError("shm fabric failed");
    return;
  }
  Side a, b;
  if (!setup(&a, fa, false, 0) || !setup(&b, fb, false, 0)) {
    state.SkipWithError("setup failed");
    return;
  }
  Ah *to_b = nullptr, *to_a = nullptr;
  Gid gb = b.dev->gid(), ga = a.dev->gid();
  a.dev->create_ah(a.pd, gb.data(), &to_b);
  b.dev->create_ah(b.pd, ga.data(), &to_a);
  for (Side* s : {&a, &b}) {
    efa_dp_sge sge = {reinterpret_cast<uint64_t>(s->buf.data()), 64, s->mr->lkey()};
    for (int i = 0; i < 64; ++i) efa_rq_post(&s->rq, &sge, 1, 0);
  }
  auto wr = [](Side* from, Side* to, Ah* ah) {
    efa_dp_wr w;
    std::memset(&w, 0, sizeof(w));
    w.op = EFA_DP_OP_SEND;
    w.ah = ah->ahn();
    w.dest_qpn = static_cast<uint16_t>(to->qp->qpn());
    w.qkey = 1;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(from->buf.data() + 4096), 64, from->mr->lkey()};
    return w;
  };
  const efa_dp_wr ab = wr(&a, &b, to_b), ba = wr(&b, &a, to_a);
  // Each side drives its own device, as the two processes' pollers do.
  auto hop = [](Side* from, const efa_dp_wr& w, Side* to) {
    efa_sq_post(&from->sq, &w);
    from->dev->progress(16);
    while (drain_rx(to) == 0) {
      to->dev->progress(64);
      from->dev->progress(64);
    }
  };
  for (auto _ : state) {
    hop(&a, ab, &b);
    hop(&b, ba, &a);
  }
  // Let the last answers in, so that no request is left outstanding at teardown.
  for (int i = 0; i < 8; ++i) {
    a.dev->progress(64);
    b.dev->progress(64);
    drain_rx(&a);
    drain_rx(&b);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ShmPingPong)->UseRealTime();
BENCHMARK(BM_ShmPingPong)->Name("BM_ShmPingPongCount")->Iterations(100);
BENCHMARK(BM_ShmPingPong)->Name("BM_ShmPingPongCount")->Iterations(300);

// One engine pass of an idle device with N QPs (the cost that must not grow with idle QPs).
void BM_IdleStep(benchmark::State& state) {
  Side s;
  if (!setup(&s, std::make_shared<InProcFabric>(), false, static_cast<int>(state.range(0)))) {
    state.SkipWithError("setup failed");
    return;
  }
  s.dev->step(64);  // the first pass compares the whole doorbell page
  for (auto _ : state) benchmark::DoNotOptimize(s.dev->step(64));
}
BENCHMARK(BM_IdleStep)->Arg(1)->Arg(1000);

// One engine pass through progress() with nothing to do: what a device kernel's polling host
// thread, or a UCT progress loop, pays per idle call. Arg: idle QPs.
void BM_IdleProgress(benchmark::State& state) {
  Side s;
  if (!setup(&s, std::make_shared<InProcFabric>(), false, static_cast<int>(state.range(0)))) {
    state.SkipWithError("setup failed");
    return;
  }
  s.dev->progress(64);
  for (auto _ : state) benchmark::DoNotOptimize(s.dev->progress(64));
}
BENCHMARK(BM_IdleProgress)->Arg(1)->Arg(1000);
BENCHMARK(BM_IdleProgress)->Name("BM_IdleProgressCount")->Arg(1)->Iterations(1000);

// One read of the engine's clock, against the kernel's CLOCK_MONOTONIC it replaces.
void BM_ClockRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(clock::mono_ns());
  state.SetLabel(clock::uses_tsc() ? "tsc" : "monotonic");
}
BENCHMARK(BM_ClockRead);
BENCHMARK(BM_ClockRead)->Name("BM_ClockReadCount")->Iterations(1000);

void BM_MonotonicRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(clock::monotonic_ns());
}
BENCHMARK(BM_MonotonicRead);
BENCHMARK(BM_MonotonicRead)->Name("BM_MonotonicReadCount")->Iterations(1000);

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU an idle device's engine thread uses, as a fraction of one core (the benchmark thread
// sleeps meanwhile). Arg: idle QPs.
void BM_IdleDeviceCpu(benchmark::State& state) {
  Side s;
  if (!setup(&s, std::make_shared<InProcFabric>(), true, static_cast<int>(state.range(0)))) {
    state.SkipWithError("setup failed");
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin phase
  double cpu = 0, wall = 0;
  for (auto _ : state) {
    double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    cpu += cpu_seconds() - c0;
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["core_percent"] = 100.0 * cpu / wall;
}
BENCHMARK(BM_IdleDeviceCpu)->Arg(0)->Arg(1000)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace emu
}  // namespace xpufab
