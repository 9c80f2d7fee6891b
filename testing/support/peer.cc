#include "testing/support/peer.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>

namespace xpufab::peer {

void check_failed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "%s[%d]: %s:%d: check failed: %s\n", program_invocation_short_name, getpid(),
               file, line, cond);
  std::exit(1);
}

Endpoint::Endpoint(const EndpointOptions& o) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup("efa");
  PEER_CHECK(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_) == 0);
  fi_freeinfo(hints);
  PEER_CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr) == 0);
  opened_ = Clock::now();
  PEER_CHECK(fi_domain(fabric_, info_, &domain_, nullptr) == 0);
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  PEER_CHECK(fi_av_open(domain_, &aa, &av_, nullptr) == 0);
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_DATA;
  ca.size = o.cq_size;
  PEER_CHECK(fi_cq_open(domain_, &ca, &cq_, nullptr) == 0);
  PEER_CHECK(fi_endpoint(domain_, info_, &ep_, nullptr) == 0);
  PEER_CHECK(fi_ep_bind(ep_, &av_->fid, 0) == 0);
  PEER_CHECK(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0);
  PEER_CHECK(fi_enable(ep_) == 0);
  // A device may run out of QPs before `extra_eps`: the figure is then about as many as it took.
  for (int i = 0; i < o.extra_eps; ++i) {
    fid_ep* ep = nullptr;
    if (fi_endpoint(domain_, info_, &ep, nullptr) != 0) break;
    PEER_CHECK(fi_ep_bind(ep, &av_->fid, 0) == 0);
    PEER_CHECK(fi_ep_bind(ep, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0);
    // The QP is created at enable: that is where a device out of QPs (or memory) says so.
    if (fi_enable(ep) != 0) {
      fi_close(&ep->fid);
      break;
    }
    extra_.push_back(ep);
  }
  if (static_cast<int>(extra_.size()) != o.extra_eps) {
    std::fprintf(stderr, "%s: only %zu of %d extra endpoints\n", program_invocation_short_name,
                 extra_.size(), o.extra_eps);
  }
  buf_.assign(o.buffer_bytes, 0);
  PEER_CHECK(fi_mr_reg(domain_, buf_.data(), buf_.size(),
                       FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                       0, &mr_, nullptr) == 0);
}

Endpoint::~Endpoint() {
  for (fid_ep* ep : extra_) PEER_CHECK(fi_close(&ep->fid) == 0);
  PEER_CHECK(fi_close(&ep_->fid) == 0);
  PEER_CHECK(fi_close(&mr_->fid) == 0);
  PEER_CHECK(fi_close(&cq_->fid) == 0);
  PEER_CHECK(fi_close(&av_->fid) == 0);
  PEER_CHECK(fi_close(&domain_->fid) == 0);
  PEER_CHECK(fi_close(&fabric_->fid) == 0);
  fi_freeinfo(info_);
}

Address Endpoint::address(uint32_t role) const {
  Address a{};
  a.role = role;
  a.key = fi_mr_key(mr_);
  a.addr = reinterpret_cast<uint64_t>(buf_.data());
  size_t len = sizeof(a.name);
  PEER_CHECK(fi_getname(&ep_->fid, a.name, &len) == 0);
  a.name_len = static_cast<uint32_t>(len);
  return a;
}

fi_addr_t Endpoint::insert(const Address& peer) {
  fi_addr_t a = FI_ADDR_UNSPEC;
  PEER_CHECK(fi_av_insert(av_, peer.name, 1, &a, 0, nullptr) == 1);
  return a;
}

std::vector<Address> exchange(oob::Session& s, const Address& mine) {
  std::vector<std::string> all;
  PEER_CHECK(s.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), &all) == 0);
  std::vector<Address> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    PEER_CHECK(all[r].size() == sizeof(Address));
    std::memcpy(&out[r], all[r].data(), sizeof(Address));
  }
  return out;
}

std::vector<Address> exchange_by_role(oob::Session& s, const Address& mine, size_t roles) {
  std::vector<Address> out(roles);
  for (const Address& a : exchange(s, mine)) {
    PEER_CHECK(a.role < roles);
    out[a.role] = a;
  }
  return out;
}

int wait_one(Endpoint& e, fi_cq_data_entry* entry, fi_cq_err_entry* err, int ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (uint32_t polls = 1;; ++polls) {
    const ssize_t n = fi_cq_read(e.cq(), entry, 1);
    if (n == 1) return 1;
    if (n == -FI_EAVAIL) {
      PEER_CHECK(fi_cq_readerr(e.cq(), err, 0) == 1);
      return -FI_EAVAIL;
    }
    PEER_CHECK(n == -FI_EAGAIN);
    // The clock every kPollsPerClock empty reads: on a virtual machine a read costs as much as
    // an idle fi_cq_read, and a poll loop's latency figures should be the provider's.
    if (polls % kPollsPerClock == 0 && Clock::now() > end) return -FI_ETIMEDOUT;
  }
}

void expect_one(Endpoint& e, fi_cq_data_entry* entry, int ms) {
  fi_cq_err_entry err{};
  const int rc = wait_one(e, entry, &err, ms);
  if (rc != 1) {
    std::fprintf(stderr, "%s: completion rc %d err %d prov_errno %d\n", program_invocation_short_name,
                 rc, err.err, err.prov_errno);
  }
  PEER_CHECK(rc == 1);
}

void expect_context(Endpoint& e, void* context, int ms) {
  fi_cq_data_entry entry{};
  expect_one(e, &entry, ms);
  PEER_CHECK(entry.op_context == context);
}

void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8) + (seed >> 8));
}

bool has_pattern(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8) + (seed >> 8))) return false;
  return true;
}

namespace {
constexpr int kWaitMs = 30000;
}  // namespace

double send_pingpong(Endpoint& e, oob::Session& s, fi_addr_t peer, size_t bytes, size_t rx,
                     size_t tx, int iters, int warm) {
  const bool server = s.rank() == 0;
  fi_cq_data_entry c{};
  Clock::time_point t0 = Clock::now();
  for (int i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    PEER_CHECK(fi_recv(e.ep(), e.at(rx), bytes, e.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    // The first receive is posted on both sides before anyone sends.
    if (i == 0) PEER_CHECK(s.barrier() == 0);
    if (server) {
      expect_one(e, &c, kWaitMs);
      PEER_CHECK(fi_send(e.ep(), e.at(tx), bytes, e.desc(), peer, nullptr) == 0);
      expect_one(e, &c, kWaitMs);
    } else {
      PEER_CHECK(fi_send(e.ep(), e.at(tx), bytes, e.desc(), peer, nullptr) == 0);
      expect_one(e, &c, kWaitMs);
      expect_one(e, &c, kWaitMs);
    }
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters / 2;
}

double write_pingpong(Endpoint& e, oob::Session& s, fi_addr_t peer, const Address& remote,
                      size_t bytes, size_t src, size_t dst, int iters) {
  const bool server = s.rank() == 0;
  fi_cq_data_entry c{};
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    PEER_CHECK(fi_recv(e.ep(), e.at(0), 64, e.desc(), FI_ADDR_UNSPEC, nullptr) == 0);
    if (i == 0) PEER_CHECK(s.barrier() == 0);
    // The client goes first; the server answers each announcement with its own write.
    if (server) expect_one(e, &c, kWaitMs);
    PEER_CHECK(fi_write(e.ep(), e.at(src), bytes, e.desc(), peer, remote.addr + dst, remote.key,
                        nullptr) == 0);
    expect_one(e, &c, kWaitMs);
    PEER_CHECK(fi_send(e.ep(), e.at(src), 64, e.desc(), peer, nullptr) == 0);
    expect_one(e, &c, kWaitMs);
    if (!server) expect_one(e, &c, kWaitMs);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void write_read_verified(Endpoint& e, fi_addr_t peer, const Address& remote, size_t bytes,
                         size_t src, size_t back, size_t dst, uint32_t seed) {
  fill(e.at(src), bytes, seed);
  std::memset(e.at(back), 0, bytes);
  PEER_CHECK(fi_write(e.ep(), e.at(src), bytes, e.desc(), peer, remote.addr + dst, remote.key,
                      e.at(src)) == 0);
  expect_context(e, e.at(src), kWaitMs);
  PEER_CHECK(fi_read(e.ep(), e.at(back), bytes, e.desc(), peer, remote.addr + dst, remote.key,
                     e.at(back)) == 0);
  expect_context(e, e.at(back), kWaitMs);
  PEER_CHECK(has_pattern(e.at(back), bytes, seed));
}

}  // namespace xpufab::peer
