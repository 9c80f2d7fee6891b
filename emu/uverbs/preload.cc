// LD_PRELOAD layer: the libc calls rdma-core makes on the uverbs device, routed to the uverbs
// server; everything else goes to the next definition (libc). Only the symbols in shim.lds are
// exported, so the emulator and the backend registry inside this library never clash with a
// program that links its own copies.
//
// Interposed: open/open64/openat/openat64 and stat/stat64/lstat/fstatat/__xstat* of
// /dev/infiniband/uverbs0 (served by /dev/null, whose device number the sysfs tree advertises),
// open of $SYSFS_PATH/class/infiniband/*/ports/1/gids/0 and .../node_guid (the live GID and node
// GUID of this process's emulated device), write/read/ioctl/close on contexts and completion
// channels, mmap/munmap of queue keys, and socket(AF_NETLINK, NETLINK_RDMA), which fails as on a kernel without ib_core so libibverbs
// falls back to sysfs. ibv_open_device, efadv_create_qp_ex and efadv_create_cq pass through to
// rdma-core and then wrap the poll and post entries of what they made, so the calling thread
// drives the emulated NIC (caller_progress.h).
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hw/efadv_compat.h"
#include "emu/uverbs/caller_progress.h"
#include "emu/uverbs/uverbs_server.h"

namespace {

constexpr const char kDevPath[] = "/dev/infiniband/uverbs0";
constexpr const char kDevPrefix[] = "/dev/infiniband/uverbs";
constexpr const char kStandIn[] = "/dev/null";
constexpr int kNetlinkRdma = 20;

// Which fds are ours, checked without a lock on every call (0 none, 1 context, 2 channel).
constexpr int kMaxFd = 1 << 16;
std::atomic<uint8_t> g_kind[kMaxFd];
std::atomic<int> g_handed{0};  // mmaps handed out and not yet unmapped (fast path for munmap)

uint8_t kind_of(int fd) {
  return fd >= 0 && fd < kMaxFd ? g_kind[fd].load(std::memory_order_acquire) : 0;
}
void set_kind(int fd, uint8_t k) {
  if (fd >= 0 && fd < kMaxFd) g_kind[fd].store(k, std::memory_order_release);
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// rdma-core's entry points, for a program that reaches rdma-core through a library it dlopened
// with RTLD_LOCAL (Python's pyverbs, plugins): RTLD_NEXT does not see such a library, but its own
// calls still bind to this preloaded definition. dlsym on the loaded library's handle finds its
// default version and never this one (the shim is not among that library's dependencies).
template <class F>
F next_in(const char* name, const char* library) {
  if (F f = next<F>(name)) return f;
  void* h = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  F f = reinterpret_cast<F>(dlsym(h, name));
  dlclose(h);  // RTLD_NOLOAD took a reference; the library stays loaded by its opener
  return f;
}

// Each entry point's next definition, looked up on first use. The slot is atomic: these calls
// come from any thread, sanitizer runtimes included (a ThreadSanitizer report maps its
// symbolizer's files through mmap), and a plain lazily written pointer is a race there.
#define REAL_LOOKUP(name, type, lookup)                                      \
  static std::atomic<type> real_slot_##name{nullptr};                       \
  type real_##name = real_slot_##name.load(std::memory_order_acquire);      \
  if (real_##name == nullptr) {                                              \
    real_##name = lookup;                                                    \
    real_slot_##name.store(real_##name, std::memory_order_release);          \
  }

#define REAL_IN(name, type, library) REAL_LOOKUP(name, type, next_in<type>(#name, library))
#define REAL(name, type) REAL_LOOKUP(name, type, next<type>(#name))

int err(int e) {
  errno = e;
  return -1;
}

// 0: not ours; 1: the device node; -1: another uverbs index (no such device).
int dev_path(const char* path) {
  if (path == nullptr) return 0;
  if (std::strcmp(path, kDevPath) == 0) return 1;
  if (std::strncmp(path, kDevPrefix, sizeof(kDevPrefix) - 1) == 0) return -1;
  return 0;
}

// The sysfs files whose contents are live values of this process's emulated device.
enum class LiveFile { kNone, kGid, kNodeGuid };

LiveFile live_path(const char* path) {
  if (path == nullptr) return LiveFile::kNone;
  const char* root = std::getenv("SYSFS_PATH");
  if (root == nullptr || root[0] == '\0') return LiveFile::kNone;
  size_t rl = std::strlen(root);
  if (std::strncmp(path, root, rl) != 0) return LiveFile::kNone;
  const char* rest = path + rl;
  static const char kClass[] = "/class/infiniband/";
  if (std::strncmp(rest, kClass, sizeof(kClass) - 1) != 0) return LiveFile::kNone;
  rest += sizeof(kClass) - 1;
  const char* slash = std::strchr(rest, '/');
  if (slash == nullptr) return LiveFile::kNone;
  if (std::strcmp(slash, "/ports/1/gids/0") == 0) return LiveFile::kGid;
  if (std::strcmp(slash, "/node_guid") == 0) return LiveFile::kNodeGuid;
  return LiveFile::kNone;
}

// A read-only fd holding the live text; one emulated device per process (index 0).
int open_live_file(LiveFile f) {
  char text[64];
  bool ok = f == LiveFile::kGid ? xpufab::uverbs::gid_text(0, text, sizeof(text))
                                : xpufab::uverbs::node_guid_text(0, text, sizeof(text));
  if (!ok) return err(ENOENT);
  int fd = static_cast<int>(syscall(SYS_memfd_create, "xpufab-sysfs", MFD_CLOEXEC));
  if (fd < 0) return -1;
  size_t n = std::strlen(text);
  if (syscall(SYS_write, fd, text, n) != static_cast<long>(n) || lseek(fd, 0, SEEK_SET) != 0) {
    syscall(SYS_close, fd);
    return err(EIO);
  }
  return fd;
}

using open_fn = int (*)(const char*, int, ...);
using openat_fn = int (*)(int, const char*, int, ...);

int do_open(open_fn real, const char* path, int flags, mode_t mode) {
  int d = dev_path(path);
  if (d < 0) return err(ENOENT);
  if (d > 0) {
    int fd = real(kStandIn, flags & ~O_CREAT);
    if (fd >= 0) {
      xpufab::uverbs::register_context(fd);
      set_kind(fd, 1);
    }
    return fd;
  }
  if ((flags & O_ACCMODE) == O_RDONLY) {
    LiveFile f = live_path(path);
    if (f != LiveFile::kNone) return open_live_file(f);
  }
  return real(path, flags, mode);
}

int stat_path(const char* path, const char** use) {
  int d = dev_path(path);
  if (d < 0) return err(ENOENT);
  *use = d > 0 ? kStandIn : path;
  return 0;
}

__attribute__((constructor)) void shim_init() {
  pthread_atfork(nullptr, nullptr, [] {
    for (int i = 0; i < kMaxFd; ++i) g_kind[i].store(0, std::memory_order_relaxed);
    g_handed.store(0);
    xpufab::uverbs::after_fork_child();
  });
  std::atexit([] { xpufab::uverbs::at_exit(); });
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  REAL(open, open_fn);
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_open(real_open, path, flags, mode);
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  REAL(open64, open_fn);
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_open(real_open64, path, flags, mode);
}

static int do_openat(openat_fn real, int dirfd, const char* path, int flags, mode_t mode) {
  if (path != nullptr && path[0] == '/') {
    int d = dev_path(path);
    if (d < 0) return err(ENOENT);
    if (d > 0 || ((flags & O_ACCMODE) == O_RDONLY && live_path(path) != LiveFile::kNone)) {
      REAL(open, open_fn);
      return do_open(real_open, path, flags, mode);
    }
  }
  return real(dirfd, path, flags, mode);
}

__attribute__((visibility("default"))) int openat(int dirfd, const char* path, int flags, ...) {
  REAL(openat, openat_fn);
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_openat(real_openat, dirfd, path, flags, mode);
}

__attribute__((visibility("default"))) int openat64(int dirfd, const char* path, int flags, ...) {
  REAL(openat64, openat_fn);
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_openat(real_openat64, dirfd, path, flags, mode);
}

#define STAT_WRAPPER(name, stype)                                                   \
  __attribute__((visibility("default"))) int name(const char* path, stype* buf) {  \
    using fn = int (*)(const char*, stype*);                                        \
    REAL(name, fn);                                                                 \
    const char* use = path;                                                         \
    if (stat_path(path, &use) != 0) return -1;                                      \
    return real_##name(use, buf);                                                   \
  }
STAT_WRAPPER(stat, struct stat)
STAT_WRAPPER(stat64, struct stat64)
STAT_WRAPPER(lstat, struct stat)
STAT_WRAPPER(lstat64, struct stat64)

#define XSTAT_WRAPPER(name, stype)                                                         \
  __attribute__((visibility("default"))) int name(int ver, const char* path, stype* buf) { \
    using fn = int (*)(int, const char*, stype*);                                          \
    REAL(name, fn);                                                                        \
    const char* use = path;                                                                \
    if (stat_path(path, &use) != 0) return -1;                                             \
    return real_##name(ver, use, buf);                                                     \
  }
XSTAT_WRAPPER(__xstat, struct stat)
XSTAT_WRAPPER(__xstat64, struct stat64)
XSTAT_WRAPPER(__lxstat, struct stat)
XSTAT_WRAPPER(__lxstat64, struct stat64)

__attribute__((visibility("default"))) int fstatat(int dirfd, const char* path, struct stat* buf,
                                                   int flags) {
  using fn = int (*)(int, const char*, struct stat*, int);
  REAL(fstatat, fn);
  const char* use = path;
  if (stat_path(path, &use) != 0) return -1;
  return real_fstatat(dirfd, use, buf, flags);
}

__attribute__((visibility("default"))) int fstatat64(int dirfd, const char* path,
                                                     struct stat64* buf, int flags) {
  using fn = int (*)(int, const char*, struct stat64*, int);
  REAL(fstatat64, fn);
  const char* use = path;
  if (stat_path(path, &use) != 0) return -1;
  return real_fstatat64(dirfd, use, buf, flags);
}

__attribute__((visibility("default"))) int close(int fd) {
  using fn = int (*)(int);
  REAL(close, fn);
  uint8_t k = kind_of(fd);
  if (k == 1) {
    xpufab::uverbs::close_context(fd);
    set_kind(fd, 0);
  } else if (k == 2) {
    xpufab::uverbs::close_channel(fd);
    set_kind(fd, 0);
  }
  return real_close(fd);
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t count) {
  using fn = ssize_t (*)(int, const void*, size_t);
  REAL(write, fn);
  uint8_t k = kind_of(fd);
  if (k == 1) {
    ssize_t rc = xpufab::uverbs::handle_write(fd, buf, count);
    if (rc < 0) return err(static_cast<int>(-rc));
    int ch = xpufab::uverbs::take_new_channel();
    if (ch >= 0) set_kind(ch, 2);
    return rc;
  }
  if (k == 2) return err(EINVAL);
  return real_write(fd, buf, count);
}

__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t count) {
  using fn = ssize_t (*)(int, void*, size_t);
  REAL(read, fn);
  uint8_t k = kind_of(fd);
  if (k == 1) return err(EINVAL);
  if (k == 2) {
    int fl = fcntl(fd, F_GETFL);
    ssize_t rc = xpufab::uverbs::channel_read(fd, buf, count, fl >= 0 && (fl & O_NONBLOCK));
    return rc < 0 ? err(static_cast<int>(-rc)) : rc;
  }
  return real_read(fd, buf, count);
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...) {
  using fn = int (*)(int, unsigned long, ...);
  REAL(ioctl, fn);
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  // No ioctl method is served: libibverbs then uses the write() ABI for everything.
  if (kind_of(fd) == 1) return err(ENOTTY);
  return real_ioctl(fd, request, arg);
}

static void* do_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off,
                     void* (*real)(void*, size_t, int, int, int, off_t)) {
  if (kind_of(fd) == 1) {
    int e = 0;
    void* p = xpufab::uverbs::handle_mmap(fd, len, prot, flags, off, &e);
    if (p == nullptr) {
      errno = e;
      return MAP_FAILED;
    }
    g_handed.fetch_add(1);
    return p;
  }
  return real(addr, len, prot, flags, fd, off);
}

__attribute__((visibility("default"))) void* mmap(void* addr, size_t len, int prot, int flags,
                                                  int fd, off_t off) {
  using fn = void* (*)(void*, size_t, int, int, int, off_t);
  REAL(mmap, fn);
  return do_mmap(addr, len, prot, flags, fd, off, real_mmap);
}

__attribute__((visibility("default"))) void* mmap64(void* addr, size_t len, int prot, int flags,
                                                    int fd, off_t off) {
  using fn = void* (*)(void*, size_t, int, int, int, off_t);
  REAL(mmap64, fn);
  return do_mmap(addr, len, prot, flags, fd, off, real_mmap64);
}

__attribute__((visibility("default"))) int munmap(void* addr, size_t len) {
  using fn = int (*)(void*, size_t);
  REAL(munmap, fn);
  if (g_handed.load(std::memory_order_acquire) > 0 && xpufab::uverbs::may_be_handed(addr, len)) {
    // From inside the server only a signal handler's teardown gets here (the server's own
    // memory goes back through malloc, whose unmapping is internal to libc), and the server
    // lock may be this thread's own: a range that may be the emulator's stays mapped (a leak
    // of an ending process at worst) rather than risk unmapping queues still in use.
    if (xpufab::uverbs::in_server_now()) return 0;
    const int rc = xpufab::uverbs::handle_munmap(addr, len);
    if (rc == 0) {
      g_handed.fetch_sub(1);
      return 0;
    }
    if (rc < 0) return err(-rc);
  }
  return real_munmap(addr, len);
}

__attribute__((visibility("default"))) int socket(int domain, int type, int protocol) {
  using fn = int (*)(int, int, int);
  REAL(socket, fn);
  if (domain == AF_NETLINK && protocol == kNetlinkRdma) return err(EPROTONOSUPPORT);
  return real_socket(domain, type, protocol);
}

// Contexts and objects of ours get their poll and post entries wrapped once rdma-core has set
// them up. With no rdma-core loaded at all they fail as a missing provider would.
__attribute__((visibility("default"))) struct ibv_context* ibv_open_device(struct ibv_device* dev) {
  using fn = struct ibv_context* (*)(struct ibv_device*);
  REAL_IN(ibv_open_device, fn, "libibverbs.so.1");
  if (real_ibv_open_device == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  struct ibv_context* ctx = real_ibv_open_device(dev);
  if (ctx != nullptr && kind_of(ctx->cmd_fd) == 1) xpufab::uverbs::wrap_context(ctx);
  return ctx;
}

__attribute__((visibility("default"))) struct ibv_qp* efadv_create_qp_ex(
    struct ibv_context* ctx, struct ibv_qp_init_attr_ex* attr_ex,
    struct efadv_compat_qp_init_attr* efa_attr, uint32_t inlen) {
  REAL_IN(efadv_create_qp_ex, efadv_compat_create_qp_ex_fn, "libefa.so.1");
  if (real_efadv_create_qp_ex == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  struct ibv_qp* qp = real_efadv_create_qp_ex(ctx, attr_ex, efa_attr, inlen);
  xpufab::uverbs::wrap_qp(qp);
  return qp;
}

__attribute__((visibility("default"))) struct ibv_cq_ex* efadv_create_cq(
    struct ibv_context* ctx, struct ibv_cq_init_attr_ex* attr_ex,
    struct efadv_compat_cq_init_attr* efa_attr, uint32_t inlen) {
  REAL_IN(efadv_create_cq, efadv_compat_create_cq_fn, "libefa.so.1");
  if (real_efadv_create_cq == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  struct ibv_cq_ex* cq = real_efadv_create_cq(ctx, attr_ex, efa_attr, inlen);
  xpufab::uverbs::wrap_cq_ex(cq);
  return cq;
}

// rdma-core v59 efadv entry points that Debian's libefa (v44) lacks. They return a positive
// errno as libefa does.
__attribute__((visibility("default"))) int efadv_query_qp_wqs(struct ibv_qp* qp,
                                                              efadv_compat_wq_attr* sq,
                                                              efadv_compat_wq_attr* rq,
                                                              uint32_t inlen) {
  return xpufab::uverbs::query_qp_wqs(qp, sq, rq, inlen);
}

__attribute__((visibility("default"))) int efadv_query_cq(struct ibv_cq* cq,
                                                          efadv_compat_cq_attr* attr,
                                                          uint32_t inlen) {
  return xpufab::uverbs::query_cq(cq, attr, inlen);
}

}  // extern "C"
