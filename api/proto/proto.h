/*
 * proto.h - the protocol core over SRD (DESIGN §9): active messages with
 * credit flow control, tagged and untagged messages of any length (eager and
 * rendezvous), and atomics executed at the target, on one SRD QP whose rings
 * the consumer took from the backend (query_qp_wqs / query_cq). Written once
 * in the C subset device/ uses, so the host provider, device kernels and the
 * UCT transport run the same code. Nothing here allocates or knows the
 * backend.
 *
 * Set-up (see testing/proto/harness.cc for a complete one):
 *   struct proto_config cfg; proto_config_default(&cfg);
 *   struct proto_dev dev = {sq, rq, cq, max_sq_sge, max_rq_sge, mtu, max_rdma_size,
 *                           PROTO_DEV_RDMA_READ / PROTO_DEV_RDMA_WRITE as the device has them};
 *   the QP's receive queue needs proto_rx_buffers(&cfg) entries;
 *   mem = proto_ep_mem_size(&cfg, &dev) bytes, bounce = proto_bounce_size(&cfg, &dev)
 *   bytes registered for local write, lkey;
 *   proto_ep_init(&ep, &cfg, &dev, mem, len, bounce, lkey);
 *   proto_peer_add(&ep, ahn, qpn, qkey, &peer);   per peer
 *
 * Data path (all return 0 or a negative FI_E*; -FI_EAGAIN means progress and retry):
 *   proto_am_set_handler / proto_am_send         active messages (core.h)
 *   proto_send / proto_recv / proto_cancel        messages, tagged or not (msg.h)
 *   proto_sendv / proto_recvv                     the same over up to PROTO_IOV_MAX buffers
 *   proto_atomic                                  atomics (amo.h)
 *   proto_rma                                     fi_read / fi_write (rma.h): RDMA read and
 *                                                 write where the device has them
 *   proto_peer_ops_out                            what FI_FENCE waits for (core.h)
 *   proto_progress(&ep, comps, n)                 completions (struct proto_comp)
 * The consumer drives its device as it does for any QP (an emulated device's
 * progress(), nothing on hardware) and calls proto_progress.
 */
#ifndef XPUFAB_API_PROTO_PROTO_H_
#define XPUFAB_API_PROTO_PROTO_H_

#include "api/proto/amo.h"
#include "api/proto/core.h"
#include "api/proto/ep.h"
#include "api/proto/msg.h"
#include "api/proto/rma.h"
#include "api/proto/wire.h"

#endif /* XPUFAB_API_PROTO_PROTO_H_ */
