// Making the head of fresh anonymous or shared memory resident when it is set up. A NIC's queues
// are pinned memory, written by the device from the first message on; a queue, table or ring that
// the emulator or the provider maps lazily would instead take a page fault at each page its first
// messages reach, on the path those messages time (several microseconds each on a virtual
// machine). Only the head is made resident: an idle queue costs a page, not its depth.
#ifndef XPUFAB_BASE_RESIDENT_H_
#define XPUFAB_BASE_RESIDENT_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace xpufab {
namespace base {

constexpr size_t kResidentPage = 4096;

// Maps the pages that hold [p, p + len) for writing now; false where that failed. Best effort:
// on a kernel without MADV_POPULATE_WRITE (before 5.14) they fault in as they are first written.
inline bool make_resident(const void* p, size_t len) {
#ifdef MADV_POPULATE_WRITE
  if (p == nullptr || len == 0) return false;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kResidentPage - 1};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + len;
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
#else
  (void)p;
  (void)len;
  return false;
#endif
}

}  // namespace base
}  // namespace xpufab

#endif  // XPUFAB_BASE_RESIDENT_H_
