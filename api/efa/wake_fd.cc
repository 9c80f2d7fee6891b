// The eventfd behind fi_cq_sread / fi_cntr_wait wake-ups (efa.h, WakeFd).
#include <sys/eventfd.h>
#include <unistd.h>

#include "api/efa/efa.h"

namespace xpufab::efa {

int WakeFd::open() {
  fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? -FI_ENOMEM : 0;
}

void WakeFd::close() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void WakeFd::wake() {
  if (fd < 0 || waiters.load(std::memory_order_acquire) == 0) return;
  uint64_t one = 1;
  ssize_t n = write(fd, &one, sizeof(one));
  (void)n;
}

void WakeFd::drain() {
  uint64_t v;
  if (fd >= 0) {
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
  }
}

}  // namespace xpufab::efa
