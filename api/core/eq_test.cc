#include "api/core/eq.h"

#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "api/core/test_provider.h"
#include "api/core/trywait.h"
#include "gtest/gtest.h"

namespace xpufab::core {
namespace {

using testing::default_offer;
using testing::ScopedProvider;
using testing::TestProvider;
using Clock = std::chrono::steady_clock;

// True when poll() reports `fd` readable right now.
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

class EqTest : public ::testing::Test {
 protected:
  void SetUp() override { open_fabric(FI_VERSION(2, 7)); }
  void TearDown() override {
    for (fid_eq* eq : eqs_) EXPECT_EQ(fi_close(&eq->fid), 0);
    if (fabric_) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
  }

  void open_fabric(uint32_t api_version) {
    prov_ = std::make_unique<TestProvider>("eqtest", FI_VERSION(1, 0),
                                           default_offer("eq-fab", "eq0"), api_version);
    scoped_ = std::make_unique<ScopedProvider>(prov_.get());
    ASSERT_EQ(scoped_->status(), 0);
    fi_fabric_attr attr{};
    attr.name = const_cast<char*>("eq-fab");
    attr.prov_name = const_cast<char*>("eqtest");
    attr.api_version = api_version;  // what the application asked fi_getinfo for
    ASSERT_EQ(fi_fabric(&attr, &fabric_, nullptr), 0);
  }

  // Opens an EQ closed by TearDown.
  fid_eq* open(fi_wait_obj wait_obj = FI_WAIT_UNSPEC, size_t size = 0, void* ctx = nullptr) {
    fi_eq_attr attr{};
    attr.size = size;
    attr.flags = FI_WRITE;
    attr.wait_obj = wait_obj;
    fid_eq* eq = nullptr;
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, ctx), 0);
    if (eq) eqs_.push_back(eq);
    return eq;
  }

  // Closes an EQ opened with open() before TearDown.
  void close(fid_eq* eq) {
    ASSERT_EQ(fi_close(&eq->fid), 0);
    eqs_.erase(std::find(eqs_.begin(), eqs_.end(), eq));
  }

  static ssize_t write_entry(fid_eq* eq, uint32_t event, void* ctx, uint64_t data) {
    fi_eq_entry e{};
    e.fid = &eq->fid;
    e.context = ctx;
    e.data = data;
    return fi_eq_write(eq, event, &e, sizeof(e), 0);
  }

  static ssize_t write_error(fid_eq* eq, int err, const void* data, size_t size) {
    fi_eq_err_entry e{};
    e.fid = &eq->fid;
    e.context = reinterpret_cast<void*>(0x77);
    e.data = 9;
    e.err = err;
    e.prov_errno = -err;
    e.err_data = const_cast<void*>(data);
    e.err_data_size = size;
    return fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), kEqWriteError);
  }

  std::unique_ptr<TestProvider> prov_;
  std::unique_ptr<ScopedProvider> scoped_;
  fid_fabric* fabric_ = nullptr;
  std::vector<fid_eq*> eqs_;
};

TEST_F(EqTest, OpenRejectsBadAttributes) {
  fid_eq* eq = nullptr;
  fi_eq_attr attr{};
  EXPECT_EQ(fi_eq_open(fabric_, nullptr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_eq_open(fabric_, &attr, nullptr, nullptr), -FI_EINVAL);
  attr.flags = FI_SEND;
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EBADFLAGS);
  attr.flags = 0;
  for (fi_wait_obj w : {FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD}) {
    attr.wait_obj = w;
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_ENOSYS) << w;
  }
  attr.wait_obj = FI_WAIT_SET;
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL);
  fid_eq* other = open();
  attr.wait_set = reinterpret_cast<fid_wait*>(other);  // an EQ is not a wait set
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
}

TEST_F(EqTest, OpenSetsTheFid) {
  int ctx;
  fid_eq* eq = open(FI_WAIT_NONE, 0, &ctx);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(eq->fid.fclass, size_t{FI_CLASS_EQ});
  EXPECT_EQ(eq->fid.context, &ctx);
  EXPECT_TRUE(is_eq(&eq->fid));
  EXPECT_FALSE(is_eq(&fabric_->fid));
  EXPECT_FALSE(is_eq(nullptr));
}

TEST_F(EqTest, WriteThenReadReturnsTheEntry) {
  fid_eq* eq = open(FI_WAIT_NONE);
  int ctx;
  EXPECT_EQ(write_entry(eq, FI_AV_COMPLETE, &ctx, 42), ssize_t{sizeof(fi_eq_entry)});
  uint32_t event = 0;
  fi_eq_entry e{};
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(event, uint32_t{FI_AV_COMPLETE});
  EXPECT_EQ(e.fid, &eq->fid);
  EXPECT_EQ(e.context, &ctx);
  EXPECT_EQ(e.data, 42u);
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), -FI_EAGAIN);
}

TEST_F(EqTest, EventsComeOutInOrder) {
  fid_eq* eq = open(FI_WAIT_NONE);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_GT(write_entry(eq, FI_MR_COMPLETE, nullptr, i), 0);
  for (uint64_t i = 0; i < 10; ++i) {
    uint32_t event;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
    EXPECT_EQ(e.data, i);
  }
}

TEST_F(EqTest, PeekLeavesTheEventQueued) {
  fid_eq* eq = open(FI_WAIT_NONE);
  ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 5), 0);
  uint32_t event = 99;
  fi_eq_entry e{};
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), FI_PEEK), ssize_t{sizeof(e)});
  EXPECT_EQ(event, uint32_t{FI_NOTIFY});
  EXPECT_EQ(e.data, 5u);
  e = {};
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(e.data, 5u);
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), FI_PEEK), -FI_EAGAIN);
}

TEST_F(EqTest, ShortBufferIsTooSmallAndKeepsTheEvent) {
  fid_eq* eq = open(FI_WAIT_NONE);
  ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 7), 0);
  uint32_t event = 99;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e) - 1, 0), -FI_ETOOSMALL);
  EXPECT_EQ(event, 99u);
  EXPECT_EQ(fi_eq_read(eq, &event, nullptr, 0, 0), -FI_ETOOSMALL);
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e) + 8, 0), ssize_t{sizeof(e)});
  EXPECT_EQ(e.data, 7u);
}

TEST_F(EqTest, CmEntryCarriesItsPrivateData) {
  fid_eq* eq = open(FI_WAIT_NONE);
  const size_t len = sizeof(fi_eq_cm_entry) + 16;
  std::vector<uint8_t> in(len), out(len + 32);
  auto* cm = reinterpret_cast<fi_eq_cm_entry*>(in.data());
  cm->fid = &eq->fid;
  cm->info = nullptr;
  for (int i = 0; i < 16; ++i) cm->data[i] = static_cast<uint8_t>(i * 3);
  ASSERT_EQ(fi_eq_write(eq, FI_CONNREQ, in.data(), len, 0), ssize_t(len));
  uint32_t event;
  ASSERT_EQ(fi_eq_read(eq, &event, out.data(), out.size(), 0), ssize_t(len));
  EXPECT_EQ(event, uint32_t{FI_CONNREQ});
  EXPECT_EQ(memcmp(in.data(), out.data(), len), 0);
}

TEST_F(EqTest, ReadAndWriteRejectBadArguments) {
  fid_eq* eq = open(FI_WAIT_NONE, 2);
  fi_eq_entry e{};
  uint32_t event;
  EXPECT_EQ(fi_eq_read(eq, nullptr, &e, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_read(eq, &event, nullptr, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), FI_SEND), -FI_EBADFLAGS);
  EXPECT_EQ(fi_eq_readerr(eq, nullptr, 0), -FI_EINVAL);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq, &err, FI_SEND), -FI_EBADFLAGS);
  EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, nullptr, 8, 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), FI_SEND), -FI_EBADFLAGS);
  EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &err, sizeof(err) - 1, kEqWriteError), -FI_EINVAL);
  // attr.size bounds what fi_eq_write may queue.
  EXPECT_GT(write_entry(eq, FI_NOTIFY, nullptr, 1), 0);
  EXPECT_GT(write_entry(eq, FI_NOTIFY, nullptr, 2), 0);
  EXPECT_EQ(write_entry(eq, FI_NOTIFY, nullptr, 3), -FI_EAGAIN);
  EXPECT_EQ(write_error(eq, FI_EIO, nullptr, 0), -FI_EAGAIN);
  // A zero-length event is an event.
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, nullptr, 0, 0), 0);
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), 0);
}

TEST_F(EqTest, ErrorMakesReadReturnEavail) {
  fid_eq* eq = open(FI_WAIT_NONE);
  const char detail[] = "remote went away";
  ASSERT_EQ(write_error(eq, FI_ECONNABORTED, detail, sizeof(detail)),
            ssize_t{sizeof(fi_eq_err_entry)});
  uint32_t event;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), -FI_EAVAIL);
  char buf[64] = {};
  fi_eq_err_entry err{};
  err.err_data = buf;
  err.err_data_size = sizeof(buf);
  ASSERT_EQ(fi_eq_readerr(eq, &err, FI_PEEK), ssize_t{sizeof(err)});
  EXPECT_EQ(err.err, FI_ECONNABORTED);
  EXPECT_EQ(err.prov_errno, -FI_ECONNABORTED);
  EXPECT_EQ(err.fid, &eq->fid);
  EXPECT_EQ(err.context, reinterpret_cast<void*>(0x77));
  EXPECT_EQ(err.data, 9u);
  EXPECT_EQ(err.err_data, buf);
  EXPECT_EQ(err.err_data_size, sizeof(detail));
  EXPECT_STREQ(buf, detail);
  // Still there after the peek; a user buffer shorter than the data truncates it.
  char small[4];
  err = {};
  err.err_data = small;
  err.err_data_size = sizeof(small);
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), ssize_t{sizeof(err)});
  EXPECT_EQ(err.err_data, small);
  EXPECT_EQ(err.err_data_size, sizeof(small));
  EXPECT_EQ(memcmp(small, detail, sizeof(small)), 0);
  EXPECT_EQ(fi_eq_readerr(eq, &err, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), -FI_EAGAIN);
}

TEST_F(EqTest, ErrDataIsLentWhenTheCallerGivesNoBuffer) {
  fid_eq* eq = open(FI_WAIT_NONE);
  const uint32_t detail[3] = {1, 2, 3};
  ASSERT_GT(write_error(eq, FI_EIO, detail, sizeof(detail)), 0);
  ASSERT_GT(write_error(eq, FI_EIO, nullptr, 0), 0);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), ssize_t{sizeof(err)});
  ASSERT_NE(err.err_data, nullptr);
  ASSERT_EQ(err.err_data_size, sizeof(detail));
  EXPECT_EQ(memcmp(err.err_data, detail, sizeof(detail)), 0);
  // The lent buffer is the EQ's, not the writer's.
  EXPECT_NE(err.err_data, static_cast<const void*>(detail));
  err = {};
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), ssize_t{sizeof(err)});
  EXPECT_EQ(err.err_data, nullptr);
  EXPECT_EQ(err.err_data_size, 0u);
}

TEST_F(EqTest, ErrorsAndEventsKeepTheirOrder) {
  fid_eq* eq = open(FI_WAIT_NONE);
  ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 1), 0);
  ASSERT_GT(write_error(eq, FI_EIO, nullptr, 0), 0);
  ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 2), 0);
  uint32_t event;
  fi_eq_entry e{};
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq, &err, 0), -FI_EAGAIN);  // the head is not an error
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(e.data, 1u);
  EXPECT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), -FI_EAVAIL);
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), ssize_t{sizeof(err)});
  EXPECT_EQ(err.err, FI_EIO);
  ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), ssize_t{sizeof(e)});
  EXPECT_EQ(e.data, 2u);
}

TEST_F(EqTest, OldApiAlwaysLendsErrData) {
  TearDown();
  eqs_.clear();
  fabric_ = nullptr;
  scoped_.reset();
  open_fabric(FI_VERSION(1, 4));
  fid_eq* eq = open(FI_WAIT_NONE);
  const char detail[] = "x";
  ASSERT_GT(write_error(eq, FI_EIO, detail, sizeof(detail)), 0);
  char buf[8] = {};
  fi_eq_err_entry err{};
  err.err_data = buf;
  err.err_data_size = sizeof(buf);
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), ssize_t{sizeof(err)});
  EXPECT_NE(err.err_data, buf);
  EXPECT_EQ(err.err_data_size, sizeof(detail));
  EXPECT_STREQ(static_cast<const char*>(err.err_data), detail);
}

TEST_F(EqTest, SreadTimesOut) {
  fid_eq* eq = open(FI_WAIT_UNSPEC);
  uint32_t event;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), 50, 0), -FI_EAGAIN);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), 0, 0), -FI_EAGAIN);
}

TEST_F(EqTest, SreadWakesForAnEventFromAnotherThread) {
  for (int timeout : {-1, 10000}) {
    fid_eq* eq = open(FI_WAIT_FD);
    std::thread writer([eq] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      write_entry(eq, FI_NOTIFY, nullptr, 11);
    });
    uint32_t event;
    fi_eq_entry e{};
    const auto t0 = Clock::now();
    EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), timeout, 0), ssize_t{sizeof(e)});
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(e.data, 11u);
    writer.join();
  }
}

TEST_F(EqTest, SreadReportsQueuedErrorsAndRejectsEqsWithoutWaitObject) {
  fid_eq* eq = open(FI_WAIT_FD);
  ASSERT_GT(write_error(eq, FI_EIO, nullptr, 0), 0);
  uint32_t event;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), -1, 0), -FI_EAVAIL);
  EXPECT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), -1, FI_SEND), -FI_EBADFLAGS);
  EXPECT_EQ(fi_eq_sread(eq, nullptr, &e, sizeof(e), -1, 0), -FI_EINVAL);
  fid_eq* none = open(FI_WAIT_NONE);
  EXPECT_EQ(fi_eq_sread(none, &event, &e, sizeof(e), 0, 0), -FI_EINVAL);
}

TEST_F(EqTest, WaitFdIsReadableExactlyWhileSomethingIsQueued) {
  for (fi_wait_obj w : {FI_WAIT_FD, FI_WAIT_UNSPEC}) {
    fid_eq* eq = open(w);
    int fd = -1;
    ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
    ASSERT_GE(fd, 0);
    fi_wait_obj obj = FI_WAIT_NONE;
    ASSERT_EQ(fi_control(&eq->fid, FI_GETWAITOBJ, &obj), 0);
    EXPECT_EQ(obj, FI_WAIT_FD);
    EXPECT_FALSE(readable(fd));
    ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 1), 0);
    ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 2), 0);
    EXPECT_TRUE(readable(fd));
    uint32_t event;
    fi_eq_entry e{};
    ASSERT_GT(fi_eq_read(eq, &event, &e, sizeof(e), FI_PEEK), 0);
    EXPECT_TRUE(readable(fd));
    ASSERT_GT(fi_eq_read(eq, &event, &e, sizeof(e), 0), 0);
    EXPECT_TRUE(readable(fd));  // one still queued
    ASSERT_GT(fi_eq_read(eq, &event, &e, sizeof(e), 0), 0);
    EXPECT_FALSE(readable(fd));
    ASSERT_GT(write_error(eq, FI_EIO, nullptr, 0), 0);
    EXPECT_TRUE(readable(fd));
    fi_eq_err_entry err{};
    ASSERT_GT(fi_eq_readerr(eq, &err, 0), 0);
    EXPECT_FALSE(readable(fd));
  }
}

TEST_F(EqTest, WaitFdWakesAPollingThread) {
  fid_eq* eq = open(FI_WAIT_FD);
  int fd = -1;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
  std::thread writer([eq] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write_entry(eq, FI_NOTIFY, nullptr, 1);
  });
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1);
  writer.join();
}

TEST_F(EqTest, ControlWithoutWaitObject) {
  fid_eq* eq = open(FI_WAIT_NONE);
  int fd = -1;
  EXPECT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
  EXPECT_EQ(fi_control(&eq->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
  fi_wait_obj obj = FI_WAIT_FD;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAITOBJ, &obj), 0);
  EXPECT_EQ(obj, FI_WAIT_NONE);
  EXPECT_EQ(fi_control(&eq->fid, FI_ENABLE, nullptr), -FI_ENOSYS);
}

TEST_F(EqTest, StrerrorDescribesProviderErrno) {
  fid_eq* eq = open(FI_WAIT_NONE);
  EXPECT_STREQ(fi_eq_strerror(eq, FI_EIO, nullptr, nullptr, 0), fi_strerror(FI_EIO));
  char buf[128];
  EXPECT_EQ(fi_eq_strerror(eq, FI_ETIMEDOUT, nullptr, buf, sizeof(buf)), buf);
  EXPECT_STREQ(buf, fi_strerror(FI_ETIMEDOUT));
  char tiny[4];
  EXPECT_EQ(fi_eq_strerror(eq, FI_ETIMEDOUT, nullptr, tiny, sizeof(tiny)), tiny);
  EXPECT_EQ(strlen(tiny), 3u);
}

TEST_F(EqTest, CloseIsBusyWhileBoundObjectsLive) {
  fid_eq* eq = open(FI_WAIT_NONE);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);  // the EQ holds the fabric
  ASSERT_EQ(eq_bind_acquire(&eq->fid), 0);
  ASSERT_EQ(eq_bind_acquire(&eq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  eq_bind_release(&eq->fid);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  eq_bind_release(&eq->fid);
  close(eq);
  EXPECT_EQ(eq_bind_acquire(&fabric_->fid), -FI_EINVAL);
  EXPECT_EQ(eq_bind_acquire(nullptr), -FI_EINVAL);
}

TEST_F(EqTest, ProviderPostsIgnoreTheSizeBound) {
  fid_eq* eq = open(FI_WAIT_NONE, 1);
  fi_eq_entry e{};
  e.fid = &fabric_->fid;
  e.data = 3;
  ASSERT_EQ(eq_post(eq, FI_AV_COMPLETE, &e, sizeof(e)), ssize_t{sizeof(e)});
  ASSERT_EQ(eq_post(eq, FI_AV_COMPLETE, &e, sizeof(e)), ssize_t{sizeof(e)});
  fi_eq_err_entry err{};
  err.err = FI_EADDRNOTAVAIL;
  const int detail = 5;
  err.err_data = const_cast<int*>(&detail);
  err.err_data_size = sizeof(detail);
  ASSERT_EQ(eq_post_error(eq, &err), ssize_t{sizeof(err)});
  EXPECT_EQ(eq_post(nullptr, FI_AV_COMPLETE, &e, sizeof(e)), -FI_EINVAL);
  EXPECT_EQ(eq_post(eq, FI_AV_COMPLETE, nullptr, sizeof(e)), -FI_EINVAL);
  EXPECT_EQ(eq_post_error(eq, nullptr), -FI_EINVAL);
  uint32_t event;
  for (int i = 0; i < 2; ++i) {
    fi_eq_entry r{};
    ASSERT_EQ(fi_eq_read(eq, &event, &r, sizeof(r), 0), ssize_t{sizeof(r)});
    EXPECT_EQ(event, uint32_t{FI_AV_COMPLETE});
    EXPECT_EQ(r.data, 3u);
  }
  fi_eq_err_entry r{};
  ASSERT_EQ(fi_eq_readerr(eq, &r, 0), ssize_t{sizeof(r)});
  EXPECT_EQ(r.err, FI_EADDRNOTAVAIL);
  ASSERT_EQ(r.err_data_size, sizeof(detail));
  EXPECT_EQ(*static_cast<const int*>(r.err_data), 5);
}

TEST_F(EqTest, TrywaitReportsQueuedEvents) {
  fid_eq* eq = open(FI_WAIT_FD);
  fid* fids[] = {&eq->fid};
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  ASSERT_GT(write_entry(eq, FI_NOTIFY, nullptr, 1), 0);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), -FI_EAGAIN);
  uint32_t event;
  fi_eq_entry e{};
  ASSERT_GT(fi_eq_read(eq, &event, &e, sizeof(e), 0), 0);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), 0);
  fid_eq* none = open(FI_WAIT_NONE);
  fid* bad[] = {&eq->fid, &none->fid};
  EXPECT_EQ(fi_trywait(fabric_, bad, 2), -FI_EINVAL);
  fid* foreign[] = {&fabric_->fid};
  EXPECT_EQ(fi_trywait(fabric_, foreign, 1), -FI_EINVAL);
  EXPECT_EQ(fi_trywait(fabric_, fids, 0), -FI_EINVAL);
  EXPECT_EQ(fi_trywait(fabric_, nullptr, 1), -FI_EINVAL);
  int rc = 0;
  EXPECT_FALSE(trywait_core_fid(&fabric_->fid, &rc));
}

TEST_F(EqTest, ConcurrentWritersAndOneReaderLoseNothing) {
  fid_eq* eq = open(FI_WAIT_FD, 64);
  constexpr int kWriters = 4, kEach = 500;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([eq, w] {
      for (int i = 0; i < kEach;) {
        ssize_t rc = write_entry(eq, FI_NOTIFY, nullptr, uint64_t(w) << 32 | uint64_t(i));
        if (rc == -FI_EAGAIN) {
          std::this_thread::yield();
          continue;
        }
        ASSERT_EQ(rc, ssize_t{sizeof(fi_eq_entry)});
        ++i;
      }
    });
  }
  std::vector<int> next(kWriters, 0);
  for (int got = 0; got < kWriters * kEach; ++got) {
    uint32_t event;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_sread(eq, &event, &e, sizeof(e), 10000, 0), ssize_t{sizeof(e)});
    const int w = static_cast<int>(e.data >> 32);
    ASSERT_LT(w, kWriters);
    EXPECT_EQ(static_cast<int>(e.data & 0xffffffff), next[w]++);  // per-writer FIFO
  }
  for (auto& t : writers) t.join();
}

}  // namespace
}  // namespace xpufab::core
