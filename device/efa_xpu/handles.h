/*
 * efa_xpu/handles.h - the device-side state behind the handles
 * fi_ep_export_xpu, fi_cq_export_xpu and fi_cntr_export_xpu fill for the efa
 * provider (prov_id FI_XPU_PROV_EFA): the host provider writes these structs,
 * device code (efa_xpu.h) reads and updates them. Valid C11, C++17 and nvcc;
 * the same layout for every backend (emulated or hardware).
 *
 * handle.fid.prov_ctx is the device address of one of the structs below; the
 * struct starts with a copy of the handle, then `version` (FI_VERSION(2, 7) for
 * this layout) and `size` (sizeof the struct), which device code checks before
 * using anything else.
 *
 * Memory: every struct lives in host memory the provider imported with
 * FI_XPU_IMPORT_DEVICEMAP, so host and device see the same bytes; every
 * pointer inside is a device address (rings and doorbells imported from the
 * NIC, CQ rings and counters allocated with FI_XPU_ALLOC_DMABUF). With the
 * default host-memory callbacks device and host addresses are equal.
 *
 * What device code does with them (device/ routines, the one data path):
 *   post a send/write/read     efa_wr_build + claim/write/publish on ep->sq,
 *                              using efa_xpu_peer (fi_av_lookup2) for
 *                              ah/qpn/qkey and efa_xpu_desc
 *                              (fi_mr_get_xpu_desc) for the lkey; the wr
 *                              context is the op_context the CQ reports.
 *   post a receive             claim/write/publish on ep->rq; the buffer goes
 *                              to rx_bufs at the request's table index.
 *   read a CQ                  (efa_xpu/cq.h) under cq->err_lock: efa_cq_poll
 *                              on cq->cq; the CQE's qp_num selects the EP in
 *                              cq->eps, whose sq/rq request table
 *                              (efa_completion.h) returns the op_context and
 *                              gives the queue space back; entries are
 *                              written in cq->format. An error CQE is staged
 *                              in cq->err (one at a time) for cq_readerr;
 *                              while one is staged, reads return -FI_EAVAIL
 *                              and the ring is left alone, so none is
 *                              dropped. A stale CQE is dropped and counted in
 *                              cq->stale_cqes.
 *   counters                   *value / *err_value are updated by the NIC with
 *                              atomic adds; device add/set use 64-bit atomics.
 *
 * The protocol fabric `efa` (caps & EFA_XPU_EP_CAP_PROTO): the EP runs on the
 * protocol core (api/proto/proto.h). ep->proto is the core endpoint, in
 * memory device code reaches (XPU-context memory; host memory with the
 * default callbacks), already initialized, with one peer per AV entry
 * (proto_peer_add) and the local MRs remote atomics may target
 * (proto_mr_add). The core owns the QP's rings and its CQ: ep->sq/ep->rq
 * are not used, and a device CQ read of such an EP runs proto_progress
 * instead of polling cq->cq. Every core call on the endpoint, the host
 * provider's included, holds ep->proto_lock (0 free, 1 held; taken with
 * xpu_cas_u32, released with a release store). tx_cq and rx_cq are the same
 * XPU CQ (or one is NULL); counters bound to the EP are advanced by device
 * CQ reads as the core completes operations, never by the NIC.
 *   tagged send/recv           proto_send / proto_recv with FI_TAGGED;
 *   send/recv                  the same without FI_TAGGED;
 *   write/read                 proto_rma (EFA_XPU_EP_CAP_RMA): RDMA write
 *                              and read where the device has them, packets
 *                              otherwise; completions FI_RMA | FI_WRITE or
 *                              FI_READ through the CQ, the target's remote
 *                              counter and remote CQ data as on the host;
 *   atomics                    proto's atomics; the destination is the same
 *                              efa_xpu_peer as on efa-direct, mapped to the
 *                              core's peer with proto_peer_lookup(ahn, qpn);
 *                              desc is efa_xpu_desc, its key serving as
 *                              lkey and (rendezvous) rkey: an EFA MR has one
 *                              key for both.
 */
#ifndef XPUFAB_DEVICE_EFA_XPU_HANDLES_H_
#define XPUFAB_DEVICE_EFA_XPU_HANDLES_H_

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_xpu.h>

#include "device/efa_completion.h"
#include "device/efa_dp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layout version written into every struct: FI_VERSION(2, 7). */
#define EFA_XPU_VERSION ((2u << 16) | 7u)

/* Most XPU EPs one XPU CQ can serve (its QPN lookup table). */
#define EFA_XPU_CQ_MAX_EPS 32

/* efa_xpu_ep.caps */
#define EFA_XPU_EP_CAP_RDMA_READ (1u << 0)
#define EFA_XPU_EP_CAP_RDMA_WRITE (1u << 1)
#define EFA_XPU_EP_CAP_UNSOLICITED_WRITE_RECV (1u << 2)
#define EFA_XPU_EP_CAP_PROTO (1u << 3) /* the `efa` fabric: ep->proto is set */
#define EFA_XPU_EP_CAP_RMA (1u << 4)   /* with PROTO: the EP has FI_RMA (fi_xpu_write / read) */

/* fi_av_lookup2(FI_XPU) output: the address a WQE needs (av_addr_size = 8). */
struct efa_xpu_peer {
  uint16_t ahn;
  uint16_t remote_qpn;
  uint32_t remote_qkey;
};

/* fi_mr_get_xpu_desc() output (mr_desc_size = 4). */
struct efa_xpu_desc {
  uint32_t lkey;
};

/* Most AV entries an exported EP mirrors for fi_xpu_cq_readfrom. */
#define EFA_XPU_AV_MIRROR_MAX 1024u

/* One AV entry as device code sees it: fi_addr_t i is entry i. */
struct efa_xpu_av_entry {
  uint16_t ahn;
  uint16_t qpn;
  uint32_t valid; /* 0 for a removed or unresolved entry */
};

struct efa_xpu_cq;
struct efa_xpu_cntr;
struct proto_ep;

struct efa_xpu_ep {
  struct fid_xpu_ep fid;
  uint32_t version;
  uint32_t size;
  struct efa_sq sq; /* ring + req table; pointers are device addresses */
  struct efa_rq rq;
  uint32_t qpn;
  uint32_t qkey;
  uint32_t caps;          /* EFA_XPU_EP_CAP_* */
  uint32_t mtu;           /* largest SEND */
  uint32_t max_rdma_size; /* largest RDMA read/write */
  uint32_t inline_size;   /* inline bytes per WQE */
  uint64_t tx_op_flags;   /* default op flags of the EP */
  struct efa_xpu_cq *tx_cq; /* device addresses; NULL when not bound */
  struct efa_xpu_cq *rx_cq;
  struct efa_xpu_cntr *cntr_send;
  struct efa_xpu_cntr *cntr_recv;
  struct efa_xpu_cntr *cntr_read;
  struct efa_xpu_cntr *cntr_write;
  struct efa_xpu_cntr *cntr_remote_read;
  struct efa_xpu_cntr *cntr_remote_write;
  /* Receive buffer of each outstanding receive, by req-id index (rq.reqs.count
   * entries): the `buf` a FI_CQ_FORMAT_DATA entry reports. */
  uint64_t *rx_bufs;
  /* The bound AV (source addresses for fi_xpu_cq_readfrom): as of the latest
   * fi_ep_export_xpu, and for a protocol-fabric EP kept up with every insert
   * since (av_count published last). */
  struct efa_xpu_av_entry *av;
  uint32_t av_count;
  uint32_t av_pad;
  /* The protocol fabric only (EFA_XPU_EP_CAP_PROTO), else NULL / 0. */
  struct proto_ep *proto;
  uint32_t proto_lock;
  uint32_t proto_pad;
};

struct efa_xpu_cq {
  struct fid_xpu_cq fid;
  uint32_t version;
  uint32_t size;
  struct efa_cq cq;     /* polling state; cq.buf is the ring (device address) */
  uint32_t format;      /* enum fi_cq_format */
  uint32_t entry_size;  /* bytes of one application entry in that format */
  uint32_t num_eps;     /* valid entries of eps */
  uint32_t err_lock;    /* 0 free, 1 held (device spin lock around err_*) */
  struct efa_xpu_ep *eps[EFA_XPU_CQ_MAX_EPS];
  /* Error staging for cq_readerr. */
  uint32_t err_pending;
  uint32_t stale_cqes;  /* CQEs dropped because they named no outstanding request */
  struct efa_comp err;
  /* What fi_cq_err_entry adds for a staged protocol-core error (0 otherwise). */
  uint64_t err_tag;
  uint64_t err_olen;
};

struct efa_xpu_cntr {
  struct fid_xpu_cntr fid;
  uint32_t version;
  uint32_t size;
  uint64_t *value;     /* successful completions (device address) */
  uint64_t *err_value; /* error completions (device address) */
};

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_XPU_HANDLES_H_ */
