// A fixed-size array of zero bytes. Blocks of 64 KiB and more are anonymous mappings of their
// own (calloc would serve them from the heap once glibc's mmap threshold has risen, and clear
// every page), so a deep queue's per-entry tables cost only the pages its entries really used:
// an endpoint with the device's full 16K-entry RQ keeps a few KiB resident, not the table.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <sys/mman.h>
#include <memory>
#include <new>
#include <type_traits>

namespace xpufab::efa {

template <typename T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "the elements are zero bytes, never constructed");

 public:
  // Replaces the contents with n zeroed elements; throws std::bad_alloc like std::vector.
  void reset(size_t n) {
    mem_.reset();
    const size_t bytes = n * sizeof(T);
    if (bytes >= kMapMin) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mem_ = Block(static_cast<T*>(p), Release{bytes});
    } else if (n) {
      void* p = std::calloc(n, sizeof(T));
      if (!p) throw std::bad_alloc();
      mem_ = Block(static_cast<T*>(p), Release{0});
    }
    size_ = n;
  }
  T* data() { return mem_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return mem_.get()[i]; }

 private:
  static constexpr size_t kMapMin = size_t{64} << 10;
  struct Release {
    size_t mapped = 0;  // bytes of the mapping, 0 for a calloc block
    void operator()(T* p) const {
      if (mapped)
        munmap(p, mapped);
      else
        std::free(p);
    }
  };
  using Block = std::unique_ptr<T, Release>;
  Block mem_{nullptr, Release{0}};
  size_t size_ = 0;
};

}  // namespace xpufab::efa
