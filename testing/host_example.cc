// Two endpoints in one process on the efa provider: a send/recv ping-pong and an RDMA write and
// read, with every byte checked. Public libfabric API only. Exit status 0 on success.
//   host_example [iterations]
#include <cstdio>
#include <vector>

#include "testing/conformance_util.h"

namespace {

#define CHECK(expr)                                                         \
  do {                                                                      \
    long long rc_ = static_cast<long long>(expr);                           \
    if (rc_ < 0) {                                                          \
      fprintf(stderr, "%s:%d: %s = %lld (%s)\n", __FILE__, __LINE__, #expr, \
              rc_, fi_strerror(static_cast<int>(-rc_)));                    \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int run(int iters) {
  using xpufab::testing::wait_cq;
  fi_info* hints = xpufab::testing::make_hints(false);
  fi_info* info = nullptr;
  CHECK(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info));
  fi_freeinfo(hints);
  fid_fabric* fabric;
  fid_domain* domain;
  fid_av* av;
  fid_cq* cq[2];
  fid_ep* ep[2];
  fi_addr_t addr[2];
  CHECK(fi_fabric(info->fabric_attr, &fabric, nullptr));
  CHECK(fi_domain(fabric, info, &domain, nullptr));
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  CHECK(fi_av_open(domain, &aa, &av, nullptr));
  for (int i = 0; i < 2; ++i) {
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_MSG;
    CHECK(fi_cq_open(domain, &ca, &cq[i], nullptr));
    CHECK(fi_endpoint(domain, info, &ep[i], nullptr));
    CHECK(fi_ep_bind(ep[i], &av->fid, 0));
    CHECK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(ep[i]));
    char name[64];
    size_t len = sizeof(name);
    CHECK(fi_getname(&ep[i]->fid, name, &len));
    if (fi_av_insert(av, name, 1, &addr[i], 0, nullptr) != 1) return 1;
  }
  const size_t n = 4096;
  std::vector<uint8_t> buf[2] = {std::vector<uint8_t>(n), std::vector<uint8_t>(n)};
  fid_mr* mr[2];
  for (int i = 0; i < 2; ++i)
    CHECK(fi_mr_reg(domain, buf[i].data(), n,
                    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                    0, &mr[i], nullptr));
  // Ping-pong: each side echoes a 64-byte message whose content changes every round.
  fi_cq_msg_entry e;
  for (int it = 0; it < iters; ++it) {
    for (int s = 0; s < 2; ++s) {
      const int r = 1 - s;
      CHECK(fi_recv(ep[r], buf[r].data(), 64, fi_mr_desc(mr[r]), FI_ADDR_UNSPEC, nullptr));
      for (int k = 0; k < 64; ++k) buf[s][k] = static_cast<uint8_t>(it * 3 + s + k);
      CHECK(fi_send(ep[s], buf[s].data(), 64, fi_mr_desc(mr[s]), addr[r], nullptr));
      CHECK(wait_cq(cq[s], &e));
      CHECK(wait_cq(cq[r], &e));
      if (e.len != 64 || !(e.flags & FI_RECV)) return fprintf(stderr, "bad recv entry\n"), 1;
      for (int k = 0; k < 64; ++k)
        if (buf[r][k] != static_cast<uint8_t>(it * 3 + s + k))
          return fprintf(stderr, "ping-pong byte %d differs\n", k), 1;
    }
  }
  // RDMA write 0 -> 1, then read it back into the second half of buffer 0.
  for (size_t k = 0; k < n / 2; ++k) buf[0][k] = static_cast<uint8_t>(k * 13);
  CHECK(fi_write(ep[0], buf[0].data(), n / 2, fi_mr_desc(mr[0]), addr[1],
                 reinterpret_cast<uintptr_t>(buf[1].data()), fi_mr_key(mr[1]), nullptr));
  CHECK(wait_cq(cq[0], &e));
  CHECK(fi_read(ep[0], buf[0].data() + n / 2, n / 2, fi_mr_desc(mr[0]), addr[1],
                reinterpret_cast<uintptr_t>(buf[1].data()), fi_mr_key(mr[1]), nullptr));
  CHECK(wait_cq(cq[0], &e));
  for (size_t k = 0; k < n / 2; ++k)
    if (buf[1][k] != static_cast<uint8_t>(k * 13) || buf[0][n / 2 + k] != buf[1][k])
      return fprintf(stderr, "RDMA byte %zu differs\n", k), 1;
  printf("ping-pong: %d round trips of 64 B verified; RDMA write+read of %zu B verified\n", iters,
         n / 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(fi_close(&ep[i]->fid));
    CHECK(fi_close(&mr[i]->fid));
    CHECK(fi_close(&cq[i]->fid));
  }
  CHECK(fi_close(&av->fid));
  CHECK(fi_close(&domain->fid));
  CHECK(fi_close(&fabric->fid));
  fi_freeinfo(info);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc > 1 ? atoi(argv[1]) : 100); }
