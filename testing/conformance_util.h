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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/backend/backend.h"

namespace xpufab::testing {

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

// The backends a suite is instantiated over, decided once when the tests register: "emu" wherever
// it is linked, "hw" where fi_getinfo finds a usable device through it (a real EFA, or Debian's
// rdma-core over the emulator's kernel-device shim). A backend left out is named in one line on
// stderr, so a run without hardware says what it did not cover. XPUFAB_CONFORMANCE_BACKEND, when
// set, is the only one (the bring-up tool lists and runs the tests per backend that way).
inline std::vector<const char*> present_backends() {
  static const std::vector<const char*> present = [] {
    std::vector<const char*> out;
    const char* forced = std::getenv("XPUFAB_CONFORMANCE_BACKEND");
    if (forced && *forced) {
      out.push_back(forced);
      std::fprintf(stderr, "conformance backends: %s (XPUFAB_CONFORMANCE_BACKEND)\n", forced);
      return out;
    }
    const std::vector<std::string> linked = backend::registered_backends();
    auto is_linked = [&](const char* n) {
      return std::find(linked.begin(), linked.end(), n) != linked.end();
    };
    std::string absent;
    if (is_linked("emu")) {
      out.push_back("emu");
    } else {
      absent += " emu (not linked)";
    }
    if (!is_linked("hw")) {
      absent += " hw (not linked)";
    } else {
      const char* prev = std::getenv("FI_EFA_BACKEND");
      const std::string saved = prev ? prev : "";
      setenv("FI_EFA_BACKEND", "hw", 1);
      fi_info* hints = make_hints(false);
      fi_info* info = nullptr;
      const int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info);
      fi_freeinfo(hints);
      fi_freeinfo(info);
      if (prev) {
        setenv("FI_EFA_BACKEND", saved.c_str(), 1);
      } else {
        unsetenv("FI_EFA_BACKEND");
      }
      if (rc == 0) {
        out.push_back("hw");
      } else {
        absent += " hw (fi_getinfo: " + std::string(fi_strerror(-rc)) + ")";
      }
    }
    std::string names;
    for (const char* n : out) names += std::string(names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "conformance backends: %s; not instantiated:%s\n",
                 names.empty() ? "none" : names.c_str(), absent.empty() ? " none" : absent.c_str());
    return out;
  }();
  return present;
}

// Names what a skipped test ran on, for "<capability> not offered by <this>": the backend, and for
// the emulator its profile and cleared capabilities (FI_EFA_EMU_PROFILE, FI_EFA_EMU_CAPS_CLEAR).
inline std::string backend_label() {
  const char* b = std::getenv("FI_EFA_BACKEND");
  std::string label = b && *b ? b : "auto";
  if (label == "emu") {
    const char* profile = std::getenv("FI_EFA_EMU_PROFILE");
    const char* cleared = std::getenv("FI_EFA_EMU_CAPS_CLEAR");
    label += std::string(", profile ") + (profile && *profile ? profile : "default");
    if (cleared && *cleared) label += std::string(", caps cleared ") + cleared;
  }
  return label;
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
