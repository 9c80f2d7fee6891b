#include "emu/wqe_decode.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "api/backend/backend.h"

namespace xpufab {
namespace emu {
namespace {

WqeBuffer buffer_of(const efa_io_tx_buf_desc& d) {
  WqeBuffer b;
  b.lkey = efa_io_tx_buf_desc_get_lkey(&d);
  b.lkey_reserved = (d.lkey >> 24) != 0;
  b.addr = efa_io_tx_buf_desc_get_addr(&d);
  b.length = d.length;
  return b;
}

}  // namespace

WqeDecode decode_wqe(const uint8_t* wqe, uint32_t wqe_size, const Profile& profile) {
  WqeDecode out;
  WqeRequest& r = out.req;
  efa_io_tx_meta_desc meta;
  std::memcpy(&meta, wqe, sizeof(meta));
  uint8_t op = efa_io_tx_meta_desc_get_op_type(&meta);
  r.op = op;
  r.cqe_op = op <= EFA_IO_RDMA_WRITE ? op : static_cast<uint8_t>(EFA_IO_SEND);
  r.comp_req = efa_io_tx_meta_desc_get_comp_req(&meta) != 0;
  r.req_id = meta.req_id;
  r.req_id_ex = meta.req_id_ex;
  r.ah = meta.ah;
  // Every exit returns `out` itself, so the result is built in the caller's (no copy).
  // Descriptor framing: meta_desc, first and last set; reserved bits clear.
  if (!efa_io_tx_meta_desc_get_meta_desc(&meta) || !efa_io_tx_meta_desc_get_first(&meta) ||
      !efa_io_tx_meta_desc_get_last(&meta) || efa_io_tx_meta_desc_get_meta_extension(&meta) ||
      (meta.ctrl2 & 0xe2) != 0 || (meta.ctrl3 & 0xfc) != 0) {
    out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR;
    return out;
  }
  const uint32_t caps = profile.device_caps;
  bool has_imm = efa_io_tx_meta_desc_get_has_imm(&meta) != 0;
  bool inl = efa_io_tx_meta_desc_get_inline_msg(&meta) != 0;
  if (op > EFA_IO_RDMA_WRITE || (op == EFA_IO_RDMA_READ && !(caps & backend::kCapRdmaRead)) ||
      (op == EFA_IO_RDMA_WRITE && !(caps & backend::kCapRdmaWrite)) ||
      (op == EFA_IO_RDMA_READ && has_imm) || (op == EFA_IO_RDMA_READ && inl) ||
      (op == EFA_IO_RDMA_WRITE && inl && wqe_size != EFA_IO_TX_WQE_128_SIZE)) {
    out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP;
    return out;
  }
  r.dest_qpn = meta.dest_qp_num;
  r.qkey = meta.qkey;
  r.has_imm = has_imm;
  r.imm = meta.immediate_data;
  r.is_inline = inl;
  const uint32_t inline_max = wqe_size == EFA_IO_TX_WQE_128_SIZE ? EFA_IO_TX_DESC_INLINE_MAX_SIZE_128
                                                                 : EFA_IO_TX_DESC_INLINE_MAX_SIZE;
  const uint8_t* data = wqe + offsetof(efa_io_tx_wqe, data);
  if (op == EFA_IO_SEND) {
    if (inl) {
      if (meta.length > inline_max || meta.length > profile.mtu) {
        out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
        return out;
      }
      r.inline_data = data;
      r.inline_len = meta.length;
      return out;
    }
    if (meta.length > std::min<uint32_t>(profile.max_sq_sge, EFA_IO_TX_DESC_NUM_BUFS)) {
      out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
      return out;
    }
    efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
    std::memcpy(sgl, data, sizeof(sgl));
    r.num_sge = meta.length;
    for (uint32_t i = 0; i < r.num_sge; ++i) r.sge[i] = buffer_of(sgl[i]);
    return out;
  }
  efa_io_remote_mem_addr remote;
  std::memcpy(&remote, data, sizeof(remote));
  r.remote_addr = efa_io_remote_mem_addr_get_addr(&remote);
  r.rkey = remote.rkey;
  r.length = remote.length;
  if (remote.length > profile.max_rdma_size) {
    out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
    return out;
  }
  const uint8_t* local = data + sizeof(efa_io_remote_mem_addr);
  if (inl) {  // inline RDMA write (128-byte WQE only, checked above)
    if (meta.length != remote.length || meta.length > inline_max) {
      out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
      return out;
    }
    r.inline_data = local;
    r.inline_len = meta.length;
    return out;
  }
  if (meta.length != EFA_IO_TX_DESC_NUM_RDMA_BUFS) {
    out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
    return out;
  }
  efa_io_tx_buf_desc lm;
  std::memcpy(&lm, local, sizeof(lm));
  if (lm.length != remote.length) {
    out.status = EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH;
    return out;
  }
  r.local = buffer_of(lm);
  return out;
}

uint32_t wqe_length(const uint8_t* wqe) {
  efa_io_tx_meta_desc meta;
  std::memcpy(&meta, wqe, sizeof(meta));
  const uint8_t* data = wqe + offsetof(efa_io_tx_wqe, data);
  if (efa_io_tx_meta_desc_get_op_type(&meta) == EFA_IO_SEND) {
    if (efa_io_tx_meta_desc_get_inline_msg(&meta)) return meta.length;
    efa_io_tx_buf_desc sgl[EFA_IO_TX_DESC_NUM_BUFS];
    std::memcpy(sgl, data, sizeof(sgl));
    uint32_t total = 0;
    for (uint32_t i = 0; i < std::min<uint32_t>(meta.length, EFA_IO_TX_DESC_NUM_BUFS); ++i) total += sgl[i].length;
    return total;
  }
  efa_io_remote_mem_addr remote;
  std::memcpy(&remote, data, sizeof(remote));
  return remote.length;
}

}  // namespace emu
}  // namespace xpufab
