// A device whose every operation is refused (-EOPNOTSUPP), for tests that need a backend::Device
// and implement only the few operations they exercise.
#ifndef XPUFAB_API_BACKEND_UNSUPPORTED_DEVICE_H_
#define XPUFAB_API_BACKEND_UNSUPPORTED_DEVICE_H_

#include <cerrno>

#include "api/backend/backend.h"

namespace xpufab::backend {

class UnsupportedDevice : public Device {
 public:
  int query(DeviceAttr*) const override { return -EOPNOTSUPP; }
  int alloc_pd(Pd**) override { return -EOPNOTSUPP; }
  int dealloc_pd(Pd*) override { return -EOPNOTSUPP; }
  int reg_mr(Pd*, const MrInitAttr&, Mr**) override { return -EOPNOTSUPP; }
  int dereg_mr(Mr*) override { return -EOPNOTSUPP; }
  int create_cq(const CqInitAttr&, Cq**) override { return -EOPNOTSUPP; }
  int destroy_cq(Cq*) override { return -EOPNOTSUPP; }
  int create_qp(const QpInitAttr&, Qp**) override { return -EOPNOTSUPP; }
  int destroy_qp(Qp*) override { return -EOPNOTSUPP; }
  int create_ah(Pd*, const uint8_t*, Ah**) override { return -EOPNOTSUPP; }
  int destroy_ah(Ah*) override { return -EOPNOTSUPP; }
  int create_comp_cntr(const CompCntrInitAttr&, CompCntr**) override { return -EOPNOTSUPP; }
  int destroy_comp_cntr(CompCntr*) override { return -EOPNOTSUPP; }
  int local_address(const Qp*, uint8_t*, uint32_t*, uint32_t*) const override { return -EOPNOTSUPP; }
  int set_qp_failed(Qp*, int) override { return -EOPNOTSUPP; }
  void set_event_handler(EventHandler*) override {}
  int progress(int) override { return 0; }
};

}  // namespace xpufab::backend

#endif  // XPUFAB_API_BACKEND_UNSUPPORTED_DEVICE_H_
