#include "api/proto/grow_bounce.h"

#include <sys/mman.h>

#include <cerrno>

#include "base/resident.h"

namespace xpufab::proto {

int GrowBounce::init(backend::Device* dev, backend::Pd* pd, const proto_config& c,
                     const proto_dev& d, uint32_t limit) {
  release();
  dev_ = dev;
  pd_ = pd;
  cfg_ = c;
  dev_attr_ = d;
  const size_t len = proto_grow_bounce_size(&c, &d, limit);
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) return -ENOMEM;
  base_ = static_cast<uint8_t*>(m);
  len_ = len;
  tx_off_ = proto_grow_tx_offset(&c, &d, limit);
  // The first receive buffer and the first transmit buffer carry a job's first messages: resident
  // from the start, as the queues' heads are (base/resident.h). The rest commits as peers use it.
  base::make_resident(base_, proto_buf_size(&d));
  base::make_resident(base_ + tx_off_, proto_buf_size(&d));
  return reg(base_ + tx_off_, len_ - tx_off_, &tx_mr_);
}

int GrowBounce::register_rx(uint32_t n, uint32_t* lkey) {
  backend::Mr* mr = nullptr;
  const int rc = reg(base_, rx_bytes(n), &mr);
  if (rc) return rc;
  rx_mrs_.push_back(mr);
  *lkey = mr->lkey();
  return 0;
}

void GrowBounce::release() {
  for (backend::Mr* mr : rx_mrs_) dev_->dereg_mr(mr);
  rx_mrs_.clear();
  if (tx_mr_) dev_->dereg_mr(tx_mr_);
  tx_mr_ = nullptr;
  if (base_) munmap(base_, len_);
  base_ = nullptr;
  len_ = tx_off_ = 0;
}

int GrowBounce::reg(uint8_t* addr, size_t len, backend::Mr** mr) {
  backend::MrInitAttr ma;
  ma.addr = addr;
  ma.length = len;
  ma.access = backend::kAccessLocalWrite;
  return dev_->reg_mr(pd_, ma, mr);
}

}  // namespace xpufab::proto
