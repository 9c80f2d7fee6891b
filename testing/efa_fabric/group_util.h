// What every member of a multi-process test does first: open its node, tell the others where it
// is, and insert them all into its AV (fi_addr by rank).
#ifndef XPUFAB_TESTING_EFA_FABRIC_GROUP_UTIL_H_
#define XPUFAB_TESTING_EFA_FABRIC_GROUP_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "testing/efa_fabric/group.h"
#include "testing/efa_fabric/node.h"

namespace xpufab::efa_fabric {

struct Peers {
  std::vector<fi_addr_t> addr;  // by rank
  std::vector<Remote> remote;   // by rank
};

// Ends with a barrier, so that a test's first message finds every AV complete (a message from a
// sender not yet inserted waits in the core until the insert; AMessageFromASenderNotYetInTheAvIsKept).
inline Peers connect(Member& m, Node& n) {
  Peers p;
  for (const std::string& b : m.allgather(encode(n.self()))) {
    p.remote.push_back(decode(b));
    p.addr.push_back(n.insert(p.remote.back()));
  }
  m.barrier();
  return p;
}

// The byte pattern tests write and verify; `seed` tells one transfer from another.
inline void fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = static_cast<uint8_t>(x >> 16);
  }
}

inline bool has_pattern(const uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    if (p[i] != static_cast<uint8_t>(x >> 16)) return false;
  }
  return true;
}

// One 64-bit value each member contributes, gathered by rank.
inline std::vector<uint64_t> gather_u64(Member& m, const std::vector<uint64_t>& mine) {
  std::string s(mine.size() * 8, '\0');
  if (!mine.empty()) memcpy(&s[0], mine.data(), s.size());
  std::vector<uint64_t> all;
  for (const std::string& b : m.allgather(s)) {
    const size_t k = b.size() / 8;
    const size_t at = all.size();
    all.resize(at + k);
    if (k) memcpy(&all[at], b.data(), k * 8);
  }
  return all;
}

}  // namespace xpufab::efa_fabric

#endif  // XPUFAB_TESTING_EFA_FABRIC_GROUP_UTIL_H_
