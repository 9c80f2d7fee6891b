/*
 * rdma/fi_trigger.h - triggered operations (fi_trigger(3)).
 *
 * A data-transfer call made with FI_TRIGGER passes a struct
 * fi_triggered_context (or fi_triggered_context2) as its context: the
 * operation starts once the trigger condition holds, e.g. a counter reaching
 * a threshold.  Deferred work (fi_control FI_QUEUE_WORK) queues a prepared
 * operation the same way.  Layouts and values follow libfabric (1.17 and 2.x
 * agree).  Providers without triggered operations reject FI_TRIGGER and
 * FI_QUEUE_WORK, so the types here only need to exist.
 */
#ifndef FI_TRIGGER_H
#define FI_TRIGGER_H

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fi_trigger_event {
	FI_TRIGGER_THRESHOLD,
	FI_TRIGGER_XPU,
};

/* The operation a struct fi_deferred_work carries. */
enum fi_op_type {
	FI_OP_RECV,
	FI_OP_SEND,
	FI_OP_TRECV,
	FI_OP_TSEND,
	FI_OP_READ,
	FI_OP_WRITE,
	FI_OP_ATOMIC,
	FI_OP_FETCH_ATOMIC,
	FI_OP_COMPARE_ATOMIC,
	FI_OP_CNTR_SET,
	FI_OP_CNTR_ADD
};

/* FI_TRIGGER_THRESHOLD: start once `cntr` reaches `threshold`. */
struct fi_trigger_threshold {
	struct fid_cntr *cntr;
	size_t threshold;
};

/* One device variable an FI_TRIGGER_XPU trigger waits on. */
struct fi_trigger_var {
	enum fi_datatype datatype;
	int count;
	void *addr;
	union {
		uint8_t val8;
		uint16_t val16;
		uint32_t val32;
		uint64_t val64;
		uint8_t *data;
	} value;
};

/* FI_TRIGGER_XPU: start once a device signals through `var`. */
struct fi_trigger_xpu {
	int count;
	enum fi_hmem_iface iface;
	union {
		uint64_t reserved;
		int cuda;
		int ze;
	} device;
	struct fi_trigger_var *var;
};

/* The prepared operations of struct fi_deferred_work. */
struct fi_op_msg {
	struct fid_ep *ep;
	struct fi_msg msg;
	uint64_t flags;
};

struct fi_op_tagged {
	struct fid_ep *ep;
	struct fi_msg_tagged msg;
	uint64_t flags;
};

struct fi_op_rma {
	struct fid_ep *ep;
	struct fi_msg_rma msg;
	uint64_t flags;
};

struct fi_op_atomic {
	struct fid_ep *ep;
	struct fi_msg_atomic msg;
	uint64_t flags;
};

struct fi_op_fetch_atomic {
	struct fid_ep *ep;
	struct fi_msg_atomic msg;
	struct fi_msg_fetch fetch;
	uint64_t flags;
};

struct fi_op_compare_atomic {
	struct fid_ep *ep;
	struct fi_msg_atomic msg;
	struct fi_msg_fetch fetch;
	struct fi_msg_compare compare;
	uint64_t flags;
};

struct fi_op_cntr {
	struct fid_cntr *cntr;
	uint64_t value;
};

/* The context of a triggered operation; sized like struct fi_context. */
struct fi_triggered_context {
	enum fi_trigger_event event_type;
	union {
		struct fi_trigger_threshold threshold;
		struct fi_trigger_xpu xpu;
		void *internal[3];
	} trigger;
};

/* The same for providers that need FI_CONTEXT2-sized contexts. */
struct fi_triggered_context2 {
	enum fi_trigger_event event_type;
	union {
		struct fi_trigger_threshold threshold;
		struct fi_trigger_xpu xpu;
		void *internal[7];
	} trigger;
};

/* fi_control(domain, FI_QUEUE_WORK / FI_CANCEL_WORK, struct fi_deferred_work *). */
struct fi_deferred_work {
	struct fi_context2 context;
	uint64_t threshold;
	struct fid_cntr *triggering_cntr;
	struct fid_cntr *completion_cntr;
	enum fi_op_type op_type;
	union {
		struct fi_op_msg *msg;
		struct fi_op_tagged *tagged;
		struct fi_op_rma *rma;
		struct fi_op_atomic *atomic;
		struct fi_op_fetch_atomic *fetch_atomic;
		struct fi_op_compare_atomic *compare_atomic;
		struct fi_op_cntr *cntr;
	} op;
};

#ifdef __cplusplus
}
#endif

#endif /* FI_TRIGGER_H */
