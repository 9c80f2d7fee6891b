// Methods of the device objects; the ones that touch device state take its lock.
#include "emu/objects.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/resident.h"
#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer's own annotation: a range is new memory. Mappings made by syscall() pass
// under its mmap interceptor, so without it the shadow of an earlier mapping at the same address
// makes the first atomic access to a new ring look like a race.
extern "C" void AnnotateNewMemory(const char* file, int line, const volatile void* mem, size_t size);
#endif

namespace {

size_t queue_len(size_t bytes) { return (bytes + 4095) & ~size_t{4095}; }

}  // namespace

// Straight to the kernel: under the uverbs shim (emu/uverbs) mmap and munmap are interposed,
// and it creates queues while holding the lock its interposed calls take.
uint8_t* alloc_queue(size_t bytes, size_t resident_bytes) {
  if (bytes == 0) return nullptr;
  long p = syscall(SYS_mmap, nullptr, queue_len(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (p == -1) return nullptr;  // syscall(): -1 and errno
#if defined(__SANITIZE_THREAD__)
  AnnotateNewMemory(__FILE__, __LINE__, reinterpret_cast<void*>(p), queue_len(bytes));
#endif
  base::make_resident(reinterpret_cast<void*>(p), std::min(bytes, resident_bytes));
  return reinterpret_cast<uint8_t*>(p);
}

void free_queue(void* p, size_t bytes) {
  if (p != nullptr) syscall(SYS_munmap, p, queue_len(bytes));
}

int EmuCq::query(CqAttr* attr) const {
  if (attr == nullptr) return -EINVAL;
  attr->buffer = ring;
  attr->entry_size = kCqeSize;
  attr->num_entries = entries;
  attr->doorbell = db;
  return 0;
}

int EmuCq::arm() { return dev->arm_cq(this); }

QpState EmuQp::state() const {
  std::lock_guard<DeviceMutex> lock(dev->mu_);
  return st;
}

int EmuQp::modify(const QpAttr& attr, uint32_t attr_mask) {
  std::lock_guard<DeviceMutex> lock(dev->mu_);
  return dev->modify_qp_locked(this, attr, attr_mask);
}

int EmuQp::query_wqs(WqAttr* sq, WqAttr* rq) const {
  if (sq == nullptr || rq == nullptr) return -EINVAL;
  sq->buffer = sq_buf;
  sq->entry_size = wqe_size;
  sq->num_entries = sq_entries;
  sq->doorbell = sq_db;
  sq->max_batch = max_batch;
  rq->buffer = rq_buf;
  rq->entry_size = EFA_IO_RX_DESC_SIZE;
  rq->num_entries = rq_entries;
  rq->doorbell = rq_db;
  rq->max_batch = rq_entries;
  return 0;
}

int EmuQp::attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) {
  constexpr uint32_t kAll = kCntrSend | kCntrRecv | kCntrRdmaRead | kCntrRdmaWrite |
                            kCntrRemoteRdmaRead | kCntrRemoteRdmaWrite;
  if (cntr_ops == 0 || (cntr_ops & ~kAll) != 0) return -EINVAL;
  std::lock_guard<DeviceMutex> lock(dev->mu_);
  auto* c = dev->live_as<EmuCntr>(cntr);
  if (c == nullptr) return -EINVAL;
  for (auto& e : cntrs) {
    if (e.first == c) return -EEXIST;
  }
  cntrs.emplace_back(c, cntr_ops);
  c->refs++;
  return 0;
}

int EmuQp::detach_comp_cntr(CompCntr* cntr) {
  std::lock_guard<DeviceMutex> lock(dev->mu_);
  for (size_t i = 0; i < cntrs.size(); ++i) {
    if (cntrs[i].first == cntr) {
      cntrs[i].first->refs--;
      cntrs.erase(cntrs.begin() + static_cast<long>(i));
      return 0;
    }
  }
  return -ENOENT;
}

}  // namespace emu
}  // namespace xpufab
