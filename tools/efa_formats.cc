// Prints the EFA queue formats as the headers define them: struct sizes, field
// offsets, and the completion status table. Every number comes from sizeof,
// offsetof or the status table itself.
#include <cstddef>
#include <cstdio>

#include "device/efa_io_defs.h"
#include "device/efa_io_layout.h"
#include "device/efa_io_status.h"

namespace {

#define XPUFAB_STR_(x) #x
#define XPUFAB_STR(x) XPUFAB_STR_(x)

void PrintLayout() {
  std::printf("# EFA queue formats: struct size, then field offset\n");
#define SIZE_(s) std::printf("%s %zu\n", #s, sizeof(s));
#define FIELD_(s, m) std::printf("  %s.%s @%zu\n", #s, #m, offsetof(s, m));
  EFA_IO_LAYOUT_LIST(SIZE_, FIELD_)
#undef SIZE_
#undef FIELD_
  std::printf("# constants\n");
  std::printf("EFA_IO_TX_DESC_NUM_BUFS %d\n", EFA_IO_TX_DESC_NUM_BUFS);
  std::printf("EFA_IO_TX_DESC_NUM_RDMA_BUFS %d\n", EFA_IO_TX_DESC_NUM_RDMA_BUFS);
  std::printf("EFA_IO_TX_DESC_INLINE_MAX_SIZE %d\n", EFA_IO_TX_DESC_INLINE_MAX_SIZE);
  std::printf("EFA_IO_TX_DESC_INLINE_MAX_SIZE_128 %d\n", EFA_IO_TX_DESC_INLINE_MAX_SIZE_128);
  std::printf("EFA_IO_CQE_SIZE %d\n", EFA_IO_CQE_SIZE);
  std::printf("EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK 0x%08x\n", EFA_IO_REGS_CQ_DB_CONSUMER_INDEX_MASK);
  std::printf("EFA_IO_REGS_CQ_DB_CMD_SN_MASK 0x%08x\n", EFA_IO_REGS_CQ_DB_CMD_SN_MASK);
  std::printf("EFA_IO_REGS_CQ_DB_ARM_MASK 0x%08x\n", EFA_IO_REGS_CQ_DB_ARM_MASK);
}

void PrintStatuses() {
  std::printf("# completion status: value name fi_errno(value) ibv_wc_status(value) description\n");
  for (size_t i = 0; i < efa_io_status_table_len; ++i) {
    const efa_io_status_entry& e = efa_io_status_table[i];
    std::printf("status %2u %-48s %s(%d) %s(%d) \"%s\"\n", e.status, e.name, e.fi_errno_name, e.fi_errno,
                e.ibv_wc_name, e.ibv_wc_status, e.description);
  }
  // Names of the fallbacks, spelled by the header's own macros ("EFA_IO_" dropped).
  const char* fi_name = XPUFAB_STR(EFA_IO_STATUS_UNKNOWN_FI_ERRNO);
  const char* wc_name = XPUFAB_STR(EFA_IO_STATUS_UNKNOWN_IBV_WC) + 7;
  std::printf("status other %-47s %s(%d) %s(%d) \"%s\"\n", efa_io_status_name(0xff), fi_name,
              efa_io_status_to_fi_errno(0xff), wc_name, efa_io_status_to_ibv_wc_status(0xff),
              efa_io_status_str(0xff));
}

}  // namespace

int main() {
  PrintLayout();
  PrintStatuses();
  return 0;
}
