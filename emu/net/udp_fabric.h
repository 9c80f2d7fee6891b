// A Fabric between hosts: SRD packets in UDP datagrams over IPv4.
//
// Addressing. A GID names its UDP endpoint: fe80::ii:02'u':a.b.c.d:port (bytes 10-13 the IPv4
// address, 14-15 the port, byte 7 a device index), so a raw address learnt out of band is all a
// sender needs; there is no table to keep in sync. Several devices share one socket.
//
// Why a reliability layer here and not only the device's. The device retransmits whole packets
// (on a timeout from the measured round trip, with back-off), with no flow control. That suits
// an occasional drop, not a wire where a 1 MiB RDMA travels as ~130 datagrams: one lost
// datagram would cost the whole packet, and a slow receiver would drop bursts at its socket. So each (sender, receiver) pair runs a small
// selective-repeat protocol over datagrams: per-peer sequence numbers, cumulative + 64-bit
// selective acks, retransmission timers with exponential back-off, duplicate suppression (each
// sequence number is accepted once; fragments reassemble into packets delivered at most once,
// in any order) and a window of datagrams in flight per peer, so that a slow receiver holds the
// sender back instead of overflowing its socket. The fabric therefore reports lossless() and the
// device keeps its end-to-end timers for what the fabric cannot fix: a peer that stays silent
// for peer_timeout_ms is declared dead, its queue is dropped, and sends to it return
// -EHOSTUNREACH for a while; outstanding operations then complete with UNRESP_REMOTE (or
// UNREACH_REMOTE for a peer that never answered) from the device's timers. Other peers are
// unaffected. RNR travels as an ordinary response and the device retries it.
//
// Receiving. A device's engine pass reads the socket itself (poll_rx_batch): datagrams for it
// go straight into the pass, others to their devices' inboxes, and acks and due retransmissions
// go out at once. Meanwhile the receive thread stays parked instead of waking on every datagram;
// it takes the socket back when the polls stop (poll_rx_stop, or none for a while), as the shm
// fabric's receive thread does.
//
// Integrity. Every datagram carries a SipHash-2-4 MAC keyed by the fabric key
// (FI_EFA_EMU_FABRIC_KEY). Datagrams that are foreign (bad magic or version), truncated, fail
// the MAC, or are malformed are dropped and counted, never delivered.
#ifndef XPUFAB_EMU_NET_UDP_FABRIC_H_
#define XPUFAB_EMU_NET_UDP_FABRIC_H_

#include <netinet/in.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu/fabric.h"
#include "emu/net/rx_park.h"
#include "emu/net/wire.h"

namespace xpufab {
namespace emu {
namespace net {

struct UdpFabricOptions {
  std::string addr = "127.0.0.1";  // IPv4 address to bind
  uint16_t port = 0;               // 0: any free port
  std::string key;                 // default: the fabric key from the environment
  uint32_t fragment_bytes = 8192;  // payload bytes per datagram (1200..60000)
  uint32_t window = 256;           // datagrams in flight per peer
  uint32_t rto_min_us = 4000;      // first retransmission timeout, doubled per try
  uint32_t rto_max_us = 250000;
  uint32_t peer_timeout_ms = 3000;  // no progress for this long: the peer is dead
  uint32_t park_us = 200;          // receive thread: stays parked while a device polled within this
  uint32_t park_max_us = 4000;     // a park doubles from park_us up to this while polls go on
  // Fault injection for tests: drop this fraction of outgoing datagrams (data, retransmits and
  // acks alike), seeded.
  double drop_tx = 0.0;
  uint64_t seed = 1;
};

struct UdpFabricStats {
  uint64_t packets_tx, packets_rx, datagrams_tx, datagrams_rx, retransmits, acks_tx, acks_rx;
  uint64_t duplicates, dropped_foreign, dropped_truncated, dropped_bad_mac, dropped_malformed;
  uint64_t dropped_no_sink, dead_peers, injected_drops, window_waits;
  // Datagrams a device's engine pass read itself, and the receive thread's parks meanwhile.
  uint64_t polled_datagrams, rx_parks;
};

// GID <-> endpoint.
Gid udp_gid(const sockaddr_in& sa, uint8_t index);
bool udp_endpoint(const Gid& gid, sockaddr_in* sa);

class UdpFabric : public Fabric {
 public:
  static int create(const UdpFabricOptions& options, std::shared_ptr<UdpFabric>* fabric_p);
  ~UdpFabric() override;

  int attach(const Gid& gid, PacketSink* sink) override;
  void detach(const Gid& gid) override;
  int send(const Gid& dst, Packet&& pkt, uint64_t now_ns = 0) override;
  bool lossless() const override { return true; }
  // Reads the socket on the caller's thread (see above).
  int poll_rx_batch(const Gid& gid, int budget, uint64_t now_ns, std::vector<Packet>* out) override;
  // The caller stops polling: the receive thread reads the socket again from now on.
  void poll_rx_stop(const Gid& gid) override;

  // The bound endpoint and the GID of device `index` on it.
  sockaddr_in local() const { return local_; }
  Gid gid(uint8_t index) const { return udp_gid(local_, index); }
  UdpFabricStats stats() const;

  struct Peer;

 private:
  explicit UdpFabric(const UdpFabricOptions& o);
  void rx_loop();
  // Parks the receive thread while devices poll the socket themselves: true when it parked.
  bool park_while_polled(RxPark* park);
  // Reads up to `budget` datagrams (mu_ held): their packets in *ready.
  int read_socket(int budget, std::vector<std::pair<Gid, Packet>>* ready);
  void handle_datagram(const uint8_t* d, size_t n, const sockaddr_in& from, std::vector<std::pair<Gid, Packet>>* out);
  void handle_ack(Peer* p, const uint8_t* d);
  void pump(Peer* p, uint64_t now);           // mu_ held
  void transmit(Peer* p, uint64_t seq, bool retransmit);  // mu_ held
  void seal(std::vector<uint8_t>* d, uint64_t seq, uint64_t base);  // seq, base, MAC
  void kick();  // wakes the receive thread
  void send_raw(const void* d, size_t n, const sockaddr_in& to);  // mu_ held
  void send_acks();                           // mu_ held
  uint64_t timers(uint64_t now);              // mu_ held; returns ns until the next deadline
  void deliver_all(std::vector<std::pair<Gid, Packet>>* pkts);
  Peer* peer_for(const sockaddr_in& sa, uint64_t now);  // mu_ held

  UdpFabricOptions opt_;
  MacKey key_;
  int fd_ = -1;
  int stop_fd_ = -1;  // eventfd: stop, or a timer to arm
  sockaddr_in local_{};
  uint64_t epoch_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::vector<uint8_t> rx_buf_;                      // one datagram; guarded by mu_
  uint64_t next_timer_ns_ = 0;  // no retransmission is due before this; guarded by mu_
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;  // by ip:port; guarded by mu_
  Reassembler reasm_;                                // guarded by mu_
  uint64_t next_msg_ = 1;                            // guarded by mu_
  uint64_t rng_;                                     // guarded by mu_
  std::shared_mutex sinks_mu_;
  std::map<Gid, PacketSink*> sinks_;  // guarded by sinks_mu_
  mutable std::atomic<uint64_t> st_[18] = {};
  // The receive thread's parks: the latest poll (clock::mono_ns, 0 after poll_rx_stop).
  std::atomic<uint64_t> last_poll_ns_{0};
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  bool park_stop_ = false;  // guarded by park_mu_

};

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_UDP_FABRIC_H_
