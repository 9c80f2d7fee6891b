/*
 * hw/efadv_compat.h - the efadv (and verbs completion-counter) declarations that rdma-core >= v59
 * has and Debian 12's rdma-core 44 lacks, written from the documented layouts
 * (reference/efa-queues.md section 3, the efadv and ibv_create_comp_cntr man pages).
 *
 * Everything carries an `_compat` name so this header can sit next to any installed
 * <infiniband/efadv.h> without clashing; the layouts are the newest ones (a superset of every
 * older one, so an `inlen` up to the older size works against an older libefa).  Nothing here is
 * ever linked: the hardware backend resolves the functions with dlsym() into the pointer types
 * declared at the end.  Valid C11 and C++ (the preload shim that supplies efadv_query_qp_wqs and
 * efadv_query_cq for old libefa uses the same declarations).  LP64 only.
 */
#ifndef XPUFAB_HW_EFADV_COMPAT_H_
#define XPUFAB_HW_EFADV_COMPAT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque here; the real definitions come from <infiniband/verbs.h> where needed. */
struct ibv_context;
struct ibv_qp;
struct ibv_cq;
struct ibv_cq_ex;
struct ibv_ah;
struct ibv_qp_init_attr_ex;
struct ibv_cq_init_attr_ex;

/* ---- efadv_query_device (EFA_1.1; inline_buf_size_ex since v63) ---- */

enum {
  EFADV_COMPAT_DEVICE_ATTR_CAPS_RDMA_READ = 1 << 0,              /* v27 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_RNR_RETRY = 1 << 1,              /* v32 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_CQ_WITH_SGID = 1 << 2,           /* v43 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_RDMA_WRITE = 1 << 3,             /* v46 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV = 1 << 4, /* v52 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_CQ_WITH_EXT_MEM_DMABUF = 1 << 5, /* v59 */
  EFADV_COMPAT_DEVICE_ATTR_CAPS_COMP_CNTR = 1 << 6               /* after v63 */
};

struct efadv_compat_device_attr {
  uint64_t comp_mask;
  uint32_t max_sq_wr;
  uint32_t max_rq_wr;
  uint16_t max_sq_sge;
  uint16_t max_rq_sge;
  uint16_t inline_buf_size;
  uint16_t inline_buf_size_ex; /* reserved[2] before v63, reads 0 there */
  uint32_t device_caps;
  uint32_t max_rdma_size;
};

/* ---- efadv_query_ah (EFA_1.1, unchanged since) ---- */

struct efadv_compat_ah_attr {
  uint64_t comp_mask;
  uint16_t ahn;
  uint8_t reserved[6];
};

/* ---- efadv_create_qp_ex (EFA_1.1; flags v52, sl v55, wr_flags v64) ---- */

enum { EFADV_COMPAT_QP_DRIVER_TYPE_SRD = 0 };

enum {
  EFADV_COMPAT_QP_FLAGS_UNSOLICITED_WRITE_RECV = 1 << 0, /* v52 */
  EFADV_COMPAT_QP_FLAGS_INLINE_WRITE = 1 << 1            /* v63 */
};

struct efadv_compat_qp_init_attr {
  uint64_t comp_mask;
  uint32_t driver_qp_type;
  uint16_t flags;
  uint8_t sl;
  uint8_t reserved[1];
  uint64_t wr_flags; /* v64 */
};

/* The inlen that covers everything up to `sl`: equal to the v44 struct size, so libefa 44 accepts
 * it and rejects non-zero flags/sl as "reserved not cleared" (a clean EINVAL). */
#define EFADV_COMPAT_QP_INIT_ATTR_INLEN_SL 16u

/* ---- efadv_create_cq (EFA_1.2; wc flag v52, flags + ext_mem_dmabuf v59) ---- */

enum {
  EFADV_COMPAT_WC_EX_WITH_SGID = 1 << 0,
  EFADV_COMPAT_WC_EX_WITH_IS_UNSOLICITED = 1 << 1 /* v52 */
};

enum { EFADV_COMPAT_CQ_INIT_FLAGS_EXT_MEM_DMABUF = 1 << 0 }; /* v59 */

struct efadv_compat_cq_init_attr {
  uint64_t comp_mask;
  uint64_t wc_flags;
  uint64_t flags;
  struct {
    uint8_t* buffer; /* optional CPU mapping; without it the verbs poll calls must not be used */
    uint64_t length;
    uint64_t offset;
    int32_t fd;
    uint8_t reserved[4];
  } ext_mem_dmabuf;
};

/* The v43..v58 size: {comp_mask, wc_flags}. */
#define EFADV_COMPAT_CQ_INIT_ATTR_INLEN_V43 16u

/* ---- efadv_query_qp_wqs (EFA_1.4, v59; caps after v63) ---- */

enum { EFADV_COMPAT_WQ_CAPS_64_BIT_REQ_ID = 1 << 0 };

struct efadv_compat_wq_attr {
  uint64_t comp_mask;
  uint8_t* buffer;
  uint32_t entry_size;
  uint32_t num_entries;
  uint32_t* doorbell;
  uint32_t max_batch;
  uint16_t caps;
  uint8_t reserved[2];
};

/* libefa requires at least offsetofend(max_batch). */
#define EFADV_COMPAT_WQ_ATTR_MIN_INLEN 36u

/* ---- efadv_query_cq (EFA_1.4, v59; doorbell v60) ---- */

struct efadv_compat_cq_attr {
  uint64_t comp_mask;
  uint8_t* buffer;
  uint32_t entry_size;
  uint32_t num_entries;
  uint32_t* doorbell; /* v60: consumer index / cmd_sn / arm; NULL when the CQ has none */
};

/* ---- completion counters (libibverbs ibv_*_comp_cntr, efadv_create_comp_cntr) ---- */

enum {
  IBV_COMPAT_MEMORY_LOCATION_VA = 0,
  IBV_COMPAT_MEMORY_LOCATION_DMABUF = 1
};

struct ibv_compat_memory_location {
  uint8_t* ptr;
  struct {
    uint64_t offset;
    int32_t fd;
    uint32_t reserved;
  } dmabuf;
  uint8_t type;
  uint8_t reserved[7];
};

struct ibv_compat_comp_cntr_init_attr {
  uint32_t comp_mask;
  uint32_t flags;
  struct ibv_compat_memory_location comp_cntr_ext_mem;
  struct ibv_compat_memory_location err_cntr_ext_mem;
};

struct ibv_compat_comp_cntr {
  struct ibv_context* context;
  uint32_t handle;
  uint64_t* comp_count;
  uint64_t* err_count;
  uint64_t comp_count_max_value;
  uint64_t err_count_max_value;
};

enum {
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_SEND = 1 << 0,
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_RECV = 1 << 1,
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_RDMA_READ = 1 << 2,
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_REMOTE_RDMA_READ = 1 << 3,
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_RDMA_WRITE = 1 << 4,
  IBV_COMPAT_COMP_CNTR_ATTACH_OP_REMOTE_RDMA_WRITE = 1 << 5
};

struct ibv_compat_comp_cntr_attach_attr {
  uint32_t comp_mask;
  uint32_t op_mask;
};

enum {
  EFADV_COMPAT_MEMORY_LOCATION_VA = 0,
  EFADV_COMPAT_MEMORY_LOCATION_DMABUF = 1
};

/* Same layout as ibv_compat_memory_location. */
struct efadv_compat_memory_location {
  uint8_t* ptr;
  struct {
    uint64_t offset;
    int32_t fd;
    uint32_t reserved;
  } dmabuf;
  uint8_t type;
  uint8_t reserved[7];
};

enum {
  EFADV_COMPAT_COMP_CNTR_INIT_WITH_COMP_EXTERNAL_MEM = 1 << 0,
  EFADV_COMPAT_COMP_CNTR_INIT_WITH_ERR_EXTERNAL_MEM = 1 << 1
};

struct efadv_compat_comp_cntr_init_attr {
  uint64_t comp_mask;
  uint32_t flags;
  uint32_t reserved;
  struct efadv_compat_memory_location comp_cntr_ext_mem;
  struct efadv_compat_memory_location err_cntr_ext_mem;
};

/* ---- function pointer types of the newer entry points ---- */

typedef int (*efadv_compat_query_qp_wqs_fn)(struct ibv_qp* qp, struct efadv_compat_wq_attr* sq,
                                            struct efadv_compat_wq_attr* rq, uint32_t inlen);
typedef int (*efadv_compat_query_cq_fn)(struct ibv_cq* cq, struct efadv_compat_cq_attr* attr,
                                        uint32_t inlen);
typedef int (*efadv_compat_query_ah_fn)(struct ibv_ah* ah, struct efadv_compat_ah_attr* attr,
                                        uint32_t inlen);
typedef int (*efadv_compat_query_device_fn)(struct ibv_context* ctx,
                                            struct efadv_compat_device_attr* attr, uint32_t inlen);
typedef struct ibv_qp* (*efadv_compat_create_qp_ex_fn)(struct ibv_context* ctx,
                                                       struct ibv_qp_init_attr_ex* attr_ex,
                                                       struct efadv_compat_qp_init_attr* efa_attr,
                                                       uint32_t inlen);
typedef struct ibv_cq_ex* (*efadv_compat_create_cq_fn)(struct ibv_context* ctx,
                                                       struct ibv_cq_init_attr_ex* attr_ex,
                                                       struct efadv_compat_cq_init_attr* efa_attr,
                                                       uint32_t inlen);
typedef struct ibv_compat_comp_cntr* (*efadv_compat_create_comp_cntr_fn)(
    struct ibv_context* ctx, struct ibv_compat_comp_cntr_init_attr* attr,
    struct efadv_compat_comp_cntr_init_attr* efa_attr, uint32_t inlen);
typedef int (*ibv_compat_destroy_comp_cntr_fn)(struct ibv_compat_comp_cntr* cntr);
typedef int (*ibv_compat_qp_attach_comp_cntr_fn)(struct ibv_qp* qp,
                                                 struct ibv_compat_comp_cntr* cntr,
                                                 struct ibv_compat_comp_cntr_attach_attr* attr);

/* ---- layout checks (LP64) ---- */

#ifdef __cplusplus
#define EFADV_COMPAT_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define EFADV_COMPAT_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

EFADV_COMPAT_ASSERT(sizeof(void*) == 8, "efadv_compat.h assumes LP64");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_device_attr) == 32, "efadv_device_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_device_attr, inline_buf_size_ex) == 22,
                    "inline_buf_size_ex");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_device_attr, device_caps) == 24, "device_caps");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_ah_attr) == 16, "efadv_ah_attr");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_qp_init_attr) == 24, "efadv_qp_init_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_qp_init_attr, flags) == 12, "qp flags");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_qp_init_attr, sl) == 14, "qp sl");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_qp_init_attr, wr_flags) ==
                        EFADV_COMPAT_QP_INIT_ATTR_INLEN_SL,
                    "qp inlen through sl");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_cq_init_attr) == 56, "efadv_cq_init_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_cq_init_attr, flags) ==
                        EFADV_COMPAT_CQ_INIT_ATTR_INLEN_V43,
                    "cq flags");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_cq_init_attr, ext_mem_dmabuf) == 24, "ext mem");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_cq_init_attr, ext_mem_dmabuf.fd) == 48, "ext fd");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_wq_attr) == 40, "efadv_wq_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_wq_attr, max_batch) + 4 ==
                        EFADV_COMPAT_WQ_ATTR_MIN_INLEN,
                    "wq min inlen");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_wq_attr, caps) == 36, "wq caps");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_cq_attr) == 32, "efadv_cq_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_cq_attr, doorbell) == 24, "cq doorbell");
EFADV_COMPAT_ASSERT(sizeof(struct ibv_compat_memory_location) == 32, "ibv_memory_location");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_memory_location) == 32, "efadv_memory_location");
EFADV_COMPAT_ASSERT(sizeof(struct ibv_compat_comp_cntr_init_attr) == 72,
                    "ibv_comp_cntr_init_attr");
EFADV_COMPAT_ASSERT(sizeof(struct ibv_compat_comp_cntr) == 48, "ibv_comp_cntr");
EFADV_COMPAT_ASSERT(sizeof(struct ibv_compat_comp_cntr_attach_attr) == 8,
                    "ibv_comp_cntr_attach_attr");
EFADV_COMPAT_ASSERT(sizeof(struct efadv_compat_comp_cntr_init_attr) == 80,
                    "efadv_comp_cntr_init_attr");
EFADV_COMPAT_ASSERT(offsetof(struct efadv_compat_comp_cntr_init_attr, err_cntr_ext_mem) == 48,
                    "err_cntr_ext_mem");

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_HW_EFADV_COMPAT_H_ */
