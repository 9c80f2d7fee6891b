// A fixed-size array of zero bytes from calloc. Large blocks come straight from the kernel, so a
// deep queue's per-entry tables cost only the pages that entries really used: an endpoint with
// the device's full 16K-entry RQ keeps a few KiB resident instead of the whole table.
#pragma once

#include <cstddef>
#include <cstdlib>
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
    void* p = n ? std::calloc(n, sizeof(T)) : nullptr;
    if (n && !p) throw std::bad_alloc();
    mem_.reset(static_cast<T*>(p));
    size_ = n;
  }
  T* data() { return mem_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return mem_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> mem_;
  size_t size_ = 0;
};

}  // namespace xpufab::efa
