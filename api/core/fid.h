/*
 * api/core/fid.h - bookkeeping shared by every provider object.
 *
 * fi_close() must fail with -FI_EBUSY while other objects still depend on
 * the one being closed (a domain with open endpoints, a CQ bound to an
 * endpoint).  FidRefs counts those dependents: an object takes a reference on
 * each object it depends on when created or bound, drops it when closed, and
 * the close op of the dependency calls try_close() first.
 *
 * Thread-safety: all operations are atomic; try_close() succeeds at most once.
 */
#ifndef XPUFAB_API_CORE_FID_H_
#define XPUFAB_API_CORE_FID_H_

#include <rdma/fi_errno.h>

#include <atomic>
#include <cstdint>

namespace xpufab::core {

class FidRefs {
 public:
  FidRefs() = default;
  FidRefs(const FidRefs&) = delete;
  FidRefs& operator=(const FidRefs&) = delete;

  // A dependent appears.  Returns -FI_EOPBADSTATE once the object is closing.
  int acquire() {
    int64_t v = count_.load(std::memory_order_relaxed);
    do {
      if (v < 0) return -FI_EOPBADSTATE;
    } while (!count_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
    return 0;
  }

  // A dependent goes away.  Unbalanced releases are ignored.
  void release() {
    int64_t v = count_.load(std::memory_order_relaxed);
    do {
      if (v <= 0) return;
    } while (!count_.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel));
  }

  // 0: no dependents, and from now on acquire() fails; the caller frees the
  // object.  -FI_EBUSY: dependents remain.  -FI_EOPBADSTATE: already closed.
  int try_close() {
    int64_t expected = 0;
    if (count_.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) return 0;
    return expected < 0 ? -FI_EOPBADSTATE : -FI_EBUSY;
  }

  int64_t count() const {
    int64_t v = count_.load(std::memory_order_acquire);
    return v < 0 ? 0 : v;
  }

 private:
  std::atomic<int64_t> count_{0};  // -1 once closed
};

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_FID_H_
