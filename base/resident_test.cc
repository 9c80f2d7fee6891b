#include "base/resident.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include <gtest/gtest.h>

namespace xpufab {
namespace base {
namespace {

// Which of the mapping's pages are resident (mincore).
std::vector<bool> resident_pages(void* p, size_t pages) {
  std::vector<unsigned char> v(pages);
  EXPECT_EQ(mincore(p, pages * kResidentPage, v.data()), 0);
  std::vector<bool> out(pages);
  for (size_t i = 0; i < pages; ++i) out[i] = (v[i] & 1) != 0;
  return out;
}

TEST(MakeResident, MapsThePagesOfTheRangeAndNoOthers) {
  ASSERT_EQ(sysconf(_SC_PAGESIZE), static_cast<long>(kResidentPage));
  constexpr size_t kPages = 8;
  void* m = mmap(nullptr, kPages * kResidentPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(resident_pages(m, kPages), std::vector<bool>(kPages, false));
  // From the middle of page 2 to the first byte of page 4: pages 2, 3 and 4.
  auto* base = static_cast<char*>(m);
  if (!make_resident(base + 2 * kResidentPage + 100, 2 * kResidentPage - 99)) {
    munmap(m, kPages * kResidentPage);
    GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  }
  EXPECT_EQ(resident_pages(m, kPages), (std::vector<bool>{false, false, true, true, true, false, false, false}));
  // The memory reads as zero bytes, as fresh memory does.
  for (size_t i = 2 * kResidentPage; i < 5 * kResidentPage; ++i) ASSERT_EQ(base[i], 0);
  munmap(m, kPages * kResidentPage);
}

}  // namespace
}  // namespace base
}  // namespace xpufab
