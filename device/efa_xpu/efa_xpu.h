/*
 * efa_xpu/efa_xpu.h - the efa provider's device-side calls
 * (prov_id FI_XPU_PROV_EFA): efa_xpu_<op>() for every fi_xpu_<op>() of
 * rdma/fi_xpu_device.h, which includes this header when FI_XPU_HAVE_EFA is
 * nonzero. Valid C11, C++17 and CUDA (nvcc); the host form runs kernels on
 * the host XPU (device/runtime/host_xpu.h). HIP and SYCL: not available (the
 * data-path primitives have no implementation there yet).
 *
 * The handles point at the structs of handles.h; every queue access goes
 * through the one data path of device/ (efa_sq.h, efa_rq.h, efa_cq.h), and
 * work requests and completions are built by device/efa_wr.h and
 * device/efa_completion.h: the same code the host provider uses.
 *
 * Scope. Every work-item of `scope` makes the same call with the same
 * handle, scope and flags; buffers, lengths, addresses and contexts may
 * differ per work-item. Data transfers post one operation per work-item,
 * with one slot claim and one doorbell for the group (in max_batch chunks):
 * members enroll, the leader (rank 0) claims `n` slots, each member writes
 * its WQE/descriptor into its slot, and after a scope barrier the leader
 * publishes and rings. A member whose own arguments are invalid returns its
 * error and posts nothing; the others post normally. CQ and counter calls
 * are performed once for the scope by the leader and their result is
 * broadcast (cntr_add/set/adderr/seterr change the counter once per scope).
 * FI_XPU_DEVICE is supported where xpu_scope_supported() says so (host XPU
 * launches that are cooperative, cooperative CUDA launches); elsewhere every
 * call returns -FI_EOPNOTSUPP (cntr_read/readerr 0, cntr_wait returns at
 * once) before touching any queue. An unknown scope gives -FI_EINVAL.
 *
 * Return values (all calls check the handle first: a NULL or foreign state
 * gives -FI_EINVAL, a layout version other than EFA_XPU_VERSION
 * -FI_EOPNOTSUPP):
 *   send/recv/write/read   0; -FI_EAGAIN when the SQ/RQ lacks room for the
 *                          group (nothing is posted; poll the CQ, which gives
 *                          slots back, and retry); -FI_EINVAL (bad buffer,
 *                          desc or address, or a group larger than the
 *                          queue); -FI_EMSGSIZE (send above the MTU, RDMA
 *                          above max_rdma_size); -FI_EBADFLAGS;
 *                          -FI_EOPNOTSUPP (RDMA the device lacks).
 *                          Flags: FI_REMOTE_CQ_DATA (send/write: `data`'s
 *                          low 32 bits as immediate data), FI_MORE (defer the
 *                          doorbell; whole max_batch chunks still ring),
 *                          FI_COMPLETION (every operation completes anyway).
 *                          Building with -DFI_XPU_EFA_POST_SPIN makes posts
 *                          spin until the queue has room instead of
 *                          returning -FI_EAGAIN (what upstream kernels
 *                          expect); someone must keep polling the CQ.
 *   tsend/trecv            on the protocol fabric `efa` (an EP exported
 *                          with EFA_XPU_EP_CAP_PROTO): tag matching through
 *                          the protocol core, see tagged.h; its CQ reads
 *                          progress the core and return tagged entries
 *                          (proto_ep.h). -FI_ENOSYS on efa-direct, which has
 *                          no tags.
 *   atomics                the same, through the core's atomics executed
 *                          at the target (atomics.h); -FI_ENOSYS on
 *                          efa-direct.
 *   cq_read/readfrom       entries > 0 in the CQ's format, exactly as the
 *                          host fi_cq_read fills them (op_context; flags
 *                          FI_MSG|FI_SEND, FI_RMA|FI_WRITE, FI_RMA|FI_READ,
 *                          FI_MSG|FI_RECV, FI_RMA|FI_REMOTE_WRITE, plus
 *                          FI_REMOTE_CQ_DATA; len 0 for transmits, bytes
 *                          received for receives; buf = the receive buffer;
 *                          data = immediate data); -FI_EAGAIN when none is
 *                          ready (or another reader holds the CQ);
 *                          -FI_EAVAIL when an error completion is next
 *                          (successes before it are returned first);
 *                          -FI_EINVAL for a NULL buf with count > 0.
 *                          readfrom writes one fi_addr_t per entry: the AV
 *                          index of the sender of a receive (from the AV as
 *                          of the EP's latest fi_ep_export_xpu; export again
 *                          after fi_av_insert), else FI_ADDR_NOTAVAIL.
 *   cq_sread/sreadfrom     like read, but wait until min(threshold, count)
 *                          (at least 1) entries were read or an error is
 *                          next; no timeout.
 *   cq_readerr             1 with a struct fi_cq_err_entry (op_context,
 *                          flags, len, buf, data, err, prov_errno = EFA
 *                          status, olen 0, err_data_size 0), -FI_EAGAIN if
 *                          no error is next; flags must be 0 (-FI_EINVAL).
 *   cntr_read/readerr      the value (0 for a bad handle or scope).
 *   cntr_wait              returns when value >= threshold, when the error
 *                          count grew during the wait, or after `timeout`
 *                          milliseconds (negative: no limit), measured with
 *                          CLOCK_MONOTONIC on the host and %globaltimer on
 *                          CUDA.
 *   cntr_add/set/adderr/seterr  0, with 64-bit atomics on the memory the NIC
 *                          adds into.
 *
 * Queue space: SQ and RQ slots come back only when their completions are
 * read from the CQ (as in rdma-core), so a kernel that waits on counters
 * must still read the CQ now and then.
 *
 * Stale CQEs: one that names no exported EP or no outstanding request is
 * dropped and counted in the CQ state's stale_cqes (handles.h), the policy of
 * the host provider too (device/efa_completion.h).
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_EFA_XPU_H_
#define XPUFAB_DEVICE_EFA_XPU_EFA_XPU_H_

#include "xpufab/efa_xpu/atomics.h"
#include "xpufab/efa_xpu/cntr.h"
#include "xpufab/efa_xpu/cq.h"
#include "xpufab/efa_xpu/handles.h"
#include "xpufab/efa_xpu/post.h"
#include "xpufab/efa_xpu/proto_ep.h"
#include "xpufab/efa_xpu/tagged.h"

#endif /* XPUFAB_DEVICE_EFA_XPU_EFA_XPU_H_ */
