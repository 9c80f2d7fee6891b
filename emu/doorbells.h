// The doorbell page of an emulated device and the scan that notices writes to it.
//
// Doorbells are dense 32-bit words in one page (as the doorbell BAR is), written by applications
// and device kernels with atomic stores. The engine compares words against a shadow copy: each
// pass looks at (a) the words of objects active in the last kHotPasses passes and (b) a
// fixed-size round-robin chunk of the whole page, so the cost of a pass does not grow with idle
// QPs; a doorbell of an idle QP is noticed within ceil(words / kScanChunk) passes. A page of
// at most kScanChunk words is compared whole every pass. After the engine slept, the whole page
// is compared once (request_full_scan, from the next pass's scan_doorbells).
//
// Internal to emu/. Guarded by the device's mu_, except the words themselves and unchanged()
// (which reads the shadow and the page's extent with atomic loads; they change with atomic
// stores under mu_).
#ifndef XPUFAB_EMU_DOORBELLS_H_
#define XPUFAB_EMU_DOORBELLS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xpufab {
namespace emu {

enum class DbKind : uint8_t { kNone, kSq, kRq, kCq };

struct DbOwner {
  DbKind kind = DbKind::kNone;
  void* obj = nullptr;
  uint64_t hot_until = 0;   // pass number
  uint64_t stalled_in = 0;  // pass in which a fault hook stalled this doorbell
};

inline uint32_t load_db(const uint32_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }

class DoorbellPage {
 public:
  static constexpr uint32_t kScanChunk = 128;   // words compared per pass besides hot ones
  static constexpr uint64_t kHotPasses = 4096;  // passes a word stays hot after activity

  DoorbellPage() = default;
  DoorbellPage(const DoorbellPage&) = delete;
  DoorbellPage& operator=(const DoorbellPage&) = delete;
  ~DoorbellPage();

  // Page-aligned, zeroed words for `capacity` doorbells. -ENOMEM.
  int init(uint32_t capacity);
  // A zeroed word owned by `obj`. -ENOMEM when the page is full.
  int alloc(DbKind kind, void* obj, uint32_t* index_p);
  // The word is free for reuse; a stale hot entry drops out by itself (it has no owner).
  void free(uint32_t index);
  // Takes the word out of the hot set now (its owner is going away).
  void forget_hot(uint32_t index);

  uint32_t* word(uint32_t index) { return &words_[index]; }
  DbOwner& owner(uint32_t index) { return owner_[index]; }
  void set_shadow(uint32_t index, uint32_t value) { __atomic_store_n(&shadow_[index], value, __ATOMIC_RELAXED); }
  uint32_t shadow(uint32_t index) const { return __atomic_load_n(&shadow_[index], __ATOMIC_RELAXED); }
  // Without mu_: true when the page is small enough to be compared whole in a pass (see above)
  // and no word differs from its shadow, so a pass would find no doorbell. A larger page says
  // false.
  bool unchanged() const {
    const uint32_t n = __atomic_load_n(&high_, __ATOMIC_RELAXED);
    if (n > kScanChunk) return false;
    for (uint32_t i = 0; i < n; ++i)
      if (load_db(&words_[i]) != __atomic_load_n(&shadow_[i], __ATOMIC_RELAXED)) return false;
    return true;
  }
  // The word was active in pass `pass`: compare it every pass for the next kHotPasses.
  void mark_hot(uint32_t index, uint64_t pass);
  void request_full_scan() { full_scan_ = true; }

  // Calls on_change(index, value) for each owned word that differs from its shadow and that no
  // fault stalled in this pass. on_change updates the shadow (set_shadow) when it accepts the
  // value.
  template <class F>
  void scan(uint64_t pass, F&& on_change) {
    auto check = [&](uint32_t i) {
      uint32_t v = load_db(&words_[i]);
      if (v != shadow_[i] && owner_[i].kind != DbKind::kNone && owner_[i].stalled_in != pass) {
        on_change(i, v);
      }
    };
    // A page no larger than the chunk is compared whole, in one run: that costs what the chunk
    // would, without the hot set's second look at the same words (its entries then wait
    // unexpired until the page grows).
    if (full_scan_ || high_ <= kScanChunk) {
      full_scan_ = false;
      for (uint32_t i = 0; i < high_; ++i) check(i);
      return;
    }
    for (size_t h = 0; h < hot_.size();) {
      uint32_t i = hot_[h];
      check(i);
      if (owner_[i].hot_until < pass) {
        is_hot_[i] = 0;
        hot_[h] = hot_.back();
        hot_.pop_back();
      } else {
        ++h;
      }
    }
    // Each word at most once per pass: a device with few queues compares its few words, not
    // the same ones over and over to fill the chunk, and a hot word, compared above, is not
    // compared again (hot_ holds distinct words below high_: all of them are hot when it holds
    // as many).
    if (hot_.size() >= high_) return;
    // The chunk is one or two runs of consecutive words (it wraps at high_ at most once).
    for (uint32_t left = high_ < kScanChunk ? high_ : kScanChunk; left != 0;) {
      if (cursor_ >= high_) cursor_ = 0;
      const uint32_t end = high_ - cursor_ < left ? high_ : cursor_ + left;
      left -= end - cursor_;
      for (uint32_t i = cursor_; i < end; ++i) {
        if (!is_hot_[i]) check(i);
      }
      cursor_ = end;
    }
  }

 private:
  uint32_t* words_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t high_ = 0;  // words ever handed out
  std::vector<uint32_t> shadow_;
  std::vector<DbOwner> owner_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> hot_;  // indices recently active
  std::vector<uint8_t> is_hot_;
  uint32_t cursor_ = 0;
  bool full_scan_ = true;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_DOORBELLS_H_
