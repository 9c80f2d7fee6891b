// When a fabric's receive thread may stay off the wire because the devices read it themselves
// (their engine passes poll it): the decision the shm and UDP fabrics share.
//
// A park lasts park_ns at first and doubles, up to a maximum, while polls keep coming in, so a
// long caller-driven run wakes the thread rarely. The thread parks when a device polled within
// park_ns. A park that times out is renewed while the latest poll came within own_max_ns: on a
// loaded machine a poller is often preempted for longer than park_ns, and taking over then only
// adds a thread that every sender must wake. Packets that wait while nobody polled within
// park_ns end the renewal: this thread hands them on rather than leave a peer's packet waiting
// for the poller's next time slice. A park that something ends early (poll_rx_stop: the poller
// stops) starts the next one short, as does a renewal that lapsed: at park_ns, or at first_ns
// where something else covers the wire meanwhile (set_first).
#ifndef XPUFAB_EMU_NET_RX_PARK_H_
#define XPUFAB_EMU_NET_RX_PARK_H_

#include <algorithm>
#include <cstdint>

#include "emu/clock.h"

namespace xpufab {
namespace emu {
namespace net {

class RxPark {
 public:
  RxPark(uint64_t park_ns, uint64_t own_max_ns)
      : park_ns_(park_ns), own_max_ns_(std::max(own_max_ns, park_ns)), first_ns_(park_ns), wait_ns_(park_ns) {}
  // The park that starts a run of them (park_ns by default). Longer where the device's engine
  // thread polls the wire whenever its callers stop and ends a park when it stops itself: the
  // parks then only bound a lapse of both, and each one that ends is a wakeup on a machine whose
  // cores the application's threads need.
  void set_first(uint64_t first_ns) { first_ns_ = std::max(first_ns, park_ns_); }

  // How long to park now, or 0 to receive instead. `polled` is the latest poll's stamp (0 once
  // a poller said it stopped), read before `now`; `waiting` says packets wait unread.
  uint64_t next(uint64_t now, uint64_t polled, bool waiting) {
    const bool recent = polled != 0 && clock::within(now, polled, park_ns_);
    const bool renew = timed_out_ && polled != 0 && clock::within(now, polled, own_max_ns_) &&
                       !(waiting && !recent);
    if (!recent && !renew) {
      timed_out_ = false;
      wait_ns_ = first_ns_;
      return 0;
    }
    if (timed_out_ && !renew) wait_ns_ = first_ns_;  // the pollers fell behind: start over
    return wait_ns_;
  }

  // The park ended: by its timeout, or woken early. `max_ns` bounds the next one (larger than
  // own_max_ns where the device's engine thread always ends a park when it stops polling).
  void ended(bool woken, uint64_t max_ns) {
    timed_out_ = !woken;
    wait_ns_ = woken ? first_ns_ : std::min(wait_ns_ * 2, std::max(max_ns, own_max_ns_));
  }

 private:
  const uint64_t park_ns_;
  const uint64_t own_max_ns_;
  uint64_t first_ns_;
  uint64_t wait_ns_;
  bool timed_out_ = false;  // the last park ended by its timeout
};

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_RX_PARK_H_
