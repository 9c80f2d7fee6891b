/*
 * rdma/fi_eq.h - event queues, completion queues, counters, wait and poll
 * sets.
 *
 * Completion queues (fid_cq) and counters (fid_cntr) report data-transfer
 * completions; event queues (fid_eq) report control events (connection
 * management, asynchronous MR/AV completion).  With FI_XPU (2.7) a CQ or
 * counter opened with `xpu_ctx` set (and FI_XPU in `flags`) is polled by
 * device code after fi_cq_export_xpu()/fi_cntr_export_xpu().
 */
#ifndef FI_EQ_H
#define FI_EQ_H

#include <poll.h>
#include <pthread.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Wait and poll sets                                                  */
/* ------------------------------------------------------------------ */

enum fi_wait_obj {
	FI_WAIT_NONE,
	FI_WAIT_UNSPEC,
	FI_WAIT_SET,        /* deprecated in 2.0 */
	FI_WAIT_FD,
	FI_WAIT_MUTEX_COND,
	FI_WAIT_YIELD,
	FI_WAIT_POLLFD,     /* deprecated in 2.0 */
};

struct fi_wait_attr {
	enum fi_wait_obj wait_obj;
	uint64_t flags;
};

struct fi_ops_wait {
	size_t size;
	int (*wait)(struct fid_wait *waitset, int timeout);
};

struct fid_wait {
	struct fid fid;
	struct fi_ops_wait *ops;
};

/* What FI_GETWAIT returns for FI_WAIT_MUTEX_COND. */
struct fi_mutex_cond {
	pthread_mutex_t *mutex;
	pthread_cond_t *cond;
};

/* What FI_GETWAIT returns for FI_WAIT_POLLFD. */
struct fi_wait_pollfd {
	uint64_t change_index;
	size_t nfds;
	struct pollfd *fd;
};

struct fi_poll_attr {
	uint64_t flags;
};

struct fi_ops_poll {
	size_t size;
	int (*poll)(struct fid_poll *pollset, void **context, int count);
	int (*poll_add)(struct fid_poll *pollset, struct fid *event_fid,
			uint64_t flags);
	int (*poll_del)(struct fid_poll *pollset, struct fid *event_fid,
			uint64_t flags);
};

struct fid_poll {
	struct fid fid;
	struct fi_ops_poll *ops;
};

/* ------------------------------------------------------------------ */
/* Event queues                                                        */
/* ------------------------------------------------------------------ */

struct fi_eq_attr {
	size_t size;
	uint64_t flags;
	enum fi_wait_obj wait_obj;
	int signaling_vector;
	struct fid_wait *wait_set;
};

/* Event codes returned by fi_eq_read(). */
enum {
	FI_NOTIFY,
	FI_CONNREQ,
	FI_CONNECTED,
	FI_SHUTDOWN,
	FI_MR_COMPLETE,
	FI_AV_COMPLETE,
	FI_JOIN_COMPLETE,
};

struct fi_eq_entry {
	fid_t fid;
	void *context;
	uint64_t data;
};

struct fi_eq_err_entry {
	fid_t fid;
	void *context;
	uint64_t data;
	int err;          /* positive FI_E* code */
	int prov_errno;
	void *err_data;   /* provider-owned unless err_data_size was set */
	size_t err_data_size;
};

/* FI_CONNREQ / FI_CONNECTED / FI_SHUTDOWN payload; `data` carries the
 * peer's private connection data. */
struct fi_eq_cm_entry {
	fid_t fid;
	struct fi_info *info;
	uint8_t data[];
};

struct fi_ops_eq {
	size_t size;
	ssize_t (*read)(struct fid_eq *eq, uint32_t *event, void *buf,
			size_t len, uint64_t flags);
	ssize_t (*readerr)(struct fid_eq *eq, struct fi_eq_err_entry *buf,
			   uint64_t flags);
	ssize_t (*write)(struct fid_eq *eq, uint32_t event, const void *buf,
			 size_t len, uint64_t flags);
	ssize_t (*sread)(struct fid_eq *eq, uint32_t *event, void *buf,
			 size_t len, int timeout, uint64_t flags);
	const char *(*strerror)(struct fid_eq *eq, int prov_errno,
				const void *err_data, char *buf, size_t len);
};

struct fid_eq {
	struct fid fid;
	struct fi_ops_eq *ops;
};

/* ------------------------------------------------------------------ */
/* Completion queues                                                   */
/* ------------------------------------------------------------------ */

enum fi_cq_format {
	FI_CQ_FORMAT_UNSPEC,
	FI_CQ_FORMAT_CONTEXT,  /* struct fi_cq_entry */
	FI_CQ_FORMAT_MSG,      /* struct fi_cq_msg_entry */
	FI_CQ_FORMAT_DATA,     /* struct fi_cq_data_entry */
	FI_CQ_FORMAT_TAGGED,   /* struct fi_cq_tagged_entry */
};

/* Each format extends the previous one. */
struct fi_cq_entry {
	void *op_context;
};

struct fi_cq_msg_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
};

struct fi_cq_data_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
};

struct fi_cq_tagged_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
	uint64_t tag;
};

struct fi_cq_err_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
	uint64_t tag;
	size_t olen;        /* bytes that did not fit (FI_ETRUNC) */
	int err;            /* positive FI_E* code */
	int prov_errno;
	void *err_data;
	size_t err_data_size;
	/* Appended after 1.17 (API >= 1.20): source of the failed receive
	 * when the CQ was bound with FI_SOURCE_ERR. */
	fi_addr_t src_addr;
};

enum fi_cq_wait_cond {
	FI_CQ_COND_NONE,
	FI_CQ_COND_THRESHOLD   /* cond points to a size_t */
};

struct fi_cq_attr {
	size_t size;
	uint64_t flags;          /* FI_AFFINITY, FI_PEER, FI_XPU */
	enum fi_cq_format format;
	enum fi_wait_obj wait_obj;
	int signaling_vector;
	enum fi_cq_wait_cond wait_cond;
	struct fid_wait *wait_set;
	/*
	 * 2.7: XPU context of a CQ that device code reads.  Not versioned:
	 * readers look at it only when FI_XPU is set in `flags` (this
	 * implementation also honours it when set without FI_XPU).
	 */
	struct fid_xpu_ctx *xpu_ctx;
};

struct fi_ops_cq {
	size_t size;
	ssize_t (*read)(struct fid_cq *cq, void *buf, size_t count);
	ssize_t (*readfrom)(struct fid_cq *cq, void *buf, size_t count,
			    fi_addr_t *src_addr);
	ssize_t (*readerr)(struct fid_cq *cq, struct fi_cq_err_entry *buf,
			   uint64_t flags);
	ssize_t (*sread)(struct fid_cq *cq, void *buf, size_t count,
			 const void *cond, int timeout);
	ssize_t (*sreadfrom)(struct fid_cq *cq, void *buf, size_t count,
			     fi_addr_t *src_addr, const void *cond, int timeout);
	int (*signal)(struct fid_cq *cq);
	const char *(*strerror)(struct fid_cq *cq, int prov_errno,
				const void *err_data, char *buf, size_t len);
	/* 2.7: fill a caller-owned device handle for this CQ. */
	int (*export_xpu)(struct fid_cq *cq, uint64_t flags,
			  struct fid_xpu_cq *xpu_cq);
};

struct fid_cq {
	struct fid fid;
	struct fi_ops_cq *ops;
};

/* ------------------------------------------------------------------ */
/* Counters                                                            */
/* ------------------------------------------------------------------ */

enum fi_cntr_events {
	FI_CNTR_EVENTS_COMP,
	FI_CNTR_EVENTS_BYTES,
};

struct fi_cntr_attr {
	enum fi_cntr_events events;
	enum fi_wait_obj wait_obj;
	struct fid_wait *wait_set;
	uint64_t flags;            /* 2.7: FI_XPU creates an XPU counter */
	struct fid_xpu_ctx *xpu_ctx; /* 2.7: read only when FI_XPU is set */
};

struct fi_ops_cntr {
	size_t size;
	uint64_t (*read)(struct fid_cntr *cntr);
	uint64_t (*readerr)(struct fid_cntr *cntr);
	int (*add)(struct fid_cntr *cntr, uint64_t value);
	int (*set)(struct fid_cntr *cntr, uint64_t value);
	int (*wait)(struct fid_cntr *cntr, uint64_t threshold, int timeout);
	int (*adderr)(struct fid_cntr *cntr, uint64_t value);
	int (*seterr)(struct fid_cntr *cntr, uint64_t value);
	/* 2.7: fill a caller-owned device handle for this counter. */
	int (*export_xpu)(struct fid_cntr *cntr, uint64_t flags,
			  struct fid_xpu_cntr *xpu_cntr);
};

struct fid_cntr {
	struct fid fid;
	struct fi_ops_cntr *ops;
};

/* ------------------------------------------------------------------ */
/* Wrappers                                                            */
/* ------------------------------------------------------------------ */

static inline int fi_trywait(struct fid_fabric *fabric, struct fid **fids,
			     int count)
{
	return FI_CHECK_OP(fabric->ops, struct fi_ops_fabric, trywait) ?
		fabric->ops->trywait(fabric, fids, count) : -FI_ENOSYS;
}

static inline int fi_wait(struct fid_wait *waitset, int timeout)
{
	return waitset->ops->wait(waitset, timeout);
}

static inline int fi_poll(struct fid_poll *pollset, void **context, int count)
{
	return pollset->ops->poll(pollset, context, count);
}

static inline int fi_poll_add(struct fid_poll *pollset, struct fid *event_fid,
			      uint64_t flags)
{
	return pollset->ops->poll_add(pollset, event_fid, flags);
}

static inline int fi_poll_del(struct fid_poll *pollset, struct fid *event_fid,
			      uint64_t flags)
{
	return pollset->ops->poll_del(pollset, event_fid, flags);
}

static inline int fi_eq_open(struct fid_fabric *fabric,
			     struct fi_eq_attr *attr, struct fid_eq **eq,
			     void *context)
{
	return fabric->ops->eq_open(fabric, attr, eq, context);
}

static inline ssize_t fi_eq_read(struct fid_eq *eq, uint32_t *event,
				 void *buf, size_t len, uint64_t flags)
{
	return eq->ops->read(eq, event, buf, len, flags);
}

static inline ssize_t fi_eq_readerr(struct fid_eq *eq,
				    struct fi_eq_err_entry *buf,
				    uint64_t flags)
{
	return eq->ops->readerr(eq, buf, flags);
}

static inline ssize_t fi_eq_write(struct fid_eq *eq, uint32_t event,
				  const void *buf, size_t len, uint64_t flags)
{
	return eq->ops->write(eq, event, buf, len, flags);
}

static inline ssize_t fi_eq_sread(struct fid_eq *eq, uint32_t *event,
				  void *buf, size_t len, int timeout,
				  uint64_t flags)
{
	return eq->ops->sread(eq, event, buf, len, timeout, flags);
}

static inline const char *fi_eq_strerror(struct fid_eq *eq, int prov_errno,
					 const void *err_data, char *buf,
					 size_t len)
{
	return eq->ops->strerror(eq, prov_errno, err_data, buf, len);
}

static inline ssize_t fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return cq->ops->read(cq, buf, count);
}

static inline ssize_t fi_cq_readfrom(struct fid_cq *cq, void *buf,
				     size_t count, fi_addr_t *src_addr)
{
	return cq->ops->readfrom(cq, buf, count, src_addr);
}

static inline ssize_t fi_cq_readerr(struct fid_cq *cq,
				    struct fi_cq_err_entry *buf,
				    uint64_t flags)
{
	return cq->ops->readerr(cq, buf, flags);
}

static inline ssize_t fi_cq_sread(struct fid_cq *cq, void *buf, size_t count,
				  const void *cond, int timeout)
{
	return cq->ops->sread(cq, buf, count, cond, timeout);
}

static inline ssize_t fi_cq_sreadfrom(struct fid_cq *cq, void *buf,
				      size_t count, fi_addr_t *src_addr,
				      const void *cond, int timeout)
{
	return cq->ops->sreadfrom(cq, buf, count, src_addr, cond, timeout);
}

static inline int fi_cq_signal(struct fid_cq *cq)
{
	return cq->ops->signal(cq);
}

static inline const char *fi_cq_strerror(struct fid_cq *cq, int prov_errno,
					 const void *err_data, char *buf,
					 size_t len)
{
	return cq->ops->strerror(cq, prov_errno, err_data, buf, len);
}

/*
 * fi_cq_export_xpu: fills *xpu_cq (caller-owned) with the device handle of
 * an XPU CQ.  Returns -FI_ENOSYS when the provider's table predates the op
 * or leaves it unset (upstream calls it unguarded), -FI_EINVAL when the CQ
 * has no XPU context.
 */
static inline int fi_cq_export_xpu(struct fid_cq *cq, uint64_t flags,
				   struct fid_xpu_cq *xpu_cq)
{
	return FI_CHECK_OP(cq->ops, struct fi_ops_cq, export_xpu) ?
		cq->ops->export_xpu(cq, flags, xpu_cq) : -FI_ENOSYS;
}

static inline uint64_t fi_cntr_read(struct fid_cntr *cntr)
{
	return cntr->ops->read(cntr);
}

static inline uint64_t fi_cntr_readerr(struct fid_cntr *cntr)
{
	return cntr->ops->readerr(cntr);
}

static inline int fi_cntr_add(struct fid_cntr *cntr, uint64_t value)
{
	return cntr->ops->add(cntr, value);
}

static inline int fi_cntr_adderr(struct fid_cntr *cntr, uint64_t value)
{
	return FI_CHECK_OP(cntr->ops, struct fi_ops_cntr, adderr) ?
		cntr->ops->adderr(cntr, value) : -FI_ENOSYS;
}

static inline int fi_cntr_set(struct fid_cntr *cntr, uint64_t value)
{
	return cntr->ops->set(cntr, value);
}

static inline int fi_cntr_seterr(struct fid_cntr *cntr, uint64_t value)
{
	return FI_CHECK_OP(cntr->ops, struct fi_ops_cntr, seterr) ?
		cntr->ops->seterr(cntr, value) : -FI_ENOSYS;
}

static inline int fi_cntr_wait(struct fid_cntr *cntr, uint64_t threshold,
			       int timeout)
{
	return cntr->ops->wait(cntr, threshold, timeout);
}

/* fi_cntr_export_xpu: as fi_cq_export_xpu, for counters. */
static inline int fi_cntr_export_xpu(struct fid_cntr *cntr, uint64_t flags,
				     struct fid_xpu_cntr *xpu_cntr)
{
	return FI_CHECK_OP(cntr->ops, struct fi_ops_cntr, export_xpu) ?
		cntr->ops->export_xpu(cntr, flags, xpu_cntr) : -FI_ENOSYS;
}

#ifdef __cplusplus
}
#endif

#endif /* FI_EQ_H */
