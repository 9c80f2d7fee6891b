/*
 * efa_io_defs.h - the EFA work-queue and completion-queue formats.
 *
 * The single definition of the bytes an EFA NIC reads and writes: the TX meta
 * descriptor, TX buffer descriptor, RDMA remote-memory descriptor, the 64-byte
 * and 128-byte TX WQEs, the RX descriptor, the common/TX/RX/extended RX
 * completion descriptors, the CQ doorbell register, op types, queue types and
 * completion status codes. Struct and constant names follow rdma-core's
 * providers/efa/efa_io_defs.h so readers who know it find their way; layouts
 * follow rdma-core HEAD (64-bit request-id words included).
 *
 * Rules for this header: valid C11, C++17 and nvcc; no STL; layout only plus
 * tiny inline accessors. Sub-byte fields are described by a _MASK and a
 * _SHIFT constant each (never C bitfields, whose layout is implementation
 * defined) and read/written through typed get/set functions, e.g.
 *
 *   efa_io_tx_meta_desc_set_phase(&wqe.meta, phase);
 *   uint8_t qt = efa_io_cdesc_common_get_q_type(&cqe->common);
 *
 * A setter truncates its value to the field width and leaves every other bit
 * of the containing word untouched. All multi-byte fields are little-endian
 * (the NIC and every supported host are little-endian).
 */
#ifndef XPUFAB_DEVICE_EFA_IO_DEFS_H_
#define XPUFAB_DEVICE_EFA_IO_DEFS_H_

#include <stddef.h>
#include <stdint.h>

#include "device/xpu_func.h"


#if defined(__cplusplus)
#define EFA_IO_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define EFA_IO_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Constants (reference/efa-queues.md 1.1) ---------------------------- */

#define EFA_IO_TX_DESC_NUM_BUFS 2            /* SGEs in a SEND WQE */
#define EFA_IO_TX_DESC_NUM_RDMA_BUFS 1       /* local SGEs of an RDMA read/write */
#define EFA_IO_TX_DESC_INLINE_MAX_SIZE 32    /* inline bytes in a 64-B WQE */
#define EFA_IO_TX_DESC_INLINE_MAX_SIZE_128 80 /* inline bytes in a 128-B WQE */
#define EFA_IO_TX_DESC_IMM_DATA_SIZE 4
#define EFA_IO_TX_DESC_INLINE_PBL_SIZE 1     /* kernel fast-reg only */

#define EFA_IO_TX_WQE_SIZE 64
#define EFA_IO_TX_WQE_128_SIZE 128
#define EFA_IO_RX_DESC_SIZE 16
#define EFA_IO_CQE_SIZE 32 /* every CQ entry, sizeof(struct efa_io_rx_cdesc_ex) */

/* The RX CQE's ah when the sender has no AH at the receiver. */
#define EFA_IO_AH_UNKNOWN 0xFFFFu

/* ---- Enums (reference 1.2) --------------------------------------------- */

/* Value of efa_io_cdesc_common.flags[2:1]. */
enum efa_io_queue_type {
  EFA_IO_SEND_QUEUE = 1,
  EFA_IO_RECV_QUEUE = 2,
};

/* meta.ctrl1[3:0]; also the CQE op_type (RX: RDMA_WRITE = write with imm). */
enum efa_io_send_op_type {
  EFA_IO_SEND = 0,
  EFA_IO_RDMA_READ = 1,
  EFA_IO_RDMA_WRITE = 2,
};

/* meta.ctrl3[1:0] (rdma-core v64). */
enum efa_io_processing_hint {
  EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE = 1 << 0,
};

/* The CQE status byte. 16 and 17 are unused; any other value is unknown. */
enum efa_io_comp_status {
  EFA_IO_COMP_STATUS_OK = 0,
  EFA_IO_COMP_STATUS_FLUSHED = 1,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR = 2,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP = 3,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH = 4,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY = 5,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH = 6,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS = 7,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT = 8,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN = 9,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR = 10,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH = 11,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS = 12,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE = 13,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER = 14,
  EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE = 15,
  EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH = 18,
};
/* Name of status 3 in rdma-core v44..v51. */
#define EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_OP_TYPE EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP

/* ---- TX descriptors (reference 1.3 - 1.5) -------------------------------- */

/* Bits 16..63 of a 64-bit request id, as three little-endian 16-bit words. */
struct efa_io_req_id_ex {
  uint16_t w[3];
};

/* The first 32 bytes of every TX WQE. */
struct efa_io_tx_meta_desc {
  uint16_t req_id;         /* echoed in the TX CQE */
  uint8_t ctrl1;           /* [3:0] op_type [4] has_imm [5] inline_msg [6] meta_extension [7] meta_desc */
  uint8_t ctrl2;           /* [0] phase [1] MBZ [2] first [3] last [4] comp_req [7:5] MBZ */
  uint16_t dest_qp_num;    /* remote QPN */
  uint16_t length;         /* inline: byte count; else: number of buffer descriptors */
  uint32_t immediate_data; /* host order; sent only with has_imm */
  uint16_t ah;             /* device AH number (efadv ahn) */
  uint8_t ctrl3;           /* [1:0] processing_hints [7:2] MBZ */
  uint8_t reserved;
  uint32_t qkey;           /* remote QKey */
  uint8_t reserved2[6];
  struct efa_io_req_id_ex req_id_ex;
};

/* A local buffer of a SEND or RDMA WQE. */
struct efa_io_tx_buf_desc {
  uint32_t length;
  uint32_t lkey; /* [23:0] lkey [31:24] MBZ */
  uint32_t buf_addr_lo;
  uint32_t buf_addr_hi;
};

/* The remote side of an RDMA read/write. */
struct efa_io_remote_mem_addr {
  uint32_t length; /* total RDMA bytes */
  uint32_t rkey;
  uint32_t buf_addr_lo;
  uint32_t buf_addr_hi;
};

struct efa_io_rdma_req {
  struct efa_io_remote_mem_addr remote_mem;
  struct efa_io_tx_buf_desc local_mem[EFA_IO_TX_DESC_NUM_RDMA_BUFS];
};

/* RDMA request of a 128-B WQE: a local buffer or up to 80 inline bytes (inline write). */
struct efa_io_rdma_req_128 {
  struct efa_io_remote_mem_addr remote_mem;
  union {
    struct efa_io_tx_buf_desc local_mem[EFA_IO_TX_DESC_NUM_RDMA_BUFS];
    uint8_t inline_data[EFA_IO_TX_DESC_INLINE_MAX_SIZE_128];
  };
};

/*
 * 64-byte TX WQE:
 *   0          32                                            64
 *   | meta     | sgl[2] | inline_data[32] | rdma_req          |
 */
struct efa_io_tx_wqe {
  struct efa_io_tx_meta_desc meta;
  union {
    struct efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
    uint8_t inline_data[EFA_IO_TX_DESC_INLINE_MAX_SIZE];
    struct efa_io_rdma_req rdma_req;
  } data;
};

/*
 * 128-byte TX WQE (rdma-core v63):
 *   0          32                                                  128
 *   | meta     | sgl[2] | inline_data[80] | rdma_req_128 (inline @48) |
 */
struct efa_io_tx_wqe_128 {
  struct efa_io_tx_meta_desc meta;
  union {
    struct efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
    uint8_t inline_data[EFA_IO_TX_DESC_INLINE_MAX_SIZE_128];
    struct efa_io_rdma_req_128 rdma_req_128;
  } data;
};

/* ---- RX descriptor (reference 1.6): one per receive SGE, no phase bit ----- */

struct efa_io_rx_desc {
  uint32_t buf_addr_lo;
  uint32_t buf_addr_hi;
  uint16_t req_id;
  uint16_t length;    /* 16 bits: at most 65535 bytes per descriptor */
  uint32_t lkey_ctrl; /* [23:0] lkey [29:24] MBZ [30] first [31] last */
};

/* ---- Completion descriptors (reference 1.7) ----------------------------- */

struct efa_io_cdesc_common {
  uint16_t req_id;
  uint8_t status; /* enum efa_io_comp_status */
  uint8_t flags;  /* [0] phase [2:1] q_type [3] has_imm [6:4] op_type [7] unsolicited */
  uint16_t qp_num; /* local QPN */
};

struct efa_io_tx_cdesc {
  struct efa_io_cdesc_common common;
  struct efa_io_req_id_ex req_id_ex;
  uint8_t reserved[4];
};

struct efa_io_rx_cdesc {
  struct efa_io_cdesc_common common;
  uint16_t length;     /* bytes [15:0] */
  uint16_t ah;         /* remote AH index, EFA_IO_AH_UNKNOWN if none */
  uint16_t src_qp_num;
  uint32_t imm;        /* host order */
};

/* The 32-byte CQ entry. */
struct efa_io_rx_cdesc_ex {
  struct efa_io_rx_cdesc base;
  union {
    struct {
      uint16_t length_hi; /* bytes [31:16], valid when op_type is RDMA_WRITE */
    } rdma_write;
    uint8_t src_addr[16]; /* source GID, valid when ah is unknown and SGID was requested */
  } u;
};

/* ---- Sub-byte fields: one mask and one shift per field ------------------- */

#define EFA_IO_TX_META_DESC_OP_TYPE_MASK 0x0fu
#define EFA_IO_TX_META_DESC_OP_TYPE_SHIFT 0
#define EFA_IO_TX_META_DESC_HAS_IMM_MASK 0x10u
#define EFA_IO_TX_META_DESC_HAS_IMM_SHIFT 4
#define EFA_IO_TX_META_DESC_INLINE_MSG_MASK 0x20u
#define EFA_IO_TX_META_DESC_INLINE_MSG_SHIFT 5
#define EFA_IO_TX_META_DESC_META_EXTENSION_MASK 0x40u
#define EFA_IO_TX_META_DESC_META_EXTENSION_SHIFT 6
#define EFA_IO_TX_META_DESC_META_DESC_MASK 0x80u
#define EFA_IO_TX_META_DESC_META_DESC_SHIFT 7

#define EFA_IO_TX_META_DESC_PHASE_MASK 0x01u
#define EFA_IO_TX_META_DESC_PHASE_SHIFT 0
#define EFA_IO_TX_META_DESC_FIRST_MASK 0x04u
#define EFA_IO_TX_META_DESC_FIRST_SHIFT 2
#define EFA_IO_TX_META_DESC_LAST_MASK 0x08u
#define EFA_IO_TX_META_DESC_LAST_SHIFT 3
#define EFA_IO_TX_META_DESC_COMP_REQ_MASK 0x10u
#define EFA_IO_TX_META_DESC_COMP_REQ_SHIFT 4

#define EFA_IO_TX_META_DESC_PROCESSING_HINTS_MASK 0x03u
#define EFA_IO_TX_META_DESC_PROCESSING_HINTS_SHIFT 0

#define EFA_IO_TX_BUF_DESC_LKEY_MASK 0x00ffffffu
#define EFA_IO_TX_BUF_DESC_LKEY_SHIFT 0

#define EFA_IO_RX_DESC_LKEY_MASK 0x00ffffffu
#define EFA_IO_RX_DESC_LKEY_SHIFT 0
#define EFA_IO_RX_DESC_FIRST_MASK 0x40000000u
#define EFA_IO_RX_DESC_FIRST_SHIFT 30
#define EFA_IO_RX_DESC_LAST_MASK 0x80000000u
#define EFA_IO_RX_DESC_LAST_SHIFT 31

#define EFA_IO_CDESC_COMMON_PHASE_MASK 0x01u
#define EFA_IO_CDESC_COMMON_PHASE_SHIFT 0
#define EFA_IO_CDESC_COMMON_Q_TYPE_MASK 0x06u
#define EFA_IO_CDESC_COMMON_Q_TYPE_SHIFT 1
#define EFA_IO_CDESC_COMMON_HAS_IMM_MASK 0x08u
#define EFA_IO_CDESC_COMMON_HAS_IMM_SHIFT 3
#define EFA_IO_CDESC_COMMON_OP_TYPE_MASK 0x70u
#define EFA_IO_CDESC_COMMON_OP_TYPE_SHIFT 4
#define EFA_IO_CDESC_COMMON_UNSOLICITED_MASK 0x80u
#define EFA_IO_CDESC_COMMON_UNSOLICITED_SHIFT 7

/* CQ doorbell register (efa_io_regs_defs.h): one 32-bit write. */
#define EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK 0x0000ffffu
#define EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_SHIFT 0
#define EFA_IO_REGS_CQ_DB_CMD_SN_MASK 0x60000000u
#define EFA_IO_REGS_CQ_DB_CMD_SN_SHIFT 29
#define EFA_IO_REGS_CQ_DB_ARM_MASK 0x80000000u
#define EFA_IO_REGS_CQ_DB_ARM_SHIFT 31

/*
 * EFA_IO_DEFINE_FIELD(stype, field, member, mtype, vtype, FIELD) defines
 *   vtype stype##_get_##field(const struct stype *p);
 *   void  stype##_set_##field(struct stype *p, vtype v);
 * for the bits FIELD##_MASK of p->member (of type mtype).
 */
#define EFA_IO_DEFINE_FIELD(stype, field, member, mtype, vtype, FIELD)                   \
  XPU_FUNC vtype stype##_get_##field(const struct stype *p) {                        \
    return (vtype)(((uint32_t)p->member & (FIELD##_MASK)) >> (FIELD##_SHIFT));           \
  }                                                                                      \
  XPU_FUNC void stype##_set_##field(struct stype *p, vtype v) {                      \
    p->member = (mtype)(((uint32_t)p->member & ~(uint32_t)(FIELD##_MASK)) |              \
                        (((uint32_t)v << (FIELD##_SHIFT)) & (FIELD##_MASK)));            \
  }

EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, op_type, ctrl1, uint8_t, uint8_t, EFA_IO_TX_META_DESC_OP_TYPE)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, has_imm, ctrl1, uint8_t, uint8_t, EFA_IO_TX_META_DESC_HAS_IMM)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, inline_msg, ctrl1, uint8_t, uint8_t, EFA_IO_TX_META_DESC_INLINE_MSG)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, meta_extension, ctrl1, uint8_t, uint8_t,
                    EFA_IO_TX_META_DESC_META_EXTENSION)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, meta_desc, ctrl1, uint8_t, uint8_t, EFA_IO_TX_META_DESC_META_DESC)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, phase, ctrl2, uint8_t, uint8_t, EFA_IO_TX_META_DESC_PHASE)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, first, ctrl2, uint8_t, uint8_t, EFA_IO_TX_META_DESC_FIRST)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, last, ctrl2, uint8_t, uint8_t, EFA_IO_TX_META_DESC_LAST)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, comp_req, ctrl2, uint8_t, uint8_t, EFA_IO_TX_META_DESC_COMP_REQ)
EFA_IO_DEFINE_FIELD(efa_io_tx_meta_desc, processing_hints, ctrl3, uint8_t, uint8_t,
                    EFA_IO_TX_META_DESC_PROCESSING_HINTS)
EFA_IO_DEFINE_FIELD(efa_io_tx_buf_desc, lkey, lkey, uint32_t, uint32_t, EFA_IO_TX_BUF_DESC_LKEY)
EFA_IO_DEFINE_FIELD(efa_io_rx_desc, lkey, lkey_ctrl, uint32_t, uint32_t, EFA_IO_RX_DESC_LKEY)
EFA_IO_DEFINE_FIELD(efa_io_rx_desc, first, lkey_ctrl, uint32_t, uint8_t, EFA_IO_RX_DESC_FIRST)
EFA_IO_DEFINE_FIELD(efa_io_rx_desc, last, lkey_ctrl, uint32_t, uint8_t, EFA_IO_RX_DESC_LAST)
EFA_IO_DEFINE_FIELD(efa_io_cdesc_common, phase, flags, uint8_t, uint8_t, EFA_IO_CDESC_COMMON_PHASE)
EFA_IO_DEFINE_FIELD(efa_io_cdesc_common, q_type, flags, uint8_t, uint8_t, EFA_IO_CDESC_COMMON_Q_TYPE)
EFA_IO_DEFINE_FIELD(efa_io_cdesc_common, has_imm, flags, uint8_t, uint8_t, EFA_IO_CDESC_COMMON_HAS_IMM)
EFA_IO_DEFINE_FIELD(efa_io_cdesc_common, op_type, flags, uint8_t, uint8_t, EFA_IO_CDESC_COMMON_OP_TYPE)
EFA_IO_DEFINE_FIELD(efa_io_cdesc_common, unsolicited, flags, uint8_t, uint8_t,
                    EFA_IO_CDESC_COMMON_UNSOLICITED)

/* ---- Whole-value helpers ------------------------------------------------- */

/* The CQ doorbell value: consumer index [15:0], cmd_sn [30:29], arm [31]. */
XPU_FUNC uint32_t efa_io_cq_db_make(uint16_t consumer_index, uint32_t cmd_sn, uint32_t arm) {
  return (((uint32_t)consumer_index << EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_SHIFT) &
          EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK) |
         ((cmd_sn << EFA_IO_REGS_CQ_DB_CMD_SN_SHIFT) & EFA_IO_REGS_CQ_DB_CMD_SN_MASK) |
         ((arm << EFA_IO_REGS_CQ_DB_ARM_SHIFT) & EFA_IO_REGS_CQ_DB_ARM_MASK);
}
XPU_FUNC uint16_t efa_io_cq_db_get_consumer_index(uint32_t db) {
  return (uint16_t)((db & EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK) >> EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_SHIFT);
}
XPU_FUNC uint32_t efa_io_cq_db_get_cmd_sn(uint32_t db) {
  return (db & EFA_IO_REGS_CQ_DB_CMD_SN_MASK) >> EFA_IO_REGS_CQ_DB_CMD_SN_SHIFT;
}
XPU_FUNC uint32_t efa_io_cq_db_get_arm(uint32_t db) {
  return (db & EFA_IO_REGS_CQ_DB_ARM_MASK) >> EFA_IO_REGS_CQ_DB_ARM_SHIFT;
}

/* 64-bit addresses are split into lo/hi words. */
XPU_FUNC void efa_io_tx_buf_desc_set_addr(struct efa_io_tx_buf_desc *p, uint64_t addr) {
  p->buf_addr_lo = (uint32_t)addr;
  p->buf_addr_hi = (uint32_t)(addr >> 32);
}
XPU_FUNC uint64_t efa_io_tx_buf_desc_get_addr(const struct efa_io_tx_buf_desc *p) {
  return ((uint64_t)p->buf_addr_hi << 32) | p->buf_addr_lo;
}
XPU_FUNC void efa_io_remote_mem_addr_set_addr(struct efa_io_remote_mem_addr *p, uint64_t addr) {
  p->buf_addr_lo = (uint32_t)addr;
  p->buf_addr_hi = (uint32_t)(addr >> 32);
}
XPU_FUNC uint64_t efa_io_remote_mem_addr_get_addr(const struct efa_io_remote_mem_addr *p) {
  return ((uint64_t)p->buf_addr_hi << 32) | p->buf_addr_lo;
}
XPU_FUNC void efa_io_rx_desc_set_addr(struct efa_io_rx_desc *p, uint64_t addr) {
  p->buf_addr_lo = (uint32_t)addr;
  p->buf_addr_hi = (uint32_t)(addr >> 32);
}
XPU_FUNC uint64_t efa_io_rx_desc_get_addr(const struct efa_io_rx_desc *p) {
  return ((uint64_t)p->buf_addr_hi << 32) | p->buf_addr_lo;
}

/* The 48 high bits of a 64-bit request id (req_id_ex words w[0..2] = bits 16..63). */
XPU_FUNC void efa_io_req_id_ex_set(struct efa_io_req_id_ex *p, uint64_t id) {
  p->w[0] = (uint16_t)(id >> 16);
  p->w[1] = (uint16_t)(id >> 32);
  p->w[2] = (uint16_t)(id >> 48);
}
XPU_FUNC uint64_t efa_io_req_id_ex_get(const struct efa_io_req_id_ex *p, uint16_t req_id) {
  return (uint64_t)req_id | ((uint64_t)p->w[0] << 16) | ((uint64_t)p->w[1] << 32) |
         ((uint64_t)p->w[2] << 48);
}

/* Received byte count of an RX CQE: length | length_hi << 16 for RDMA write with imm. */
XPU_FUNC uint32_t efa_io_rx_cdesc_ex_byte_len(const struct efa_io_rx_cdesc_ex *p) {
  uint32_t len = p->base.length;
  if (efa_io_cdesc_common_get_op_type(&p->base.common) == EFA_IO_RDMA_WRITE)
    len |= (uint32_t)p->u.rdma_write.length_hi << 16;
  return len;
}

/* ---- Layout checks (reference 1.3 - 1.8) --------------------------------- */

#define EFA_IO_CHECK_SIZE(type, size) \
  EFA_IO_STATIC_ASSERT(sizeof(struct type) == (size), "sizeof(" #type ") != " #size)
#define EFA_IO_CHECK_OFF(type, member, off) \
  EFA_IO_STATIC_ASSERT(offsetof(struct type, member) == (off), "offsetof(" #type ", " #member ") != " #off)

EFA_IO_CHECK_SIZE(efa_io_tx_meta_desc, 32);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, req_id, 0);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, ctrl1, 2);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, ctrl2, 3);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, dest_qp_num, 4);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, length, 6);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, immediate_data, 8);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, ah, 12);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, ctrl3, 14);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, reserved, 15);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, qkey, 16);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, reserved2, 20);
EFA_IO_CHECK_OFF(efa_io_tx_meta_desc, req_id_ex, 26);
EFA_IO_CHECK_SIZE(efa_io_req_id_ex, 6);

EFA_IO_CHECK_SIZE(efa_io_tx_buf_desc, 16);
EFA_IO_CHECK_OFF(efa_io_tx_buf_desc, length, 0);
EFA_IO_CHECK_OFF(efa_io_tx_buf_desc, lkey, 4);
EFA_IO_CHECK_OFF(efa_io_tx_buf_desc, buf_addr_lo, 8);
EFA_IO_CHECK_OFF(efa_io_tx_buf_desc, buf_addr_hi, 12);

EFA_IO_CHECK_SIZE(efa_io_remote_mem_addr, 16);
EFA_IO_CHECK_OFF(efa_io_remote_mem_addr, length, 0);
EFA_IO_CHECK_OFF(efa_io_remote_mem_addr, rkey, 4);
EFA_IO_CHECK_OFF(efa_io_remote_mem_addr, buf_addr_lo, 8);
EFA_IO_CHECK_OFF(efa_io_remote_mem_addr, buf_addr_hi, 12);

EFA_IO_CHECK_SIZE(efa_io_rdma_req, 32);
EFA_IO_CHECK_OFF(efa_io_rdma_req, remote_mem, 0);
EFA_IO_CHECK_OFF(efa_io_rdma_req, local_mem, 16);

EFA_IO_CHECK_SIZE(efa_io_rdma_req_128, 96);
EFA_IO_CHECK_OFF(efa_io_rdma_req_128, remote_mem, 0);
EFA_IO_CHECK_OFF(efa_io_rdma_req_128, local_mem, 16);
EFA_IO_CHECK_OFF(efa_io_rdma_req_128, inline_data, 16);

EFA_IO_CHECK_SIZE(efa_io_tx_wqe, EFA_IO_TX_WQE_SIZE);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, meta, 0);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, data, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, data.sgl, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, data.inline_data, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, data.rdma_req, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe, data.rdma_req.local_mem, 48);

EFA_IO_CHECK_SIZE(efa_io_tx_wqe_128, EFA_IO_TX_WQE_128_SIZE);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, meta, 0);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, data, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, data.sgl, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, data.inline_data, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, data.rdma_req_128, 32);
EFA_IO_CHECK_OFF(efa_io_tx_wqe_128, data.rdma_req_128.inline_data, 48);

EFA_IO_CHECK_SIZE(efa_io_rx_desc, EFA_IO_RX_DESC_SIZE);
EFA_IO_CHECK_OFF(efa_io_rx_desc, buf_addr_lo, 0);
EFA_IO_CHECK_OFF(efa_io_rx_desc, buf_addr_hi, 4);
EFA_IO_CHECK_OFF(efa_io_rx_desc, req_id, 8);
EFA_IO_CHECK_OFF(efa_io_rx_desc, length, 10);
EFA_IO_CHECK_OFF(efa_io_rx_desc, lkey_ctrl, 12);

EFA_IO_CHECK_SIZE(efa_io_cdesc_common, 6);
EFA_IO_CHECK_OFF(efa_io_cdesc_common, req_id, 0);
EFA_IO_CHECK_OFF(efa_io_cdesc_common, status, 2);
EFA_IO_CHECK_OFF(efa_io_cdesc_common, flags, 3);
EFA_IO_CHECK_OFF(efa_io_cdesc_common, qp_num, 4);

EFA_IO_CHECK_SIZE(efa_io_tx_cdesc, 16);
EFA_IO_CHECK_OFF(efa_io_tx_cdesc, common, 0);
EFA_IO_CHECK_OFF(efa_io_tx_cdesc, req_id_ex, 6);
EFA_IO_CHECK_OFF(efa_io_tx_cdesc, reserved, 12);

EFA_IO_CHECK_SIZE(efa_io_rx_cdesc, 16);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc, common, 0);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc, length, 6);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc, ah, 8);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc, src_qp_num, 10);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc, imm, 12);

EFA_IO_CHECK_SIZE(efa_io_rx_cdesc_ex, EFA_IO_CQE_SIZE);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc_ex, base, 0);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc_ex, u, 16);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc_ex, u.rdma_write.length_hi, 16);
EFA_IO_CHECK_OFF(efa_io_rx_cdesc_ex, u.src_addr, 16);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_IO_DEFS_H_ */
