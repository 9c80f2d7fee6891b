// Wait sets, poll sets and the Pollable interface, with the core's EQs and a
// provider-side test double (FakeCq) standing in for a CQ or counter.
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "api/core/eq.h"
#include "api/core/pollable.h"
#include "api/core/test_provider.h"
#include "api/core/wait_set.h"
#include "gtest/gtest.h"

namespace xpufab::core {
namespace {

using testing::default_offer;
using testing::ScopedProvider;
using testing::TestProvider;
using Clock = std::chrono::steady_clock;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// What a provider CQ looks like to the core: a fid, a reference count, an
// event test, and optionally an fd that its NIC signals.
class FakeCq : public Pollable {
 public:
  explicit FakeCq(void* context, bool with_fd = false) {
    fid_.fclass = FI_CLASS_CQ;
    fid_.context = context;
    if (with_fd) fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~FakeCq() override {
    if (fd_ >= 0) ::close(fd_);
  }
  fid* pollable_fid() override { return &fid_; }
  FidRefs& pollable_refs() override { return refs_; }
  bool has_event() override { return events_.load() > 0; }
  int pollable_fd() override { return fd_; }

  // A completion produced by the object's own code.
  void complete() {
    events_++;
    wake_watchers();
  }
  // A completion written behind the object's back, announced only by its fd.
  void nic_complete() {
    events_++;
    const uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), ssize_t{sizeof(one)});
  }
  void drain() { events_ = 0; }
  // What the provider's close does.
  int close() {
    int rc = refs_.try_close();
    if (rc == 0) unregister_pollable(this);
    return rc;
  }

  fid fid_{};
  FidRefs refs_;
  std::atomic<int> events_{0};
  int fd_ = -1;
};

class WaitPollTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prov_ = std::make_unique<TestProvider>("waittest", FI_VERSION(1, 0),
                                           default_offer("wait-fab", "wait0"));
    scoped_ = std::make_unique<ScopedProvider>(prov_.get());
    ASSERT_EQ(scoped_->status(), 0);
    fi_fabric_attr attr{};
    attr.name = const_cast<char*>("wait-fab");
    attr.prov_name = const_cast<char*>("waittest");
    ASSERT_EQ(fi_fabric(&attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, nullptr, &domain_, nullptr), 0);
  }
  void TearDown() override {
    for (auto it = fids_.rbegin(); it != fids_.rend(); ++it) EXPECT_EQ(fi_close(*it), 0);
    EXPECT_EQ(fi_close(&domain_->fid), 0);
    EXPECT_EQ(fi_close(&fabric_->fid), 0);
  }

  fid_wait* open_wait(fi_wait_obj obj = FI_WAIT_UNSPEC) {
    fi_wait_attr attr{};
    attr.wait_obj = obj;
    fid_wait* ws = nullptr;
    EXPECT_EQ(fi_wait_open(fabric_, &attr, &ws), 0);
    if (ws) fids_.push_back(&ws->fid);
    return ws;
  }
  fid_poll* open_poll() {
    fi_poll_attr attr{};
    fid_poll* ps = nullptr;
    EXPECT_EQ(fi_poll_open(domain_, &attr, &ps), 0);
    if (ps) fids_.push_back(&ps->fid);
    return ps;
  }
  fid_eq* open_eq(fi_wait_obj obj, fid_wait* ws = nullptr, void* ctx = nullptr) {
    fi_eq_attr attr{};
    attr.wait_obj = obj;
    attr.wait_set = ws;
    fid_eq* eq = nullptr;
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, ctx), 0);
    if (eq) fids_.push_back(&eq->fid);
    return eq;
  }
  // Closes an object opened above ahead of TearDown.
  int close(fid* f) {
    int rc = fi_close(f);
    if (rc == 0) fids_.erase(std::find(fids_.begin(), fids_.end(), f));
    return rc;
  }
  static void post(fid_eq* eq, uint64_t data) {
    fi_eq_entry e{};
    e.data = data;
    ASSERT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  }
  static void consume(fid_eq* eq) {
    uint32_t event;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  }

  std::unique_ptr<TestProvider> prov_;
  std::unique_ptr<ScopedProvider> scoped_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  std::vector<fid*> fids_;
};

// ---- wait sets ------------------------------------------------------------------------------

TEST_F(WaitPollTest, WaitOpenRejectsBadAttributes) {
  fi_wait_attr attr{};
  fid_wait* ws = nullptr;
  EXPECT_EQ(fi_wait_open(fabric_, nullptr, &ws), -FI_EINVAL);
  EXPECT_EQ(fi_wait_open(fabric_, &attr, nullptr), -FI_EINVAL);
  attr.flags = 1;
  EXPECT_EQ(fi_wait_open(fabric_, &attr, &ws), -FI_EBADFLAGS);
  attr.flags = 0;
  for (fi_wait_obj w : {FI_WAIT_NONE, FI_WAIT_SET, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    attr.wait_obj = w;
    EXPECT_EQ(fi_wait_open(fabric_, &attr, &ws), -FI_ENOSYS) << w;
  }
  EXPECT_EQ(ws, nullptr);
}

TEST_F(WaitPollTest, WaitSetHasARealFd) {
  for (fi_wait_obj w : {FI_WAIT_UNSPEC, FI_WAIT_FD}) {
    fid_wait* ws = open_wait(w);
    ASSERT_NE(ws, nullptr);
    EXPECT_EQ(ws->fid.fclass, size_t{FI_CLASS_WAIT});
    int fd = -1;
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
    EXPECT_GE(fd, 0);
    fi_wait_obj obj = FI_WAIT_NONE;
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAITOBJ, &obj), 0);
    EXPECT_EQ(obj, FI_WAIT_FD);
    EXPECT_EQ(fi_control(&ws->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_control(&ws->fid, FI_ENABLE, nullptr), -FI_ENOSYS);
    EXPECT_FALSE(readable(fd));
  }
}

TEST_F(WaitPollTest, WaitTimesOutWithoutEvents) {
  fid_wait* ws = open_wait();
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_wait(ws, 50), -FI_ETIMEDOUT);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
  fid_eq* eq = open_eq(FI_WAIT_SET, ws);
  EXPECT_EQ(fi_wait(ws, 20), -FI_ETIMEDOUT);
  (void)eq;
}

TEST_F(WaitPollTest, EqInAWaitSetWakesIt) {
  fid_wait* ws = open_wait(FI_WAIT_FD);
  fid_eq* eq = open_eq(FI_WAIT_SET, ws);
  int ws_fd = -1, eq_fd = -2;
  ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &ws_fd), 0);
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &eq_fd), 0);
  EXPECT_EQ(eq_fd, ws_fd);  // the EQ waits through its set
  fi_wait_obj obj = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAITOBJ, &obj), 0);
  EXPECT_EQ(obj, FI_WAIT_SET);
  uint32_t event;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), 0, 0), -FI_EINVAL);

  ASSERT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
  EXPECT_FALSE(readable(ws_fd));
  post(eq, 1);
  EXPECT_TRUE(readable(ws_fd));
  EXPECT_EQ(fi_wait(ws, 0), 0);
  EXPECT_EQ(fi_wait(ws, -1), 0);  // still holds the event
  consume(eq);
  EXPECT_EQ(fi_wait(ws, 10), -FI_ETIMEDOUT);
  EXPECT_FALSE(readable(ws_fd));

  std::thread writer([eq] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    post(eq, 2);
  });
  EXPECT_EQ(fi_wait(ws, -1), 0);
  writer.join();
  consume(eq);
}

TEST_F(WaitPollTest, WaitSetIsBusyWhileMembersAreAttached) {
  fid_wait* ws = open_wait();
  fid_eq* eq = open_eq(FI_WAIT_SET, ws);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  ASSERT_EQ(close(&eq->fid), 0);
  EXPECT_EQ(close(&ws->fid), 0);
}

TEST_F(WaitPollTest, ProviderObjectsWakeAWaitSet) {
  fid_wait* ws = open_wait();
  int ctx;
  FakeCq self_signalling(&ctx);
  FakeCq nic_signalled(&ctx, true);
  ASSERT_GE(nic_signalled.fd_, 0);
  ASSERT_EQ(wait_set_attach(ws, &self_signalling), 0);
  ASSERT_EQ(wait_set_attach(ws, &nic_signalled), 0);
  EXPECT_EQ(wait_set_attach(ws, &nic_signalled), -FI_EALREADY);
  EXPECT_EQ(wait_set_attach(nullptr, &nic_signalled), -FI_EINVAL);
  EXPECT_EQ(wait_set_attach(ws, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY);
  EXPECT_EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);

  std::thread t1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    self_signalling.complete();
  });
  EXPECT_EQ(fi_wait(ws, 5000), 0);
  t1.join();
  self_signalling.drain();

  // The NIC's fd wakes the set even though the object itself ran no code.
  std::thread t2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    nic_signalled.nic_complete();
  });
  int fd = -1;
  ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1);
  EXPECT_EQ(fi_wait(ws, 5000), 0);
  t2.join();

  wait_set_detach(ws, &self_signalling);
  wait_set_detach(ws, &self_signalling);  // twice: no-op
  wait_set_detach(ws, &nic_signalled);
  // Detached objects no longer wake it.
  self_signalling.complete();
  EXPECT_EQ(fi_wait(ws, 10), -FI_ETIMEDOUT);
}

TEST_F(WaitPollTest, TrywaitOnAWaitSet) {
  fid_wait* ws = open_wait();
  fid_eq* eq = open_eq(FI_WAIT_SET, ws);
  int fd = -1;
  ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
  fid* fids[] = {&ws->fid};
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  EXPECT_FALSE(readable(fd));
  post(eq, 1);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), -FI_EAGAIN);
  fid* eqs[] = {&eq->fid};
  EXPECT_EQ(fi_trywait(fabric_, eqs, 1), -FI_EAGAIN);
  consume(eq);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  EXPECT_FALSE(readable(fd));  // trywait leaves the fd clear: safe to block on it
}

// ---- poll sets ------------------------------------------------------------------------------

TEST_F(WaitPollTest, PollOpenRejectsBadAttributes) {
  fi_poll_attr attr{};
  fid_poll* ps = nullptr;
  EXPECT_EQ(fi_poll_open(domain_, nullptr, &ps), -FI_EINVAL);
  EXPECT_EQ(fi_poll_open(domain_, &attr, nullptr), -FI_EINVAL);
  attr.flags = 1;
  EXPECT_EQ(fi_poll_open(domain_, &attr, &ps), -FI_EBADFLAGS);
  EXPECT_EQ(ps, nullptr);
}

TEST_F(WaitPollTest, PollReturnsTheContextsOfObjectsWithEvents) {
  fid_poll* ps = open_poll();
  ASSERT_EQ(ps->fid.fclass, size_t{FI_CLASS_POLL});
  int c1, c2, c3;
  fid_eq* eq1 = open_eq(FI_WAIT_NONE, nullptr, &c1);
  fid_eq* eq2 = open_eq(FI_WAIT_FD, nullptr, &c2);
  FakeCq cq(&c3);
  ASSERT_EQ(register_pollable(&cq), 0);
  ASSERT_EQ(fi_poll_add(ps, &eq1->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &eq2->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &cq.fid_, 0), 0);

  void* ctx[4] = {};
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);
  post(eq2, 1);
  cq.complete();
  ASSERT_EQ(fi_poll(ps, ctx, 4), 2);
  EXPECT_EQ(ctx[0], &c2);
  EXPECT_EQ(ctx[1], &c3);
  post(eq1, 1);
  ASSERT_EQ(fi_poll(ps, ctx, 4), 3);
  EXPECT_EQ(ctx[0], &c1);
  // At most `count` contexts.
  ctx[1] = nullptr;
  ASSERT_EQ(fi_poll(ps, ctx, 1), 1);
  EXPECT_EQ(ctx[0], &c1);
  EXPECT_EQ(ctx[1], nullptr);
  EXPECT_EQ(fi_poll(ps, ctx, 0), 0);
  EXPECT_EQ(fi_poll(ps, nullptr, 1), -FI_EINVAL);
  EXPECT_EQ(fi_poll(ps, ctx, -1), -FI_EINVAL);

  consume(eq1);
  consume(eq2);
  cq.drain();
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);

  for (fid* f : {&eq1->fid, &eq2->fid, &cq.fid_}) ASSERT_EQ(fi_poll_del(ps, f, 0), 0);
  EXPECT_EQ(cq.close(), 0);
}

TEST_F(WaitPollTest, PollAddAndDelErrors) {
  fid_poll* ps = open_poll();
  fid_eq* eq = open_eq(FI_WAIT_NONE);
  EXPECT_EQ(fi_poll_add(ps, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_add(ps, &fabric_->fid, 0), -FI_EINVAL);  // not pollable
  EXPECT_EQ(fi_poll_add(ps, &eq->fid, 1), -FI_EBADFLAGS);
  ASSERT_EQ(fi_poll_add(ps, &eq->fid, 0), 0);
  EXPECT_EQ(fi_poll_add(ps, &eq->fid, 0), -FI_EALREADY);
  EXPECT_EQ(fi_poll_del(ps, &eq->fid, 1), -FI_EBADFLAGS);
  EXPECT_EQ(fi_poll_del(ps, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_del(ps, &fabric_->fid, 0), -FI_ENOENT);
  ASSERT_EQ(fi_poll_del(ps, &eq->fid, 0), 0);
  EXPECT_EQ(fi_poll_del(ps, &eq->fid, 0), -FI_ENOENT);
}

TEST_F(WaitPollTest, MembersAndPollSetKeepEachOtherOpen) {
  fid_poll* ps = open_poll();
  fid_eq* eq = open_eq(FI_WAIT_NONE);
  FakeCq cq(nullptr);
  ASSERT_EQ(register_pollable(&cq), 0);
  EXPECT_EQ(register_pollable(&cq), -FI_EALREADY);
  ASSERT_EQ(fi_poll_add(ps, &eq->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(ps, &cq.fid_, 0), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  EXPECT_EQ(cq.close(), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ps->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);  // the poll set holds its domain
  ASSERT_EQ(fi_poll_del(ps, &eq->fid, 0), 0);
  ASSERT_EQ(fi_poll_del(ps, &cq.fid_, 0), 0);
  EXPECT_EQ(cq.close(), 0);
  EXPECT_EQ(close(&eq->fid), 0);
  EXPECT_EQ(close(&ps->fid), 0);
}

TEST_F(WaitPollTest, ClosingObjectsCannotBeAdded) {
  fid_poll* ps = open_poll();
  FakeCq cq(nullptr);
  ASSERT_EQ(register_pollable(&cq), 0);
  ASSERT_EQ(cq.refs_.try_close(), 0);  // closing, not yet unregistered
  EXPECT_EQ(fi_poll_add(ps, &cq.fid_, 0), -FI_EOPBADSTATE);
  Pollable* p = nullptr;
  EXPECT_EQ(acquire_pollable(&cq.fid_, &p), -FI_EOPBADSTATE);
  unregister_pollable(&cq);
  EXPECT_EQ(acquire_pollable(&cq.fid_, &p), -FI_EINVAL);
  EXPECT_EQ(register_pollable(nullptr), -FI_EINVAL);
}

TEST_F(WaitPollTest, ConcurrentPollAndEvents) {
  fid_poll* ps = open_poll();
  fid_eq* eq = open_eq(FI_WAIT_NONE);
  ASSERT_EQ(fi_poll_add(ps, &eq->fid, 0), 0);
  constexpr int kEvents = 2000;
  std::thread writer([eq] {
    fi_eq_entry e{};
    for (int i = 0; i < kEvents;) {
      ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
      if (rc == -FI_EAGAIN) {  // the reader is behind: the queue is full
        std::this_thread::yield();
        continue;
      }
      ASSERT_EQ(rc, ssize_t{sizeof(e)});
      ++i;
    }
  });
  int read = 0;
  while (read < kEvents) {
    void* ctx;
    if (fi_poll(ps, &ctx, 1) == 1) {
      consume(eq);
      ++read;
    }
  }
  writer.join();
  void* ctx;
  EXPECT_EQ(fi_poll(ps, &ctx, 1), 0);
  ASSERT_EQ(fi_poll_del(ps, &eq->fid, 0), 0);
}

}  // namespace
}  // namespace xpufab::core
