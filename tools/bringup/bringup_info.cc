// bringup_info: the first step of hardware bring-up. Says whether the hardware backend can run
// here (and if not, which of the three absence reasons applies), lists each EFA device with the
// caps the hw backend reads, shows what the public fi_getinfo offers per backend, and names the
// emulator profile whose operations match the first device so both sides run the same suite.
//
// Output lines the bring-up script parses:
//   hw: available
//   hw: absent (library-missing|rdma-core-too-old|no-efa-device): <explanation>
//   emu_profile: gen1|gen2|gen3|gen4
//   emu_caps_clear: none|<cap names>   (FI_EFA_EMU_CAPS_CLEAR for the emulator side)
// Arguments: the backends to report on, "hw" and/or "emu" (default both; "emu" alone skips the
// hardware probe). Exit status: 0 hw available (or "emu" alone), 3 hw absent, 1 a failure.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "tools/bringup/profile_match.h"
#include "hw/hw_backend.h"

namespace {

using xpufab::backend::DeviceAttr;

const char* absence_class(int rc) {
  switch (rc) {
    case -ENOENT: return "library-missing";
    case -ENOSYS: return "rdma-core-too-old";
    case -ENODEV: return "no-efa-device";
    default: return "unknown";
  }
}

void print_device(const DeviceAttr& a) {
  std::printf("device %s: vendor_part_id=0x%04x caps=0x%08x (%s)\n", a.name.c_str(),
              a.vendor_part_id, a.device_caps,
              xpufab::bringup::caps_string(a.device_caps).c_str());
  std::printf("  max_sq_wr=%u max_rq_wr=%u max_sq_sge=%u max_rq_sge=%u inline=%u inline_ex=%u\n",
              a.max_sq_wr, a.max_rq_wr, a.max_sq_sge, a.max_rq_sge, a.inline_buf_size,
              a.inline_buf_size_ex);
  std::printf("  max_rdma_size=%u mtu=%u max_cq_depth=%u link_speed_gbps=%u\n", a.max_rdma_size,
              a.mtu, a.max_cq_depth, a.link_speed_gbps);
}

// Lists the hw backend's devices; returns the caps of the first, or -1 when there is none.
int list_hw(std::string* absent, long* first_caps) {
  xpufab::hw::LibraryNames names;
  std::string reason;
  int rc = xpufab::hw::probe_hw(names, &reason);
  if (rc != 0) {
    *absent = std::string(absence_class(rc)) + "): " + reason;
    return rc;
  }
  std::unique_ptr<xpufab::backend::Backend> backend;
  rc = xpufab::hw::make_hw_backend(names, &backend, &reason);
  if (rc != 0) {
    *absent = std::string(absence_class(rc)) + "): " + reason;
    return rc;
  }
  std::vector<xpufab::backend::DeviceInfo> devices;
  rc = backend->enumerate(&devices);
  if (rc != 0 || devices.empty()) {
    *absent = std::string("no-efa-device): discovery found none") +
              (rc ? std::string(": ") + std::strerror(-rc) : "");
    return -ENODEV;
  }
  for (const auto& info : devices) {
    std::unique_ptr<xpufab::backend::Device> dev;
    DeviceAttr attr;
    rc = backend->open_device(info.name, &dev);
    if (rc == 0) rc = dev->query(&attr);
    if (rc != 0) {
      std::printf("device %s: cannot open or query: %s\n", info.name.c_str(), std::strerror(-rc));
      return rc;
    }
    print_device(attr);
    if (*first_caps < 0) *first_caps = attr.device_caps;
  }
  return 0;
}

// What the public API offers on `backend`, host and XPU hints.
void list_getinfo(const char* backend) {
  setenv("FI_EFA_BACKEND", backend, 1);
  for (int xpu = 0; xpu < 2; ++xpu) {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | (xpu ? FI_XPU : 0);
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | (xpu ? FI_MR_XPU_DESC : 0);
    hints->fabric_attr->prov_name = strdup("efa");
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    const char* what = xpu ? "FI_XPU" : "host";
    if (rc != 0) {
      std::printf("fi_getinfo %s %s: %d (%s)\n", backend, what, rc, fi_strerror(-rc));
      continue;
    }
    for (fi_info* i = info; i; i = i->next) {
      std::printf("fi_getinfo %s %s: fabric=%s domain=%s caps=%s%s%s max_msg=%zu inject=%zu\n",
                  backend, what, i->fabric_attr->name, i->domain_attr->name,
                  (i->caps & FI_RMA) ? "rma" : "msg", (i->caps & FI_XPU) ? "+xpu" : "",
                  (i->caps & FI_REMOTE_CQ_DATA) ? "+cq_data" : "", i->ep_attr->max_msg_size,
                  i->tx_attr->inject_size);
    }
    fi_freeinfo(info);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool want_hw = argc < 2, want_emu = argc < 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "hw") == 0) {
      want_hw = true;
    } else if (std::strcmp(argv[i], "emu") == 0) {
      want_emu = true;
    } else {
      std::fprintf(stderr, "usage: %s [hw] [emu]\n", argv[0]);
      return 1;
    }
  }
  if (want_emu && !want_hw) {
    list_getinfo("emu");
    return 0;
  }
  std::string absent;
  long first_caps = -1;
  int hw = list_hw(&absent, &first_caps);
  if (hw == 0) {
    std::printf("hw: available\n");
  } else {
    std::printf("hw: absent (%s\n", absent.c_str());
  }
  if (hw == 0) list_getinfo("hw");
  if (want_emu) list_getinfo("emu");
  if (hw == 0) {
    std::printf("emu_profile: %s\n",
                xpufab::bringup::matching_profile(static_cast<uint32_t>(first_caps)));
    std::printf("emu_caps_clear: %s\n",
                xpufab::bringup::caps_string(
                    xpufab::bringup::caps_to_clear(static_cast<uint32_t>(first_caps))).c_str());
    return 0;
  }
  return hw == -ENOENT || hw == -ENOSYS || hw == -ENODEV ? 3 : 1;
}
