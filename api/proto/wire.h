/*
 * wire.h - the protocol core's packet header: the first bytes of every SEND
 * one protocol endpoint sends another over SRD. Host and nvcc; valid C11 and
 * C++17. Little-endian like every EFA host.
 *
 * Every packet except CREDIT is numbered per (sender, receiver) pair (`seq`)
 * and handled by the receiver in that order, because SRD delivers out of
 * order and libfabric promises send-after-send order for tagged and untagged
 * messages and atomics (FI_ORDER_SAS, FI_ORDER_RAW, ...). CREDIT packets
 * only return credits, which commute, so they are handled on arrival.
 *
 * `credits` piggy-backs receive credits on any packet (flow control, see
 * proto.h). `src` is the sender's index in the receiver's peer table when the
 * two sides agreed on one (PROTO_ADDR_UNKNOWN otherwise); receivers identify
 * the sender by the CQE's address handle and source QPN, which hardware
 * fills in.
 */
#ifndef XPUFAB_API_PROTO_WIRE_H_
#define XPUFAB_API_PROTO_WIRE_H_

#include <stdint.h>

#include "device/efa_io_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROTO_WIRE_VERSION 1

enum proto_wire_op {
  PROTO_OP_AM = 1,          /* active message: am_id, payload */
  PROTO_OP_EAGER = 2,       /* whole message in this packet: tag, data, payload */
  PROTO_OP_RTS = 3,         /* rendezvous offer: total, sender op, buffer address and key */
  PROTO_OP_CTS = 4,         /* receiver asks the sender to push (no RDMA read): ids, length */
  PROTO_OP_DATA = 5,        /* one pushed segment: receiver op, offset, payload */
  PROTO_OP_FIN = 6,         /* receiver finished reading: sender op */
  PROTO_OP_ATOMIC_REQ = 7,  /* atomic: op, datatype, count, address, key, operands */
  PROTO_OP_ATOMIC_RESP = 8, /* status and fetched values */
  PROTO_OP_CREDIT = 9,      /* credits only; not numbered, needs no credit */
  PROTO_OP_WRITE = 10,      /* one segment of an RMA write: ids, key, offset, address, payload */
  PROTO_OP_READ_REQ = 11,   /* asks for one segment of an RMA read */
  PROTO_OP_RMA_RESP = 12,   /* status of a write, or one read segment */
  PROTO_OP_READ_NOTE = 13,  /* an RDMA read of the target's memory finished (its counter) */
  PROTO_OP_WRITE_NOTE = 14, /* an RDMA write into the target's memory landed: length, data */
};

/* PROTO_OP_EAGER / PROTO_OP_RTS flags. */
#define PROTO_WF_TAGGED (1u << 0)   /* matched against tagged receives, else untagged */
#define PROTO_WF_CQ_DATA (1u << 1)  /* `data` is remote CQ data */
#define PROTO_WF_LAST (1u << 2)     /* WRITE / READ_REQ: the operation's last segment */
#define PROTO_WF_PUSH (1u << 3)     /* RTS: the data cannot be read (several buffers, or unregistered): push it */

#define PROTO_ADDR_UNKNOWN 0xffffu

/*
 * 64 bytes. The meaning of u0..u2 depends on op:
 *   EAGER        u0 = message length
 *   RTS          u0 = message length, u1 = sender op id | rkey << 32, u2 = address
 *   CTS          u0 = sender op id, u1 = receiver op id, u2 = bytes wanted
 *   DATA         u0 = receiver op id, u1 = offset
 *   FIN          u0 = sender op id, u1 = bytes read
 *   ATOMIC_REQ   u0 = requester op id | fi_op << 32 | fi_datatype << 40 | kind << 48,
 *                u1 = count | rkey << 32, u2 = target address
 *   ATOMIC_RESP  u0 = requester op id, u1 = efa_io_comp_status
 *   WRITE        u0 = requester op id | rkey << 32, u1 = offset, u2 = target address,
 *                tag = total length, data = remote CQ data
 *   READ_REQ     u0 = requester op id | rkey << 32, u1 = offset, u2 = target address,
 *                tag = total length, data = bytes wanted
 *   RMA_RESP     u0 = requester op id, u1 = efa_io_comp_status | bytes << 32, u2 = offset
 *   READ_NOTE    u0 = bytes read
 *   WRITE_NOTE   u0 = bytes written, u2 = target address, data = remote CQ data,
 *                flags PROTO_WF_CQ_DATA when there is some
 */
struct proto_hdr {
  uint8_t op;       /* enum proto_wire_op */
  uint8_t version;  /* PROTO_WIRE_VERSION */
  uint16_t am_id;   /* PROTO_OP_AM: handler id */
  uint16_t credits; /* receive credits returned to the receiver of this packet */
  uint16_t src;     /* see above */
  uint32_t seq;     /* per-pair packet number (not for CREDIT) */
  uint32_t len;     /* payload bytes after the header */
  uint32_t flags;   /* PROTO_WF_* */
  uint32_t reserved;
  uint64_t tag;
  uint64_t data;
  uint64_t u0;
  uint64_t u1;
  uint64_t u2;
};

EFA_IO_STATIC_ASSERT(sizeof(struct proto_hdr) == 64, "proto_hdr is 64 bytes");

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_WIRE_H_ */
