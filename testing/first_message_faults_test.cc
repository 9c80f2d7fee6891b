// A job's first messages on new endpoints take no page fault in the thread that sends and polls:
// on EFA the queues are pinned memory from the moment they exist, and the emulator and the
// provider make the heads of the queues, request tables and bounce buffers those messages write
// resident when they make them (base/resident.h). A fault costs microseconds on a virtual
// machine, on the path of exactly the round trips a benchmark's first figure times.
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/resident.h"
#include "testing/conformance_fixture.h"

namespace xpufab::testing {
namespace {

// Whether this kernel makes memory resident on request (MADV_POPULATE_WRITE, Linux 5.14).
bool kernel_populates() {
  void* m = mmap(nullptr, base::kResidentPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  const bool ok = base::make_resident(m, base::kResidentPage);
  munmap(m, base::kResidentPage);
  return ok;
}

long thread_minor_faults() {
  rusage ru{};
  EXPECT_EQ(getrusage(RUSAGE_THREAD, &ru), 0);
  return ru.ru_minflt;
}

class FirstMessages : public DataPathFixture {
 protected:
  void SetUp() override {
    if (!kernel_populates()) GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
    select_backend(GetParam());
  }

  // Polls `c` until one completion comes; no allocation, so that the count sees the library only.
  bool one(fid_cq* c) {
    fi_cq_data_entry e{};
    return wait_cq(c, &e) == 1 && (e.flags & (FI_SEND | FI_RECV)) != 0;
  }

  bool post_recv(fid_ep* y) {
    return fi_recv(y, rbuf_, sizeof(rbuf_), fi_mr_desc(rmr_), FI_ADDR_UNSPEC, nullptr) == 0;
  }

  // A 64 B send from x to y's address, its completion and y's receive completion; then y posts
  // its next receive, as a ping-pong does.
  bool send_once(fid_ep* x, fid_cq* cx, fid_ep* y, fid_cq* cy, fi_addr_t to) {
    if (fi_send(x, sbuf_, sizeof(sbuf_), fi_mr_desc(smr_), to, nullptr) != 0) return false;
    return one(cx) && one(cy) && post_recv(y);
  }

  void register_buffers() {
    std::memset(sbuf_, 7, sizeof(sbuf_));
    std::memset(rbuf_, 0, sizeof(rbuf_));
    smr_ = reg(sbuf_, sizeof(sbuf_), FI_SEND);
    rmr_ = reg(rbuf_, sizeof(rbuf_), FI_RECV);
  }

  void new_endpoints_round_trip_without_page_faults() {
    register_buffers();
    // A first pair runs the code once: its pages and the library's symbol bindings are in place
    // before the count.
    fi_addr_t a = 0, b = 0;
    fid_cq *ca = cq(), *cb = cq();
    fid_ep *ea = ep(ca, &a), *eb = ep(cb, &b);
    ASSERT_TRUE(post_recv(ea) && post_recv(eb));
    ASSERT_TRUE(send_once(ea, ca, eb, cb, b));
    ASSERT_TRUE(send_once(eb, cb, ea, ca, a));
    // New CQs and endpoints: new rings, new request tables. Each posts a receive while it is set
    // up, as programs do; the count covers the round trip and the receives posted again.
    fi_addr_t c = 0, d = 0;
    fid_cq *cc = cq(), *cd = cq();
    fid_ep *ec = ep(cc, &c), *ed = ep(cd, &d);
    ASSERT_TRUE(post_recv(ec) && post_recv(ed));
    const long before = thread_minor_faults();
    ASSERT_TRUE(send_once(ec, cc, ed, cd, d));
    ASSERT_TRUE(send_once(ed, cd, ec, cc, c));
    const long faults = thread_minor_faults() - before;
    EXPECT_EQ(faults, 0) << "page faults in the first round trip of new endpoints";
    EXPECT_EQ(std::memcmp(sbuf_, rbuf_, sizeof(sbuf_)), 0);
  }

  char sbuf_[64], rbuf_[64];
  fid_mr *smr_ = nullptr, *rmr_ = nullptr;
};

// Hints for one fabric of the provider.
std::function<void(fi_info*)> fabric(const char* name) {
  return [name](fi_info* h) {
    std::free(h->fabric_attr->name);
    h->fabric_attr->name = strdup(name);
  };
}

// efa-direct: the device's queues and the provider's request tables.
TEST_P(FirstMessages, NewEndpointsRoundTripWithoutPageFaults) {
  ASSERT_EQ(open(fabric("efa-direct")), 0);
  new_endpoints_round_trip_without_page_faults();
}

// The efa fabric: the protocol core's bounce buffers too.
TEST_P(FirstMessages, NewProtocolEndpointsRoundTripWithoutPageFaults) {
  ASSERT_EQ(open(fabric("efa")), 0);
  new_endpoints_round_trip_without_page_faults();
}

// The emulator's and the provider's memory: the hardware backend's queues are the kernel's and
// rdma-core's.
INSTANTIATE_TEST_SUITE_P(Emu, FirstMessages, ::testing::Values("emu"));

}  // namespace
}  // namespace xpufab::testing
