// The efa provider's event objects as a libfabric program uses them, through the public API only,
// on the emulated device: EQs opened on the fabric and bound to endpoints and AVs, FI_EVENT AVs,
// poll sets and wait sets holding efa CQs and counters, fi_trywait, and the fi_no_* tables of
// the capabilities efa-direct lacks (tagged messages, atomics, collectives).
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "testing/conformance_fixture.h"
#include "testing/conformance_util.h"

namespace xpufab::testing {
namespace {

constexpr size_t kMsg = 64;
// How long a test gives an expected event to show up before it fails (not a timed assertion:
// a healthy run sees the event in microseconds).
constexpr int kGiveUpMs = 5000;

class EventsTest : public OpenDomain<::testing::Test> {
 protected:
  void SetUp() override {
    setenv("FI_EFA_BACKEND", "emu", 1);
    ASSERT_EQ(open_domain(false), 0);
  }

  void TearDown() override { close_domain(); }

  // Registers `f` to be closed at teardown (in reverse order, before the AV and domain).
  fid* keep(fid* f) {
    if (f) closing_.push_back(f);
    return f;
  }
  // Closes `f` now and forgets it.
  void close_now(fid* f) {
    ASSERT_EQ(fi_close(f), 0);
    closing_.erase(std::remove(closing_.begin(), closing_.end(), f), closing_.end());
  }

  fid_eq* eq(fi_wait_obj wait = FI_WAIT_UNSPEC, void* context = nullptr) {
    fi_eq_attr ea{};
    ea.wait_obj = wait;
    fid_eq* e = nullptr;
    EXPECT_EQ(fi_eq_open(fabric_, &ea, &e, context), 0);
    keep(e ? &e->fid : nullptr);
    return e;
  }

  fid_cq* cq(fi_wait_obj wait = FI_WAIT_NONE, fid_wait* ws = nullptr, void* context = nullptr) {
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_CONTEXT;
    ca.wait_obj = wait;
    ca.wait_set = ws;
    fid_cq* c = nullptr;
    EXPECT_EQ(fi_cq_open(domain_, &ca, &c, context), 0);
    keep(c ? &c->fid : nullptr);
    return c;
  }

  fid_cntr* cntr(void* context) {
    fi_cntr_attr ca{};
    ca.events = FI_CNTR_EVENTS_COMP;
    ca.wait_obj = FI_WAIT_NONE;
    fid_cntr* c = nullptr;
    EXPECT_EQ(fi_cntr_open(domain_, &ca, &c, context), 0);
    keep(c ? &c->fid : nullptr);
    return c;
  }

  // An enabled endpoint on av_ with `c` for both directions (and `sc` counting sends); its
  // address goes into av_ and, when `name` is given, is copied there.
  fid_ep* ep(fid_cq* c, fi_addr_t* addr, fid_cntr* sc = nullptr, std::vector<char>* name = nullptr) {
    fid_ep* e = nullptr;
    EXPECT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
    if (!e) return nullptr;
    keep(&e->fid);
    EXPECT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(e, &c->fid, FI_TRANSMIT | FI_RECV), 0);
    if (sc) {
      EXPECT_EQ(fi_ep_bind(e, &sc->fid, FI_SEND), 0);
    }
    EXPECT_EQ(fi_enable(e), 0);
    char buf[64];
    size_t len = sizeof(buf);
    EXPECT_EQ(fi_getname(&e->fid, buf, &len), 0);
    EXPECT_EQ(fi_av_insert(av_, buf, 1, addr, 0, nullptr), 1);
    if (name) name->assign(buf, buf + len);
    return e;
  }

  fid_mr* reg(void* buf, size_t len) {
    fid_mr* mr = nullptr;
    EXPECT_EQ(fi_mr_reg(domain_, buf, len, FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr), 0);
    keep(mr ? &mr->fid : nullptr);
    return mr;
  }

  // One message from `from` to `to` (which posts the receive first), with the given contexts.
  void send_one(fid_ep* from, fi_addr_t to_addr, fid_ep* to, void* send_ctx, void* recv_ctx) {
    ASSERT_EQ(fi_recv(to, rbuf_, kMsg, fi_mr_desc(rmr_), FI_ADDR_UNSPEC, recv_ctx), 0);
    ASSERT_EQ(fi_send(from, sbuf_, kMsg, fi_mr_desc(smr_), to_addr, send_ctx), 0);
  }

  void register_buffers() {
    smr_ = reg(sbuf_, kMsg);
    rmr_ = reg(rbuf_, kMsg);
  }

  char sbuf_[kMsg] = "event objects";
  char rbuf_[kMsg] = {};
  fid_mr* smr_ = nullptr;
  fid_mr* rmr_ = nullptr;
};

// Reads one event, waiting up to kGiveUpMs.
ssize_t read_event(fid_eq* e, uint32_t* event, fi_eq_entry* entry) {
  return fi_eq_sread(e, event, entry, sizeof(*entry), kGiveUpMs, 0);
}

TEST_F(EventsTest, EqBindsToEndpointAndAvAndIsBusyWhileBound) {
  fid_eq* q = eq();
  ASSERT_NE(q, nullptr);
  fid_cq* c = cq();
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  keep(&e->fid);
  ASSERT_EQ(fi_ep_bind(e, &q->fid, 0), 0);
  // One EQ per endpoint.
  EXPECT_EQ(fi_ep_bind(e, &q->fid, 0), -FI_EINVAL);
  ASSERT_EQ(fi_av_bind(av_, &q->fid, 0), 0);
  EXPECT_EQ(fi_av_bind(av_, &q->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&q->fid), -FI_EBUSY);
  // The endpoint works with its EQ bound.
  ASSERT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(e, &c->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(e), 0);
  close_now(&e->fid);
  close_now(&c->fid);
  // Still bound to the AV.
  EXPECT_EQ(fi_close(&q->fid), -FI_EBUSY);
  ASSERT_EQ(fi_close(&av_->fid), 0);
  av_ = nullptr;
  close_now(&q->fid);
  // The fabric is held by the EQ until it closes: with it gone only the domain remains.
  fid_eq* q2 = eq();
  ASSERT_NE(q2, nullptr);
  ASSERT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  close_now(&q2->fid);
}

TEST_F(EventsTest, BindingsOfTheWrongClassAreInvalid) {
  fid_eq* q = eq();
  fid_cq* c = cq();
  fid_ep* e = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &e, nullptr), 0);
  keep(&e->fid);
  fi_poll_attr pa{};
  fid_poll* ps = nullptr;
  ASSERT_EQ(fi_poll_open(domain_, &pa, &ps), 0);
  keep(&ps->fid);
  EXPECT_EQ(fi_ep_bind(e, &ps->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(e, &domain_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_av_bind(av_, &c->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_av_bind(av_, &q->fid, FI_SEND), -FI_EBADFLAGS);
  // An object of another class where an XPU context belongs.
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_CONTEXT;
  ca.xpu_ctx = reinterpret_cast<fid_xpu_ctx*>(c);
  fid_cq* bad = nullptr;
  EXPECT_EQ(fi_cq_open(domain_, &ca, &bad, nullptr), -FI_EINVAL);
  // A CQ naming a wait set must be FI_WAIT_SET, and FI_WAIT_SET needs a wait set.
  ca = fi_cq_attr{};
  ca.wait_obj = FI_WAIT_SET;
  EXPECT_EQ(fi_cq_open(domain_, &ca, &bad, nullptr), -FI_EINVAL);
  ca.wait_set = reinterpret_cast<fid_wait*>(q);
  EXPECT_EQ(fi_cq_open(domain_, &ca, &bad, nullptr), -FI_EINVAL);
}

TEST_F(EventsTest, EventAvReportsInsertsOnItsEq) {
  fid_cq* c = cq();
  fi_addr_t a0, a1;
  std::vector<char> n0, n1;
  ASSERT_NE(ep(c, &a0, nullptr, &n0), nullptr);
  ASSERT_NE(ep(c, &a1, nullptr, &n1), nullptr);
  std::vector<char> both(n0);
  both.insert(both.end(), n1.begin(), n1.end());

  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  aa.flags = FI_EVENT;
  fid_av* eav = nullptr;
  ASSERT_EQ(fi_av_open(domain_, &aa, &eav, nullptr), 0);
  keep(&eav->fid);
  fi_addr_t out[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  int ctx = 0;
  // fi_av(3): an FI_EVENT AV without an EQ cannot report, so it refuses the insert.
  EXPECT_EQ(fi_av_insert(eav, both.data(), 2, out, 0, &ctx), -FI_ENOEQ);

  fid_eq* q = eq(FI_WAIT_UNSPEC);
  ASSERT_EQ(fi_av_bind(eav, &q->fid, 0), 0);
  ASSERT_EQ(fi_av_insert(eav, both.data(), 2, out, 0, &ctx), 0);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(read_event(q, &event, &entry), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_AV_COMPLETE));
  EXPECT_EQ(entry.fid, &eav->fid);
  EXPECT_EQ(entry.context, &ctx);
  EXPECT_EQ(entry.data, 2u);
  EXPECT_NE(out[0], FI_ADDR_NOTAVAIL);
  EXPECT_NE(out[1], FI_ADDR_NOTAVAIL);
  EXPECT_NE(out[0], out[1]);
  // The addresses are usable: what was inserted reads back.
  char addr[64];
  size_t len = sizeof(addr);
  ASSERT_EQ(fi_av_lookup(eav, out[1], addr, &len), 0);
  ASSERT_EQ(len, n1.size());
  EXPECT_EQ(memcmp(addr, n1.data(), len), 0);

  // An empty insert is reported too, with a count of 0.
  int ctx2 = 0;
  ASSERT_EQ(fi_av_insert(eav, nullptr, 0, nullptr, 0, &ctx2), 0);
  ASSERT_EQ(read_event(q, &event, &entry), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_AV_COMPLETE));
  EXPECT_EQ(entry.context, &ctx2);
  EXPECT_EQ(entry.data, 0u);
  // Nothing else was queued.
  EXPECT_EQ(fi_eq_read(q, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
  // Bound: the EQ stays until the AV goes.
  EXPECT_EQ(fi_close(&q->fid), -FI_EBUSY);
  close_now(&eav->fid);
}

TEST_F(EventsTest, EqSreadTimesOutOnAnEmptyQueue) {
  fid_eq* q = eq(FI_WAIT_UNSPEC);
  uint32_t event = 0;
  fi_eq_entry entry{};
  EXPECT_EQ(fi_eq_sread(q, &event, &entry, sizeof(entry), 20, 0), -FI_EAGAIN);
  // An event written from another thread ends a wait that would otherwise time out.
  int ctx = 0;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fi_eq_entry w{&fabric_->fid, &ctx, 7};
    EXPECT_EQ(fi_eq_write(q, FI_NOTIFY, &w, sizeof(w), 0), static_cast<ssize_t>(sizeof(w)));
  });
  EXPECT_EQ(fi_eq_sread(q, &event, &entry, sizeof(entry), -1, 0),
            static_cast<ssize_t>(sizeof(entry)));
  writer.join();
  EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
  EXPECT_EQ(entry.context, &ctx);
  EXPECT_EQ(entry.data, 7u);
}

TEST_F(EventsTest, FdEqIsReadableExactlyWhileAnEventIsQueued) {
  fid_eq* q = eq(FI_WAIT_FD);
  int fd = -1;
  ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  fi_eq_entry w{&fabric_->fid, nullptr, 1};
  ASSERT_EQ(fi_eq_write(q, FI_NOTIFY, &w, sizeof(w), 0), static_cast<ssize_t>(sizeof(w)));
  p.revents = 0;
  ASSERT_EQ(poll(&p, 1, kGiveUpMs), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_read(q, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  p.revents = 0;
  EXPECT_EQ(poll(&p, 1, 0), 0);
}

TEST_F(EventsTest, PollSetReportsCqCounterAndEqContexts) {
  register_buffers();
  int cq_ctx = 0, cntr_ctx = 0, eq_ctx = 0, other_ctx = 0;
  fid_cq* txcq = cq(FI_WAIT_NONE, nullptr, &cq_ctx);
  fid_cq* rxcq = cq(FI_WAIT_NONE, nullptr, &other_ctx);
  fid_cntr* sc = cntr(&cntr_ctx);
  fid_eq* q = eq(FI_WAIT_UNSPEC, &eq_ctx);
  fi_addr_t a_addr, b_addr;
  fid_ep* a = ep(txcq, &a_addr, sc);
  fid_ep* b = ep(rxcq, &b_addr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  fi_poll_attr pa{};
  fid_poll* ps = nullptr;
  ASSERT_EQ(fi_poll_open(domain_, &pa, &ps), 0);
  keep(&ps->fid);
  ASSERT_EQ(fi_poll_add(ps, &txcq->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &sc->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &q->fid, 0), 0);
  void* got[8] = {};
  EXPECT_EQ(fi_poll(ps, got, 8), 0);
  // Members are held: closing one fails until it leaves the set, and the set holds the domain.
  EXPECT_EQ(fi_close(&txcq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&sc->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&q->fid), -FI_EBUSY);

  int send_ctx = 0, recv_ctx = 0;
  send_one(a, b_addr, b, &send_ctx, &recv_ctx);
  fi_eq_entry w{&fabric_->fid, nullptr, 0};
  ASSERT_EQ(fi_eq_write(q, FI_NOTIFY, &w, sizeof(w), 0), static_cast<ssize_t>(sizeof(w)));

  // The send's completion moves the CQ and the counter; the EQ has its event.
  std::set<void*> seen;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGiveUpMs);
  while (seen.size() < 3 && std::chrono::steady_clock::now() < end) {
    const int n = fi_poll(ps, got, 8);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) seen.insert(got[i]);
    if (seen.size() < 3) std::this_thread::yield();
  }
  EXPECT_EQ(seen, (std::set<void*>{&cq_ctx, &cntr_ctx, &eq_ctx}));
  EXPECT_EQ(fi_cntr_read(sc), 1u);

  // The CQ and the EQ still hold their entries; the counter has not moved since it said so.
  int n = fi_poll(ps, got, 8);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(std::set<void*>(got, got + n), (std::set<void*>{&cq_ctx, &eq_ctx}));
  // `count` bounds what is written.
  ASSERT_EQ(fi_poll(ps, got, 1), 1);
  EXPECT_EQ(got[0], &cq_ctx);

  fi_cq_entry ce{};
  ASSERT_EQ(wait_cq(txcq, &ce), 1);
  EXPECT_EQ(ce.op_context, &send_ctx);
  ASSERT_EQ(wait_cq(rxcq, &ce), 1);
  EXPECT_EQ(ce.op_context, &recv_ctx);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_read(q, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(fi_poll(ps, got, 8), 0);

  // The receiver's CQ is not in the set; once removed, the members close normally.
  ASSERT_EQ(fi_poll_del(ps, &txcq->fid, 0), 0);
  ASSERT_EQ(fi_poll_del(ps, &sc->fid, 0), 0);
  ASSERT_EQ(fi_poll_del(ps, &q->fid, 0), 0);
  close_now(&ps->fid);
}

TEST_F(EventsTest, WaitSetWakesOnACqCompletion) {
  register_buffers();
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = nullptr;
  ASSERT_EQ(fi_wait_open(fabric_, &wa, &ws), 0);
  keep(&ws->fid);
  fid_cq* txcq = cq();
  fid_cq* rxcq = cq(FI_WAIT_SET, ws);
  ASSERT_NE(rxcq, nullptr);
  fi_wait_obj obj = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&rxcq->fid, FI_GETWAITOBJ, &obj), 0);
  EXPECT_EQ(obj, FI_WAIT_SET);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY);
  fi_addr_t a_addr, b_addr;
  fid_ep* a = ep(txcq, &a_addr);
  fid_ep* b = ep(rxcq, &b_addr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  EXPECT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
  fid* wsf[1] = {&ws->fid};
  EXPECT_EQ(fi_trywait(fabric_, wsf, 1), 0);
  int recv_ctx = 0, send_ctx = 0;
  ASSERT_EQ(fi_recv(b, rbuf_, kMsg, fi_mr_desc(rmr_), FI_ADDR_UNSPEC, &recv_ctx), 0);
  // The sender posts while this thread sleeps in fi_wait: the receive's CQE wakes it.
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fi_send(a, sbuf_, kMsg, fi_mr_desc(smr_), b_addr, &send_ctx), 0);
  });
  int rc = fi_wait(ws, kGiveUpMs);
  sender.join();
  ASSERT_EQ(rc, 0);
  fi_cq_entry ce{};
  ASSERT_EQ(wait_cq(rxcq, &ce), 1);
  EXPECT_EQ(ce.op_context, &recv_ctx);
  EXPECT_EQ(memcmp(rbuf_, sbuf_, kMsg), 0);
  ASSERT_EQ(wait_cq(txcq, &ce), 1);
  EXPECT_EQ(ce.op_context, &send_ctx);

  // The CQ leaves the set when it closes (after its endpoint).
  close_now(&b->fid);
  close_now(&rxcq->fid);
  close_now(&ws->fid);
}

TEST_F(EventsTest, WaitSetWakesOnACountedCompletionAndOnCntrAdd) {
  register_buffers();
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_FD;
  fid_wait* ws = nullptr;
  ASSERT_EQ(fi_wait_open(fabric_, &wa, &ws), 0);
  keep(&ws->fid);
  fi_cntr_attr ca{};
  ca.events = FI_CNTR_EVENTS_COMP;
  ca.wait_obj = FI_WAIT_SET;
  ca.wait_set = ws;
  fid_cntr* sc = nullptr;
  ASSERT_EQ(fi_cntr_open(domain_, &ca, &sc, nullptr), 0);
  keep(&sc->fid);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY);
  fid_cq* txcq = cq();
  fid_cq* rxcq = cq();
  fi_addr_t a_addr, b_addr;
  fid_ep* a = ep(txcq, &a_addr, sc);
  fid_ep* b = ep(rxcq, &b_addr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);

  // Nobody reads a CQ while this thread sleeps: the send's completion itself must wake it.
  int send_ctx = 0, recv_ctx = 0;
  ASSERT_EQ(fi_recv(b, rbuf_, kMsg, fi_mr_desc(rmr_), FI_ADDR_UNSPEC, &recv_ctx), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fi_send(a, sbuf_, kMsg, fi_mr_desc(smr_), b_addr, &send_ctx), 0);
  });
  // fi_wait may wake early (false positives are allowed), but every wake-up before the count
  // arrives must be a wake-up, never a timeout.
  int rc = 0;
  for (int wakes = 0; rc == 0 && fi_cntr_read(sc) < 1u && wakes < 1000; ++wakes) rc = fi_wait(ws, kGiveUpMs);
  sender.join();
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(fi_cntr_read(sc), 1u);
  fi_cq_entry ce{};
  ASSERT_EQ(wait_cq(txcq, &ce), 1);
  ASSERT_EQ(wait_cq(rxcq, &ce), 1);
  // The wake-up came from the CQ notification, so the counter itself may still report the
  // change once (false positives are allowed); after that nothing is new.
  rc = fi_wait(ws, 0);
  EXPECT_TRUE(rc == 0 || rc == -FI_ETIMEDOUT) << rc;
  EXPECT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);

  std::thread adder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(fi_cntr_add(sc, 5), 0);
  });
  rc = 0;
  for (int wakes = 0; rc == 0 && fi_cntr_read(sc) < 6u && wakes < 1000; ++wakes) rc = fi_wait(ws, kGiveUpMs);
  adder.join();
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(fi_cntr_read(sc), 6u);
}

TEST_F(EventsTest, TrywaitOnCqAndEq) {
  register_buffers();
  fid_cq* txcq = cq(FI_WAIT_FD);
  fid_cq* rxcq = cq(FI_WAIT_FD);
  fid_eq* q = eq(FI_WAIT_UNSPEC);
  fid_eq* none = eq(FI_WAIT_NONE);
  fi_addr_t a_addr, b_addr;
  fid_ep* a = ep(txcq, &a_addr);
  fid_ep* b = ep(rxcq, &b_addr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  fid* both[2] = {&txcq->fid, &q->fid};
  EXPECT_EQ(fi_trywait(fabric_, both, 2), 0);
  // An EQ without a wait object cannot be waited on.
  fid* nowait[1] = {&none->fid};
  EXPECT_EQ(fi_trywait(fabric_, nowait, 1), -FI_EINVAL);
  EXPECT_EQ(fi_trywait(fabric_, both, 0), -FI_EINVAL);

  fi_eq_entry w{&fabric_->fid, nullptr, 0};
  ASSERT_EQ(fi_eq_write(q, FI_NOTIFY, &w, sizeof(w), 0), static_cast<ssize_t>(sizeof(w)));
  EXPECT_EQ(fi_trywait(fabric_, both, 2), -FI_EAGAIN);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_read(q, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(fi_trywait(fabric_, both, 2), 0);

  int send_ctx = 0, recv_ctx = 0;
  send_one(a, b_addr, b, &send_ctx, &recv_ctx);
  // Once the send's completion is there to read, blocking would be wrong.
  int rc = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGiveUpMs);
  while ((rc = fi_trywait(fabric_, both, 2)) == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::yield();
  EXPECT_EQ(rc, -FI_EAGAIN);
  fi_cq_entry ce{};
  ASSERT_EQ(wait_cq(txcq, &ce), 1);
  EXPECT_EQ(ce.op_context, &send_ctx);
  ASSERT_EQ(wait_cq(rxcq, &ce), 1);
  EXPECT_EQ(fi_trywait(fabric_, both, 2), 0);
}

TEST_F(EventsTest, TaggedAtomicAndCollectiveCallsAreRefused) {
  register_buffers();
  fid_cq* c = cq();
  fi_addr_t self;
  fid_ep* e = ep(c, &self);
  ASSERT_NE(e, nullptr);
  void* desc = fi_mr_desc(smr_);
  iovec iov{sbuf_, kMsg};
  fi_msg_tagged tmsg{};
  tmsg.msg_iov = &iov;
  tmsg.desc = &desc;
  tmsg.iov_count = 1;
  tmsg.addr = self;

  EXPECT_EQ(fi_trecv(e, rbuf_, kMsg, desc, self, 1, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_trecvv(e, &iov, &desc, 1, self, 1, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_trecvmsg(e, &tmsg, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_tsend(e, sbuf_, kMsg, desc, self, 1, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_tsendv(e, &iov, &desc, 1, self, 1, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_tsendmsg(e, &tmsg, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_tinject(e, sbuf_, 8, self, 1), -FI_ENOSYS);
  EXPECT_EQ(fi_tsenddata(e, sbuf_, kMsg, desc, 5, self, 1, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_tinjectdata(e, sbuf_, 8, 5, self, 1), -FI_ENOSYS);

  uint64_t operand = 1, compare = 0, result = 0;
  fi_ioc ioc{&operand, 1};
  fi_ioc cmp{&compare, 1};
  fi_ioc res{&result, 1};
  fi_rma_ioc rma{0, 1, 0};
  fi_msg_atomic amsg{};
  amsg.msg_iov = &ioc;
  amsg.desc = &desc;
  amsg.iov_count = 1;
  amsg.addr = self;
  amsg.rma_iov = &rma;
  amsg.rma_iov_count = 1;
  amsg.datatype = FI_UINT64;
  amsg.op = FI_SUM;
  EXPECT_EQ(fi_atomic(e, &operand, 1, desc, self, 0, 0, FI_UINT64, FI_SUM, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_atomicv(e, &ioc, &desc, 1, self, 0, 0, FI_UINT64, FI_SUM, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_atomicmsg(e, &amsg, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_inject_atomic(e, &operand, 1, self, 0, 0, FI_UINT64, FI_SUM), -FI_ENOSYS);
  EXPECT_EQ(fi_fetch_atomic(e, &operand, 1, desc, &result, nullptr, self, 0, 0, FI_UINT64, FI_SUM,
                            nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_fetch_atomicv(e, &ioc, &desc, 1, &res, nullptr, 1, self, 0, 0, FI_UINT64, FI_SUM,
                             nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_fetch_atomicmsg(e, &amsg, &res, nullptr, 1, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_compare_atomic(e, &operand, 1, desc, &compare, nullptr, &result, nullptr, self, 0,
                              0, FI_UINT64, FI_CSWAP, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_compare_atomicv(e, &ioc, &desc, 1, &cmp, nullptr, 1, &res, nullptr, 1, self, 0, 0,
                               FI_UINT64, FI_CSWAP, nullptr),
            -FI_ENOSYS);
  EXPECT_EQ(fi_compare_atomicmsg(e, &amsg, &cmp, nullptr, 1, &res, nullptr, 1, 0), -FI_ENOSYS);
  size_t count = 99;
  EXPECT_EQ(fi_atomicvalid(e, FI_UINT64, FI_SUM, &count), -FI_ENOSYS);
  EXPECT_EQ(fi_fetch_atomicvalid(e, FI_UINT64, FI_SUM, &count), -FI_ENOSYS);
  EXPECT_EQ(fi_compare_atomicvalid(e, FI_UINT64, FI_CSWAP, &count), -FI_ENOSYS);
  fi_atomic_attr attr{};
  EXPECT_EQ(fi_query_atomic(domain_, FI_UINT64, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);

  EXPECT_EQ(fi_barrier(e, self, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_allreduce(e, &operand, 1, desc, &result, nullptr, self, FI_UINT64, FI_SUM, 0,
                         nullptr),
            -FI_ENOSYS);

  // None of it reached the queues: the endpoint still works.
  ASSERT_EQ(fi_recv(e, rbuf_, kMsg, fi_mr_desc(rmr_), FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(e, sbuf_, kMsg, desc, self, nullptr), 0);
  fi_cq_entry ce{};
  EXPECT_EQ(wait_cq(c, &ce), 1);
  EXPECT_EQ(wait_cq(c, &ce), 1);
}

}  // namespace
}  // namespace xpufab::testing
