// PeerMappings: one-copy reads of file-backed memory a process published go through a mapping of
// the file (counted), anything else through the kernel copy; withdrawn and republished ranges
// are never read from a stale mapping; a child's table is its own.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "emu/fabric.h"
#include "emu/peer_mappings.h"
#include "gtest/gtest.h"

namespace xpufab {
namespace emu {
namespace {

constexpr size_t kLen = 1 << 20;

struct Shared {
  int fd = -1;
  uint8_t* p = nullptr;
  explicit Shared(uint8_t seed, void* at = nullptr) {
    fd = memfd_create("peer-mappings-test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, kLen), 0);
    void* m = mmap(at, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    EXPECT_NE(m, MAP_FAILED);
    p = static_cast<uint8_t*>(m);
    for (size_t i = 0; i < kLen; ++i) p[i] = static_cast<uint8_t>(seed + i * 13);
  }
  ~Shared() {
    munmap(p, kLen);
    close(fd);
  }
};

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(PeerMappings, PublishedFileMemoryIsCopiedThroughAMapping) {
  Shared s(3);
  const PeerRef me = PeerMemory::self();
  ASSERT_EQ(PeerMappings::share(s.p, kLen, s.fd, 0), 0);
  std::vector<uint8_t> out(4096);
  const uint64_t before = PeerMappings::mapped_reads();
  ASSERT_EQ(PeerMemory::read(me, addr(s.p + 5000), out.data(), out.size()), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 1);
  EXPECT_EQ(std::memcmp(out.data(), s.p + 5000, out.size()), 0);
  // A range running past the published one is not the mapping's to serve.
  ASSERT_EQ(PeerMemory::read(me, addr(s.p + kLen - 100), out.data(), 100), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 2);
  std::vector<uint8_t> anon(8192, 0x5a);
  ASSERT_EQ(PeerMemory::read(me, addr(anon.data()), out.data(), out.size()), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 2);
  EXPECT_EQ(out[0], 0x5a);
  PeerMappings::unshare(s.p);
  ASSERT_EQ(PeerMemory::read(me, addr(s.p), out.data(), out.size()), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 2);  // the kernel copy again
  EXPECT_EQ(std::memcmp(out.data(), s.p, out.size()), 0);
}

TEST(PeerMappings, ARangePublishedAgainIsReadFromTheNewFile) {
  const PeerRef me = PeerMemory::self();
  std::vector<uint8_t> out(64);
  void* at;
  {
    Shared a(1);
    at = a.p;
    ASSERT_EQ(PeerMappings::share(a.p, kLen, a.fd, 0), 0);
    ASSERT_EQ(PeerMemory::read(me, addr(a.p), out.data(), out.size()), 0);
    EXPECT_EQ(out[1], static_cast<uint8_t>(1 + 13));
    PeerMappings::unshare(a.p);
  }
  Shared b(7, at);  // another file at the same address
  ASSERT_EQ(b.p, at);
  ASSERT_EQ(PeerMappings::share(b.p, kLen, b.fd, 0), 0);
  const uint64_t before = PeerMappings::mapped_reads();
  ASSERT_EQ(PeerMemory::read(me, addr(b.p), out.data(), out.size()), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 1);
  EXPECT_EQ(out[1], static_cast<uint8_t>(7 + 13));
  PeerMappings::unshare(b.p);
}

TEST(PeerMappings, AnotherProcessPublishesItsOwnRange) {
  (void)PeerMemory::self();
  (void)PeerMappings::table_fd();  // the parent's table exists before the fork
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Shared s(9);
    int rc = PeerMappings::share(s.p, kLen, s.fd, 0);
    PeerRef me = PeerMemory::self();
    uint64_t msg[4] = {static_cast<uint64_t>(rc == 0), me.id_addr, me.id, addr(s.p)};
    char c;
    if (write(to_parent[1], msg, sizeof(msg)) != sizeof(msg) || read(to_child[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  uint64_t msg[4];
  ASSERT_EQ(read(to_parent[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  EXPECT_EQ(msg[0], 1u);
  PeerRef peer;
  peer.pid = static_cast<uint32_t>(child);
  peer.id_addr = msg[1];
  peer.id = msg[2];
  std::vector<uint8_t> out(kLen);
  const uint64_t before = PeerMappings::mapped_reads();
  EXPECT_EQ(PeerMemory::read(peer, msg[3], out.data(), out.size()), 0);
  EXPECT_EQ(PeerMappings::mapped_reads(), before + 1);
  bool same = true;
  for (size_t i = 0; i < kLen; ++i) same &= out[i] == static_cast<uint8_t>(9 + i * 13);
  EXPECT_TRUE(same);
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
