// The TCP side channel of a connection by socket address (sockaddr.cc): the client sends one
// request, the server answers with one reply, then the connection closes and everything moves
// over SRD. Little-endian, packed. A server is any process that listens and speaks this: it
// accepts by answering status UCS_OK with its srd interface's device and interface addresses
// (uct_iface_get_device_address / uct_iface_get_address), and rejects with UCS_ERR_REJECTED,
// which the client's error handler then sees.
#ifndef XPUFAB_API_UCT_SOCKADDR_WIRE_H_
#define XPUFAB_API_UCT_SOCKADDR_WIRE_H_

#include <stddef.h>
#include <stdint.h>

namespace xpufab {
namespace uct {

inline constexpr uint32_t kSaMagic = 0x53524453u;  // "SRDS"
inline constexpr size_t kSaMaxPriv = 1024;          // iface attr max_conn_priv
inline constexpr size_t kSaDevAddrLen = 16;
inline constexpr size_t kSaIfaceAddrLen = 25;       // sizeof(IfaceAddr)

struct __attribute__((packed)) SaRequest {
  uint32_t magic;
  uint32_t priv_len;  // bytes of private data (sockaddr_pack_cb) after the request
  uint8_t dev[kSaDevAddrLen];
  uint8_t iface[kSaIfaceAddrLen];  // the client's own addresses
};

struct __attribute__((packed)) SaReply {
  uint32_t magic;
  int32_t status;  // UCS_OK or the error the client's endpoint fails with
  uint8_t dev[kSaDevAddrLen];
  uint8_t iface[kSaIfaceAddrLen];
};

}  // namespace uct
}  // namespace xpufab

#endif  // XPUFAB_API_UCT_SOCKADDR_WIRE_H_
