/* The older symbol versions of fi_getinfo, fi_dupinfo, fi_freeinfo (FABRIC_1.0
 * to 1.9) and fi_fabric (FABRIC_1.0), for binaries linked against an earlier
 * libfabric.so.1: Debian's 1.17 tools bind fi_getinfo@FABRIC_1.3.
 *
 * Every ABI revision only appended fields to the attribute structures, so an
 * older layout is a prefix of the current one.  Structures this library hands
 * out are always allocated at the current size, which an older binary reads as
 * its prefix; only structures the binary passes in may be short.  Those are
 * widened here: the fields the older ABI has are copied into zeroed current
 * structures and the current entry point does the rest. */
#include <stddef.h>
#include <string.h>

#include <rdma/fabric.h>

/* Bytes of each structure an application built for one ABI node knows. */
struct abi_layout {
	size_t info;
	size_t tx_attr;
	size_t ep_attr;
	size_t domain_attr;
	size_t fabric_attr;
};

/* FABRIC_1.0: no fi_info.nic, tx tclass, ep auth key, domain fields from
 * cntr_cnt on, or fabric api_version. */
static const struct abi_layout layout_1_0 = {
	offsetof(struct fi_info, nic),
	offsetof(struct fi_tx_attr, tclass),
	offsetof(struct fi_ep_attr, auth_key_size),
	offsetof(struct fi_domain_attr, cntr_cnt),
	offsetof(struct fi_fabric_attr, api_version),
};

/* FABRIC_1.1: domain cntr_cnt..mr_cnt, ep auth key, fabric api_version. */
static const struct abi_layout layout_1_1 = {
	offsetof(struct fi_info, nic),
	offsetof(struct fi_tx_attr, tclass),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, tclass),
	sizeof(struct fi_fabric_attr),
};

/* FABRIC_1.2: fi_info.nic. */
static const struct abi_layout layout_1_2 = {
	sizeof(struct fi_info),
	offsetof(struct fi_tx_attr, tclass),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, tclass),
	sizeof(struct fi_fabric_attr),
};

/* FABRIC_1.3 (libfabric 1.5 to 1.17): tx and domain tclass. */
static const struct abi_layout layout_1_3 = {
	sizeof(struct fi_info),
	sizeof(struct fi_tx_attr),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, max_ep_auth_key),
	sizeof(struct fi_fabric_attr),
};

/* FABRIC_1.7: domain max_ep_auth_key. */
static const struct abi_layout layout_1_7 = {
	sizeof(struct fi_info),
	sizeof(struct fi_tx_attr),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, max_group_id),
	sizeof(struct fi_fabric_attr),
};

/* FABRIC_1.8: domain max_group_id. */
static const struct abi_layout layout_1_8 = {
	sizeof(struct fi_info),
	sizeof(struct fi_tx_attr),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, max_cntr_value),
	sizeof(struct fi_fabric_attr),
};

/* FABRIC_1.9: domain max_cntr_value and max_err_cntr_value; FABRIC_1.10 adds
 * ep xpu_ctx and domain max_xpu_ctx_cnt. */
static const struct abi_layout layout_1_9 = {
	sizeof(struct fi_info),
	sizeof(struct fi_tx_attr),
	offsetof(struct fi_ep_attr, xpu_ctx),
	offsetof(struct fi_domain_attr, max_xpu_ctx_cnt),
	sizeof(struct fi_fabric_attr),
};

/* Current-size copies of an older fi_info and its attributes; the pointers
 * inside (names, addresses, auth keys, nic) still belong to the caller. */
struct widened_info {
	struct fi_info info;
	struct fi_tx_attr tx_attr;
	struct fi_rx_attr rx_attr;
	struct fi_ep_attr ep_attr;
	struct fi_domain_attr domain_attr;
	struct fi_fabric_attr fabric_attr;
};

static struct fi_info *widen(const struct fi_info *old, const struct abi_layout *l,
			     struct widened_info *w)
{
	memset(w, 0, sizeof(*w));
	memcpy(&w->info, old, l->info);
	/* An older next points at another short entry; only the first is read. */
	w->info.next = NULL;
	if (old->tx_attr) {
		memcpy(&w->tx_attr, old->tx_attr, l->tx_attr);
		w->info.tx_attr = &w->tx_attr;
	}
	/* fi_rx_attr has not changed since FABRIC_1.0. */
	if (old->rx_attr) {
		w->rx_attr = *old->rx_attr;
		w->info.rx_attr = &w->rx_attr;
	}
	if (old->ep_attr) {
		memcpy(&w->ep_attr, old->ep_attr, l->ep_attr);
		w->info.ep_attr = &w->ep_attr;
	}
	if (old->domain_attr) {
		memcpy(&w->domain_attr, old->domain_attr, l->domain_attr);
		w->info.domain_attr = &w->domain_attr;
	}
	if (old->fabric_attr) {
		memcpy(&w->fabric_attr, old->fabric_attr, l->fabric_attr);
		w->info.fabric_attr = &w->fabric_attr;
	}
	return &w->info;
}

static int getinfo_compat(const struct abi_layout *l, uint32_t version, const char *node,
			  const char *service, uint64_t flags, const struct fi_info *hints,
			  struct fi_info **info)
{
	struct widened_info w;
	return fi_getinfo(version, node, service, flags, hints ? widen(hints, l, &w) : NULL,
			  info);
}

static struct fi_info *dupinfo_compat(const struct abi_layout *l, const struct fi_info *info)
{
	struct widened_info w;
	return fi_dupinfo(info ? widen(info, l, &w) : NULL);
}

/* One set of older entry points per node: compat_NAME_V is bound to
 * fi_NAME@FABRIC_V; the compat_ names match no global pattern of xpufab.map,
 * so they stay local.
 * fi_freeinfo only ever sees structures this library allocated. */
#define XPUFAB_COMPAT_INFO(v, node)                                                     \
	int compat_getinfo_##v(uint32_t version, const char *n, const char *service,       \
			   uint64_t flags, const struct fi_info *hints,                \
			   struct fi_info **info);                                     \
	struct fi_info *compat_dupinfo_##v(const struct fi_info *info);                    \
	void compat_freeinfo_##v(struct fi_info *info);                                    \
	__asm__(".symver compat_getinfo_" #v ",fi_getinfo@" node);                          \
	__asm__(".symver compat_dupinfo_" #v ",fi_dupinfo@" node);                          \
	__asm__(".symver compat_freeinfo_" #v ",fi_freeinfo@" node);                        \
	int compat_getinfo_##v(uint32_t version, const char *n, const char *service,       \
			   uint64_t flags, const struct fi_info *hints,                \
			   struct fi_info **info)                                      \
	{                                                                              \
		return getinfo_compat(&layout_##v, version, n, service, flags, hints, \
				      info);                                           \
	}                                                                              \
	struct fi_info *compat_dupinfo_##v(const struct fi_info *info)                     \
	{                                                                              \
		return dupinfo_compat(&layout_##v, info);                              \
	}                                                                              \
	void compat_freeinfo_##v(struct fi_info *info) { fi_freeinfo(info); }

XPUFAB_COMPAT_INFO(1_0, "FABRIC_1.0")
XPUFAB_COMPAT_INFO(1_1, "FABRIC_1.1")
XPUFAB_COMPAT_INFO(1_2, "FABRIC_1.2")
XPUFAB_COMPAT_INFO(1_3, "FABRIC_1.3")
XPUFAB_COMPAT_INFO(1_7, "FABRIC_1.7")
XPUFAB_COMPAT_INFO(1_8, "FABRIC_1.8")
XPUFAB_COMPAT_INFO(1_9, "FABRIC_1.9")

/* FABRIC_1.0's fi_fabric_attr ends at prov_version; api_version 0 lets the
 * library pick its own. */
int compat_fabric_1_0(const struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
__asm__(".symver compat_fabric_1_0,fi_fabric@FABRIC_1.0");
int compat_fabric_1_0(const struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	struct fi_fabric_attr wide;
	if (!attr)
		return fi_fabric(NULL, fabric, context);
	memset(&wide, 0, sizeof(wide));
	memcpy(&wide, attr, offsetof(struct fi_fabric_attr, api_version));
	return fi_fabric(&wide, fabric, context);
}
