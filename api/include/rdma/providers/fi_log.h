/*
 * rdma/providers/fi_log.h - the logging subsystems and levels.
 *
 * The enum types of libfabric's provider logging header, with its names and
 * values (FI_LOG_LEVEL and FI_LOG_SUBSYS select among them; <rdma/fi_ext.h>
 * uses them in struct fi_ops_log).  This library loads no external
 * providers, so the provider-side logging calls (fi_log, FI_WARN, ...) are
 * not part of its API.
 */
#ifndef FI_LOG_H
#define FI_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* A provider's descriptor (rdma/providers/fi_prov.h upstream); only ever
 * passed by pointer here. */
struct fi_provider;

enum fi_log_subsys {
	FI_LOG_CORE,
	FI_LOG_FABRIC,
	FI_LOG_DOMAIN,
	FI_LOG_EP_CTRL,
	FI_LOG_EP_DATA,
	FI_LOG_AV,
	FI_LOG_CQ,
	FI_LOG_EQ,
	FI_LOG_MR,
	FI_LOG_CNTR,
	FI_LOG_SUBSYS_MAX
};

enum fi_log_level {
	FI_LOG_WARN,
	FI_LOG_TRACE,
	FI_LOG_INFO,
	FI_LOG_DEBUG,
	FI_LOG_MAX
};

#ifdef __cplusplus
}
#endif

#endif /* FI_LOG_H */
