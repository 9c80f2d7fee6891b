/* EQ, wait set, poll set and fi_trywait calls from a C11 program that sees
 * only the public headers, against the "statictest" provider (which wires the
 * core's implementations as a provider does). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

_Static_assert(__STDC_VERSION__ >= 201112L, "must be compiled as C11");

static int failures;

#define CHECK(cond)                                                     \
	do {                                                            \
		if (!(cond)) {                                          \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n",    \
				__FILE__, __LINE__, #cond);             \
			failures++;                                     \
		}                                                       \
	} while (0)

static int fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static ssize_t write_entry(struct fid_eq *eq, uint64_t data)
{
	struct fi_eq_entry e = {.fid = &eq->fid, .context = NULL, .data = data};
	return fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
}

static void eq_calls(struct fid_fabric *fabric)
{
	struct fi_eq_attr attr = {.size = 8, .flags = FI_WRITE, .wait_obj = FI_WAIT_FD};
	struct fid_eq *eq = NULL;
	int ctx = 0;
	CHECK(fi_eq_open(fabric, &attr, &eq, &ctx) == 0);
	if (!eq)
		return;
	CHECK(eq->fid.context == &ctx);

	int fd = -1;
	CHECK(fi_control(&eq->fid, FI_GETWAIT, &fd) == 0);
	CHECK(fd >= 0);
	CHECK(!fd_readable(fd));

	uint32_t event = 0;
	struct fi_eq_entry e;
	CHECK(fi_eq_read(eq, &event, &e, sizeof(e), 0) == -FI_EAGAIN);
	CHECK(fi_eq_sread(eq, &event, &e, sizeof(e), 10, 0) == -FI_EAGAIN);
	struct fid *fids[] = {&eq->fid};
	CHECK(fi_trywait(fabric, fids, 1) == 0);

	CHECK(write_entry(eq, 77) == (ssize_t)sizeof(e));
	CHECK(fd_readable(fd));
	CHECK(fi_trywait(fabric, fids, 1) == -FI_EAGAIN);
	CHECK(fi_eq_read(eq, &event, &e, sizeof(e) - 1, 0) == -FI_ETOOSMALL);
	CHECK(fi_eq_read(eq, &event, &e, sizeof(e), FI_PEEK) == (ssize_t)sizeof(e));
	CHECK(fi_eq_sread(eq, &event, &e, sizeof(e), -1, 0) == (ssize_t)sizeof(e));
	CHECK(event == FI_NOTIFY && e.data == 77 && e.fid == &eq->fid);
	CHECK(!fd_readable(fd));

	struct fi_eq_err_entry err;
	memset(&err, 0, sizeof(err));
	CHECK(fi_eq_readerr(eq, &err, 0) == -FI_EAGAIN);
	char buf[64];
	CHECK(fi_eq_strerror(eq, FI_EIO, NULL, buf, sizeof(buf)) == buf);
	CHECK(strcmp(buf, fi_strerror(FI_EIO)) == 0);

	/* The EQ holds the fabric open. */
	CHECK(fi_close(&fabric->fid) == -FI_EBUSY);
	CHECK(fi_close(&eq->fid) == 0);
}

static void wait_and_poll_sets(struct fid_fabric *fabric, struct fi_info *info)
{
	struct fi_wait_attr wattr = {.wait_obj = FI_WAIT_FD};
	struct fid_wait *ws = NULL;
	CHECK(fi_wait_open(fabric, &wattr, &ws) == 0);
	if (!ws)
		return;
	int ws_fd = -1;
	CHECK(fi_control(&ws->fid, FI_GETWAIT, &ws_fd) == 0);

	struct fi_eq_attr attr = {.wait_obj = FI_WAIT_SET, .wait_set = ws};
	struct fid_eq *eq = NULL;
	int ctx = 0;
	CHECK(fi_eq_open(fabric, &attr, &eq, &ctx) == 0);
	if (!eq)
		return;
	CHECK(fi_wait(ws, 10) == -FI_ETIMEDOUT);
	CHECK(write_entry(eq, 1) > 0);
	CHECK(fd_readable(ws_fd));
	CHECK(fi_wait(ws, -1) == 0);

	struct fid_domain *domain = NULL;
	CHECK(fi_domain(fabric, info, &domain, NULL) == 0);
	if (!domain)
		return;
	struct fi_poll_attr pattr = {.flags = 0};
	struct fid_poll *ps = NULL;
	CHECK(fi_poll_open(domain, &pattr, &ps) == 0);
	if (!ps)
		return;
	CHECK(fi_poll_add(ps, &eq->fid, 0) == 0);
	void *contexts[2] = {NULL, NULL};
	CHECK(fi_poll(ps, contexts, 2) == 1);
	CHECK(contexts[0] == &ctx);

	uint32_t event;
	struct fi_eq_entry e;
	CHECK(fi_eq_read(eq, &event, &e, sizeof(e), 0) == (ssize_t)sizeof(e));
	CHECK(fi_poll(ps, contexts, 2) == 0);
	CHECK(fi_wait(ws, 0) == -FI_ETIMEDOUT);

	CHECK(fi_close(&ps->fid) == -FI_EBUSY);
	CHECK(fi_close(&eq->fid) == -FI_EBUSY);
	CHECK(fi_poll_del(ps, &eq->fid, 0) == 0);
	CHECK(fi_close(&ps->fid) == 0);
	CHECK(fi_close(&domain->fid) == 0);
	CHECK(fi_close(&ws->fid) == -FI_EBUSY);
	CHECK(fi_close(&eq->fid) == 0);
	CHECK(fi_close(&ws->fid) == 0);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return 1;
	/* Strict C11 has no strdup; fi_freeinfo frees the copy. */
	static const char prov[] = "statictest";
	hints->fabric_attr->prov_name = malloc(sizeof(prov));
	if (!hints->fabric_attr->prov_name)
		return 1;
	memcpy(hints->fabric_attr->prov_name, prov, sizeof(prov));
	/* Accept what the provider requires of applications. */
	hints->mode = ~0ULL;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_HMEM;
	struct fi_info *info = NULL;
	CHECK(fi_getinfo(FI_VERSION(2, 7), NULL, NULL, 0, hints, &info) == 0);
	fi_freeinfo(hints);
	if (!info)
		return 1;
	struct fid_fabric *fabric = NULL;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL) == 0);
	if (!fabric)
		return 1;

	eq_calls(fabric);
	wait_and_poll_sets(fabric, info);

	CHECK(fi_close(&fabric->fid) == 0);
	fi_freeinfo(info);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
