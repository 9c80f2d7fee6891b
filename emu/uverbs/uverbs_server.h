// The uverbs character device of an EFA NIC, answered in user space with the emulated device
// (emu/) as the NIC. The LD_PRELOAD layer (preload.cc) routes the system calls that libibverbs
// and libefa make on /dev/infiniband/uverbs0 here; everything else passes through.
//
// What a "kernel" object is here:
//  - a context is one open uverbs fd (the fd itself is /dev/null, so fstat() shows the char device
//    the sysfs tree advertises); objects created through it die when it is closed;
//  - queue pages are the emulator's own rings and doorbell words, handed out by mmap(key) and
//    never really mapped or unmapped (munmap of them is a no-op);
//  - a 16-byte-CQE CQ (what libefa before v47 asks for) has a ring of its own that a service
//    thread fills from the emulator's 32-byte CQEs;
//  - completion channels are eventfds (EFD_SEMAPHORE) carrying a queue of 8-byte records, so
//    read() returns exactly the record ibv_get_cq_event expects and DESTROY_CQ can report exact
//    event counts (events still queued for a destroyed CQ are dropped, as the kernel does).
// One emulated device per process, shared by every context, opened through the backend registry
// ("emu", so FI_EFA_EMU_FABRIC picks the fabric) on the first GET_CONTEXT.
#ifndef XPUFAB_EMU_UVERBS_UVERBS_SERVER_H_
#define XPUFAB_EMU_UVERBS_UVERBS_SERVER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "hw/efadv_compat.h"

namespace xpufab {
namespace uverbs {

// Device number (major:minor) of the stand-in char device, /dev/null; the sysfs `dev` file says
// the same.
constexpr unsigned kDevMajor = 1;
constexpr unsigned kDevMinor = 3;

// True on a thread that is inside the server right now: only a signal handler that interrupted
// it can call in again, and such calls must not wait for the locks that thread holds.
bool in_server_now();

// A fresh uverbs context for `fd` (already opened on the stand-in device).
void register_context(int fd);
bool is_context(int fd);
// Releases everything the context created. True if fd was a context (the caller still closes it).
bool close_context(int fd);
// The write() command ABI. Returns the byte count or -errno.
ssize_t handle_write(int fd, const void* buf, size_t count);
// mmap(key) on a context: the address or nullptr with *err set (EINVAL as the kernel).
void* handle_mmap(int fd, size_t length, int prot, int flags, off_t key, int* err);
// munmap of a range handed out by handle_mmap: 0 when it forgot it, -EINVAL for an address that
// is not page aligned (refused as the kernel refuses it: the mapping stays), 1 when the range is
// not one the shim handed out (the real munmap's to answer).
int handle_munmap(void* addr, size_t length);
// False when [addr, addr + length) overlaps no range handed out now (or, past the table's
// capacity, lies wholly outside every range ever handed out). Lock-free and touching nothing but
// atomics, so munmap can ask it from any context first.
bool may_be_handed(const void* addr, size_t length);
// A handed range starting at lo is no longer handed (under the server lock).
void retire_range(uintptr_t lo);

// Completion channels.
// The channel fd the calling thread's last write() created, once; -1 if none.
int take_new_channel();
bool close_channel(int fd);
// read() on a channel: -errno or the bytes copied (whole 8-byte records).
ssize_t channel_read(int fd, void* buf, size_t count, bool nonblocking);

// The live GID of emulated device `index` as the sysfs gids/0 file shows it ("fe80:...\n").
// Returns false if there is no such device.
bool gid_text(int index, char* out, size_t out_len);
// Its node GUID as the sysfs node_guid file shows it ("xxxx:xxxx:xxxx:xxxx\n"), the value
// QUERY_DEVICE reports: ibv_get_device_guid (ibv_devices) reads the file, ibv_devinfo the query.
bool node_guid_text(int index, char* out, size_t out_len);

// v59 efadv entry points over the shim's knowledge of each queue's mappings.
int query_qp_wqs(const void* ibv_qp, efadv_compat_wq_attr* sq, efadv_compat_wq_attr* rq,
                 uint32_t inlen);
int query_cq(const void* ibv_cq, efadv_compat_cq_attr* attr, uint32_t inlen);

// In a forked child: forget the parent's contexts and device without touching them (the
// engine threads were not copied).
void after_fork_child();
// At exit: destroy what is left so nothing stays attached to a shared fabric, and write the
// statistics if XPUFAB_EMU_STATS names a file.
void at_exit();

}  // namespace uverbs
}  // namespace xpufab

#endif  // XPUFAB_EMU_UVERBS_UVERBS_SERVER_H_
