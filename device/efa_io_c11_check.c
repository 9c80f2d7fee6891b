/*
 * Compiles the format and data-path headers (work requests and completion
 * translation included) as strict C11 (-pedantic-errors) and exports
 * what the C compiler made of them, so a C++ test can compare both layouts.
 */
#include "device/efa_io_c11_check.h"

#include <string.h>

#include "device/efa_completion.h"
#include "device/efa_dp.h"
#include "device/efa_io_layout.h"
#include "device/efa_io_status.h"
#include "device/efa_wr.h"

#define EFA_IO_C11_SIZE_(s) sizeof(struct s),
#define EFA_IO_C11_FIELD_(s, m) offsetof(struct s, m),
const size_t efa_io_c11_layout[] = {EFA_IO_LAYOUT_LIST(EFA_IO_C11_SIZE_, EFA_IO_C11_FIELD_)};
#undef EFA_IO_C11_SIZE_
#undef EFA_IO_C11_FIELD_
const size_t efa_io_c11_layout_len = sizeof(efa_io_c11_layout) / sizeof(efa_io_c11_layout[0]);

void efa_io_c11_build_send_wqe(uint8_t out[EFA_IO_TX_WQE_SIZE]) {
  struct efa_io_tx_wqe wqe;
  memset(&wqe, 0, sizeof(wqe));
  wqe.meta.req_id = 0x1234;
  efa_io_tx_meta_desc_set_op_type(&wqe.meta, EFA_IO_SEND);
  efa_io_tx_meta_desc_set_has_imm(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_meta_desc(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_phase(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_first(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_last(&wqe.meta, 1);
  efa_io_tx_meta_desc_set_comp_req(&wqe.meta, 1);
  wqe.meta.dest_qp_num = 7;
  wqe.meta.length = 1;
  wqe.meta.immediate_data = 0xdeadbeef;
  wqe.meta.ah = 3;
  wqe.meta.qkey = 0x11223344;
  wqe.data.sgl[0].length = 4096;
  efa_io_tx_buf_desc_set_lkey(&wqe.data.sgl[0], 0xabcdef);
  efa_io_tx_buf_desc_set_addr(&wqe.data.sgl[0], 0x0102030405060708ull);
  memcpy(out, &wqe, sizeof(wqe));
}

int efa_io_c11_status_to_fi_errno(uint32_t status) { return efa_io_status_to_fi_errno(status); }
