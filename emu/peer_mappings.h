// File-backed memory one process lends its peers for one-copy transfers: a dma-buf MR's mapping
// (a memfd standing in for the dma-buf) is published in a small table of this process, in a
// memfd of its own, that peers map. A peer copying out of such a range (PeerMemory::read) maps the
// same file and copies with the CPU, which costs a fraction of process_vm_readv (the kernel pins
// and walks every page of the remote range on each call). Anonymous memory keeps the kernel copy.
#ifndef XPUFAB_EMU_PEER_MAPPINGS_H_
#define XPUFAB_EMU_PEER_MAPPINGS_H_

#include <cstddef>
#include <cstdint>

#include "emu/fabric.h"

namespace xpufab {
namespace emu {

class PeerMappings {
 public:
  // The table's descriptor in this process (created on first use, again in a child after
  // fork()), or -1 if it could not be made. Peers open it through /proc/PID/fd.
  static int table_fd();
  // Publishes [base, base + len) of this process, a MAP_SHARED mapping of `fd` at file offset
  // `file_off` (the table keeps its own duplicate of fd). 0 or -errno (-ENOSPC: table full;
  // the range then simply keeps the kernel copy).
  static int share(const void* base, size_t len, int fd, uint64_t file_off);
  // Withdraws what share(base, ...) published.
  static void unshare(const void* base);
  // Copies `len` bytes at `addr` of the process `from` if they lie in a range it published and
  // whose table sits at `table_fd` there: 0, or -errno when they do not (the caller then uses the
  // kernel copy). `from` has been verified by the caller.
  static int read(const PeerRef& from, int64_t table_fd, uint64_t addr, void* local, size_t len);
  // Copies served by mapping, in this process (tests tell the two paths apart by it).
  static uint64_t mapped_reads();
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_PEER_MAPPINGS_H_
