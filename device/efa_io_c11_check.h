/* What the C11 compilation of the format headers produced (efa_io_c11_check.c). */
#ifndef XPUFAB_DEVICE_EFA_IO_C11_CHECK_H_
#define XPUFAB_DEVICE_EFA_IO_C11_CHECK_H_

#include <stddef.h>
#include <stdint.h>

#include "device/efa_io_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sizeof/offsetof values in EFA_IO_LAYOUT_LIST order, as the C compiler computed them. */
extern const size_t efa_io_c11_layout[];
extern const size_t efa_io_c11_layout_len;

/* A fixed SEND WQE built with the accessors, compiled as C. */
void efa_io_c11_build_send_wqe(uint8_t out[EFA_IO_TX_WQE_SIZE]);

/* efa_io_status_to_fi_errno compiled as C. */
int efa_io_c11_status_to_fi_errno(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_IO_C11_CHECK_H_ */
