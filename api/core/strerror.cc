// fi_strerror: a description for every FI_E* code (either sign).  Texts
// carry the meaning of libfabric's; errno-range codes not named by
// fi_errno.h fall back to the C library's text, larger ones are FI_EOTHER's.
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

namespace {

struct ErrText {
  int code;
  const char* text;
};

constexpr ErrText kTexts[] = {
    {FI_SUCCESS, "Success"},
    {FI_EPERM, "Operation not permitted"},
    {FI_ENOENT, "No such file or directory"},
    {FI_EINTR, "Interrupted system call"},
    {FI_EIO, "Input/output error"},
    {FI_E2BIG, "Argument list too long"},
    {FI_EBADF, "Bad file descriptor"},
    {FI_EAGAIN, "Resource temporarily unavailable"},
    {FI_ENOMEM, "Cannot allocate memory"},
    {FI_EACCES, "Permission denied"},
    {FI_EFAULT, "Bad address"},
    {FI_EBUSY, "Device or resource busy"},
    {FI_ENODEV, "No such device"},
    {FI_EINVAL, "Invalid argument"},
    {FI_EMFILE, "Too many open files"},
    {FI_ENOSPC, "No space left on device"},
    {FI_ENOSYS, "Function not implemented"},
    {FI_ENOMSG, "No message of desired type"},
    {FI_ENODATA, "No data available"},
    {FI_EOVERFLOW, "Value too large for defined data type"},
    {FI_EMSGSIZE, "Message too long"},
    {FI_ENOPROTOOPT, "Protocol not available"},
    {FI_EOPNOTSUPP, "Operation not supported"},
    {FI_EADDRINUSE, "Address already in use"},
    {FI_EADDRNOTAVAIL, "Cannot assign requested address"},
    {FI_ENETDOWN, "Network is down"},
    {FI_ENETUNREACH, "Network is unreachable"},
    {FI_ECONNABORTED, "Software caused connection abort"},
    {FI_ECONNRESET, "Connection reset by peer"},
    {FI_ENOBUFS, "No buffer space available"},
    {FI_EISCONN, "Transport endpoint is already connected"},
    {FI_ENOTCONN, "Transport endpoint is not connected"},
    {FI_ESHUTDOWN, "Cannot send after transport endpoint shutdown"},
    {FI_ETIMEDOUT, "Connection timed out"},
    {FI_ECONNREFUSED, "Connection refused"},
    {FI_EHOSTDOWN, "Host is down"},
    {FI_EHOSTUNREACH, "No route to host"},
    {FI_EALREADY, "Operation already in progress"},
    {FI_EINPROGRESS, "Operation now in progress"},
    {FI_EREMOTEIO, "Remote I/O error"},
    {FI_ECANCELED, "Operation canceled"},
    {FI_EKEYREJECTED, "Key was rejected by service"},
    {FI_EOTHER, "Unspecified error"},
    {FI_ETOOSMALL, "Provided buffer is too small"},
    {FI_EOPBADSTATE, "Operation not permitted in current state"},
    {FI_EAVAIL, "Error available"},
    {FI_EBADFLAGS, "Flags not supported"},
    {FI_ENOEQ, "Missing or unavailable event queue"},
    {FI_EDOMAIN, "Invalid resource domain"},
    {FI_ENOCQ, "Missing or unavailable completion queue"},
    {FI_ECRC, "CRC error"},
    {FI_ETRUNC, "Truncation error"},
    {FI_ENOKEY, "Required key not available"},
    {FI_ENOAV, "Missing or unavailable address vector"},
    {FI_EOVERRUN, "Queue has been overrun"},
    {FI_ENORX, "Receiver not ready, no receive buffers available"},
    {FI_ENOMR, "Memory registration limit exceeded"},
};

}  // namespace

extern "C" const char* fi_strerror(int errnum) {
  // abs() of INT_MIN is undefined; such a value is no code at all.
  if (errnum == -2147483647 - 1) return "Unknown error";
  int code = errnum < 0 ? -errnum : errnum;
  for (const ErrText& e : kTexts)
    if (e.code == code) return e.text;
  if (code < FI_ERRNO_OFFSET) return strerror(code);
  // Past the named codes libfabric answers with FI_EOTHER's text, and programs print it as is.
  return "Unspecified error";
}
