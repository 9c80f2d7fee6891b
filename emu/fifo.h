// A first-in-first-out queue in one power-of-two ring that doubles when full: a push and a pop
// touch one slot each, and memory is allocated only while the queue grows past its largest size
// so far (a std::deque allocates and frees a block every few hundred entries, and spends more
// instructions per end).
#ifndef XPUFAB_EMU_FIFO_H_
#define XPUFAB_EMU_FIFO_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace xpufab {
namespace emu {

template <typename T>
class Fifo {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  // The i-th entry from the front.
  T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  void pop_front() {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(v);
    ++size_;
  }
  void clear() { head_ = size_ = 0; }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? kFirstSlots : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }
  static constexpr size_t kFirstSlots = 16;
  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FIFO_H_
