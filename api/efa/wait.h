// The blocking waits of CQs and counters (fi_cq_sread, fi_cntr_wait): deadlines in whole
// milliseconds and the waiter count a WakeFd writes for.
#ifndef XPUFAB_API_EFA_WAIT_H_
#define XPUFAB_API_EFA_WAIT_H_

#include <chrono>

#include "api/efa/efa.h"

namespace xpufab::efa {

using Clock = std::chrono::steady_clock;

// Whole milliseconds left until `deadline`, rounded up so a wait never ends early.
inline int ms_left(Clock::time_point deadline) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
  return us <= 0 ? 0 : static_cast<int>((us + 999) / 1000);
}

// Counts a sleeping waiter for the lifetime of a wait call (WakeFd writes only while > 0).
struct WaiterScope {
  explicit WaiterScope(WakeFd* w) : w_(w) { w_->waiters.fetch_add(1, std::memory_order_acq_rel); }
  ~WaiterScope() { w_->waiters.fetch_sub(1, std::memory_order_acq_rel); }
  WakeFd* w_;
};

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_WAIT_H_
