// Kernel-side helpers shared by the device-API tests: launch shapes per scope and collective
// CQ draining on the host XPU.
#ifndef XPUFAB_TESTING_XPU_XPU_TEST_UTIL_H_
#define XPUFAB_TESTING_XPU_XPU_TEST_UTIL_H_

#include <rdma/fi_xpu_device.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "device/runtime/host_xpu.h"

namespace xpufab::testing {

inline const int kAllScopes[] = {FI_XPU_WORK_ITEM, FI_XPU_SUBGROUP, FI_XPU_WORK_GROUP, FI_XPU_DEVICE};

inline const char* scope_name(int s) {
  switch (s) {
    case FI_XPU_WORK_ITEM: return "work_item";
    case FI_XPU_SUBGROUP: return "subgroup";
    case FI_XPU_WORK_GROUP: return "work_group";
    default: return "device";
  }
}

inline runtime::LaunchConfig shape(uint32_t grid, uint32_t wg, uint32_t sg) {
  runtime::LaunchConfig c;
  c.grid = grid;
  c.workgroup_size = wg;
  c.subgroup_size = sg;
  c.stack_size = size_t{256} << 10;
  return c;
}

// A launch whose work-items form exactly one group of `scope` (so loop exits that depend on
// broadcast results are uniform): 1 item, a 4-lane subgroup, an 8-item work-group, or 2x4 items.
inline runtime::LaunchConfig one_group(int scope) {
  switch (scope) {
    case FI_XPU_SUBGROUP: return shape(1, 4, 4);
    case FI_XPU_WORK_GROUP: return shape(1, 8, 4);
    case FI_XPU_DEVICE: return shape(2, 4, 4);
    default: return shape(1, 1, 1);
  }
}

// Reads `want` completions from `cq` collectively at `scope` (format DATA), into `out` in
// order. Gives up after `max_polls` empty reads. Returns the last error other than -FI_EAGAIN
// (0 if none); entries read so far are in `out`.
inline int drain_cq(fid_xpu_cq* cq, int scope, size_t want, std::vector<fi_cq_data_entry>* out,
                    std::vector<fi_addr_t>* src = nullptr, long max_polls = 4000000) {
  int result = 0;
  std::mutex mu;
  fi_cq_data_entry buf[16];
  fi_addr_t addrs[16];
  auto body = [&](const runtime::WorkItem&) {
    size_t got = 0;
    long empty = 0;
    while (got < want && empty < max_polls) {
      size_t room = want - got < 16 ? want - got : 16;
      int64_t n = src ? fi_xpu_cq_readfrom(cq, buf, room, addrs, scope) : fi_xpu_cq_read(cq, buf, room, scope);
      if (n == -FI_EAGAIN) {
        ++empty;
        xpu_relax();
        continue;
      }
      if (n < 0) {
        if (xpu_scope_is_leader(scope)) result = static_cast<int>(n);
        break;
      }
      if (xpu_scope_is_leader(scope)) {
        std::lock_guard<std::mutex> g(mu);
        for (int64_t i = 0; i < n; ++i) {
          out->push_back(buf[i]);
          if (src) src->push_back(addrs[i]);
        }
      }
      got += static_cast<size_t>(n);
      // Nobody may reuse buf before the leader copied it out.
      xpu_scope_barrier(scope);
    }
  };
  if (scope == FI_XPU_WORK_ITEM) {
    body(runtime::WorkItem{});
  } else if (runtime::launch(one_group(scope), body) != 0) {
    return -FI_EOTHER;
  }
  return result;
}

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_XPU_XPU_TEST_UTIL_H_
