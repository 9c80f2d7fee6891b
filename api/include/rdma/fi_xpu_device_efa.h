/*
 * rdma/fi_xpu_device_efa.h - the efa provider's device-side calls
 * (prov_id FI_XPU_PROV_EFA): efa_xpu_<op>() for every fi_xpu_<op>() of
 * rdma/fi_xpu_device.h, which includes this header when FI_XPU_HAVE_EFA is
 * nonzero. The implementation is xpufab's (installed under
 * include/xpufab/efa_xpu/, which pkg-config's Cflags put on the include path
 * together with the data-path headers it builds on); its header comment
 * describes scopes, return values and flags.
 */
#ifndef FI_XPU_DEVICE_EFA_H
#define FI_XPU_DEVICE_EFA_H

#include <xpufab/efa_xpu/efa_xpu.h>

#endif /* FI_XPU_DEVICE_EFA_H */
