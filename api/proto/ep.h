/*
 * ep.h - the protocol endpoint's state: configuration, the fixed pools carved
 * out of one block of caller memory, the peer table and the local MR table.
 * Host and nvcc; valid C11 and C++17; no allocation.
 *
 * Include api/proto/proto.h, not this file.
 */
#ifndef XPUFAB_API_PROTO_EP_H_
#define XPUFAB_API_PROTO_EP_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "api/proto/match.h"
#include "api/proto/wire.h"
#include "device/efa_cq.h"
#include "device/efa_rq.h"
#include "device/efa_sq.h"
#include "device/xpu_func.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The entry points device calls reach from many call sites (every call at
 * every scope): the device compiler keeps one copy of each instead of
 * inlining the whole transport into every site.
 */
#if defined(__CUDACC__)
#define PROTO_OUTLINE __noinline__
#else
#define PROTO_OUTLINE
#endif

#define PROTO_NONE 0xffffffffu
#define PROTO_AM_MAX 32u
/* Buffers one message or RMA may scatter into or gather from (fi_info iov_limit). */
#define PROTO_IOV_MAX 4u

/*
 * Receive buffers a peer may hold beyond its credits: CREDIT packets need no
 * credit, and at most credits / (credits / 2) = 2 of them per peer can be in
 * flight or unprocessed at once (each returns at least half the credits).
 */
#define PROTO_CTRL_SLACK 2u

/* Device capabilities the core cares about. */
#define PROTO_DEV_RDMA_READ (1u << 0)
#define PROTO_DEV_CQ_SGID (1u << 1) /* RX CQEs of senders without an AH carry their GID */
#define PROTO_DEV_RDMA_WRITE (1u << 2)

/* What the backend reports for the QP the endpoint runs on (efadv_query_qp_wqs / query_cq). */
struct proto_dev {
  struct efa_dp_wq_attr sq;
  struct efa_dp_wq_attr rq;
  struct efa_dp_cq_attr cq; /* used by this QP alone, for both directions */
  uint32_t max_sq_sge;
  uint32_t max_rq_sge;
  uint32_t mtu;           /* largest SEND payload */
  uint32_t max_rdma_size; /* largest RDMA read or write */
  uint32_t caps;          /* PROTO_DEV_* */
};

/* Sizes of the pools. Both sides of a pair must use the same `credits`. */
struct proto_config {
  uint32_t max_peers; /* peer table entries */
  uint32_t credits;   /* packets a peer may have outstanding to us; power of two >= 2 */
  uint32_t ntx;       /* transmit bounce buffers */
  uint32_t max_ops;   /* outstanding operations (sends, receives, atomics) */
  uint32_t max_unexp; /* unexpected eager messages held (each needs an eager_max slot) */
  uint32_t ncomp;     /* completions queued between two progress calls; power of two */
  uint32_t eager_max; /* largest payload sent eagerly; 0 = what one packet holds */
  uint32_t rdma_chunk; /* bytes per rendezvous RDMA read, 0 = max_rdma_size */
  /* Smallest fi_write sent by RDMA write (PROTO_DEV_RDMA_WRITE); 0 = any of more than one packet. */
  uint32_t rdma_write_min;
};

XPU_FUNC void proto_config_default(struct proto_config *c) {
  c->max_peers = 8;
  c->credits = 64;
  c->ntx = 256;
  c->max_ops = 512;
  c->max_unexp = 128;
  c->ncomp = 512;
  c->eager_max = 0;
  c->rdma_chunk = 1u << 20;
  c->rdma_write_min = 0;
}

/* One protocol-level completion; consumers turn it into fi_cq_tagged_entry or UCT callbacks. */
struct proto_comp {
  uint64_t op_context;
  uint64_t flags; /* FI_SEND / FI_RECV, FI_MSG / FI_TAGGED / FI_ATOMIC, FI_REMOTE_CQ_DATA, ... */
  uint64_t len;
  void *buf;
  uint64_t data;
  uint64_t tag;
  uint64_t olen;
  int32_t err;        /* positive FI_E*, 0 on success */
  int32_t prov_errno; /* efa_io_comp_status of a failed operation */
  uint32_t src;       /* peer index, PROTO_NONE when unknown */
  uint32_t reserved;
};

/*
 * Called during progress for each active message, in the sender's order.
 * Returns 0 when done with the payload, -FI_EAGAIN to be called again with
 * the same message on a later progress call (the sender's later packets wait).
 */
typedef int (*proto_am_fn)(void *arg, uint32_t src, const void *payload, uint32_t len);

struct proto_am_entry {
  proto_am_fn fn;
  void *arg;
};

/* A simple FIFO of pool indices linked through the entries' `next`. */
struct proto_fifo {
  uint32_t head;
  uint32_t tail;
  uint32_t count;
};

struct proto_peer {
  uint16_t ahn;
  uint16_t qpn;
  uint32_t qkey;
  uint32_t in_use;
  uint16_t src_at_peer; /* our index in the peer's table, PROTO_ADDR_UNKNOWN if not agreed */
  uint16_t reserved;
  uint32_t has_gid;
  uint8_t gid[16];
  /* Transmit side. */
  uint32_t tx_credits; /* packets we may still send the peer */
  uint32_t tx_seq;     /* next packet number */
  struct proto_fifo q; /* transmit buffers waiting for credits, in order */
  /* Receive side. */
  uint32_t rx_next; /* next packet number to handle */
  uint32_t owed;    /* credits to give back */
  uint32_t *held;   /* credits entries: rx buffer index + 1 of packet rx_next + i, 0 = not here */
  /* Operations we started towards the peer (sends, atomics, RMA) not completed yet: FI_FENCE. */
  uint32_t ops_out;
  /* The RMA op whose packets are being issued to the peer: the next RMA or atomic waits. */
  uint32_t rma_busy;
  /* Packet writes and atomics started towards the peer, not completed. */
  uint32_t writes_out;
  /*
   * Writes and atomics to the peer not completed yet, in posting order, linked through their
   * ops' `wnext`: each waits for the earlier ones it may overlap that nothing else orders
   * before it (proto_write_may_start).
   */
  uint32_t wl_head;
  uint32_t wl_tail;
};

/* One registered region a peer's atomics may target. */
struct proto_mr {
  uint64_t addr;
  uint64_t len;
  uint32_t key;
  uint32_t access; /* FI_REMOTE_READ | FI_REMOTE_WRITE */
};

enum proto_op_kind {
  PROTO_K_FREE = 0,
  PROTO_K_SEND,   /* eager or rendezvous send with a completion */
  PROTO_K_RECV,   /* posted receive */
  PROTO_K_ATOMIC, /* atomic waiting for its reply */
  PROTO_K_RMA,    /* fi_read / fi_write (rma.h) */
};

enum proto_op_state {
  PROTO_S_IDLE = 0,
  PROTO_S_POSTED,  /* receive waiting for a match / send waiting for its transmit */
  PROTO_S_RTS,     /* rendezvous sender waiting for CTS or FIN */
  PROTO_S_PUSH,    /* rendezvous sender pushing segments */
  PROTO_S_READ,    /* rendezvous receiver reading */
  PROTO_S_RXPUSH,  /* rendezvous receiver receiving pushed segments */
  PROTO_S_CTS,     /* rendezvous receiver about to ask for the push */
  PROTO_S_FIN,     /* rendezvous receiver about to tell the sender it is done; RMA read: the note */
  PROTO_S_WRITE,   /* RMA write issuing its WRITE packets */
  PROTO_S_RREQ,    /* RMA read issuing READ_REQ packets (no RDMA read) */
  PROTO_S_WAIT,    /* RMA waiting for the target's answers */
  PROTO_S_RDMAW,   /* RMA write by RDMA write: issuing its WQEs, then waiting for them */
};

/*
 * A buffer and its registration. Rendezvous reads need rkey at the sender and lkey at the
 * receiver; a buffer without a registration (PROTO_KEY_NONE in both, an application that
 * does not do FI_MR_LOCAL) is only ever copied: eager payloads through the bounce buffers, a
 * rendezvous on either side by a push instead of a read, RMA by packets (rma.h).
 */
#define PROTO_KEY_NONE 0xffffffffu
struct proto_buf {
  void *addr;
  uint64_t len;
  uint32_t lkey;
  uint32_t rkey;
};

/* One local buffer of a multi-buffer operation. */
struct proto_seg {
  uint64_t addr;
  uint64_t len;
  uint32_t lkey;
  uint32_t reserved;
};

struct proto_op {
  uint8_t kind;
  uint8_t state;
  uint16_t gen; /* changes on every reuse: stale ids from the wire are refused */
  uint32_t peer;
  uint32_t next; /* free list / queue link */
  uint32_t in_txq;
  uint64_t context;
  uint64_t flags; /* completion flags */
  uint64_t tag;
  uint64_t ignore;
  uint64_t data;
  uint8_t *buf;
  uint64_t len; /* buffer length */
  uint32_t lkey;
  uint32_t rkey;
  uint64_t total;   /* message length */
  uint64_t done;    /* bytes placed / pushed */
  uint64_t cursor;  /* next byte to read or push */
  uint32_t inflight; /* WQEs of this op not yet completed */
  uint32_t remote_id;
  uint64_t remote_addr;
  uint32_t remote_key;
  int32_t err;
  int32_t prov_errno;
  uint32_t src;
  uint32_t matcher; /* posted receives: 1 tagged, 0 untagged */
  uint32_t parent;  /* PROTO_OPM_MULTI_PART: the multi-receive buffer's op */
  /* Atomics: where fetched values go. */
  uint8_t *result;
  uint32_t result_len;
  uint32_t mode; /* PROTO_OPM_* */
  /* More than one buffer: seg[0..nseg) in order, buf = seg[0].addr and len their sum. */
  uint32_t nseg;
  uint32_t wnext; /* PROTO_OPM_WLISTED: the next write or atomic to the same peer */
  struct proto_seg seg[PROTO_IOV_MAX];
};

#define PROTO_OPM_SILENT 1u  /* no completion (an internal receive) */
#define PROTO_OPM_DISCARD 2u /* FI_DISCARD: complete without data and without truncation */
#define PROTO_OPM_COUNTED 4u /* counted in its peer's ops_out */
#define PROTO_OPM_ORDERED 8u /* counted in its peer's writes_out */
/*
 * FI_MULTI_RECV: the buffer's op stays on the untagged posted list, `cursor`
 * the bytes handed out and `inflight` its messages not completed yet; each
 * message gets an op of its own (a part) over the next bytes. Released: off
 * the list, the op lives on until its last part completed.
 */
#define PROTO_OPM_MULTI 16u
#define PROTO_OPM_MULTI_PART 32u
#define PROTO_OPM_MULTI_RELEASED 64u
/* A write or atomic on its peer's write list; STARTED: its first packet or WQE is out. */
#define PROTO_OPM_WLISTED 128u
#define PROTO_OPM_WSTARTED 256u

/* fi_setopt FI_OPT_MIN_MULTI_RECV's default, as libfabric's efa provider has it. */
#define PROTO_MIN_MULTI_RECV_DEFAULT 64u

/* What a transmit buffer holds until its SEND completes. */
struct proto_txbuf {
  uint32_t peer;
  uint32_t op;   /* op whose completion waits for this packet, PROTO_NONE if none */
  uint32_t len;  /* header + payload bytes in the buffer */
  uint32_t next; /* free list / transmit queue link */
  /* A second SGE sent after the buffer (pushed segments straight from the user buffer). */
  uint64_t ext_addr;
  uint32_t ext_len;
  uint32_t ext_lkey;
};

/* An unexpected eager message's copy, or an unexpected RTS (no payload). */
struct proto_unexp {
  struct proto_hdr hdr;
  uint32_t peer;
  uint32_t next;
  uint8_t *payload;
  uint64_t claim_ctx; /* context of the FI_PEEK | FI_CLAIM that reserved it */
  uint32_t claimed;
  uint32_t reserved;
};

/* A packet from a sender not in the peer table yet. */
struct proto_orphan {
  uint32_t buf;
  uint16_t ah;  /* EFA_IO_AH_UNKNOWN when we had no AH for the sender */
  uint16_t qpn;
  uint32_t has_gid;
  uint8_t gid[16]; /* the CQE's source GID when ah is unknown (PROTO_DEV_CQ_SGID) */
};

/* Work-request contexts: what a CQE's request id stands for. */
#define PROTO_WRC_TX 1u   /* a SEND from transmit buffer `index` */
#define PROTO_WRC_READ 2u /* an RDMA read or write of op `index` */
#define PROTO_WRC(kind, index) (((uint64_t)(kind) << 32) | (uint32_t)(index))

struct proto_stats {
  uint64_t tx_packets;
  uint64_t rx_packets;
  uint64_t credit_packets;
  uint64_t credit_stalls; /* transmit waited for credits */
  uint64_t reordered;     /* packets that arrived ahead of an earlier one */
  uint64_t unknown_src;   /* packets from no peer in the table, dropped */
  uint64_t orphans;       /* packets that waited for their sender to become a peer */
  uint64_t rx_errors;     /* receive completions with an error status */
  uint64_t tx_errors;     /* send / read completions with an error status */
  uint64_t rdma_reads;    /* rendezvous RDMA reads issued */
  uint64_t pushed;        /* rendezvous DATA packets sent */
  uint64_t rma_packets;   /* WRITE / READ_REQ packets sent */
  uint32_t last_tx_status; /* efa_io_comp_status of the latest of them */
  uint32_t reserved;
  uint64_t rdma_writes;   /* RDMA write WQEs issued for fi_write */
};

struct proto_ep {
  struct proto_config cfg;
  struct proto_dev dev;
  struct efa_sq sq;
  struct efa_rq rq;
  struct efa_cq cq;
  uint32_t payload_max; /* mtu - header */
  uint32_t buf_size;    /* bytes per bounce buffer */
  uint32_t nrx;
  uint8_t *bounce; /* nrx receive buffers, then ntx transmit buffers */
  uint32_t bounce_lkey; /* the transmit buffers' registration (and the receive buffers', rx_lkey) */
  struct proto_peer *peers;
  uint32_t *held_pool;
  struct proto_op *ops;
  uint32_t op_free;
  struct proto_txbuf *tx;
  uint32_t tx_free;
  uint32_t tx_free_count;
  struct proto_fifo txq;      /* count: transmit buffers waiting in the peers' queues */
  uint32_t *opq;              /* ops with more to transmit (rendezvous push, reads), ring */
  uint32_t opq_head, opq_count;
  struct proto_unexp *unexp;
  uint8_t *unexp_data;
  uint32_t unexp_free;
  struct proto_comp *comps;
  uint32_t comp_head, comp_count;
  uint32_t stalled; /* peers whose next packet waits for resources */
  struct proto_am_entry am[PROTO_AM_MAX];
  struct proto_mr *mrs;
  uint32_t nmr, max_mr;
  uint32_t last_peer; /* lookup cache */
  struct proto_orphan *orphans;
  uint32_t norphans;
  struct proto_stats stats;
  /* Tag matching (tagged receives) and the same lists for untagged ones (tag 0, no ignore bits). */
  struct proto_match tm;
  struct proto_match um;
  struct proto_match_entry *tm_pool;
  struct proto_match_entry *um_pool;
  uint32_t credit_due; /* a CREDIT packet could not go out: progress tries the peers again */
  uint32_t rx_lkey;    /* the receive buffers' registration: bounce_lkey, unless grow.h sets it */
  /* A multi-receive buffer with less space left than this is released (FI_OPT_MIN_MULTI_RECV). */
  uint64_t min_multi_recv;
};

#define PROTO_MAX_MR 64u

XPU_FUNC uint64_t proto_align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

XPU_FUNC uint32_t proto_rx_buffers(const struct proto_config *c) {
  return c->max_peers * (c->credits + PROTO_CTRL_SLACK);
}

XPU_FUNC uint32_t proto_buf_size(const struct proto_dev *d) {
  return (uint32_t)proto_align_up(d->mtu, 64);
}

/* Bytes of the bounce region the caller allocates and registers for local access. */
XPU_FUNC size_t proto_bounce_size(const struct proto_config *c, const struct proto_dev *d) {
  return (size_t)(proto_rx_buffers(c) + c->ntx) * proto_buf_size(d);
}

XPU_FUNC uint32_t proto_eager_max(const struct proto_config *c, const struct proto_dev *d) {
  const uint32_t one = d->mtu - (uint32_t)sizeof(struct proto_hdr);
  return c->eager_max && c->eager_max < one ? c->eager_max : one;
}

/* A bump allocator over the caller's block: layout is computed and carved by the same code. */
struct proto_carve {
  uint8_t *base;
  uint64_t off;
};

XPU_FUNC void *proto_carve_take(struct proto_carve *k, uint64_t bytes) {
  k->off = proto_align_up(k->off, 64);
  void *p = k->base ? (void *)(k->base + k->off) : (void *)0;
  k->off += bytes;
  return p;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_EP_H_ */
