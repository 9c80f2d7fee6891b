/*
 * efa_io_layout.h - the list of EFA format structs and fields, for code that
 * enumerates the layout (the format tool, the C11/C++ layout comparison).
 *
 * EFA_IO_LAYOUT_LIST(SIZE, FIELD) calls SIZE(struct_name) once per struct and
 * FIELD(struct_name, member) once per field the reference gives an offset for;
 * values come from sizeof/offsetof at the point of use, never from this list.
 */
#ifndef XPUFAB_DEVICE_EFA_IO_LAYOUT_H_
#define XPUFAB_DEVICE_EFA_IO_LAYOUT_H_

#include "device/efa_io_defs.h"

#define EFA_IO_LAYOUT_LIST(SIZE, FIELD)          \
  SIZE(efa_io_tx_meta_desc)                     \
  FIELD(efa_io_tx_meta_desc, req_id)            \
  FIELD(efa_io_tx_meta_desc, ctrl1)             \
  FIELD(efa_io_tx_meta_desc, ctrl2)             \
  FIELD(efa_io_tx_meta_desc, dest_qp_num)       \
  FIELD(efa_io_tx_meta_desc, length)            \
  FIELD(efa_io_tx_meta_desc, immediate_data)    \
  FIELD(efa_io_tx_meta_desc, ah)                \
  FIELD(efa_io_tx_meta_desc, ctrl3)             \
  FIELD(efa_io_tx_meta_desc, qkey)              \
  FIELD(efa_io_tx_meta_desc, req_id_ex)         \
  SIZE(efa_io_tx_buf_desc)                      \
  FIELD(efa_io_tx_buf_desc, length)             \
  FIELD(efa_io_tx_buf_desc, lkey)               \
  FIELD(efa_io_tx_buf_desc, buf_addr_lo)        \
  FIELD(efa_io_tx_buf_desc, buf_addr_hi)        \
  SIZE(efa_io_remote_mem_addr)                  \
  FIELD(efa_io_remote_mem_addr, length)         \
  FIELD(efa_io_remote_mem_addr, rkey)           \
  FIELD(efa_io_remote_mem_addr, buf_addr_lo)    \
  FIELD(efa_io_remote_mem_addr, buf_addr_hi)    \
  SIZE(efa_io_rdma_req)                         \
  FIELD(efa_io_rdma_req, remote_mem)            \
  FIELD(efa_io_rdma_req, local_mem)             \
  SIZE(efa_io_rdma_req_128)                     \
  FIELD(efa_io_rdma_req_128, remote_mem)        \
  FIELD(efa_io_rdma_req_128, local_mem)         \
  FIELD(efa_io_rdma_req_128, inline_data)       \
  SIZE(efa_io_tx_wqe)                           \
  FIELD(efa_io_tx_wqe, meta)                    \
  FIELD(efa_io_tx_wqe, data.sgl)                \
  FIELD(efa_io_tx_wqe, data.inline_data)        \
  FIELD(efa_io_tx_wqe, data.rdma_req)           \
  SIZE(efa_io_tx_wqe_128)                       \
  FIELD(efa_io_tx_wqe_128, meta)                \
  FIELD(efa_io_tx_wqe_128, data.sgl)            \
  FIELD(efa_io_tx_wqe_128, data.inline_data)    \
  FIELD(efa_io_tx_wqe_128, data.rdma_req_128)   \
  FIELD(efa_io_tx_wqe_128, data.rdma_req_128.inline_data) \
  SIZE(efa_io_rx_desc)                          \
  FIELD(efa_io_rx_desc, buf_addr_lo)            \
  FIELD(efa_io_rx_desc, buf_addr_hi)            \
  FIELD(efa_io_rx_desc, req_id)                 \
  FIELD(efa_io_rx_desc, length)                 \
  FIELD(efa_io_rx_desc, lkey_ctrl)              \
  SIZE(efa_io_cdesc_common)                     \
  FIELD(efa_io_cdesc_common, req_id)            \
  FIELD(efa_io_cdesc_common, status)            \
  FIELD(efa_io_cdesc_common, flags)             \
  FIELD(efa_io_cdesc_common, qp_num)            \
  SIZE(efa_io_tx_cdesc)                         \
  FIELD(efa_io_tx_cdesc, common)                \
  FIELD(efa_io_tx_cdesc, req_id_ex)             \
  SIZE(efa_io_rx_cdesc)                         \
  FIELD(efa_io_rx_cdesc, common)                \
  FIELD(efa_io_rx_cdesc, length)                \
  FIELD(efa_io_rx_cdesc, ah)                    \
  FIELD(efa_io_rx_cdesc, src_qp_num)            \
  FIELD(efa_io_rx_cdesc, imm)                   \
  SIZE(efa_io_rx_cdesc_ex)                      \
  FIELD(efa_io_rx_cdesc_ex, base)               \
  FIELD(efa_io_rx_cdesc_ex, u.rdma_write.length_hi) \
  FIELD(efa_io_rx_cdesc_ex, u.src_addr)

#endif /* XPUFAB_DEVICE_EFA_IO_LAYOUT_H_ */
