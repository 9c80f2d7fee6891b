// efa_caps: lists the EFA devices the hardware backend sees and their capabilities, or says
// why there are none (rdma-core missing, too old, or no EFA device). Exit status 0 when at least
// one device was listed, 1 otherwise.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "hw/hw_backend.h"

namespace {

using xpufab::backend::DeviceAttr;

void print_gid(const uint8_t gid[16]) {
  for (int i = 0; i < 16; i += 2) {
    std::printf("%s%02x%02x", i ? ":" : "", gid[i], gid[i + 1]);
  }
}

void print_caps(uint32_t caps) {
  static const struct {
    uint32_t bit;
    const char* name;
  } kNames[] = {
      {xpufab::backend::kCapRdmaRead, "rdma_read"},
      {xpufab::backend::kCapRnrRetry, "rnr_retry"},
      {xpufab::backend::kCapCqWithSgid, "cq_with_sgid"},
      {xpufab::backend::kCapRdmaWrite, "rdma_write"},
      {xpufab::backend::kCapUnsolicitedWriteRecv, "unsolicited_write_recv"},
      {xpufab::backend::kCapCqWithExtMem, "cq_with_ext_mem"},
      {xpufab::backend::kCapCompCntr, "comp_cntr"},
      {xpufab::backend::kCapDataPolling128, "data_polling_128"},
      {xpufab::backend::kCapCqNotifications, "cq_notifications"},
      {xpufab::backend::kCapInlineWrite, "inline_write"},
  };
  std::printf("  device_caps:        0x%08x", caps);
  for (const auto& n : kNames) {
    if (caps & n.bit) std::printf(" %s", n.name);
  }
  std::printf("\n");
}

void print_attr(const DeviceAttr& a) {
  std::printf("%s\n  gid:                ", a.name.c_str());
  print_gid(a.gid);
  std::printf("\n  vendor_part_id:     0x%04x\n", a.vendor_part_id);
  std::printf("  max_qp/cq/mr/pd/ah: %u/%u/%u/%u/%u\n", a.max_qp, a.max_cq, a.max_mr, a.max_pd,
              a.max_ah);
  std::printf("  max_sq_wr/rq_wr:    %u/%u\n", a.max_sq_wr, a.max_rq_wr);
  std::printf("  max_sq/rq/rdma_sge: %u/%u/%u\n", a.max_sq_sge, a.max_rq_sge, a.max_rdma_sge);
  std::printf("  inline_buf_size:    %u (128-byte WQE: %u)\n", a.inline_buf_size,
              a.inline_buf_size_ex);
  print_caps(a.device_caps);
  std::printf("  max_rdma_size:      %u\n", a.max_rdma_size);
  std::printf("  mtu:                %u\n", a.mtu);
  std::printf("  max_cq_depth:       %u\n", a.max_cq_depth);
  std::printf("  link_speed_gbps:    %u\n", a.link_speed_gbps);
}

}  // namespace

int main() {
  xpufab::hw::LibraryNames names;
  std::string reason;
  std::unique_ptr<xpufab::backend::Backend> backend;
  int rc = xpufab::hw::make_hw_backend(names, &backend, &reason);
  if (rc != 0) {
    std::printf("no EFA devices: %s\n", reason.c_str());
    return 1;
  }
  std::vector<xpufab::backend::DeviceInfo> devices;
  rc = backend->enumerate(&devices);
  if (rc != 0) {
    std::printf("no EFA devices: discovery failed: %s\n", std::strerror(-rc));
    return 1;
  }
  if (devices.empty()) {
    rc = xpufab::hw::probe_hw(names, &reason);
    std::printf("no EFA devices: %s\n", rc != 0 ? reason.c_str() : "none found");
    return 1;
  }
  int listed = 0;
  for (const auto& info : devices) {
    std::unique_ptr<xpufab::backend::Device> dev;
    rc = backend->open_device(info.name, &dev);
    DeviceAttr attr;
    if (rc == 0) rc = dev->query(&attr);
    if (rc != 0) {
      std::printf("%s: cannot open: %s\n", info.name.c_str(), std::strerror(-rc));
      continue;
    }
    print_attr(attr);
    ++listed;
  }
  return listed > 0 ? 0 : 1;
}
