/*
 * efa_dp.h - the EFA data path in one include: SQ posting (efa_sq.h), RQ
 * posting (efa_rq.h), CQ polling (efa_cq.h), over the queue formats
 * (efa_io_defs.h) and the xpu primitives (xpu_prims.h). Host and nvcc.
 */
#ifndef XPUFAB_DEVICE_EFA_DP_H_
#define XPUFAB_DEVICE_EFA_DP_H_

#include "device/efa_cq.h"
#include "device/efa_io_defs.h"
#include "device/efa_io_status.h"
#include "device/efa_rq.h"
#include "device/efa_sq.h"

#endif /* XPUFAB_DEVICE_EFA_DP_H_ */
