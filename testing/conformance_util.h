// Shared setup for the conformance suite and examples: public libfabric API only.
#ifndef XPUFAB_TESTING_CONFORMANCE_UTIL_H_
#define XPUFAB_TESTING_CONFORMANCE_UTIL_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_xpu.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace xpufab::testing {

// Backends the suite runs against; adding "hw" or "fake_rdma" is one more entry.
inline const char* const kBackends[] = {"emu"};

// XPUFAB_CONFORMANCE_BACKEND, when set, replaces the parameter: the bring-up tool runs one suite
// binary on "hw" and then on "emu" and compares their completion traces.
inline void select_backend(const std::string& name) {
  const char* forced = std::getenv("XPUFAB_CONFORMANCE_BACKEND");
  setenv("FI_EFA_BACKEND", forced && *forced ? forced : name.c_str(), 1);
}

inline fi_info* make_hints(bool xpu) {
  fi_info* h = fi_allocinfo();
  h->caps = FI_MSG | FI_RMA | (xpu ? FI_XPU : 0);
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                            (xpu ? FI_MR_XPU_DESC : 0);
  h->fabric_attr->prov_name = strdup("efa");
  return h;
}

// Whether the fi_info fi_getinfo returned offers an RDMA direction (FI_READ or FI_WRITE). The
// suite's hints ask for FI_RMA without direction bits, so info->caps carries FI_RMA as asked and
// the directions the device really supports are those left in tx_attr->caps (rdma-core v44 and the
// emulated gen2 have RDMA read without write).
inline bool offers_rma(const fi_info* info, uint64_t direction) {
  if (!(info->caps & FI_RMA)) return false;
  if (info->caps & (FI_READ | FI_WRITE)) return (info->caps & direction) != 0;
  return info->tx_attr && (info->tx_attr->caps & direction) != 0;
}

// Reads one completion, driving progress; -FI_EAVAIL / errors pass through. Gives up after
// `ms` milliseconds with -FI_EAGAIN.
inline ssize_t wait_cq(fid_cq* cq, void* entry, int ms = 5000, fi_addr_t* src = nullptr) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    ssize_t n = src ? fi_cq_readfrom(cq, entry, 1, src) : fi_cq_read(cq, entry, 1);
    if (n != -FI_EAGAIN) return n;
    if (std::chrono::steady_clock::now() > end) return -FI_EAGAIN;
    std::this_thread::yield();
  }
}

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_CONFORMANCE_UTIL_H_
