// The frames of the connection manager's TCP connection (cm.cc): a 32-byte header, then len
// bytes of private data. Little-endian, packed. dev is the sender's srd device address (its
// GID), which the receiver reports as the remote device address: UCP connects every lane of
// the peer's packed address with that device address.
#ifndef XPUFAB_API_UCT_CM_WIRE_H_
#define XPUFAB_API_UCT_CM_WIRE_H_

#include <stdint.h>

namespace xpufab {
namespace uct {

inline constexpr uint32_t kCmMagic = 0x4d434453u;  // "SDCM"

enum : uint8_t {
  kCmRequest = 1,     // client: its private data
  kCmReply = 2,       // server: status (UCS_OK or UCS_ERR_REJECTED) and its private data
  kCmNotify = 3,      // client: it is connected (uct_cm_client_ep_conn_notify)
  kCmDisconnect = 4,  // either: uct_ep_disconnect
};

struct __attribute__((packed)) CmHdr {
  uint32_t magic;
  uint8_t type;
  uint8_t pad[3];
  int32_t status;
  uint32_t len;
  uint8_t dev[16];
};
static_assert(sizeof(CmHdr) == 32, "CmHdr is 32 bytes on the wire");

}  // namespace uct
}  // namespace xpufab

#endif  // XPUFAB_API_UCT_CM_WIRE_H_
