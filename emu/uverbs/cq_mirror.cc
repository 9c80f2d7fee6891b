// The 16-byte CQE view of a CQ: libefa before v47 asks for 16-byte entries, while the emulator
// writes 32-byte ones. Such a CQ gets a ring of its own that the service thread fills: the first
// 16 bytes of each emulator CQE, slot for slot, with the word holding the phase bit stored last
// so libefa never sees a half-copied entry.
#include <cstdlib>
#include <cstring>

#include "emu/uverbs/server_state.h"
#include "emu/uverbs/uverbs_server.h"

namespace xpufab {
namespace uverbs {

// From the heap: the shim's own memory, freed by the shim alone (free_owned).
uint8_t* alloc_mirror_ring(size_t len) {
  void* p = std::aligned_alloc(kPage, page_align(len));
  if (p != nullptr) std::memset(p, 0, page_align(len));
  return static_cast<uint8_t*>(p);
}

int mirror_cqes(CqObj* c) {
  int copied = 0;
  for (;;) {
    uint32_t slot = c->mirrored & (c->entries - 1);
    const uint8_t* src = c->emu_ring + size_t{slot} * 32;
    uint32_t w0 = __atomic_load_n(reinterpret_cast<const uint32_t*>(src), __ATOMIC_ACQUIRE);
    uint8_t want = static_cast<uint8_t>(((c->mirrored >> c->log2_entries) & 1) ^ 1);
    if (((w0 >> 24) & 1u) != want) break;
    uint8_t* dst = c->ring16 + size_t{slot} * 16;
    std::memcpy(dst + 4, src + 4, 12);
    __atomic_store_n(reinterpret_cast<uint32_t*>(dst), w0, __ATOMIC_RELEASE);
    c->mirrored++;
    ++copied;
  }
  return copied;
}

void release_mirror_ring_locked(State& s, CqObj* c) {
  if (c->ring16 == nullptr) return;
  size_t len = page_align(size_t{c->entries} * 16);
  auto h = s.handed.find(reinterpret_cast<uintptr_t>(c->ring16));
  if (h != s.handed.end() && h->second.refs > 0) {
    h->second.orphan = true;
  } else {
    if (h != s.handed.end()) {
      retire_range(h->first);
      s.handed.erase(h);
    }
    free_owned(c->ring16, len);
  }
}

}  // namespace uverbs
}  // namespace xpufab
