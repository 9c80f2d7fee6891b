// The shared-memory fabric's key directory: the senders file whose slots tell fabrics alive, the
// sweep of dead processes' mailboxes, and the directory's removal by the last fabric of its key,
// by a process leaving at exit, and for keys whose processes were all killed.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "emu/net/shm_layout.h"

namespace xpufab {
namespace emu {
namespace net {

using namespace shm_internal;

namespace {

// The senders file: slot i is bytes [8i, 8i + 8), write-locked (an open file description lock,
// released by the kernel when the process dies) by the fabric that owns it and holding that
// fabric's lock word, with kLeftBit set once the fabric left (its process is exiting): such a
// slot still counts for its lock word, no longer for the directory.
constexpr int kMaxSenders = 1 << 15;
constexpr int kSlotShift = 48;
constexpr uint64_t kLeftBit = uint64_t{1} << (kSlotShift - 1);

struct flock byte_range(off_t start, off_t len, short type) {
  struct flock l{};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = start;
  l.l_len = len;
  return l;
}

struct flock slot_range(uint64_t slot, short type) { return byte_range(static_cast<off_t>(slot * 8), 8, type); }

// The byte after the slots: read-locked by a fabric while it takes a slot, write-locked by the
// last fabric of the key while it removes the directory, so that no fabric takes a slot in a
// senders file that is being unlinked.
struct flock guard_range(short type) { return byte_range(off_t{kMaxSenders} * 8, 1, type); }

// Held while this process holds a lock on a senders file only for an instant. Such a lock belongs
// to the file's open description, which a child forked meanwhile shares: were the parent to
// close its descriptor then, the child would keep the lock for its lifetime and wedge every
// fabric of that key that waits for the guard. So fork waits until the instant has passed.
std::mutex& brief_locks() {
  static std::mutex mu;
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { brief_locks().lock(); }, [] { brief_locks().unlock(); }, [] { brief_locks().unlock(); });
  });
  return mu;
}

bool only_senders_left(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool only = true;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 &&
        std::strcmp(e->d_name, "senders") != 0) {
      only = false;
      break;
    }
  }
  closedir(d);
  return only;
}

// Removes the mailboxes in `dir` whose owners died; returns how many.
int sweep_dead_mailboxes(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (std::strlen(e->d_name) != 32) continue;
    std::string p = dir + "/" + e->d_name;
    int fd = open(p.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    // A file still being created (empty, just made) is not stale; its creator locks it next.
    if (fstat(fd, &st) != 0) {
      close(fd);
      continue;
    }
    bool fresh = st.st_size == 0 && time(nullptr) - st.st_ctime < 5;
    if (!fresh && owner_only(st, S_IFREG) && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Nobody holds the owner lock: the process that created it is gone.
      if (unlink_if_same(p, fd)) ++removed;
    }
    close(fd);
  }
  closedir(d);
  return removed;
}

// Whether a slot of the senders file open as `fd` is held by a fabric that has not left (one of
// another open description than `fd`'s). Caller holds the guard, so no slot is being taken.
bool a_staying_fabric_holds_a_slot(int fd) {
  const off_t end = off_t{kMaxSenders} * 8;
  for (off_t off = 0; off < end;) {
    struct flock l = byte_range(off, end - off, F_WRLCK);
    if (fcntl(fd, F_OFD_GETLK, &l) != 0) return true;  // cannot tell: keep the directory
    if (l.l_type == F_UNLCK) return false;
    const off_t slot_off = l.l_start - l.l_start % 8;
    uint64_t word = 0;
    if (pread(fd, &word, sizeof(word), slot_off) != sizeof(word) || (word & kLeftBit) == 0) return true;
    off = slot_off + 8;
  }
  return false;
}

// Removes `dir` when no fabric of its key stays: every slot of its senders file (open as `fd`)
// free or held by a fabric that left (or by `fd`'s own description), nobody taking one, and no
// live process's mailbox there (dead ones' are swept first, counted in *swept). Caller holds
// brief_locks(). Returns whether the directory went.
bool remove_key_dir(const std::string& dir, int fd, int* swept) {
  struct flock guard = guard_range(F_WRLCK);
  if (fcntl(fd, F_OFD_SETLK, &guard) != 0) return false;
  bool removed = false;
  if (!a_staying_fabric_holds_a_slot(fd)) {
    *swept += sweep_dead_mailboxes(dir);  // a crashed process's mailbox goes; a live one's keeps it
    const std::string path = dir + "/senders";
    struct stat st, now;
    if (only_senders_left(dir) && fstat(fd, &st) == 0 && stat(path.c_str(), &now) == 0 && same_file(st, now)) {
      unlink(path.c_str());
      // Fails, harmlessly, where a new fabric made its senders file meanwhile.
      removed = rmdir(dir.c_str()) == 0;
    }
  }
  guard.l_type = F_UNLCK;
  fcntl(fd, F_OFD_SETLK, &guard);
  return removed;
}

}  // namespace

int ShmFabric::take_sender_slot() {
  std::string path = dir_ + "/senders";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno == ENOENT ? -EAGAIN : -errno;  // the directory went meanwhile
  struct stat st;
  if (fstat(fd, &st) != 0 || !owner_only(st, S_IFREG)) {
    close(fd);
    return -EACCES;
  }
  std::lock_guard<std::mutex> brief(brief_locks());
  struct flock guard = guard_range(F_RDLCK);
  while (fcntl(fd, F_OFD_SETLKW, &guard) != 0) {
    if (errno != EINTR) {
      int err = -errno;
      close(fd);
      return err;
    }
  }
  // Unlinked before we held the guard: by the last fabric of the key, leaving (all live fabrics
  // must share one senders file, whose locks tell them alive).
  struct stat now;
  int rc = -EAGAIN;
  if (stat(path.c_str(), &now) == 0 && same_file(st, now)) rc = lock_free_slot(fd);
  guard.l_type = F_UNLCK;
  fcntl(fd, F_OFD_SETLK, &guard);
  if (rc != 0) close(fd);
  return rc;
}

int ShmFabric::lock_free_slot(int fd) {
  for (uint64_t slot = 0; slot < kMaxSenders; ++slot) {
    struct flock l = slot_range(slot, F_WRLCK);
    if (fcntl(fd, F_OFD_SETLK, &l) != 0) continue;  // a live fabric's
    // The slot number keeps the word unique among live fabrics, the random bits tell this owner
    // of the slot from an earlier one that died holding a mailbox lock.
    const uint64_t word = ((slot + 1) << kSlotShift) | (sender_id_ & (kLeftBit - 1));
    if (pwrite(fd, &word, sizeof(word), static_cast<off_t>(slot * 8)) != sizeof(word)) {
      const int err = errno != 0 ? -errno : -EIO;
      l.l_type = F_UNLCK;
      fcntl(fd, F_OFD_SETLK, &l);
      return err;
    }
    senders_fd_ = fd;
    lock_word_ = word;
    return 0;
  }
  return -EUSERS;
}

bool ShmFabric::sender_alive(uint64_t word) const {
  const uint64_t slot = (word >> kSlotShift) - 1;
  if (slot >= kMaxSenders) return false;  // not a word any fabric takes
  struct flock l = slot_range(slot, F_WRLCK);
  if (fcntl(senders_fd_, F_OFD_GETLK, &l) != 0) return true;  // cannot tell: wait on
  if (l.l_type == F_UNLCK) return false;  // nobody holds the slot: its owner died
  // Held: by the holder, unless a newer fabric took the slot over (that one writes its own word
  // right after it locks the slot; until then the holder still looks alive, which errs on waiting).
  uint64_t cur = 0;
  if (pread(senders_fd_, &cur, sizeof(cur), static_cast<off_t>(slot * 8)) != sizeof(cur)) return true;
  return cur == word || cur == (word | kLeftBit);
}

int ShmFabric::sweep_stale() {
  const int removed = sweep_dead_mailboxes(dir_);
  st_[kStale].fetch_add(static_cast<uint64_t>(removed), std::memory_order_relaxed);
  return removed;
}

void ShmFabric::remove_dir_if_unused() {
  if (senders_fd_ < 0) return;
  std::lock_guard<std::mutex> brief(brief_locks());
  int swept = 0;
  remove_key_dir(dir_, senders_fd_, &swept);
  st_[kStale].fetch_add(static_cast<uint64_t>(swept), std::memory_order_relaxed);
}

void ShmFabric::leave() {
  {
    std::lock_guard<std::mutex> lock(locals_mu_);
    if (left_) return;
    left_ = true;
    // Closed first, as detach does: a sender that maps the file looks for a successor and finds
    // none. The mapping stays: whatever still runs here keeps its ring.
    for (auto& kv : locals_) {
      kv.second->mb->closed.store(1, std::memory_order_seq_cst);
      unlink_if_same(kv.second->path, kv.second->fd);
    }
  }
  // Our slot stays locked, so that producers waiting on a mailbox lock we hold still find us
  // alive; its mark tells fabrics leaving after us that we no longer keep the directory.
  const uint64_t slot = (lock_word_ >> kSlotShift) - 1;
  const uint64_t marked = lock_word_ | kLeftBit;
  if (senders_fd_ >= 0 && pwrite(senders_fd_, &marked, sizeof(marked), static_cast<off_t>(slot * 8)) == sizeof(marked)) {
    remove_dir_if_unused();  // unmarked, our slot would keep the directory anyway
  }
  sweep_dead_keys();
}

int ShmFabric::sweep_dead_keys() {
  char prefix[48];
  const int prefix_len = std::snprintf(prefix, sizeof(prefix), "xpufab-%u-", static_cast<unsigned>(getuid()));
  DIR* d = opendir(opt_.base_dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix, static_cast<size_t>(prefix_len)) != 0 ||
        std::strlen(e->d_name) != static_cast<size_t>(prefix_len) + 16) {
      continue;
    }
    const std::string dir = opt_.base_dir + "/" + e->d_name;
    struct stat st;
    if (dir == dir_ || lstat(dir.c_str(), &st) != 0 || !owner_only(st, S_IFDIR)) continue;
    // A directory without its senders file is being made: its maker creates the file next.
    int fd = open((dir + "/senders").c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (fstat(fd, &st) == 0 && owner_only(st, S_IFREG)) {
      std::lock_guard<std::mutex> brief(brief_locks());
      int swept = 0;
      if (remove_key_dir(dir, fd, &swept)) ++removed;
      st_[kStale].fetch_add(static_cast<uint64_t>(swept), std::memory_order_relaxed);
    }
    close(fd);
  }
  closedir(d);
  return removed;
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab
