#include "emu/net/udp_fabric.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "emu/clock.h"

namespace xpufab {
namespace emu {
namespace net {
namespace {

constexpr uint32_t kMagic = 0x31554658;  // "XFU1"
constexpr uint8_t kVersion = 2;  // 2: the 104-byte packet header
constexpr uint8_t kData = 1;
constexpr uint8_t kAck = 2;
constexpr size_t kHdr = 80;
constexpr size_t kMacOff = 72;
constexpr uint64_t kRxWindow = 1u << 16;  // sequence numbers accepted ahead of the cumulative ack

enum Stat {
  kPktTx, kPktRx, kDgTx, kDgRx, kRetx, kAckTx, kAckRx, kDup, kForeign, kTrunc, kBadMac, kMalformed,
  kNoSink, kDeadPeers, kInjected, kWindowWaits, kPolledDg, kParks
};

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t peer_key(const sockaddr_in& sa) {
  return uint64_t{ntohl(sa.sin_addr.s_addr)} << 16 | ntohs(sa.sin_port);
}

}  // namespace

// Datagram header (80 bytes, then frag_len payload bytes for DATA):
//  0 magic  4 kind  5 version  8 epoch (sender incarnation)
//  16 DATA: seq           ACK: cum (every seq below it received)
//  24 DATA: msg_id        ACK: bit i set = seq cum+1+i received
//  32 DATA: msg total     ACK: epoch of the data sender being acknowledged
//  40 DATA: frag offset   44 DATA: frag length
//  48 DATA: destination GID
//  64 DATA: base, the sender's lowest unacknowledged seq (everything below it is settled)
//  72 MAC over the header (MAC field zero) and the payload
struct UdpFabric::Peer {
  sockaddr_in addr{};
  // Sending side.
  struct Datagram {
    std::vector<uint8_t> bytes;
    uint64_t deadline = 0;
    uint32_t tries = 0;
  };
  uint64_t next_seq = 0;
  std::map<uint64_t, Datagram> inflight;
  std::deque<std::vector<uint8_t>> queue;  // built datagrams waiting for the window (no seq yet)
  uint64_t last_progress = 0;
  bool dead = false;
  uint64_t dead_since = 0;
  // Receiving side.
  uint64_t rx_epoch = 0;
  uint64_t cum = 0;
  std::set<uint64_t> above;
  bool ack_due = false;
};

Gid udp_gid(const sockaddr_in& sa, uint8_t index) {
  Gid g{0xfe, 0x80, 0, 0, 0, 0, 0, index, 0x02, 'u'};
  std::memcpy(&g[10], &sa.sin_addr.s_addr, 4);
  std::memcpy(&g[14], &sa.sin_port, 2);
  return g;
}

bool udp_endpoint(const Gid& g, sockaddr_in* sa) {
  static const uint8_t prefix[7] = {0xfe, 0x80, 0, 0, 0, 0, 0};
  if (std::memcmp(g.data(), prefix, 7) != 0 || g[8] != 0x02 || g[9] != 'u') return false;
  std::memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  std::memcpy(&sa->sin_addr.s_addr, &g[10], 4);
  std::memcpy(&sa->sin_port, &g[14], 2);
  return sa->sin_port != 0;
}

int UdpFabric::create(const UdpFabricOptions& options, std::shared_ptr<UdpFabric>* fabric_p) {
  if (fabric_p == nullptr) return -EINVAL;
  UdpFabricOptions o = options;
  if (o.fragment_bytes < 1200 || o.fragment_bytes > 60000 || o.window == 0 || o.rto_min_us == 0 ||
      o.rto_max_us < o.rto_min_us || o.peer_timeout_ms == 0 || o.drop_tx < 0 || o.drop_tx >= 1) {
    return -EINVAL;
  }
  if (o.key.empty()) o.key = fabric_key_string();
  std::shared_ptr<UdpFabric> f(new UdpFabric(o));
  f->key_ = derive_key(o.key);
  f->rng_ = o.seed * 0x9e3779b97f4a7c15ull + 1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(o.port);
  if (inet_pton(AF_INET, o.addr.c_str(), &sa.sin_addr) != 1) return -EINVAL;
  f->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (f->fd_ < 0) return -errno;
  int buf = 4 << 20;
  setsockopt(f->fd_, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  setsockopt(f->fd_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  if (bind(f->fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -errno;
  socklen_t sl = sizeof(f->local_);
  if (getsockname(f->fd_, reinterpret_cast<sockaddr*>(&f->local_), &sl) != 0) return -errno;
  f->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (f->stop_fd_ < 0) return -errno;
  std::random_device rd;
  f->epoch_ = (uint64_t{rd()} << 32 | rd()) | 1;
  UdpFabric* raw = f.get();
  f->thread_ = std::thread([raw] { raw->rx_loop(); });
  *fabric_p = std::move(f);
  return 0;
}

UdpFabric::UdpFabric(const UdpFabricOptions& o) : opt_(o), rx_buf_(65536) {}

UdpFabric::~UdpFabric() {
  stop_.store(true);
  if (stop_fd_ >= 0) kick();
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    park_stop_ = true;
  }
  park_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

int UdpFabric::attach(const Gid& gid, PacketSink* sink) {
  if (sink == nullptr) return -EINVAL;
  std::unique_lock<std::shared_mutex> lock(sinks_mu_);
  return sinks_.emplace(gid, sink).second ? 0 : -EEXIST;
}

void UdpFabric::detach(const Gid& gid) {
  std::unique_lock<std::shared_mutex> lock(sinks_mu_);
  sinks_.erase(gid);
}

UdpFabric::Peer* UdpFabric::peer_for(const sockaddr_in& sa, uint64_t now) {
  auto& slot = peers_[peer_key(sa)];
  if (!slot) {
    slot.reset(new Peer());
    slot->addr = sa;
    slot->last_progress = now;
  }
  return slot.get();
}

int UdpFabric::send(const Gid& dst, Packet&& pkt, uint64_t pass_ns) {
  (void)pass_ns;  // peer times are taken under mu_, where the clock is read once per send
  sockaddr_in to;
  if (!udp_endpoint(dst, &to)) return -EHOSTUNREACH;
  if (to.sin_addr.s_addr == local_.sin_addr.s_addr && to.sin_port == local_.sin_port) {
    // Another device on this socket: hand it over directly.
    std::shared_lock<std::shared_mutex> lock(sinks_mu_);
    auto it = sinks_.find(dst);
    if (it == sinks_.end()) return -EHOSTUNREACH;
    st_[kPktTx].fetch_add(1, std::memory_order_relaxed);
    st_[kPktRx].fetch_add(1, std::memory_order_relaxed);
    it->second->deliver(std::move(pkt));
    return 0;
  }
  uint8_t ph[kPacketHeaderSize];
  encode_header(pkt, ph);
  const uint64_t total = kPacketHeaderSize + pkt.payload.size();
  const uint64_t frag = opt_.fragment_bytes;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t now = now_ns();
  Peer* p = peer_for(to, now);
  if (p->dead) {
    if (now - p->dead_since < uint64_t{opt_.peer_timeout_ms} * 1000000) return -EHOSTUNREACH;
    p->dead = false;  // try again: a partition may have healed
    p->last_progress = now;
  }
  uint64_t msg_id = next_msg_++;
  for (uint64_t off = 0; off < total; off += frag) {
    size_t len = static_cast<size_t>(std::min(frag, total - off));
    std::vector<uint8_t> d(kHdr + len);
    uint8_t* h = d.data();
    put32(h, kMagic);
    h[4] = kData;
    h[5] = kVersion;
    put64(h + 8, epoch_);
    put64(h + 24, msg_id);
    put64(h + 32, total);
    put32(h + 40, static_cast<uint32_t>(off));
    put32(h + 44, static_cast<uint32_t>(len));
    std::memcpy(h + 48, dst.data(), 16);
    size_t done = 0;
    if (off == 0) {
      std::memcpy(h + kHdr, ph, kPacketHeaderSize);
      done = kPacketHeaderSize;
    }
    if (len > done) std::memcpy(h + kHdr + done, pkt.payload.data() + (off + done - kPacketHeaderSize), len - done);
    p->queue.push_back(std::move(d));
  }
  st_[kPktTx].fetch_add(1, std::memory_order_relaxed);
  pump(p, now);
  return 0;
}

void UdpFabric::seal(std::vector<uint8_t>* d, uint64_t seq, uint64_t base) {
  uint8_t* h = d->data();
  put64(h + 16, seq);
  put64(h + 64, base);
  put64(h + kMacOff, 0);
  put64(h + kMacOff, siphash24(key_, h, d->size()));
}

void UdpFabric::pump(Peer* p, uint64_t now) {
  if (p->inflight.empty()) {
    p->last_progress = now;
    if (!p->queue.empty()) kick();  // the receive thread may be asleep with no timer armed
  }
  while (!p->queue.empty() && p->inflight.size() < opt_.window) {
    uint64_t seq = p->next_seq++;
    Peer::Datagram& dg = p->inflight[seq];
    dg.bytes = std::move(p->queue.front());
    p->queue.pop_front();
    seal(&dg.bytes, seq, p->inflight.begin()->first);
    dg.deadline = now + uint64_t{opt_.rto_min_us} * 1000;
    next_timer_ns_ = std::min(next_timer_ns_, dg.deadline);  // for pollers and a parked thread
    transmit(p, seq, false);
  }
  if (!p->queue.empty()) st_[kWindowWaits].fetch_add(1, std::memory_order_relaxed);
}

void UdpFabric::send_raw(const void* d, size_t n, const sockaddr_in& to) {
  if (opt_.drop_tx > 0) {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    if (static_cast<double>(rng_ >> 11) / 9007199254740992.0 < opt_.drop_tx) {
      st_[kInjected].fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  for (;;) {
    ssize_t w = sendto(fd_, d, n, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    if (w >= 0 || errno != EINTR) break;
  }
  // Other failures (ENOBUFS, ECONNREFUSED from an earlier ICMP) are losses; timers cover them.
}

void UdpFabric::transmit(Peer* p, uint64_t seq, bool retransmit) {
  auto it = p->inflight.find(seq);
  if (it == p->inflight.end()) return;
  st_[kDgTx].fetch_add(1, std::memory_order_relaxed);
  if (retransmit) st_[kRetx].fetch_add(1, std::memory_order_relaxed);
  send_raw(it->second.bytes.data(), it->second.bytes.size(), p->addr);
}

void UdpFabric::send_acks() {
  for (auto& kv : peers_) {
    Peer* p = kv.second.get();
    if (!p->ack_due) continue;
    p->ack_due = false;
    uint8_t h[kHdr] = {};
    put32(h, kMagic);
    h[4] = kAck;
    h[5] = kVersion;
    put64(h + 8, epoch_);
    put64(h + 16, p->cum);
    uint64_t bits = 0;
    for (auto it = p->above.begin(); it != p->above.end() && *it <= p->cum + 64; ++it) {
      bits |= uint64_t{1} << (*it - p->cum - 1);
    }
    put64(h + 24, bits);
    put64(h + 32, p->rx_epoch);
    put64(h + kMacOff, siphash24(key_, h, kHdr));
    st_[kAckTx].fetch_add(1, std::memory_order_relaxed);
    send_raw(h, kHdr, p->addr);
  }
}

void UdpFabric::handle_ack(Peer* p, const uint8_t* h) {
  st_[kAckRx].fetch_add(1, std::memory_order_relaxed);
  if (get64(h + 32) != epoch_) return;  // acknowledges a previous incarnation of this fabric
  uint64_t cum = get64(h + 16);
  uint64_t bits = get64(h + 24);
  size_t before = p->inflight.size();
  p->inflight.erase(p->inflight.begin(), p->inflight.lower_bound(cum));
  for (int i = 0; i < 64 && bits != 0; ++i) {
    if (bits & (uint64_t{1} << i)) p->inflight.erase(cum + 1 + static_cast<uint64_t>(i));
  }
  uint64_t now = now_ns();
  if (p->inflight.size() != before) p->last_progress = now;
  pump(p, now);
}

void UdpFabric::handle_datagram(const uint8_t* d, size_t n, const sockaddr_in& from,
                                std::vector<std::pair<Gid, Packet>>* out) {
  if (n < 8 || get32(d) != kMagic) {
    st_[kForeign].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (n < kHdr) {
    st_[kTrunc].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (d[5] != kVersion || (d[4] != kData && d[4] != kAck)) {
    st_[kForeign].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  size_t want = kHdr + (d[4] == kData ? get32(d + 44) : 0);
  if (n < want) {
    st_[kTrunc].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (n > want) {
    st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint8_t h[kHdr];
  std::memcpy(h, d, kHdr);
  uint64_t mac = get64(h + kMacOff);
  put64(h + kMacOff, 0);
  if (siphash24_2(key_, h, kHdr, d + kHdr, n - kHdr) != mac) {
    st_[kBadMac].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  st_[kDgRx].fetch_add(1, std::memory_order_relaxed);
  uint64_t now = now_ns();
  Peer* p = peer_for(from, now);
  if (p->dead) {
    p->dead = false;  // it speaks again
    p->last_progress = now;
  }
  if (d[4] == kAck) return handle_ack(p, d);
  uint64_t epoch = get64(d + 8);
  uint64_t key = peer_key(from);
  uint64_t seq = get64(d + 16);
  uint64_t base = get64(d + 64);
  if (epoch != p->rx_epoch) {
    // A new incarnation of the peer (or of us): take up its numbering where it stands.
    p->rx_epoch = epoch;
    p->cum = base;
    p->above.clear();
    reasm_.forget(key);
  }
  if (base > seq) {
    st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (base > p->cum) {
    // The sender settled everything below base (acknowledged, or abandoned with a dead peer).
    p->cum = base;
    p->above.erase(p->above.begin(), p->above.lower_bound(base));
    while (!p->above.empty() && *p->above.begin() == p->cum) {
      p->above.erase(p->above.begin());
      ++p->cum;
    }
  }
  p->ack_due = true;
  if (seq < p->cum || p->above.count(seq) != 0) {
    st_[kDup].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (seq >= p->cum + kRxWindow) {
    st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (seq == p->cum) {
    ++p->cum;
    while (!p->above.empty() && *p->above.begin() == p->cum) {
      p->above.erase(p->above.begin());
      ++p->cum;
    }
  } else {
    p->above.insert(seq);
  }
  Packet pkt;
  int rc = reasm_.add(key, get64(d + 24), get64(d + 32), get32(d + 40), d + kHdr, n - kHdr, &pkt);
  if (rc < 0) {
    st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (rc == 1) {
    Gid dst;
    std::memcpy(dst.data(), d + 48, 16);
    out->emplace_back(dst, std::move(pkt));
  }
}

int UdpFabric::read_socket(int budget, std::vector<std::pair<Gid, Packet>>* ready) {
  int n_read = 0;
  for (; n_read < budget; ++n_read) {
    sockaddr_in from{};
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd_, rx_buf_.data(), rx_buf_.size(), MSG_DONTWAIT | MSG_TRUNC,
                         reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) break;
    if (static_cast<size_t>(n) > rx_buf_.size() || fl != sizeof(from) || from.sin_family != AF_INET) {
      st_[kMalformed].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    handle_datagram(rx_buf_.data(), static_cast<size_t>(n), from, ready);
  }
  return n_read;
}

int UdpFabric::poll_rx_batch(const Gid& gid, int budget, uint64_t now, std::vector<Packet>* out) {
  last_poll_ns_.store(now != 0 ? now : clock::mono_ns(), std::memory_order_release);
  // The receive thread, or another device's pass, is reading: its packets for us come through
  // the inbox.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  std::vector<std::pair<Gid, Packet>> ready;
  const int datagrams = read_socket(budget > 0 ? budget : 64, &ready);
  if (datagrams) {
    st_[kPolledDg].fetch_add(static_cast<uint64_t>(datagrams), std::memory_order_relaxed);
    send_acks();
  }
  const uint64_t t = now_ns();
  if (t >= next_timer_ns_) next_timer_ns_ = t + timers(t);
  lock.unlock();
  int mine = 0;
  std::vector<std::pair<Gid, Packet>> others;
  for (auto& e : ready) {
    if (out == nullptr || e.first != gid) {
      others.push_back(std::move(e));
      continue;
    }
    st_[kPktRx].fetch_add(1, std::memory_order_relaxed);
    out->push_back(std::move(e.second));
    ++mine;
  }
  deliver_all(&others);
  return mine;
}

void UdpFabric::poll_rx_stop(const Gid& gid) {
  (void)gid;
  last_poll_ns_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    park_stop_ = true;
  }
  park_cv_.notify_all();
}

bool UdpFabric::park_while_polled(RxPark* park) {
  // The poll stamp before the clock (clock::within). Whether datagrams wait would cost a system
  // call: a poller that stalls reads them when it comes back, or the sender retransmits.
  const uint64_t polled = last_poll_ns_.load(std::memory_order_acquire);
  const uint64_t wait = park->next(clock::mono_ns(), polled, false);
  if (wait == 0) return false;
  st_[kParks].fetch_add(1, std::memory_order_relaxed);
  bool woken;
  {
    std::unique_lock<std::mutex> lock(park_mu_);
    woken = park_cv_.wait_for(lock, std::chrono::nanoseconds(wait), [this] { return park_stop_; });
    park_stop_ = false;
  }
  park->ended(woken, 0);
  return true;
}

uint64_t UdpFabric::timers(uint64_t now) {
  uint64_t next = 200ull * 1000000;
  const uint64_t peer_timeout = uint64_t{opt_.peer_timeout_ms} * 1000000;
  for (auto& kv : peers_) {
    Peer* p = kv.second.get();
    if (p->inflight.empty()) continue;
    if (now - p->last_progress > peer_timeout) {
      // Silent for too long: give up on everything queued for it.
      p->inflight.clear();
      p->queue.clear();
      p->dead = true;
      p->dead_since = now;
      st_[kDeadPeers].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    for (auto& e : p->inflight) {
      Peer::Datagram& dg = e.second;
      if (dg.deadline <= now) {
        dg.tries++;
        uint64_t rto = uint64_t{opt_.rto_min_us} << std::min<uint32_t>(dg.tries, 16);
        dg.deadline = now + std::min<uint64_t>(rto, opt_.rto_max_us) * 1000;
        seal(&dg.bytes, e.first, p->inflight.begin()->first);
        transmit(p, e.first, true);
      }
      next = std::min(next, dg.deadline - now);
    }
  }
  return next;
}

void UdpFabric::deliver_all(std::vector<std::pair<Gid, Packet>>* pkts) {
  if (pkts->empty()) return;
  std::shared_lock<std::shared_mutex> lock(sinks_mu_);
  for (auto& e : *pkts) {
    auto it = sinks_.find(e.first);
    if (it == sinks_.end()) {
      st_[kNoSink].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    st_[kPktRx].fetch_add(1, std::memory_order_relaxed);
    it->second->deliver(std::move(e.second));
  }
  pkts->clear();
}

void UdpFabric::kick() {
  uint64_t one = 1;
  ssize_t w = write(stop_fd_, &one, sizeof(one));
  (void)w;
}

void UdpFabric::rx_loop() {
  RxPark park(uint64_t{opt_.park_us} * 1000, uint64_t{opt_.park_max_us} * 1000);
  std::vector<std::pair<Gid, Packet>> ready;
  uint64_t wait_ns = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    // Devices that poll the socket themselves read it and send the acks; the timers run here
    // too, should the polls thin out.
    if (park_while_polled(&park)) {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t t = now_ns();
      if (t >= next_timer_ns_) next_timer_ns_ = t + timers(t);
      continue;
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int ms = static_cast<int>(std::max<uint64_t>(wait_ns / 1000000, 1));
    poll(fds, 2, ms);
    if (stop_.load(std::memory_order_relaxed)) break;
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(stop_fd_, &v, sizeof(v));
      (void)r;
    }
    // A device began polling while this thread waited: the datagram that woke it is the
    // device's to read, and this thread parks.
    const uint64_t polled = last_poll_ns_.load(std::memory_order_acquire);
    if (polled != 0 && clock::within(clock::mono_ns(), polled, uint64_t{opt_.park_us} * 1000)) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      read_socket(256, &ready);
      send_acks();
      const uint64_t t = now_ns();
      wait_ns = timers(t);
      next_timer_ns_ = t + wait_ns;
    }
    deliver_all(&ready);
  }
}

UdpFabricStats UdpFabric::stats() const {
  UdpFabricStats s;
  uint64_t* out[] = {&s.packets_tx, &s.packets_rx, &s.datagrams_tx, &s.datagrams_rx, &s.retransmits,
                     &s.acks_tx, &s.acks_rx, &s.duplicates, &s.dropped_foreign, &s.dropped_truncated,
                     &s.dropped_bad_mac, &s.dropped_malformed, &s.dropped_no_sink, &s.dead_peers,
                     &s.injected_drops, &s.window_waits, &s.polled_datagrams, &s.rx_parks};
  for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); ++i) *out[i] = st_[i].load(std::memory_order_relaxed);
  return s;
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab
