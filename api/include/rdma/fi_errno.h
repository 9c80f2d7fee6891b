/*
 * rdma/fi_errno.h - libfabric error codes.
 *
 * Every libfabric call reports failure as a negative FI_E* value (0 means
 * success; data-path calls return a count on success).  Codes below
 * FI_ERRNO_OFFSET are the host's errno values under FI_ names; codes from
 * FI_ERRNO_OFFSET up are specific to libfabric.  fi_strerror() turns either
 * sign of a code into a printable string.
 */
#ifndef FI_ERRNO_H
#define FI_ERRNO_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_SUCCESS 0

/* Codes shared with the operating system's errno. */
#define FI_EPERM EPERM               /* operation not permitted */
#define FI_ENOENT ENOENT             /* no such file or directory */
#define FI_EINTR EINTR               /* interrupted call */
#define FI_EIO EIO                   /* I/O error */
#define FI_E2BIG E2BIG               /* argument list too long */
#define FI_EBADF EBADF               /* bad file descriptor */
#define FI_EAGAIN EAGAIN             /* resource busy, retry later */
#define FI_ENOMEM ENOMEM             /* out of memory */
#define FI_EACCES EACCES             /* permission denied */
#define FI_EFAULT EFAULT             /* bad address */
#define FI_EBUSY EBUSY               /* device or resource busy */
#define FI_ENODEV ENODEV             /* no such device */
#define FI_EINVAL EINVAL             /* invalid argument */
#define FI_EMFILE EMFILE             /* too many open files */
#define FI_ENOSPC ENOSPC             /* no space left */
#define FI_ENOSYS ENOSYS             /* function not implemented */
#define FI_EWOULDBLOCK EWOULDBLOCK   /* operation would block */
#define FI_ENOMSG ENOMSG             /* no message of desired type */
#define FI_ENODATA ENODATA           /* no data available */
#define FI_EOVERFLOW EOVERFLOW       /* value too large for data type */
#define FI_EMSGSIZE EMSGSIZE         /* message too long */
#define FI_ENOPROTOOPT ENOPROTOOPT   /* protocol not available */
#define FI_EOPNOTSUPP EOPNOTSUPP     /* operation not supported */
#define FI_EADDRINUSE EADDRINUSE     /* address already in use */
#define FI_EADDRNOTAVAIL EADDRNOTAVAIL /* cannot assign requested address */
#define FI_ENETDOWN ENETDOWN         /* network is down */
#define FI_ENETUNREACH ENETUNREACH   /* network is unreachable */
#define FI_ECONNABORTED ECONNABORTED /* connection aborted locally */
#define FI_ECONNRESET ECONNRESET     /* connection reset by peer */
#define FI_ENOBUFS ENOBUFS           /* no buffer space available */
#define FI_EISCONN EISCONN           /* already connected */
#define FI_ENOTCONN ENOTCONN         /* not connected */
#define FI_ESHUTDOWN ESHUTDOWN       /* endpoint shut down */
#define FI_ETIMEDOUT ETIMEDOUT       /* timed out */
#define FI_ECONNREFUSED ECONNREFUSED /* connection refused */
#define FI_EHOSTDOWN EHOSTDOWN       /* host is down */
#define FI_EHOSTUNREACH EHOSTUNREACH /* no route to host */
#define FI_EALREADY EALREADY         /* operation already in progress */
#define FI_EINPROGRESS EINPROGRESS   /* operation now in progress */
#define FI_EREMOTEIO EREMOTEIO       /* remote I/O error */
#define FI_ECANCELED ECANCELED       /* operation canceled */
#define FI_EKEYREJECTED EKEYREJECTED /* key rejected by the peer */

/* libfabric-specific codes start here, clear of every errno value. */
#define FI_ERRNO_OFFSET 256

enum {
	FI_EOTHER = FI_ERRNO_OFFSET, /* unspecified error */
	FI_ETOOSMALL = 257,          /* caller's buffer is too small */
	FI_EOPBADSTATE = 258,        /* not allowed in the object's state */
	FI_EAVAIL = 259,             /* an error entry is waiting to be read */
	FI_EBADFLAGS = 260,          /* unsupported flags */
	FI_ENOEQ = 261,              /* no event queue bound */
	FI_EDOMAIN = 262,            /* wrong resource domain */
	FI_ENOCQ = 263,              /* no completion queue bound */
	FI_ECRC = 264,               /* CRC error */
	FI_ETRUNC = 265,             /* data truncated */
	FI_ENOKEY = 266,             /* required key not available */
	FI_ENOAV = 267,              /* no address vector bound */
	FI_EOVERRUN = 268,           /* queue overrun */
	FI_ENORX = 269,              /* receiver not ready (no buffers posted) */
	FI_ENOMR = 270,              /* memory registration limit reached */
	FI_ERRNO_MAX
};

/*
 * Returns a static, never-NULL description of errnum.  Accepts the code with
 * either sign; unknown codes get a generic "Unknown error" string.
 */
const char *fi_strerror(int errnum);

#ifdef __cplusplus
}
#endif

#endif /* FI_ERRNO_H */
