// Decoding one TX WQE: its bytes and the facts of its queue and device generation in, a request
// or a completion status out. A pure function: no device state, no side effects, so it can be
// tested and fuzzed on its own; the device (requester.cc) resolves what needs its tables (the
// AH, memory keys) and executes the request.
//
// Statuses (reference/efa-queues.md 1.2), in the order they are checked:
//  1. LOCAL_ERROR_QP_INTERNAL_ERROR  framing: meta_desc/first/last clear, a meta extension, or
//                                    reserved bits of ctrl2/ctrl3 set
//  2. LOCAL_ERROR_UNSUPPORTED_OP     an op above RDMA_WRITE, RDMA read/write the generation
//                                    lacks, RDMA read with immediate or inline data, inline RDMA
//                                    write in a 64-byte WQE
//  3. LOCAL_ERROR_BAD_LENGTH         inline data over the WQE's room or the MTU; more SGEs than
//                                    the generation allows; RDMA length over max_rdma_size, local
//                                    buffer count other than one, local length or inline length
//                                    other than the remote length
// The device checks the AH between 2 and 3 (an invalid AH outranks a bad length), then the
// memory keys, then a SEND's gathered total against the MTU (an invalid key outranks it).
#ifndef XPUFAB_EMU_WQE_DECODE_H_
#define XPUFAB_EMU_WQE_DECODE_H_

#include <cstdint>

#include "device/efa_io_defs.h"
#include "emu/profile.h"

namespace xpufab {
namespace emu {

// One local buffer named by a WQE.
struct WqeBuffer {
  uint32_t lkey = 0;           // the 24-bit key field
  bool lkey_reserved = false;  // bits above the key are set: no MR has such a key
  uint64_t addr = 0;
  uint32_t length = 0;
};

struct WqeRequest {
  // Header fields, filled whatever the status.
  uint8_t op = 0;      // the op field as written
  uint8_t cqe_op = 0;  // op type of its completion (SEND for ops above RDMA_WRITE)
  bool comp_req = false;
  uint16_t req_id = 0;
  efa_io_req_id_ex req_id_ex{};
  uint16_t ah = 0;
  // Filled when the status is OK.
  uint16_t dest_qpn = 0;
  uint32_t qkey = 0;
  bool has_imm = false;
  uint32_t imm = 0;
  // Inline data (SEND, or RDMA write in a 128-byte WQE): a span of the WQE's own bytes.
  bool is_inline = false;
  const uint8_t* inline_data = nullptr;
  uint32_t inline_len = 0;
  // SEND from memory: the gather list.
  uint32_t num_sge = 0;
  WqeBuffer sge[EFA_IO_TX_DESC_NUM_BUFS];
  // RDMA read/write: the remote buffer, and the local one unless the data is inline.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  WqeBuffer local;
};

struct WqeDecode {
  uint8_t status = EFA_IO_COMP_STATUS_OK;  // one of the statuses above, or OK
  WqeRequest req;
};

// `wqe` holds wqe_size bytes (EFA_IO_TX_WQE_SIZE or EFA_IO_TX_WQE_128_SIZE); nothing past them
// is read. `profile` gives the generation's caps and limits.
WqeDecode decode_wqe(const uint8_t* wqe, uint32_t wqe_size, const Profile& profile);

// Bytes a WQE moves, for fault rules and the trace; computed before any validation, so it
// tolerates malformed lengths (a SEND counts at most EFA_IO_TX_DESC_NUM_BUFS SGEs).
uint32_t wqe_length(const uint8_t* wqe);

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_WQE_DECODE_H_
