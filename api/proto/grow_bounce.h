// The bounce region of a protocol endpoint whose peer table grows (grow.h), for host consumers
// on a backend device: address space for the receive buffers of every peer the table may grow
// to, then the transmit buffers, reserved once (pages committed as they are first written), and
// registered in pieces, so that a device that pins what is registered (the hardware) pins the
// transmit buffers and the receive buffers of the peers present, not of the limit. Every
// registration lives as long as the region: buffers posted under an earlier one stay posted.
#ifndef XPUFAB_API_PROTO_GROW_BOUNCE_H_
#define XPUFAB_API_PROTO_GROW_BOUNCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "api/backend/backend.h"
#include "api/proto/grow.h"

namespace xpufab::proto {

class GrowBounce {
 public:
  GrowBounce() = default;
  GrowBounce(const GrowBounce&) = delete;
  GrowBounce& operator=(const GrowBounce&) = delete;
  ~GrowBounce() { release(); }

  // Reserves the region for up to `limit` peers and registers its transmit buffers on `dev`
  // (kept for the later calls): 0, -ENOMEM, or reg_mr's error.
  int init(backend::Device* dev, backend::Pd* pd, const proto_config& c, const proto_dev& d,
           uint32_t limit);
  // Registers the receive buffers of a table of `n` peers: their lkey in *lkey (proto_ep_init's
  // for the first table, proto_grow_peers' for each larger one). 0 or reg_mr's error.
  int register_rx(uint32_t n, uint32_t* lkey);
  // Deregisters everything and gives the address space back (the destructor does too).
  void release();

  uint8_t* base() const { return base_; }
  size_t size() const { return len_; }
  size_t tx_offset() const { return tx_off_; }
  uint32_t tx_lkey() const { return tx_mr_ ? tx_mr_->lkey() : 0; }
  // Bytes at the start of the region the receive buffers of `n` peers take.
  size_t rx_bytes(uint32_t n) const { return proto_grow_rx_bytes(&cfg_, &dev_attr_, n); }

 private:
  int reg(uint8_t* addr, size_t len, backend::Mr** mr);

  backend::Device* dev_ = nullptr;
  backend::Pd* pd_ = nullptr;
  proto_config cfg_{};
  proto_dev dev_attr_{};
  uint8_t* base_ = nullptr;
  size_t len_ = 0;
  size_t tx_off_ = 0;
  backend::Mr* tx_mr_ = nullptr;
  std::vector<backend::Mr*> rx_mrs_;
};

}  // namespace xpufab::proto

#endif  // XPUFAB_API_PROTO_GROW_BOUNCE_H_
