#include "emu/peer_mappings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>

namespace xpufab {
namespace emu {
namespace {

constexpr uint32_t kMagic = 0x504d4150u;  // "PMAP"
constexpr uint32_t kEntries = 256;

// One published range. seq is odd while the owner rewrites the entry; a reader trusts what it
// copied only if seq was even and unchanged around the copy. gen names the publication (never
// reused in a process), ino/dev the file, so that a reader never maps a descriptor that was
// closed and reused for another file.
struct Entry {
  std::atomic<uint32_t> seq;
  int32_t fd;
  uint64_t base, len, file_off, gen, ino, dev;
};
struct Table {
  uint32_t magic;
  std::atomic<uint32_t> count;  // entries in use lie below it
  Entry e[kEntries];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the table is shared between processes");

struct Own {
  std::mutex mu;
  pid_t pid = -1;
  int fd = -1;
  Table* t = nullptr;
  uint64_t next_gen = 0;
};
Own& own() {
  static Own* o = new Own();
  return *o;
}

// Under o.mu: the table of this process, made anew after fork() (a child must not write into
// its parent's table).
Table* own_table(Own& o) {
  const pid_t pid = getpid();
  if (o.pid == pid) return o.t;
  if (o.fd >= 0) {  // inherited: the parent's
    munmap(o.t, sizeof(Table));
    close(o.fd);
  }
  o.pid = pid;
  o.t = nullptr;
  o.fd = memfd_create("xpufab-peer-mappings", MFD_CLOEXEC);
  if (o.fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (ftruncate(o.fd, sizeof(Table)) == 0)
    p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED, o.fd, 0);
  if (p == MAP_FAILED) {
    close(o.fd);
    o.fd = -1;
    return nullptr;
  }
  o.t = static_cast<Table*>(p);  // zero-filled by ftruncate
  o.t->magic = kMagic;
  return o.t;
}

int open_peer_fd(uint32_t pid, int64_t fd, int flags) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/fd/%lld", pid, static_cast<long long>(fd));
  return open(path, flags | O_CLOEXEC);
}

// What this process mapped of its peers: their tables, and the published ranges it copied from.
struct PeerKey {
  uint32_t pid;
  uint64_t id;
  bool operator<(const PeerKey& o) const { return std::tie(pid, id) < std::tie(o.pid, o.id); }
};
struct Mapping {
  const uint8_t* p;
  uint64_t len;
};
struct PeerView {
  const Table* t = nullptr;  // null: the peer has none (or we cannot map it)
  std::map<uint64_t, Mapping> by_gen;
};
struct Views {
  std::shared_mutex mu;  // copies hold it shared; mapping and unmapping hold it exclusively
  std::map<PeerKey, PeerView> peers;
  std::atomic<uint64_t> mapped_reads{0};
};
Views& views() {
  static Views* v = new Views();
  return *v;
}

constexpr size_t kMaxPeers = 64, kMaxMappingsPerPeer = 32;

void drop_view(PeerView* v) {
  for (auto& m : v->by_gen) munmap(const_cast<uint8_t*>(m.second.p), m.second.len);
  v->by_gen.clear();
  if (v->t) munmap(const_cast<Table*>(v->t), sizeof(Table));
  v->t = nullptr;
}

// The entries' fields are plain words in memory other processes map, ordered around their
// sequence count by fences. ThreadSanitizer cannot model fences (GCC warns, and warnings are
// errors here); processes are outside what it checks anyway.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
inline void fence_acquire() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
inline void fence_release() { __atomic_thread_fence(__ATOMIC_RELEASE); }
#pragma GCC diagnostic pop

// A consistent copy of entry i, or false if it is being rewritten or unused.
bool snapshot(const Table* t, uint32_t i, Entry* out) {
  const Entry& e = t->e[i];
  const uint32_t s1 = e.seq.load(std::memory_order_acquire);
  if (s1 & 1) return false;
  out->fd = e.fd;
  out->base = e.base;
  out->len = e.len;
  out->file_off = e.file_off;
  out->gen = e.gen;
  out->ino = e.ino;
  out->dev = e.dev;
  fence_acquire();
  if (e.seq.load(std::memory_order_relaxed) != s1) return false;
  out->seq.store(s1, std::memory_order_relaxed);
  return out->len != 0;
}

// Finds the published range holding [addr, addr + len) in a peer's table.
bool lookup(const Table* t, uint64_t addr, size_t len, Entry* out) {
  const uint32_t n = std::min(t->count.load(std::memory_order_acquire), kEntries);
  for (uint32_t i = 0; i < n; ++i) {
    if (!snapshot(t, i, out)) continue;
    if (addr >= out->base && addr - out->base <= out->len && len <= out->len - (addr - out->base))
      return true;
  }
  return false;
}

// Exclusive lock held: maps what the peer published under e.gen (checking the file is the one
// published), dropping mappings of publications the peer has since withdrawn.
const Mapping* map_range(const PeerRef& from, PeerView* v, const Entry& e) {
  if (v->by_gen.size() >= kMaxMappingsPerPeer) {
    for (auto it = v->by_gen.begin(); it != v->by_gen.end();) {
      bool live = false;
      Entry cur;
      const uint32_t n = std::min(v->t->count.load(std::memory_order_acquire), kEntries);
      for (uint32_t i = 0; i < n && !live; ++i) live = snapshot(v->t, i, &cur) && cur.gen == it->first;
      if (live) {
        ++it;
      } else {
        munmap(const_cast<uint8_t*>(it->second.p), it->second.len);
        it = v->by_gen.erase(it);
      }
    }
    if (v->by_gen.size() >= kMaxMappingsPerPeer) return nullptr;
  }
  const int fd = open_peer_fd(from.pid, e.fd, O_RDONLY);
  if (fd < 0) return nullptr;
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == e.ino &&
      static_cast<uint64_t>(st.st_dev) == e.dev)
    p = mmap(nullptr, e.len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(e.file_off));
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  return &(v->by_gen[e.gen] = Mapping{static_cast<const uint8_t*>(p), e.len});
}

}  // namespace

int PeerMappings::table_fd() {
  Own& o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  return own_table(o) ? o.fd : -1;
}

int PeerMappings::share(const void* base, size_t len, int fd, uint64_t file_off) {
  if (base == nullptr || len == 0 || fd < 0) return -EINVAL;
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  Own& o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  Table* t = own_table(o);
  if (t == nullptr) return -ENOMEM;
  const uint32_t n = t->count.load(std::memory_order_relaxed);
  uint32_t i = 0;
  while (i < n && t->e[i].len != 0) ++i;
  if (i == kEntries) return -ENOSPC;
  const int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return -errno;
  Entry& e = t->e[i];
  e.seq.fetch_add(1, std::memory_order_relaxed);  // odd: being written
  fence_release();
  e.fd = dup_fd;
  e.base = reinterpret_cast<uint64_t>(base);
  e.file_off = file_off;
  e.gen = ++o.next_gen;
  e.ino = static_cast<uint64_t>(st.st_ino);
  e.dev = static_cast<uint64_t>(st.st_dev);
  e.len = len;
  e.seq.fetch_add(1, std::memory_order_release);
  if (i == n) t->count.store(n + 1, std::memory_order_release);
  return 0;
}

void PeerMappings::unshare(const void* base) {
  Own& o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  Table* t = own_table(o);
  if (t == nullptr) return;
  const uint32_t n = t->count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; ++i) {
    Entry& e = t->e[i];
    if (e.len == 0 || e.base != reinterpret_cast<uint64_t>(base)) continue;
    e.seq.fetch_add(1, std::memory_order_relaxed);
    fence_release();
    e.len = 0;
    const int fd = e.fd;
    e.fd = -1;
    e.seq.fetch_add(1, std::memory_order_release);
    close(fd);
    return;
  }
}

int PeerMappings::read(const PeerRef& from, int64_t table_fd, uint64_t addr, void* local, size_t len) {
  if (table_fd < 0 || len == 0) return -ENOENT;
  Views& vs = views();
  const PeerKey key{from.pid, from.id};
  {
    std::shared_lock<std::shared_mutex> lock(vs.mu);
    auto it = vs.peers.find(key);
    if (it != vs.peers.end()) {
      PeerView& v = it->second;
      if (v.t == nullptr) return -ENOENT;
      Entry e;
      if (!lookup(v.t, addr, len, &e)) return -ENOENT;
      auto m = v.by_gen.find(e.gen);
      if (m != v.by_gen.end()) {
        std::memcpy(local, m->second.p + (addr - e.base), len);
        vs.mapped_reads.fetch_add(1, std::memory_order_relaxed);
        return 0;
      }
    }
  }
  std::unique_lock<std::shared_mutex> lock(vs.mu);
  auto it = vs.peers.find(key);
  if (it == vs.peers.end()) {
    if (vs.peers.size() >= kMaxPeers) {
      for (auto& p : vs.peers) drop_view(&p.second);
      vs.peers.clear();
    }
    PeerView& v = vs.peers[key];
    const int fd = open_peer_fd(from.pid, table_fd, O_RDONLY);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Table)) {
        void* p = mmap(nullptr, sizeof(Table), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          v.t = static_cast<const Table*>(p);
          if (v.t->magic != kMagic) {
            munmap(p, sizeof(Table));
            v.t = nullptr;
          }
        }
      }
      close(fd);
    }
    it = vs.peers.find(key);
  }
  PeerView& v = it->second;
  if (v.t == nullptr) return -ENOENT;
  Entry e;
  if (!lookup(v.t, addr, len, &e)) return -ENOENT;
  auto m = v.by_gen.find(e.gen);
  const Mapping* mp = m != v.by_gen.end() ? &m->second : map_range(from, &v, e);
  if (mp == nullptr) return -ENOENT;
  std::memcpy(local, mp->p + (addr - e.base), len);
  vs.mapped_reads.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

uint64_t PeerMappings::mapped_reads() { return views().mapped_reads.load(std::memory_order_relaxed); }

}  // namespace emu
}  // namespace xpufab
