// The device calls fi_xpu_tsend / fi_xpu_trecv / fi_xpu_atomic / fi_xpu_fetch_atomic /
// fi_xpu_compare_atomic on protocol-fabric endpoints, from kernels on the host XPU at every
// scope, over two protocol-core endpoints on the emulated EFA. The exported handles are filled
// the way handles.h tells the host provider to (EFA_XPU_EP_CAP_PROTO, ep->proto, one CQ for
// both directions, counters), so the calls run exactly as behind fi_ep_export_xpu.
#include <rdma/fi_xpu_device.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "testing/proto/harness.h"
#include "testing/xpu/xpu_test_util.h"

namespace xpufab::testing {
namespace {

using proto_test::fill;
using proto_test::has_pattern;
using proto_test::Node;
using proto_test::Stack;
using runtime::launch;
using runtime::WorkItem;

// One endpoint's device handles: state, its CQ (tagged format) and two counters.
struct DevEp {
  efa_xpu_ep st{};
  efa_xpu_cq cq{};
  efa_xpu_cntr tx{}, rx{};
  uint64_t tx_value = 0, tx_err = 0, rx_value = 0, rx_err = 0;
  efa_xpu_av_entry av[1]{};
  fid_xpu_ep xep{};
  fid_xpu_cq xcq{};

  void make(proto_ep* p, const proto_peer& other) {
    st.fid.fid.fclass = FI_CLASS_EP;
    st.fid.fid.prov_id = FI_XPU_PROV_EFA;
    st.fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(&st);
    st.version = EFA_XPU_VERSION;
    st.size = sizeof(st);
    st.caps = EFA_XPU_EP_CAP_PROTO | EFA_XPU_EP_CAP_RDMA_READ;
    st.proto = p;
    st.tx_cq = st.rx_cq = &cq;
    st.cntr_send = &tx;
    st.cntr_recv = &rx;
    st.cntr_read = &tx;
    st.cntr_write = &tx;
    av[0] = {other.ahn, other.qpn, 1};
    st.av = av;
    st.av_count = 1;
    cq.fid.fid.fclass = FI_CLASS_CQ;
    cq.fid.fid.prov_id = FI_XPU_PROV_EFA;
    cq.fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(&cq);
    cq.version = EFA_XPU_VERSION;
    cq.size = sizeof(cq);
    cq.format = FI_CQ_FORMAT_TAGGED;
    cq.entry_size = sizeof(fi_cq_tagged_entry);
    cq.num_eps = 1;
    cq.eps[0] = &st;
    for (auto [c, v, e] : {std::tuple{&tx, &tx_value, &tx_err}, std::tuple{&rx, &rx_value, &rx_err}}) {
      c->fid.fid.fclass = FI_CLASS_CNTR;
      c->fid.fid.prov_id = FI_XPU_PROV_EFA;
      c->fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(c);
      c->version = EFA_XPU_VERSION;
      c->size = sizeof(*c);
      c->value = v;
      c->err_value = e;
    }
    xep = st.fid;
    xcq = cq.fid;
  }
};

// A registered buffer with its device descriptor and remote key.
struct Buf {
  std::vector<uint8_t> bytes;
  efa_xpu_desc desc{};
  uint32_t rkey = 0;
  uint8_t* data() { return bytes.data(); }
};

class ProtoCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(stack_.open(), 0);
    proto_config cfg;
    proto_config_default(&cfg);
    cfg.max_peers = 4;
    cfg.credits = 16;
    ASSERT_EQ(a_.open(cfg), 0);
    ASSERT_EQ(b_.open(cfg), 0);
    ASSERT_EQ(a_.add_peer(b_.address(), &a_to_b_), 0);
    ASSERT_EQ(b_.add_peer(a_.address(), &b_to_a_), 0);
    const proto_peer& pb = a_.ep()->peers[a_to_b_];
    const proto_peer& pa = b_.ep()->peers[b_to_a_];
    peer_b_ = {pb.ahn, pb.qpn, pb.qkey};
    peer_a_ = {pa.ahn, pa.qpn, pa.qkey};
    da_.make(a_.ep(), pb);
    db_.make(b_.ep(), pa);
  }

  void reg(Node& n, Buf* b, size_t len) {
    b->bytes.assign(len, 0);
    uint32_t lkey = 0;
    ASSERT_EQ(n.reg(b->data(), len, &lkey, &b->rkey), 0);
    b->desc.lkey = lkey;
  }

  // Reads `want` entries of `d`'s CQ from this thread (a work-group of one), progressing `other`'s
  // core meanwhile (the target of atomics, the sender of rendezvous data). Errors are collected.
  void drain(DevEp* d, DevEp* other, size_t want, std::vector<fi_cq_tagged_entry>* out,
             std::vector<fi_cq_err_entry>* errs = nullptr, std::vector<fi_addr_t>* src = nullptr) {
    fi_cq_tagged_entry e[8];
    fi_addr_t from[8];
    for (long spins = 0; out->size() + (errs ? errs->size() : 0) < want && spins < 20000000; ++spins) {
      if (other) (void)fi_xpu_cq_read(&other->xcq, e, 0, FI_XPU_WORK_ITEM);
      const size_t room = std::min<size_t>(8, want - out->size() - (errs ? errs->size() : 0));
      const int64_t n = fi_xpu_cq_readfrom(&d->xcq, e, room, from, FI_XPU_WORK_ITEM);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        ASSERT_EQ(fi_xpu_cq_readerr(&d->xcq, &err, 0, FI_XPU_WORK_ITEM), 1);
        ASSERT_NE(errs, nullptr) << "unexpected error " << err.err;
        errs->push_back(err);
        continue;
      }
      if (n == -FI_EAGAIN) continue;
      ASSERT_GT(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        out->push_back(e[i]);
        if (src) src->push_back(from[i]);
      }
    }
  }

  Stack stack_;
  Node a_{&stack_}, b_{&stack_};
  uint32_t a_to_b_ = 0, b_to_a_ = 0;
  efa_xpu_peer peer_a_{}, peer_b_{};  // b as a's destination, a as b's source
  DevEp da_, db_;
};

void* ctx_of(uint32_t i) { return reinterpret_cast<void*>(uintptr_t{0x1000} + i); }
uint32_t ctx_index(void* c) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(c) - 0x1000); }

// Every work-item receives its own tag; senders post them in the opposite order, so each message
// must find its receive by tag, not by position. Every fourth message is far above the MTU
// (rendezvous), the rest eager; the receiving side drains its CQ at the scope under test.
TEST_F(ProtoCalls, TaggedSendRecvAtEveryScope) {
  const uint32_t mtu = a_.attr().mtu;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const runtime::LaunchConfig cfg = one_group(scope);
    const uint32_t n = cfg.grid * cfg.workgroup_size;
    auto len_of = [&](uint32_t g) -> size_t { return g % 4 == 0 ? 3 * size_t{mtu} + 17 * g : 16 + 5 * g; };
    const size_t slot = 3 * size_t{mtu} + 17 * n;
    Buf src, dst;
    reg(a_, &src, slot * n);
    reg(b_, &dst, slot * n);
    for (uint32_t g = 0; g < n; ++g) fill(src.data() + g * slot, len_of(g), g + 7 * scope);
    const uint64_t tag_base = 0xabcd000000ull + (static_cast<uint64_t>(scope) << 16);
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_trecv(&db_.xep, dst.data() + g * slot, slot, &dst.desc, nullptr, tag_base + g, 0,
                                        ctx_of(g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = n - 1 - it.global_id;
                       if (fi_xpu_tsend(&da_.xep, src.data() + g * slot, len_of(g), &src.desc, 0, &peer_b_,
                                        tag_base + g, ctx_of(100 + g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    // The receiver's kernel reads its CQ collectively; the sender's side is read afterwards.
    std::vector<fi_cq_tagged_entry> rx;
    std::mutex mu;
    std::atomic<int> read_err{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem&) {
                       fi_cq_tagged_entry e[4];
                       size_t got = 0;
                       for (long spins = 0; got < n && spins < 20000000; ++spins) {
                         // The sender waits for credits only its own progress brings back.
                         if (xpu_scope_is_leader(scope)) (void)fi_xpu_cq_read(&da_.xcq, nullptr, 0, FI_XPU_WORK_ITEM);
                         const int64_t k = fi_xpu_cq_read(&db_.xcq, e, 4, scope);
                         if (k == -FI_EAGAIN) continue;
                         if (k < 0) {
                           read_err = static_cast<int>(k);
                           break;
                         }
                         if (xpu_scope_is_leader(scope)) {
                           std::lock_guard<std::mutex> l(mu);
                           rx.insert(rx.end(), e, e + k);
                         }
                         got += static_cast<size_t>(k);
                         xpu_scope_barrier(scope);
                       }
                     }),
              0);
    ASSERT_EQ(read_err.load(), 0);
    ASSERT_EQ(rx.size(), n);
    std::vector<int> seen(n);
    for (const auto& e : rx) {
      const uint32_t g = ctx_index(e.op_context);
      ASSERT_LT(g, n);
      seen[g]++;
      EXPECT_EQ(e.flags, FI_TAGGED | FI_RECV);
      EXPECT_EQ(e.tag, tag_base + g);
      EXPECT_EQ(e.len, len_of(g));
      EXPECT_EQ(e.buf, dst.data() + g * slot);
      EXPECT_TRUE(has_pattern(dst.data() + g * slot, len_of(g), g + 7 * scope)) << g;
    }
    for (uint32_t g = 0; g < n; ++g) EXPECT_EQ(seen[g], 1) << g;
    std::vector<fi_cq_tagged_entry> tx;
    drain(&da_, &db_, n, &tx);
    ASSERT_EQ(tx.size(), n);
    for (const auto& e : tx) {
      EXPECT_EQ(e.flags, FI_TAGGED | FI_SEND);
      EXPECT_GE(ctx_index(e.op_context), 100u);
    }
  }
  // Counters follow the completions (4 scopes of 1 + 4 + 8 + 8 operations).
  EXPECT_EQ(db_.rx_value, 21u);
  EXPECT_EQ(da_.tx_value, 21u);
  EXPECT_EQ(db_.rx_err + da_.tx_err, 0u);
}

// Messages that arrive before their receives wait as unexpected; receives with ignore masks and a
// source take them in arrival order; readfrom names the sender.
TEST_F(ProtoCalls, UnexpectedMessagesIgnoreMaskAndSource) {
  Buf src, dst;
  reg(a_, &src, 6 * 64);
  reg(b_, &dst, 6 * 64);
  for (uint32_t i = 0; i < 6; ++i) {
    fill(src.data() + i * 64, 64, i);
    // Tags 0x50..0x52 then 0x60..0x62.
    ASSERT_EQ(fi_xpu_tsend(&da_.xep, src.data() + i * 64, 64, &src.desc, 0, &peer_b_, (i < 3 ? 0x50 : 0x60) + i % 3,
                           ctx_of(i), 0, FI_XPU_WORK_ITEM),
              0);
  }
  std::vector<fi_cq_tagged_entry> tx;
  drain(&da_, &db_, 6, &tx);
  ASSERT_EQ(tx.size(), 6u);
  // Let every message reach b's unexpected list before any receive is posted.
  for (int i = 0; i < 1000; ++i) (void)fi_xpu_cq_read(&db_.xcq, nullptr, 0, FI_XPU_WORK_ITEM);
  // 0x6? under ignore 0xf: the three 0x6x messages in arrival order, then 0x5x with a source.
  for (uint32_t i = 0; i < 3; ++i)
    ASSERT_EQ(fi_xpu_trecv(&db_.xep, dst.data() + i * 64, 64, &dst.desc, nullptr, 0x60, 0xf, ctx_of(10 + i), 0,
                           FI_XPU_WORK_ITEM),
              0);
  for (uint32_t i = 3; i < 6; ++i)
    ASSERT_EQ(fi_xpu_trecv(&db_.xep, dst.data() + i * 64, 64, &dst.desc, &peer_a_, 0x50, 0x3, ctx_of(10 + i), 0,
                           FI_XPU_WORK_ITEM),
              0);
  std::vector<fi_cq_tagged_entry> rx;
  std::vector<fi_addr_t> from;
  drain(&db_, &da_, 6, &rx, nullptr, &from);
  ASSERT_EQ(rx.size(), 6u);
  std::sort(rx.begin(), rx.end(), [](const auto& x, const auto& y) { return x.op_context < y.op_context; });
  for (uint32_t i = 0; i < 6; ++i) {
    const uint32_t sent = i < 3 ? 3 + i : i - 3;  // which send each receive got
    EXPECT_EQ(rx[i].tag, (sent < 3 ? 0x50u : 0x60u) + sent % 3) << i;
    EXPECT_TRUE(has_pattern(dst.data() + i * 64, 64, sent)) << i;
  }
  for (fi_addr_t f : from) EXPECT_EQ(f, 0u);
  // A source that is no peer of the core is refused before anything is posted.
  efa_xpu_peer nobody = peer_a_;
  nobody.remote_qpn ^= 0x55;
  EXPECT_EQ(fi_xpu_trecv(&db_.xep, dst.data(), 64, &dst.desc, &nobody, 1, 0, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_tsend(&da_.xep, src.data(), 64, &src.desc, 0, &nobody, 1, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_tsend(&da_.xep, src.data(), 64, nullptr, 0, &peer_b_, 1, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_tsend(&da_.xep, src.data(), 64, &src.desc, 0, &peer_b_, 1, nullptr, FI_PEEK, FI_XPU_WORK_ITEM),
            -FI_EBADFLAGS);
}

// A receive shorter than the message completes with FI_ETRUNC, olen and the tag in cq_readerr.
TEST_F(ProtoCalls, TruncationIsAnErrorCompletion) {
  Buf src, dst;
  reg(a_, &src, 256);
  reg(b_, &dst, 256);
  fill(src.data(), 256, 3);
  ASSERT_EQ(fi_xpu_trecv(&db_.xep, dst.data(), 100, &dst.desc, nullptr, 0x77, 0, ctx_of(1), 0, FI_XPU_WORK_ITEM), 0);
  ASSERT_EQ(fi_xpu_tsend(&da_.xep, src.data(), 256, &src.desc, 0, &peer_b_, 0x77, ctx_of(2), 0, FI_XPU_WORK_ITEM), 0);
  std::vector<fi_cq_tagged_entry> rx;
  std::vector<fi_cq_err_entry> errs;
  drain(&db_, &da_, 1, &rx, &errs);
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].err, FI_ETRUNC);
  EXPECT_EQ(errs[0].op_context, ctx_of(1));
  EXPECT_EQ(errs[0].tag, 0x77u);
  EXPECT_EQ(errs[0].olen, 156u);
  EXPECT_EQ(errs[0].len, 100u);
  EXPECT_TRUE(has_pattern(dst.data(), 100, 3));
  EXPECT_EQ(db_.rx_err, 1u);
}

// Fetching adds from every work-item of every scope on one word of b: the total is exact and the
// fetched values are all different; b executes them in its own CQ reads.
TEST_F(ProtoCalls, FetchSumFromEveryScopeIsExact) {
  Buf word, results;
  reg(b_, &word, 64);
  reg(a_, &results, 8 * 64);
  ASSERT_EQ(proto_mr_add(b_.ep(), reinterpret_cast<uintptr_t>(word.data()), 64, word.rkey,
                         FI_REMOTE_READ | FI_REMOTE_WRITE),
            0);
  const uint64_t addr = reinterpret_cast<uintptr_t>(word.data());
  std::vector<uint64_t> fetched;
  uint32_t total = 0;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const runtime::LaunchConfig cfg = one_group(scope);
    const uint32_t n = cfg.grid * cfg.workgroup_size;
    std::atomic<int> bad{0};
    const uint64_t three = 3;
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_fetch_atomic(&da_.xep, &three, 1, nullptr, results.data() + 8 * g, &results.desc,
                                               &peer_b_, addr, word.rkey, FI_UINT64, FI_SUM, ctx_of(g), 0,
                                               scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    std::vector<fi_cq_tagged_entry> done;
    drain(&da_, &db_, n, &done);
    ASSERT_EQ(done.size(), n);
    for (const auto& e : done) EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
    for (uint32_t g = 0; g < n; ++g) {
      uint64_t v;
      std::memcpy(&v, results.data() + 8 * g, 8);
      fetched.push_back(v);
    }
    total += n;
  }
  uint64_t final_value;
  std::memcpy(&final_value, word.data(), 8);
  EXPECT_EQ(final_value, 3u * total);
  std::sort(fetched.begin(), fetched.end());
  for (uint32_t i = 0; i < total; ++i) EXPECT_EQ(fetched[i], 3u * i);
}

// Every work-item of a work-group tries FI_CSWAP 0 -> its id + 1 on one word: exactly one wins.
TEST_F(ProtoCalls, CompareSwapRaceHasOneWinner) {
  Buf word, results;
  reg(b_, &word, 16);
  reg(a_, &results, 4 * 8);
  ASSERT_EQ(proto_mr_add(b_.ep(), reinterpret_cast<uintptr_t>(word.data()), 16, word.rkey, FI_REMOTE_READ | FI_REMOTE_WRITE),
            0);
  const runtime::LaunchConfig cfg = one_group(FI_XPU_WORK_GROUP);
  const uint32_t n = cfg.grid * cfg.workgroup_size;
  std::vector<uint32_t> mine(n);
  std::atomic<int> bad{0};
  const uint32_t zero = 0;
  ASSERT_EQ(launch(cfg,
                   [&](const WorkItem& it) {
                     const uint32_t g = it.global_id;
                     mine[g] = g + 1;
                     if (fi_xpu_compare_atomic(&da_.xep, &mine[g], 1, nullptr, &zero, nullptr, results.data() + 4 * g,
                                               &results.desc, &peer_b_, reinterpret_cast<uintptr_t>(word.data()),
                                               word.rkey, FI_UINT32, FI_CSWAP, ctx_of(g), 0, FI_XPU_WORK_GROUP) != 0)
                       bad++;
                   }),
            0);
  ASSERT_EQ(bad.load(), 0);
  std::vector<fi_cq_tagged_entry> done;
  drain(&da_, &db_, n, &done);
  ASSERT_EQ(done.size(), n);
  uint32_t winners = 0, winner = 0;
  for (uint32_t g = 0; g < n; ++g) {
    uint32_t old;
    std::memcpy(&old, results.data() + 4 * g, 4);
    if (old == 0) {
      winners++;
      winner = g + 1;
    } else {
      EXPECT_GE(old, 1u);
      EXPECT_LE(old, n);
    }
  }
  EXPECT_EQ(winners, 1u);
  uint32_t final_value;
  std::memcpy(&final_value, word.data(), 4);
  EXPECT_EQ(final_value, winner);
}

// Sub-word and plain atomics through the device call against a host reference.
TEST_F(ProtoCalls, PlainAtomicsOnSubWordAndWideTypes) {
  Buf mem;
  reg(b_, &mem, 64);
  ASSERT_EQ(proto_mr_add(b_.ep(), reinterpret_cast<uintptr_t>(mem.data()), 64, mem.rkey, FI_REMOTE_READ | FI_REMOTE_WRITE), 0);
  const uint64_t base = reinterpret_cast<uintptr_t>(mem.data());
  int8_t bytes[4] = {5, -3, 100, 7};
  std::memcpy(mem.data(), bytes, 4);
  const int8_t mins[4] = {1, -9, 101, 7};
  __extension__ typedef unsigned __int128 u128;
  const u128 big = (static_cast<u128>(1) << 64) | 5;
  const u128 before = (static_cast<u128>(7) << 64) | ~uint64_t{0};
  std::memcpy(mem.data() + 16, &before, 16);
  ASSERT_EQ(fi_xpu_atomic(&da_.xep, mins, 4, nullptr, &peer_b_, base, mem.rkey, FI_INT8, FI_MIN, ctx_of(1), 0,
                          FI_XPU_WORK_ITEM),
            0);
  ASSERT_EQ(fi_xpu_atomic(&da_.xep, &big, 1, nullptr, &peer_b_, base + 16, mem.rkey, FI_UINT128, FI_SUM, ctx_of(2), 0,
                          FI_XPU_WORK_ITEM),
            0);
  std::vector<fi_cq_tagged_entry> done;
  drain(&da_, &db_, 2, &done);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& e : done) EXPECT_EQ(e.flags, FI_ATOMIC | FI_WRITE);
  int8_t got[4];
  std::memcpy(got, mem.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], std::min(bytes[i], mins[i])) << i;
  u128 sum;
  std::memcpy(&sum, mem.data() + 16, 16);
  EXPECT_TRUE(sum == before + big);
}

// Refusals before anything is sent, and a bad key answered with the EFA status.
TEST_F(ProtoCalls, BadAtomicsAreRefusedOrFailWithTheEfaStatus) {
  Buf mem, res;
  reg(b_, &mem, 64);
  reg(a_, &res, 64);
  ASSERT_EQ(proto_mr_add(b_.ep(), reinterpret_cast<uintptr_t>(mem.data()), 64, mem.rkey, FI_REMOTE_READ | FI_REMOTE_WRITE), 0);
  const uint64_t addr = reinterpret_cast<uintptr_t>(mem.data());
  const uint64_t one = 1;
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, &peer_b_, addr, mem.rkey, FI_LONG_DOUBLE, FI_SUM, nullptr, 0,
                          FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, &peer_b_, addr, mem.rkey, FI_DOUBLE, FI_BOR, nullptr, 0,
                          FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, &peer_b_, addr, mem.rkey, FI_UINT64, FI_CSWAP, nullptr, 0,
                          FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_xpu_fetch_atomic(&da_.xep, &one, 1, nullptr, res.data(), nullptr, &peer_b_, addr, mem.rkey, FI_UINT64,
                                static_cast<int>(FI_NOOP), nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 0, nullptr, &peer_b_, addr, mem.rkey, FI_UINT64, FI_SUM, nullptr, 0,
                          FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, nullptr, addr, mem.rkey, FI_UINT64, FI_SUM, nullptr, 0,
                          FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, &peer_b_, addr, uint64_t{1} << 40, FI_UINT64, FI_SUM, nullptr,
                          0, FI_XPU_WORK_ITEM),
            -FI_EINVAL);
  EXPECT_EQ(fi_xpu_fetch_atomic(&da_.xep, &one, 1, nullptr, res.data(), nullptr, &peer_b_, addr, mem.rkey, FI_UINT64,
                                FI_SUM, nullptr, FI_INJECT, FI_XPU_WORK_ITEM),
            -FI_EBADFLAGS);
  // A wrong key and a range past the region: error completions with the EFA status, memory untouched.
  ASSERT_EQ(fi_xpu_atomic(&da_.xep, &one, 1, nullptr, &peer_b_, addr, mem.rkey ^ 0x1000, FI_UINT64, FI_SUM,
                          ctx_of(1), 0, FI_XPU_WORK_ITEM),
            0);
  const uint64_t ones[2] = {1, 1};
  ASSERT_EQ(fi_xpu_fetch_atomic(&da_.xep, ones, 2, nullptr, res.data(), nullptr, &peer_b_, addr + 56, mem.rkey,
                                FI_UINT64, FI_SUM, ctx_of(2), 0, FI_XPU_WORK_ITEM),
            0);
  std::vector<fi_cq_tagged_entry> ok;
  std::vector<fi_cq_err_entry> errs;
  drain(&da_, &db_, 2, &ok, &errs);
  EXPECT_TRUE(ok.empty());
  ASSERT_EQ(errs.size(), 2u);
  for (const auto& e : errs) {
    EXPECT_EQ(e.prov_errno, EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
    EXPECT_NE(e.err, 0);
    EXPECT_TRUE(e.flags & FI_ATOMIC);
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(mem.data()[i], 0) << i;
  EXPECT_EQ(da_.tx_err, 2u);
}

// An EP exported without the protocol core (efa-direct) keeps answering -FI_ENOSYS.
TEST_F(ProtoCalls, EfaDirectEndpointHasNoTagsOrAtomics) {
  da_.st.caps &= ~EFA_XPU_EP_CAP_PROTO;
  uint64_t v = 0;
  EXPECT_EQ(fi_xpu_tsend(&da_.xep, &v, 8, nullptr, 0, &peer_b_, 1, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_trecv(&da_.xep, &v, 8, nullptr, nullptr, 1, 0, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
  EXPECT_EQ(fi_xpu_atomic(&da_.xep, &v, 1, nullptr, &peer_b_, 0, 0, FI_UINT64, FI_SUM, nullptr, 0, FI_XPU_WORK_ITEM),
            -FI_ENOSYS);
  da_.st.caps |= EFA_XPU_EP_CAP_PROTO;
}

}  // namespace
}  // namespace xpufab::testing
