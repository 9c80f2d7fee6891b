#include <rdma/fi_errno.h>

#include <cstring>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace {

// Every code fi_errno.h names, with a word its text must contain.
struct Expect {
  int code;
  const char* word;
};

constexpr Expect kCodes[] = {
    {FI_SUCCESS, "Success"}, {FI_EPERM, "not permitted"}, {FI_ENOENT, "No such file"},
    {FI_EINTR, "Interrupted"}, {FI_EIO, "Input/output"}, {FI_E2BIG, "too long"},
    {FI_EBADF, "file descriptor"}, {FI_EAGAIN, "unavailable"}, {FI_ENOMEM, "memory"},
    {FI_EACCES, "Permission"}, {FI_EFAULT, "address"}, {FI_EBUSY, "busy"},
    {FI_ENODEV, "device"}, {FI_EINVAL, "Invalid argument"}, {FI_EMFILE, "open files"},
    {FI_ENOSPC, "space"}, {FI_ENOSYS, "not implemented"}, {FI_EWOULDBLOCK, "unavailable"},
    {FI_ENOMSG, "message"}, {FI_ENODATA, "No data"}, {FI_EOVERFLOW, "too large"},
    {FI_EMSGSIZE, "too long"}, {FI_ENOPROTOOPT, "Protocol"},
    {FI_EOPNOTSUPP, "not supported"}, {FI_EADDRINUSE, "in use"},
    {FI_EADDRNOTAVAIL, "assign"}, {FI_ENETDOWN, "down"}, {FI_ENETUNREACH, "unreachable"},
    {FI_ECONNABORTED, "abort"}, {FI_ECONNRESET, "reset"}, {FI_ENOBUFS, "buffer"},
    {FI_EISCONN, "already connected"}, {FI_ENOTCONN, "not connected"},
    {FI_ESHUTDOWN, "shutdown"}, {FI_ETIMEDOUT, "timed out"}, {FI_ECONNREFUSED, "refused"},
    {FI_EHOSTDOWN, "Host is down"}, {FI_EHOSTUNREACH, "route"},
    {FI_EALREADY, "already in progress"}, {FI_EINPROGRESS, "now in progress"},
    {FI_EREMOTEIO, "Remote I/O"}, {FI_ECANCELED, "canceled"},
    {FI_EKEYREJECTED, "rejected"}, {FI_EOTHER, "Unspecified"},
    {FI_ETOOSMALL, "too small"}, {FI_EOPBADSTATE, "state"}, {FI_EAVAIL, "available"},
    {FI_EBADFLAGS, "Flags"}, {FI_ENOEQ, "event queue"}, {FI_EDOMAIN, "domain"},
    {FI_ENOCQ, "completion queue"}, {FI_ECRC, "CRC"}, {FI_ETRUNC, "Truncat"},
    {FI_ENOKEY, "key"}, {FI_ENOAV, "address vector"}, {FI_EOVERRUN, "overrun"},
    {FI_ENORX, "Receiver not ready"}, {FI_ENOMR, "registration"},
};

TEST(StrerrorTest, EveryCodeHasItsText) {
  for (const Expect& e : kCodes) {
    const char* pos = fi_strerror(e.code);
    const char* neg = fi_strerror(-e.code);
    ASSERT_NE(pos, nullptr) << e.code;
    EXPECT_STREQ(pos, neg) << e.code;
    EXPECT_NE(strstr(pos, e.word), nullptr) << e.code << ": " << pos;
  }
}

TEST(StrerrorTest, LibfabricCodesAreDistinct) {
  std::set<std::string> texts;
  for (int c = FI_ERRNO_OFFSET; c < FI_ERRNO_MAX; ++c) {
    std::string t = fi_strerror(-c);
    if (c != FI_EOTHER) {
      EXPECT_NE(t, "Unspecified error") << c;
    }
    texts.insert(t);
  }
  EXPECT_EQ(texts.size(), static_cast<size_t>(FI_ERRNO_MAX - FI_ERRNO_OFFSET));
}

TEST(StrerrorTest, UnknownCodesNeverCrash) {
  // Debian's fi_strerror tool prints this for any code past the table.
  EXPECT_STREQ(fi_strerror(FI_ERRNO_MAX + 10), "Unspecified error");
  EXPECT_STREQ(fi_strerror(-100000), "Unspecified error");
  EXPECT_STREQ(fi_strerror(-2147483647 - 1), "Unknown error");
  EXPECT_NE(fi_strerror(200), nullptr);  // errno range, unnamed: libc text
}

}  // namespace
