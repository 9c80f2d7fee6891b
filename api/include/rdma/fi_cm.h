/*
 * rdma/fi_cm.h - connection management and endpoint names/addresses
 * (fi_getname is how an RDM application learns its own address).
 */
#ifndef FI_CM_H
#define FI_CM_H

#include <rdma/fi_endpoint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fid_mc {
	struct fid fid;
	fi_addr_t fi_addr;
};

struct fi_ops_cm {
	size_t size;
	int (*setname)(fid_t fid, void *addr, size_t addrlen);
	int (*getname)(fid_t fid, void *addr, size_t *addrlen);
	int (*getpeer)(struct fid_ep *ep, void *addr, size_t *addrlen);
	int (*connect)(struct fid_ep *ep, const void *addr, const void *param,
		       size_t paramlen);
	int (*listen)(struct fid_pep *pep);
	int (*accept)(struct fid_ep *ep, const void *param, size_t paramlen);
	int (*reject)(struct fid_pep *pep, fid_t handle, const void *param,
		      size_t paramlen);
	int (*shutdown)(struct fid_ep *ep, uint64_t flags);
	int (*join)(struct fid_ep *ep, const void *addr, uint64_t flags,
		    struct fid_mc **mc, void *context);
};

static inline int fi_setname(fid_t fid, void *addr, size_t addrlen)
{
	struct fid_ep *ep = container_of(fid, struct fid_ep, fid);
	return ep->cm->setname(fid, addr, addrlen);
}

/* *addrlen is the buffer size in and the address size out; -FI_ETOOSMALL
 * when the buffer is too small. */
static inline int fi_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct fid_ep *ep = container_of(fid, struct fid_ep, fid);
	return ep->cm->getname(fid, addr, addrlen);
}

static inline int fi_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	return ep->cm->getpeer(ep, addr, addrlen);
}

static inline int fi_listen(struct fid_pep *pep)
{
	return pep->cm->listen(pep);
}

static inline int fi_connect(struct fid_ep *ep, const void *addr,
			     const void *param, size_t paramlen)
{
	return ep->cm->connect(ep, addr, param, paramlen);
}

static inline int fi_accept(struct fid_ep *ep, const void *param,
			    size_t paramlen)
{
	return ep->cm->accept(ep, param, paramlen);
}

static inline int fi_reject(struct fid_pep *pep, fid_t handle,
			    const void *param, size_t paramlen)
{
	return pep->cm->reject(pep, handle, param, paramlen);
}

static inline int fi_shutdown(struct fid_ep *ep, uint64_t flags)
{
	return ep->cm->shutdown(ep, flags);
}

static inline int fi_join(struct fid_ep *ep, const void *addr, uint64_t flags,
			  struct fid_mc **mc, void *context)
{
	return FI_CHECK_OP(ep->cm, struct fi_ops_cm, join) ?
		ep->cm->join(ep, addr, flags, mc, context) : -FI_ENOSYS;
}

static inline fi_addr_t fi_mc_addr(struct fid_mc *mc)
{
	return mc->fi_addr;
}

#ifdef __cplusplus
}
#endif

#endif /* FI_CM_H */
