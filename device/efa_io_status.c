/* The status table as data, generated from EFA_IO_COMP_STATUS_TABLE. */
#include "device/efa_io_status.h"

#define EFA_IO_ROW_(name, fi, wc, desc)                                                      \
  {EFA_IO_COMP_STATUS_##name, "EFA_IO_COMP_STATUS_" #name, desc, (fi), #fi, EFA_IO_IBV_WC_##wc, \
   "IBV_WC_" #wc},

const struct efa_io_status_entry efa_io_status_table[] = {EFA_IO_COMP_STATUS_TABLE(EFA_IO_ROW_)};

#undef EFA_IO_ROW_

const size_t efa_io_status_table_len = sizeof(efa_io_status_table) / sizeof(efa_io_status_table[0]);
