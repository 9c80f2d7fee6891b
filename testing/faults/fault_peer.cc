// One process of a multi-process fault run over the public libfabric API (FI_EFA_EMU_FABRIC=shm
// or udp, the fault plan in FI_EFA_EMU_FAULTS of each process):
//
//   fault_peer mixed server|client PORT OPS WINDOW
//     The client keeps WINDOW operations in flight against the server, OPS in all, cycling
//     SEND, RDMA WRITE, WRITE with immediate and RDMA READ with varied lengths. Checked: every
//     operation completes once with success; the server receives every SEND and immediate
//     exactly once with its bytes; every READ brings the bytes of its slot; at the end every
//     slot, read back, holds the last WRITE the client put there.
//
//   fault_peer kill survivor|victim|other PORT KILL_MS
//     Three processes. The survivor learns the victim's GID first, then opens its device with
//     FI_EFA_EMU_FAULTS=kill_peer=GID@KILL_MS (appended to any plan it was given). It verifies a
//     write and a read with the victim, posts SENDs the victim never receives (they sit in RNR
//     retry, outstanding when the victim dies), and expects them and a later WRITE to complete
//     with LOCAL_ERROR_UNRESP_REMOTE, after KILL_MS and within the response timeout; then a
//     mixed exchange with the other peer has to succeed with data verified.
//
// Exit status 0 means every check passed; figures go to stdout.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/efa_io_defs.h"
#include "testing/support/peer.h"
#include "tools/oob/oob.h"

namespace {

using xpufab::peer::Address;
using xpufab::peer::Clock;
using xpufab::peer::Endpoint;
using xpufab::peer::exchange_by_role;
using xpufab::peer::expect_context;
using xpufab::peer::fill;
using xpufab::peer::has_pattern;
using xpufab::peer::post_retrying;
using xpufab::peer::wait_one;

constexpr size_t kSlot = 1024;      // SEND / WRITE / READ slots
constexpr size_t kSlots = 128;      // slots in flight at most (bounds the window)
constexpr size_t kImmSlot = 256;    // WRITE with immediate: one slot per operation, never reused
constexpr size_t kRecvs = 64;       // receives the server keeps posted

// Buffer layout of both sides (each side uses the regions it needs).
struct Layout {
  size_t imm_slots;
  size_t recv() const { return 0; }
  size_t write() const { return recv() + kRecvs * kSlot; }
  size_t read() const { return write() + kSlots * kSlot; }
  size_t imm() const { return read() + kSlots * kSlot; }
  size_t total() const { return imm() + imm_slots * kImmSlot; }
};

// Operation k of a mixed run.
enum Op { kSend, kWrite, kWriteImm, kRead };
Op op_of(uint64_t k) { return static_cast<Op>(k % 4); }
size_t len_of(uint64_t k) {
  const uint64_t h = (k * 0x9e3779b97f4a7c15ull) >> 40;
  return op_of(k) == kWriteImm ? 8 + h % (kImmSlot - 8) : 8 + h % (kSlot - 8);
}

// ---- mixed ----------------------------------------------------------------------------------

void mixed_server(Endpoint& c, xpufab::oob::Session& s, uint64_t ops) {
  Layout l{(ops + 3) / 4};
  for (size_t i = 0; i < kSlots; ++i) fill(c.at(l.read() + i * kSlot), kSlot, 50000 + static_cast<uint32_t>(i));
  std::vector<Address> all = exchange_by_role(s, c.address(0), 2);
  c.insert(all[1]);
  void* desc = c.desc();
  auto repost = [&](size_t i) {
    PEER_CHECK(fi_recv(c.ep(), c.at(l.recv() + i * kSlot), kSlot, desc, FI_ADDR_UNSPEC,
                  reinterpret_cast<void*>(i + 1)) == 0);
  };
  for (size_t i = 0; i < kRecvs; ++i) repost(i);
  PEER_CHECK(s.barrier() == 0);
  uint64_t expect = 0;
  for (uint64_t k = 0; k < ops; ++k) expect += op_of(k) == kSend || op_of(k) == kWriteImm;
  std::vector<uint8_t> seen(ops, 0);
  uint64_t got = 0;
  auto deadline = Clock::now() + std::chrono::seconds(600);
  fi_cq_data_entry e[16];
  while (got < expect) {
    ssize_t n = fi_cq_read(c.cq(), e, 16);
    if (n == -FI_EAGAIN) {
      PEER_CHECK(Clock::now() < deadline);
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq(), &err, 0);
      std::fprintf(stderr, "server: error completion err %d prov_errno %d\n", err.err, err.prov_errno);
      std::exit(1);
    }
    PEER_CHECK(n > 0);
    for (ssize_t i = 0; i < n; ++i) {
      // Immediate data may arrive without consuming a receive (unsolicited write-recv): then
      // the entry has no context and nothing is reposted.
      const size_t r = reinterpret_cast<uintptr_t>(e[i].op_context) - 1;
      const bool consumed = e[i].op_context != nullptr;
      PEER_CHECK(!consumed || r < kRecvs);
      uint64_t k;
      if (e[i].flags & FI_REMOTE_CQ_DATA) {
        k = e[i].data;
        PEER_CHECK(k < ops && op_of(k) == kWriteImm);
        PEER_CHECK(has_pattern(c.at(l.imm() + (k / 4) * kImmSlot), len_of(k), static_cast<uint32_t>(k)));
      } else {
        PEER_CHECK((e[i].flags & FI_RECV) && consumed);
        uint32_t k32;
        std::memcpy(&k32, c.at(l.recv() + r * kSlot), 4);
        k = k32;
        PEER_CHECK(k < ops && op_of(k) == kSend);
        PEER_CHECK(e[i].len == len_of(k));
        PEER_CHECK(has_pattern(c.at(l.recv() + r * kSlot) + 4, len_of(k) - 4, static_cast<uint32_t>(k)));
      }
      if (seen[k]++ != 0) {
        std::fprintf(stderr, "server: operation %" PRIu64 " delivered twice\n", k);
        std::exit(1);
      }
      ++got;
      if (consumed) repost(r);
    }
  }
  PEER_CHECK(s.barrier() == 0);
  std::printf("server: %" PRIu64 " sends and immediates received once each\n", got);
}

void mixed_client(Endpoint& c, xpufab::oob::Session& s, uint64_t ops, size_t window) {
  Layout l{(ops + 3) / 4};
  std::vector<Address> all = exchange_by_role(s, c.address(1), 2);
  const fi_addr_t peer = c.insert(all[0]);
  const uint64_t rkey = all[0].key, raddr = all[0].addr;
  void* desc = c.desc();
  PEER_CHECK(s.barrier() == 0);
  window = std::min(window, kSlots);
  std::vector<size_t> free_slots;
  for (size_t i = kSlots; i-- > 0;) free_slots.push_back(i);
  std::vector<uint32_t> slot_of(ops, 0);
  std::vector<uint8_t> done(ops, 0);
  std::vector<uint64_t> last(kSlots, UINT64_MAX);
  uint64_t posted = 0, completed = 0, outstanding = 0;
  const auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::seconds(600);
  fi_cq_data_entry e[16];
  auto reap = [&]() {
    ssize_t n = fi_cq_read(c.cq(), e, 16);
    if (n == -FI_EAGAIN) {
      PEER_CHECK(Clock::now() < deadline);
      return;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(c.cq(), &err, 0);
      std::fprintf(stderr, "client: operation %zu failed: err %d prov_errno %d\n",
                   static_cast<size_t>(reinterpret_cast<uintptr_t>(err.op_context) - 1), err.err,
                   err.prov_errno);
      std::exit(1);
    }
    PEER_CHECK(n > 0);
    for (ssize_t i = 0; i < n; ++i) {
      const uint64_t k = reinterpret_cast<uintptr_t>(e[i].op_context) - 1;
      PEER_CHECK(k < posted);
      if (done[k]++ != 0) {
        std::fprintf(stderr, "client: operation %" PRIu64 " completed twice\n", k);
        std::exit(1);
      }
      const Op op = op_of(k);
      if (op == kRead) {
        PEER_CHECK(e[i].flags & FI_READ);
        PEER_CHECK(has_pattern(c.at(l.read() + slot_of[k] * kSlot), len_of(k), 50000 + slot_of[k]));
      } else {
        PEER_CHECK(e[i].flags & (op == kSend ? FI_SEND : FI_WRITE));
      }
      if (op != kWriteImm) free_slots.push_back(slot_of[k]);
      ++completed;
      --outstanding;
    }
  };
  while (completed < ops) {
    while (posted < ops && outstanding < window && !free_slots.empty()) {
      const uint64_t k = posted;
      const size_t len = len_of(k);
      void* ctx = reinterpret_cast<void*>(k + 1);
      const uint32_t k32 = static_cast<uint32_t>(k);
      const Op op = op_of(k);
      if (op == kWriteImm) {
        uint8_t* src = c.at(l.imm() + (k / 4) * kImmSlot);
        fill(src, len, k32);
        post_retrying([&] { return fi_writedata(c.ep(), src, len, desc, k, peer, raddr + l.imm() + (k / 4) * kImmSlot, rkey, ctx); },
             reap);
      } else {
        const size_t slot = free_slots.back();
        free_slots.pop_back();
        slot_of[k] = static_cast<uint32_t>(slot);
        if (op == kSend) {
          uint8_t* src = c.at(l.write() + slot * kSlot);
          std::memcpy(src, &k32, 4);
          fill(src + 4, len - 4, k32);
          post_retrying([&] { return fi_send(c.ep(), src, len, desc, peer, ctx); }, reap);
        } else if (op == kWrite) {
          uint8_t* src = c.at(l.write() + slot * kSlot);
          fill(src, len, k32);
          last[slot] = k;
          post_retrying([&] { return fi_write(c.ep(), src, len, desc, peer, raddr + l.write() + slot * kSlot, rkey, ctx); },
               reap);
        } else {
          uint8_t* dst = c.at(l.read() + slot * kSlot);
          std::memset(dst, 0, len);
          post_retrying([&] { return fi_read(c.ep(), dst, len, desc, peer, raddr + l.read() + slot * kSlot, rkey, ctx); },
               reap);
        }
      }
      ++posted;
      ++outstanding;
    }
    reap();
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  // Each slot holds the last WRITE put there: read back through the NIC (the target process
  // could only look at it without any ordering against the engine that wrote it).
  uint64_t want = 0, got = 0;
  auto reap_back = [&]() {
    ssize_t n = fi_cq_read(c.cq(), e, 16);
    if (n == -FI_EAGAIN) {
      PEER_CHECK(Clock::now() < deadline);
      return;
    }
    PEER_CHECK(n > 0);
    for (ssize_t i = 0; i < n; ++i) {
      const size_t slot = reinterpret_cast<uintptr_t>(e[i].op_context) - 1;
      PEER_CHECK(slot < kSlots && (e[i].flags & FI_READ));
      PEER_CHECK(has_pattern(c.at(l.read() + slot * kSlot), len_of(last[slot]), static_cast<uint32_t>(last[slot])));
      ++got;
    }
  };
  for (size_t slot = 0; slot < kSlots; ++slot) {
    if (last[slot] == UINT64_MAX) continue;
    uint8_t* dst = c.at(l.read() + slot * kSlot);
    const size_t len = len_of(last[slot]);
    std::memset(dst, 0, len);
    post_retrying([&] { return fi_read(c.ep(), dst, len, desc, peer, raddr + l.write() + slot * kSlot, rkey,
                               reinterpret_cast<void*>(slot + 1)); },
         reap_back);
    ++want;
  }
  while (got < want) reap_back();
  PEER_CHECK(s.barrier() == 0);
  std::printf("client: %" PRIu64 " operations, window %zu, %.2f s, %.0f ops/s; %" PRIu64 " written slots read back\n", ops, window,
              sec, ops / sec, want);
}

// ---- kill -----------------------------------------------------------------------------------

enum Role { kSurvivor, kVictim, kOther };

// A write and a read-back of it, data verified, against `peer`.
void verified_round(Endpoint& c, fi_addr_t peer, const Address& pb, uint32_t seed) {
  xpufab::peer::write_read_verified(c, peer, pb, kSlot, 0, kSlot, 4 * kSlot, seed);
}

void run_kill(xpufab::oob::Session& s, Role role, uint64_t kill_ms) {
  xpufab::peer::EndpointOptions eo;
  eo.buffer_bytes = 16 * kSlot;
  std::unique_ptr<Endpoint> ep;
  std::vector<Address> first;
  if (role != kSurvivor) {
    ep = std::make_unique<Endpoint>(eo);
    first = exchange_by_role(s, ep->address(role), 3);
  } else {
    Address none{};
    none.role = kSurvivor;
    first = exchange_by_role(s, none, 3);
    // The victim's GID is the first 16 bytes of its address (FI_ADDR_EFA, as upstream).
    PEER_CHECK(first[kVictim].name_len >= 16);
    char gid[40];
    const auto* g = reinterpret_cast<const uint8_t*>(first[kVictim].name);
    char* p = gid;
    for (int i = 0; i < 16; ++i) p += std::snprintf(p, 3, "%02x", g[i]);
    std::string plan = std::getenv("FI_EFA_EMU_FAULTS") ? std::getenv("FI_EFA_EMU_FAULTS") : "";
    if (!plan.empty()) plan += ";";
    plan += "kill_peer=" + std::string(gid) + "@" + std::to_string(kill_ms);
    setenv("FI_EFA_EMU_FAULTS", plan.c_str(), 1);
    std::printf("survivor: plan %s\n", plan.c_str());
    ep = std::make_unique<Endpoint>(eo);
  }
  Endpoint& c = *ep;
  std::vector<Address> all = exchange_by_role(s, c.address(role), 3);
  fi_addr_t addr[3] = {};
  for (int r = 0; r < 3; ++r)
    if (r != role) addr[r] = c.insert(all[r]);
  PEER_CHECK(s.barrier() == 0);
  if (role == kSurvivor) {
    void* desc = c.desc();
    const auto kill_at = c.opened() + std::chrono::milliseconds(kill_ms);
    verified_round(c, addr[kVictim], all[kVictim], 1);
    PEER_CHECK(Clock::now() < kill_at);  // else KILL_MS was too short for this machine
    // SENDs the victim has no receive for: RNR retry keeps them outstanding until it dies.
    const int kPending = 6;
    for (int i = 0; i < kPending; ++i)
      PEER_CHECK(fi_send(c.ep(), c.at(2 * kSlot), 64, desc, addr[kVictim], reinterpret_cast<void*>(uintptr_t{100} + i)) == 0);
    int errors = 0;
    double worst_ms = 0;
    for (int i = 0; i < kPending; ++i) {
      fi_cq_data_entry e{};
      fi_cq_err_entry err{};
      int rc = wait_one(c, &e, &err, static_cast<int>(kill_ms) + 60000);
      PEER_CHECK(rc == -FI_EAVAIL);
      const auto now = Clock::now();
      PEER_CHECK(now >= kill_at);  // they really were outstanding when the victim died
      worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(now - kill_at).count());
      std::printf("survivor: pending send %zu: err %d prov_errno %d, %.0f ms after the kill\n",
                  static_cast<size_t>(reinterpret_cast<uintptr_t>(err.op_context) - 100), err.err, err.prov_errno,
                  std::chrono::duration<double, std::milli>(now - kill_at).count());
      PEER_CHECK(err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
      PEER_CHECK(err.err == FI_ECONNABORTED);
      ++errors;
    }
    PEER_CHECK(errors == kPending);
    // Within the response timeout (FI_EFA_EMU_TIMEOUT_MS), with room for a loaded machine.
    if (const char* t = std::getenv("FI_EFA_EMU_TIMEOUT_MS")) PEER_CHECK(worst_ms <= 3.0 * std::atof(t) + 5000);
    // A WRITE posted after the kill fails the same way.
    const auto t1 = Clock::now();
    PEER_CHECK(fi_write(c.ep(), c.at(0), 256, desc, addr[kVictim], all[kVictim].addr, all[kVictim].key, c.at(0)) == 0);
    fi_cq_data_entry e{};
    fi_cq_err_entry err{};
    PEER_CHECK(wait_one(c, &e, &err, 60000) == -FI_EAVAIL);
    PEER_CHECK(err.op_context == c.at(0));
    PEER_CHECK(err.prov_errno == EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
    const double late_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    // The other peer still works: sends received there and write/read rounds.
    for (uint32_t r = 0; r < 20; ++r) verified_round(c, addr[kOther], all[kOther], 100 + r);
    PEER_CHECK(s.barrier() == 0);  // the other posts its receives
    for (int i = 0; i < 8; ++i) {
      fill(c.at(3 * kSlot), 512, 700 + i);
      PEER_CHECK(fi_send(c.ep(), c.at(3 * kSlot), 512, desc, addr[kOther], c.at(3 * kSlot)) == 0);
      expect_context(c, c.at(3 * kSlot), 30000);
    }
    PEER_CHECK(s.barrier() == 0);
    std::printf("survivor: %d outstanding sends failed UNRESP_REMOTE, worst %.0f ms after the kill; "
                "a later write failed in %.0f ms; 20 rounds and 8 sends with the other peer ok\n",
                errors, worst_ms, late_ms);
  } else {
    PEER_CHECK(s.barrier() == 0);
    if (role == kOther) {
      void* desc = c.desc();
      for (int i = 0; i < 8; ++i)
        PEER_CHECK(fi_recv(c.ep(), c.at((8 + i) * kSlot), kSlot, desc, FI_ADDR_UNSPEC, reinterpret_cast<void*>(uintptr_t{1} + i)) == 0);
      for (int i = 0; i < 8; ++i) {
        fi_cq_data_entry e{};
        fi_cq_err_entry err{};
        PEER_CHECK(wait_one(c, &e, &err, 60000) == 1);
        const size_t slot = reinterpret_cast<uintptr_t>(e.op_context) - 1;
        PEER_CHECK(e.len == 512);
        // Sends go out one at a time, so they arrive in order.
        PEER_CHECK(has_pattern(c.at((8 + slot) * kSlot), 512, 700 + i));
      }
    }
    PEER_CHECK(s.barrier() == 0);
  }
  PEER_CHECK(s.barrier() == 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s mixed server|client PORT OPS WINDOW\n"
                 "       %s kill survivor|victim|other PORT KILL_MS [unused]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string mode = argv[1], role = argv[2];
  xpufab::oob::Options o;
  o.port = static_cast<uint16_t>(std::atoi(argv[3]));
  o.timeout_ms = 60000;
  xpufab::oob::Session s;
  if (mode == "mixed") {
    o.server = role == "server";
    PEER_CHECK(s.open(o) == 0);
    const uint64_t ops = std::strtoull(argv[4], nullptr, 10);
    const size_t window = std::strtoul(argv[5], nullptr, 10);
    xpufab::peer::EndpointOptions eo;
    eo.buffer_bytes = Layout{(ops + 3) / 4}.total();
    Endpoint c(eo);
    if (o.server) {
      mixed_server(c, s, ops);
    } else {
      mixed_client(c, s, ops, window);
    }
    PEER_CHECK(s.barrier() == 0);
    return 0;
  }
  if (mode == "kill") {
    Role r = role == "survivor" ? kSurvivor : role == "victim" ? kVictim : kOther;
    o.server = r == kSurvivor;
    o.size = 3;
    PEER_CHECK(s.open(o) == 0);
    run_kill(s, r, std::strtoull(argv[4], nullptr, 10));
    return 0;
  }
  return 2;
}
