/*
 * rdma/fi_ext.h - provider-specific options and the fid export/import
 * extensions, as in libfabric 2.x.
 *
 * Provider-specific option names are negative: each provider owns a 12-bit
 * code shifted left by 16 (FI_PROV_SPECIFIC_*), and its options count up
 * from the negated code.  The EFA options are what fi_getopt/fi_setopt of an
 * efa endpoint at FI_OPT_ENDPOINT level take; their values are libfabric's
 * (FI_OPT_EFA_RNR_RETRY is the one 1.17 already had).
 *
 * Differences from 1.17: fi_export_fid, fi_import_fid, fi_import and
 * fi_import_log are library functions rather than inlines (as in 2.x), and
 * the peer-provider structures moved out of this header upstream
 * (rdma/providers/fi_peer.h), which this library does not offer.
 */
#ifndef FI_EXT_H
#define FI_EXT_H

#include <stdbool.h>

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/providers/fi_log.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_PROV_SPECIFIC_EFA (0xefa << 16)
#define FI_PROV_SPECIFIC_TCP (0x7cb << 16)

enum {
	FI_OPT_EFA_RNR_RETRY = -FI_PROV_SPECIFIC_EFA, /* size_t */
	FI_OPT_EFA_EMULATED_READ,                     /* bool, getopt only */
	FI_OPT_EFA_EMULATED_WRITE,                    /* bool, getopt only */
	FI_OPT_EFA_EMULATED_ATOMICS,                  /* bool, getopt only */
	FI_OPT_EFA_USE_DEVICE_RDMA,                   /* bool, API >= 1.18 */
	FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES, /* bool */
	FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES,  /* bool */
	FI_OPT_EFA_HOMOGENEOUS_PEERS,                 /* bool */
	FI_OPT_EFA_USE_UNSOLICITED_WRITE_RECV,        /* bool */
};

/* fi_control(fid, FI_EXPORT_FID, struct fi_fid_export *). */
struct fi_fid_export {
	struct fid **fid;
	uint64_t flags;
	void *context;
};

/* Asks `fid` for an exported fid in *expfid (fi_control FI_EXPORT_FID). */
int fi_export_fid(struct fid *fid, uint64_t flags, struct fid **expfid,
		  void *context);
/* Hands `expfid` to `fid` (its bind op). */
int fi_import_fid(struct fid *fid, struct fid *expfid, uint64_t flags);

/* Memory-monitor import: an application-provided monitor for an MR cache. */
struct fid_mem_monitor;

struct fi_ops_mem_monitor {
	size_t size;
	int (*start)(struct fid_mem_monitor *monitor);
	void (*stop)(struct fid_mem_monitor *monitor);
	int (*subscribe)(struct fid_mem_monitor *monitor, const void *addr,
			 size_t len);
	void (*unsubscribe)(struct fid_mem_monitor *monitor, const void *addr,
			    size_t len);
	bool (*valid)(struct fid_mem_monitor *monitor, const void *addr,
		      size_t len);
};

struct fi_ops_mem_notify {
	size_t size;
	void (*notify)(struct fid_mem_monitor *monitor, const void *addr,
		       size_t len);
};

struct fid_mem_monitor {
	struct fid fid;
	struct fi_ops_mem_monitor *export_ops;
	struct fi_ops_mem_notify *import_ops;
};

/* Logging import: an application-provided log sink. */
#define FI_LOG_PROV_FILTERED (1ULL << 0)

struct fi_ops_log {
	size_t size;
	int (*enabled)(const struct fi_provider *prov, enum fi_log_level level,
		       enum fi_log_subsys subsys, uint64_t flags);
	int (*ready)(const struct fi_provider *prov, enum fi_log_level level,
		     enum fi_log_subsys subsys, uint64_t flags,
		     uint64_t *showtime);
	void (*log)(const struct fi_provider *prov, enum fi_log_level level,
		    enum fi_log_subsys subsys, const char *func, int line,
		    const char *msg);
};

struct fid_logging {
	struct fid fid;
	struct fi_ops_log *ops;
};

/* Opens the named object (fi_open), imports `fid` into it, closes it. */
int fi_import(uint32_t version, const char *name, void *attr, size_t attr_len,
	      uint64_t flags, struct fid *fid, void *context);
/* fi_import of a log sink into "logging". */
int fi_import_log(uint32_t version, uint64_t flags,
		  struct fid_logging *log_fid);

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_H */
