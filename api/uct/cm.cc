// The connection manager of component "xpufab" (UCT_COMPONENT_FLAG_CM): how UCX 1.13 connects a
// client to a server by socket address (uct_listener_create, uct_ep_create with a sockaddr or a
// connection request), which is what ucp_listener_create and ucp_ep_create(SOCK_ADDR) use.
//
// A CM endpoint is a TCP connection carrying only the two sides' private data; the data path
// stays SRD, each side packing its SRD addresses (UCP: its worker address) into that data. The
// connection stays open after the exchange so that either side's uct_ep_disconnect reaches the
// other as its disconnect callback. Frames on it (cm_wire.h):
//   client -> server  kCmRequest (private data)     after uct_ep_connect, or the pack callback
//   server -> client  kCmReply   (status, data)     uct_ep_create on the request, or the reject
//   client -> server  kCmNotify                      uct_cm_client_ep_conn_notify
//   either            kCmDisconnect                  uct_ep_disconnect
//
// Every socket is watched by the worker's async context (ucs_async_set_event_handler), as UCX's
// own CMs watch theirs: a connection request or a (dis)connection runs the CM from the async
// thread, and UCP's callbacks then signal the worker, so that a program asleep in
// ucp_worker_wait hears of it. The worker's progress looks at every socket too (at most every kIdleScanNs while nothing
// happens), which covers events that came while the context was blocked, and contexts in poll
// mode. Callbacks may thus come from either thread, which
// UCT_CB_FLAG_ASYNC (required, as UCX's base CM does) allows; the CM's state is guarded by the
// async context's lock. A callback may destroy any object: events are gathered first, then
// delivered each after checking its target still exists.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "api/uct/cm_wire.h"
#include "api/uct/sockaddr_wire.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

struct Cm;
struct Listener;

struct Conn {  // a client's request, until the server creates an endpoint on it or rejects it
  Listener* listener;
  int fd;
  sockaddr_storage peer;
  socklen_t peer_len;
  std::vector<uint8_t> in;
  bool delivered = false;  // conn_request_cb has run
  uint8_t dev[16] = {};    // the client's srd device address
};

struct Listener {
  uct_listener_t super;  // first: uct_listener_* reads super.cm
  Cm* cm;
  int fd;
  uct_cm_listener_conn_request_callback_t cb;
  void* arg;
  std::list<Conn*> conns;
};

struct CmEp {
  uct_base_ep_t super;  // first: UCX casts uct_ep_h to it
  Cm* cm;
  uint64_t serial;
  bool server;
  int fd = -1;
  sockaddr_storage peer{};
  socklen_t peer_len = 0;
  void* user_data = nullptr;
  uct_cm_ep_priv_data_pack_callback_t pack_cb = nullptr;
  uct_cm_ep_resolve_callback_t resolve_cb = nullptr;
  uct_ep_disconnect_cb_t disconnect_cb = nullptr;
  uct_cm_ep_client_connect_callback_t connect_cb = nullptr;
  uct_cm_ep_server_conn_notify_callback_t notify_cb = nullptr;
  enum State : uint8_t { kConnecting, kWaitConnect, kWaitReply, kConnected, kFailed } state;
  bool notified = false;     // server: the client's notify arrived
  bool local_disc = false;   // uct_ep_disconnect was called
  bool remote_disc = false;  // the peer disconnected (or went away)
  std::vector<uint8_t> in;
  uint8_t peer_dev[16] = {};  // the peer's srd device address, from its first frame
};

struct Cm {
  uct_cm_t super;  // first: UCX casts uct_cm_h to it
  uct_worker_h worker;
  uct_worker_cb_id_t prog_id;
  std::string dev_name;  // the device the CM's connections name to UCP
  SharedDevice* dev = nullptr;
  uint8_t gid[16] = {};  // its srd device address
  std::list<Listener*> listeners;
  std::map<uint64_t, CmEp*> eps;
  uint64_t next_serial = 1;
  // cm_progress: no socket looked at before this time (kNever while the CM has none).
  std::atomic<uint64_t> next_scan{0};
};

// UCS_ASYNC_BLOCK / UNBLOCK on the worker's async context (ucx_compat.h). Signal mode is not
// supported (cm_open refuses it): its blocking masks signals per thread.
void async_block(ucs_async_context_t* a) {
  auto* h = reinterpret_cast<xpufab_async_context_head_t*>(a);
  if (h->mode == UCS_ASYNC_MODE_THREAD_SPINLOCK) {
    ucs_recursive_spin_lock(&h->spinlock);
  } else if (h->mode == UCS_ASYNC_MODE_THREAD_MUTEX) {
    pthread_mutex_lock(&h->mutex.lock);
    if (h->mutex.count++ == 0) h->mutex.owner = pthread_self();
  } else {
    ++h->poll_block;
  }
}

void async_unblock(ucs_async_context_t* a) {
  auto* h = reinterpret_cast<xpufab_async_context_head_t*>(a);
  if (h->mode == UCS_ASYNC_MODE_THREAD_SPINLOCK) {
    ucs_recursive_spin_unlock(&h->spinlock);
  } else if (h->mode == UCS_ASYNC_MODE_THREAD_MUTEX) {
    if (--h->mutex.count == 0) h->mutex.owner = 0;
    pthread_mutex_unlock(&h->mutex.lock);
  } else {
    --h->poll_block;
  }
}

ucs_async_context_t* async_of(const Cm* cm) { return cm->super.iface.worker->async; }

// Holds the worker's async lock (recursively) for one entry into the CM.
class AsyncGuard {
 public:
  explicit AsyncGuard(const Cm* cm) : a_(async_of(cm)) { async_block(a_); }
  ~AsyncGuard() { async_unblock(a_); }
  AsyncGuard(const AsyncGuard&) = delete;
  AsyncGuard& operator=(const AsyncGuard&) = delete;

 private:
  ucs_async_context_t* a_;
};

Cm* cm_of(uct_cm_h h) { return reinterpret_cast<Cm*>(h); }
Listener* listener_of(uct_listener_h h) { return reinterpret_cast<Listener*>(h); }
CmEp* cep_of(uct_ep_h h) { return reinterpret_cast<CmEp*>(h); }

socklen_t addr_len(const struct sockaddr* sa, socklen_t given) {
  if (sa == nullptr) return 0;
  socklen_t need = 0;
  if (sa->sa_family == AF_INET) need = sizeof(sockaddr_in);
  if (sa->sa_family == AF_INET6) need = sizeof(sockaddr_in6);
  return need != 0 && given >= need ? need : 0;
}

// A frame is small (header + at most kSaMaxPriv): the socket buffer takes it; a short wait at most.
bool send_frame(const Cm* cm, int fd, uint8_t type, int32_t status, const void* data, uint32_t len) {
  std::vector<uint8_t> b(sizeof(CmHdr) + len);
  CmHdr h{kCmMagic, type, {0, 0, 0}, status, len, {}};
  std::memcpy(h.dev, cm->gid, sizeof(h.dev));
  std::memcpy(b.data(), &h, sizeof(h));
  if (len) std::memcpy(b.data() + sizeof(h), data, len);
  size_t off = 0;
  while (off < b.size()) {
    const ssize_t w = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
    } else if (!(w < 0 && errno == EINTR)) {
      return false;
    }
  }
  return true;
}

// Appends what the socket has; false once the peer closed it or it failed.
bool read_avail(int fd, std::vector<uint8_t>* in) {
  uint8_t b[2048];
  for (;;) {
    const ssize_t r = ::recv(fd, b, sizeof(b), 0);
    if (r > 0) {
      in->insert(in->end(), b, b + r);
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else if (!(r < 0 && errno == EINTR)) {
      return false;
    }
  }
}

// The first complete frame of *in, removed into *h / *data. 0: none yet, -1: not our protocol.
int take_frame(std::vector<uint8_t>* in, CmHdr* h, std::vector<uint8_t>* data) {
  if (in->size() < sizeof(CmHdr)) return 0;
  std::memcpy(h, in->data(), sizeof(*h));
  if (h->magic != kCmMagic || h->len > kSaMaxPriv) return -1;
  if (in->size() < sizeof(CmHdr) + h->len) return 0;
  data->assign(in->begin() + sizeof(CmHdr), in->begin() + sizeof(CmHdr) + h->len);
  in->erase(in->begin(), in->begin() + sizeof(CmHdr) + h->len);
  return 1;
}

void close_fd(int* fd) {
  if (*fd >= 0) {
    ucs_async_remove_handler(*fd, 1);  // no-op (NO_ELEM) for a socket never watched
    ::close(*fd);
  }
  *fd = -1;
}

void on_socket_event(int fd, ucs_event_set_types_t events, void* arg);

// Edge-triggered: every reader here drains its socket to EAGAIN, and a socket whose data waits
// for the user (a delivered request) must not wake the async thread again and again.
void watch(Cm* cm, int fd, bool writable = false) {
  ucs_async_context_t* a = async_of(cm);
  const ucs_async_mode_t mode = reinterpret_cast<xpufab_async_context_head_t*>(a)->mode;
  if (mode == UCS_ASYNC_MODE_POLL) return;  // no thread to wake: progress scans
  int events = UCS_EVENT_SET_EVREAD | UCS_EVENT_SET_EVERR | UCS_EVENT_SET_EDGE_TRIGGERED;
  if (writable) events |= UCS_EVENT_SET_EVWRITE;
  ucs_async_set_event_handler(mode, fd, static_cast<ucs_event_set_types_t>(events), on_socket_event, cm, a);
}

uct_cm_remote_data_t remote_data(const uint8_t* dev, const std::vector<uint8_t>& priv) {
  uct_cm_remote_data_t rd{};
  rd.field_mask = UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR | UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR_LENGTH |
                  UCT_CM_REMOTE_DATA_FIELD_CONN_PRIV_DATA |
                  UCT_CM_REMOTE_DATA_FIELD_CONN_PRIV_DATA_LENGTH;
  rd.dev_addr = reinterpret_cast<const uct_device_addr_t*>(dev);  // the peer's srd device address
  rd.dev_addr_length = 16;
  rd.conn_priv_data = priv.empty() ? nullptr : priv.data();
  rd.conn_priv_data_length = priv.size();
  return rd;
}

// ---- the user callbacks, delivered after a progress scan ----

using Event = std::function<void()>;

void client_connected(CmEp* ep, ucs_status_t status, const std::vector<uint8_t>& priv) {
  uct_cm_remote_data_t rd = remote_data(ep->peer_dev, priv);
  uct_cm_ep_client_connect_args_t a{};
  a.field_mask = UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_REMOTE_DATA |
                 UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_STATUS;
  a.remote_data = &rd;
  a.status = status;
  ep->connect_cb(&ep->super.super, ep->user_data, &a);
}

// Defers a callback on ep: it runs only if ep still exists by then.
void defer(std::vector<Event>* ev, CmEp* ep, std::function<void(CmEp*)> f) {
  Cm* cm = ep->cm;
  const uint64_t serial = ep->serial;
  ev->push_back([cm, serial, f] {
    auto it = cm->eps.find(serial);
    if (it != cm->eps.end()) f(it->second);
  });
}

// The client failed before its connection was up: the user hears it through the callback the
// current step has (resolve before uct_ep_connect, connect after).
void client_fail(std::vector<Event>* ev, CmEp* ep, ucs_status_t status) {
  const bool resolving = ep->state == CmEp::kConnecting && ep->resolve_cb != nullptr;
  ep->state = CmEp::kFailed;
  close_fd(&ep->fd);
  defer(ev, ep, [status, resolving](CmEp* e) {
    if (resolving) {
      uct_cm_ep_resolve_args_t a{};
      a.field_mask = UCT_CM_EP_RESOLVE_ARGS_FIELD_STATUS;
      a.status = status;
      e->resolve_cb(e->user_data, &a);
    } else {
      client_connected(e, status, {});
    }
  });
}

void remote_gone(std::vector<Event>* ev, CmEp* ep) {
  if (ep->remote_disc) return;
  ep->remote_disc = true;
  defer(ev, ep, [](CmEp* e) { e->disconnect_cb(&e->super.super, e->user_data); });
}

ucs_status_t send_request(CmEp* ep, const void* priv, size_t len) {
  if (len > kSaMaxPriv) return UCS_ERR_EXCEEDS_LIMIT;
  if (!send_frame(ep->cm, ep->fd, kCmRequest, UCS_OK, priv, static_cast<uint32_t>(len))) return UCS_ERR_IO_ERROR;
  ep->state = CmEp::kWaitReply;
  ep->cm->next_scan = 0;
  return UCS_OK;
}

void client_progress(CmEp* ep, std::vector<Event>* ev) {
  if (ep->state == CmEp::kConnecting) {
    pollfd p{ep->fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return;
    int err = 0;
    socklen_t l = sizeof(err);
    getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &l);
    if (err != 0) {
      client_fail(ev, ep, UCS_ERR_UNREACHABLE);
      return;
    }
    if (ep->resolve_cb) {  // the user sends its private data with uct_ep_connect
      ep->state = CmEp::kWaitConnect;
      defer(ev, ep, [](CmEp* e) {
        uct_cm_ep_resolve_args_t a{};
        a.field_mask = UCT_CM_EP_RESOLVE_ARGS_FIELD_DEV_NAME | UCT_CM_EP_RESOLVE_ARGS_FIELD_STATUS;
        std::strncpy(a.dev_name, e->cm->dev_name.c_str(), UCT_DEVICE_NAME_MAX - 1);
        a.status = UCS_OK;
        e->resolve_cb(e->user_data, &a);
      });
      return;
    }
    std::vector<uint8_t> priv(kSaMaxPriv);
    ssize_t n = 0;
    if (ep->pack_cb) {
      uct_cm_ep_priv_data_pack_args_t pa{};
      pa.field_mask = UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME;
      std::strncpy(pa.dev_name, ep->cm->dev_name.c_str(), UCT_DEVICE_NAME_MAX - 1);
      n = ep->pack_cb(ep->user_data, &pa, priv.data());
    }
    const ucs_status_t st = n < 0 ? static_cast<ucs_status_t>(n)
                                  : send_request(ep, priv.data(), static_cast<size_t>(n));
    if (st != UCS_OK) client_fail(ev, ep, st);
    return;
  }
  if (ep->fd < 0 || ep->state == CmEp::kFailed) return;
  const bool alive = read_avail(ep->fd, &ep->in);
  CmHdr h;
  std::vector<uint8_t> data;
  int r;
  while ((r = take_frame(&ep->in, &h, &data)) == 1) {
    if (ep->state == CmEp::kWaitReply && h.type == kCmReply) {
      const auto st = static_cast<ucs_status_t>(h.status);
      if (st != UCS_OK) {
        ep->state = CmEp::kFailed;
        close_fd(&ep->fd);
        defer(ev, ep, [st](CmEp* e) { client_connected(e, st, {}); });
        return;
      }
      ep->state = CmEp::kConnected;
      std::memcpy(ep->peer_dev, h.dev, sizeof(ep->peer_dev));
      defer(ev, ep, [data](CmEp* e) { client_connected(e, UCS_OK, data); });
    } else if (ep->state == CmEp::kConnected && h.type == kCmDisconnect) {
      remote_gone(ev, ep);
    } else {
      r = -1;
      break;
    }
  }
  if (r < 0 || !alive) {
    if (ep->state == CmEp::kConnected)
      remote_gone(ev, ep);
    else if (ep->state != CmEp::kFailed)
      client_fail(ev, ep, r < 0 ? UCS_ERR_IO_ERROR : UCS_ERR_CONNECTION_RESET);
  }
}

void server_progress(CmEp* ep, std::vector<Event>* ev) {
  if (ep->fd < 0 || ep->remote_disc) return;
  const bool alive = read_avail(ep->fd, &ep->in);
  CmHdr h;
  std::vector<uint8_t> data;
  int r;
  while ((r = take_frame(&ep->in, &h, &data)) == 1) {
    if (h.type == kCmNotify && !ep->notified) {
      ep->notified = true;
      const auto st = static_cast<ucs_status_t>(h.status);
      defer(ev, ep, [st](CmEp* e) {
        uct_cm_ep_server_conn_notify_args_t a{};
        a.field_mask = UCT_CM_EP_SERVER_CONN_NOTIFY_ARGS_FIELD_STATUS;
        a.status = st;
        e->notify_cb(&e->super.super, e->user_data, &a);
      });
    } else if (h.type == kCmDisconnect) {
      remote_gone(ev, ep);
    } else {
      r = -1;
      break;
    }
  }
  if (r < 0 || !alive) {
    if (!ep->notified) {  // the client went away before it was connected
      ep->notified = true;
      defer(ev, ep, [](CmEp* e) {
        uct_cm_ep_server_conn_notify_args_t a{};
        a.field_mask = UCT_CM_EP_SERVER_CONN_NOTIFY_ARGS_FIELD_STATUS;
        a.status = UCS_ERR_CONNECTION_RESET;
        e->notify_cb(&e->super.super, e->user_data, &a);
      });
    }
    remote_gone(ev, ep);
  }
}

void conn_drop(Conn* c) {
  close_fd(&c->fd);
  c->listener->conns.remove(c);
  delete c;
}

void listener_progress(Listener* l, std::vector<Event>* ev) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(l->fd, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    l->conns.push_back(new Conn{l, fd, peer, len, {}, false});
    watch(l->cm, fd);
  }
  for (auto it = l->conns.begin(); it != l->conns.end();) {
    Conn* c = *it++;
    if (c->delivered) continue;
    const bool alive = read_avail(c->fd, &c->in);
    CmHdr h;
    std::vector<uint8_t> data;
    const int r = take_frame(&c->in, &h, &data);
    if (r == 1 && h.type == kCmRequest) {
      c->delivered = true;
      std::memcpy(c->dev, h.dev, sizeof(c->dev));
      Cm* cm = l->cm;
      ev->push_back([cm, l, c, data] {
        // Both may be gone by now: the listener destroyed (with its requests) by an earlier event.
        bool live = false;
        for (Listener* x : cm->listeners)
          for (Conn* y : x->conns) live |= x == l && y == c;
        if (!live) return;
        uct_cm_remote_data_t rd = remote_data(c->dev, data);
        uct_cm_listener_conn_request_args_t a{};
        a.field_mask = UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_DEV_NAME |
                       UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CONN_REQUEST |
                       UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_REMOTE_DATA |
                       UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CLIENT_ADDR;
        std::strncpy(a.dev_name, cm->dev_name.c_str(), UCT_DEVICE_NAME_MAX - 1);
        a.conn_request = reinterpret_cast<uct_conn_request_h>(c);
        a.remote_data = &rd;
        a.client_address.addr = reinterpret_cast<const sockaddr*>(&c->peer);
        a.client_address.addrlen = c->peer_len;
        l->cb(&l->super, l->arg, &a);
      });
    } else if (r != 0 || !alive) {
      conn_drop(c);  // not our protocol, or gone before asking
    }
  }
}

uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// An established CM endpoint lives as long as the UCP endpoint, and the worker's progress runs
// this on every call: the sockets are looked at again at once after something happened, and
// otherwise at most every kIdleScanNs, so that the data path does not pay a system call per
// endpoint per progress call.
constexpr uint64_t kIdleScanNs = 50000;
constexpr uint64_t kNever = UINT64_MAX;

// Looks at every socket and delivers what happened; the caller holds the async lock.
unsigned cm_scan(Cm* cm) {
  std::vector<Event> ev;
  for (Listener* l : cm->listeners) listener_progress(l, &ev);
  for (auto& kv : cm->eps) {
    if (kv.second->server)
      server_progress(kv.second, &ev);
    else
      client_progress(kv.second, &ev);
  }
  if (cm->listeners.empty() && cm->eps.empty())
    cm->next_scan = kNever;
  else
    cm->next_scan = ev.empty() ? now_ns() + kIdleScanNs : 0;
  for (auto& e : ev) e();
  return static_cast<unsigned>(ev.size());
}

// The async thread (or, for an event missed while the context was blocked, the thread that
// unblocks it), with the context blocked.
void on_socket_event(int, ucs_event_set_types_t, void* arg) {
  Cm* cm = static_cast<Cm*>(arg);
  AsyncGuard g(cm);
  cm_scan(cm);
}

unsigned cm_progress(void* arg) {
  Cm* cm = static_cast<Cm*>(arg);
  const uint64_t next = cm->next_scan.load(std::memory_order_relaxed);
  if (next == kNever || (next != 0 && now_ns() < next)) return 0;
  AsyncGuard g(cm);
  return cm_scan(cm);
}

// ---- endpoint ops (through the CM's interface) ----

ucs_status_t ep_connect(uct_ep_h tl, const uct_ep_connect_params_t* params) {
  CmEp* ep = cep_of(tl);
  AsyncGuard g(ep->cm);
  if (ep->server || params == nullptr) return UCS_ERR_INVALID_PARAM;
  if (ep->state != CmEp::kWaitConnect) return ep->state == CmEp::kFailed ? UCS_ERR_NOT_CONNECTED : UCS_ERR_BUSY;
  const void* priv = (params->field_mask & UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA) ? params->private_data : nullptr;
  const size_t len = (params->field_mask & UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA_LENGTH) ? params->private_data_length : 0;
  if (len != 0 && priv == nullptr) return UCS_ERR_INVALID_PARAM;
  return send_request(ep, priv, len);
}

ucs_status_t ep_conn_notify(uct_ep_h tl) {
  CmEp* ep = cep_of(tl);
  AsyncGuard g(ep->cm);
  if (ep->server) return UCS_ERR_INVALID_PARAM;
  if (ep->state != CmEp::kConnected || ep->fd < 0) return UCS_ERR_NOT_CONNECTED;
  return send_frame(ep->cm, ep->fd, kCmNotify, UCS_OK, nullptr, 0) ? UCS_OK : UCS_ERR_IO_ERROR;
}

ucs_status_t ep_disconnect(uct_ep_h tl, unsigned) {
  CmEp* ep = cep_of(tl);
  AsyncGuard g(ep->cm);
  if (ep->state == CmEp::kFailed) return UCS_ERR_NOT_CONNECTED;
  if (ep->local_disc) return ep->remote_disc ? UCS_ERR_NOT_CONNECTED : UCS_INPROGRESS;
  if (ep->state != CmEp::kConnected) return UCS_ERR_BUSY;
  ep->local_disc = true;
  ep->cm->next_scan = 0;
  if (ep->fd >= 0) {  // also after the peer's: it waits for ours
    send_frame(ep->cm, ep->fd, kCmDisconnect, UCS_OK, nullptr, 0);
    ::shutdown(ep->fd, SHUT_WR);
  }
  return UCS_OK;
}

void ep_destroy(uct_ep_h tl) {
  CmEp* ep = cep_of(tl);
  AsyncGuard g(ep->cm);
  close_fd(&ep->fd);
  ep->cm->eps.erase(ep->serial);
  delete ep;
}

ucs_status_t ep_flush(uct_ep_h, unsigned, uct_completion_t*) { return UCS_OK; }
ucs_status_t ep_fence(uct_ep_h, unsigned) { return UCS_OK; }
void ep_pending_purge(uct_ep_h, uct_pending_purge_callback_t, void*) {}
ucs_status_t ep_pending_add(uct_ep_h, uct_pending_req_t*, unsigned) { return UCS_ERR_UNSUPPORTED; }
unsigned iface_progress(uct_iface_h tl) {
  return cm_progress(reinterpret_cast<char*>(tl) - offsetof(uct_cm_t, iface));
}
ucs_status_t iface_flush(uct_iface_h, unsigned, uct_completion_t*) { return UCS_OK; }
ucs_status_t iface_fence(uct_iface_h, unsigned) { return UCS_OK; }
void iface_close(uct_iface_h) {}  // the CM closes through uct_cm_close

uct_iface_ops_t make_iface_ops() {
  uct_iface_ops_t o{};
  o.ep_connect = ep_connect;
  o.ep_disconnect = ep_disconnect;
  o.cm_ep_conn_notify = ep_conn_notify;
  o.ep_destroy = ep_destroy;
  o.ep_flush = ep_flush;
  o.ep_fence = ep_fence;
  o.ep_pending_add = ep_pending_add;
  o.ep_pending_purge = ep_pending_purge;
  o.iface_progress = iface_progress;
  o.iface_flush = iface_flush;
  o.iface_fence = iface_fence;
  o.iface_close = iface_close;
  return o;
}
uct_iface_ops_t g_cm_iface_ops = make_iface_ops();

void no_disconnect_cb(uct_ep_h, void*) {}

CmEp* new_ep(Cm* cm, const uct_ep_params_t* p, bool server) {
  auto* ep = new CmEp();
  ep->super.super.iface = &cm->super.iface.super;
  ep->cm = cm;
  ep->serial = cm->next_serial++;
  ep->server = server;
  ep->user_data = (p->field_mask & UCT_EP_PARAM_FIELD_USER_DATA) ? p->user_data : nullptr;
  if (p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB) ep->pack_cb = p->sockaddr_pack_cb;
  if (p->field_mask & UCT_EP_PARAM_FIELD_CM_RESOLVE_CB) ep->resolve_cb = p->cm_resolve_cb;
  ep->disconnect_cb =
      (p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB) ? p->disconnect_cb : no_disconnect_cb;
  return ep;
}

ucs_status_t server_ep_create(Cm* cm, const uct_ep_params_t* p, uct_ep_h* ep_p) {
  Conn* c = reinterpret_cast<Conn*>(p->conn_request);
  bool known = false;
  for (Listener* l : cm->listeners)
    for (Conn* x : l->conns)
      if (x == c && x->delivered) known = true;
  if (!known) return UCS_ERR_INVALID_PARAM;
  if (!(p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_NOTIFY_CB_SERVER) || p->sockaddr_cb_server == nullptr)
    return UCS_ERR_INVALID_PARAM;
  std::vector<uint8_t> priv;
  if (p->field_mask & UCT_EP_PARAM_FIELD_PRIV_DATA) {
    const size_t len = (p->field_mask & UCT_EP_PARAM_FIELD_PRIV_DATA_LENGTH) ? p->private_data_length : 0;
    if (len > kSaMaxPriv) return UCS_ERR_EXCEEDS_LIMIT;
    if (len != 0 && p->private_data == nullptr) return UCS_ERR_INVALID_PARAM;
    priv.assign(static_cast<const uint8_t*>(p->private_data), static_cast<const uint8_t*>(p->private_data) + len);
  } else if ((p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB) && p->sockaddr_pack_cb) {
    priv.resize(kSaMaxPriv);
    uct_cm_ep_priv_data_pack_args_t pa{};
    pa.field_mask = UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME;
    std::strncpy(pa.dev_name, cm->dev_name.c_str(), UCT_DEVICE_NAME_MAX - 1);
    const void* ud = (p->field_mask & UCT_EP_PARAM_FIELD_USER_DATA) ? p->user_data : nullptr;
    const ssize_t n = p->sockaddr_pack_cb(const_cast<void*>(ud), &pa, priv.data());
    if (n < 0) return static_cast<ucs_status_t>(n);
    if (static_cast<size_t>(n) > kSaMaxPriv) return UCS_ERR_EXCEEDS_LIMIT;
    priv.resize(static_cast<size_t>(n));
  }
  CmEp* ep = new_ep(cm, p, true);
  ep->notify_cb = p->sockaddr_cb_server;
  ep->peer = c->peer;
  ep->peer_len = c->peer_len;
  std::memcpy(ep->peer_dev, c->dev, sizeof(ep->peer_dev));
  ep->fd = c->fd;
  ep->in = std::move(c->in);
  c->fd = -1;
  conn_drop(c);
  if (!send_frame(ep->cm, ep->fd, kCmReply, UCS_OK, priv.data(), static_cast<uint32_t>(priv.size()))) {
    close_fd(&ep->fd);
    delete ep;
    return UCS_ERR_IO_ERROR;
  }
  ep->state = CmEp::kConnected;
  cm->eps[ep->serial] = ep;
  cm->next_scan = 0;
  *ep_p = &ep->super.super;
  return UCS_OK;
}

ucs_status_t client_ep_create(Cm* cm, const uct_ep_params_t* p, uct_ep_h* ep_p) {
  if (!(p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR) || p->sockaddr == nullptr) return UCS_ERR_INVALID_PARAM;
  const socklen_t len = addr_len(p->sockaddr->addr, p->sockaddr->addrlen);
  if (len == 0) return UCS_ERR_INVALID_PARAM;
  if (!(p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT) || p->sockaddr_cb_client == nullptr)
    return UCS_ERR_INVALID_PARAM;
  const bool resolve = (p->field_mask & UCT_EP_PARAM_FIELD_CM_RESOLVE_CB) && p->cm_resolve_cb;
  const bool pack = (p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB) && p->sockaddr_pack_cb;
  if (resolve == pack) return UCS_ERR_INVALID_PARAM;  // exactly one way to give private data
  const int fd = ::socket(p->sockaddr->addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UCS_ERR_IO_ERROR;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (p->field_mask & UCT_EP_PARAM_FIELD_LOCAL_SOCKADDR) {
    const socklen_t ll = p->local_sockaddr ? addr_len(p->local_sockaddr->addr, p->local_sockaddr->addrlen) : 0;
    if (ll == 0 || ::bind(fd, p->local_sockaddr->addr, ll) != 0) {
      ::close(fd);
      return ll == 0 ? UCS_ERR_INVALID_PARAM : UCS_ERR_BUSY;
    }
  }
  if (::connect(fd, p->sockaddr->addr, len) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    ::close(fd);
    return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH ? UCS_ERR_UNREACHABLE : UCS_ERR_IO_ERROR;
  }
  CmEp* ep = new_ep(cm, p, false);
  ep->connect_cb = p->sockaddr_cb_client;
  ep->fd = fd;
  watch(cm, fd, true);  // writable: the connection is up
  std::memcpy(&ep->peer, p->sockaddr->addr, len);
  ep->peer_len = len;
  ep->state = CmEp::kConnecting;
  cm->eps[ep->serial] = ep;
  cm->next_scan = 0;
  *ep_p = &ep->super.super;
  return UCS_OK;
}

ucs_status_t cm_ep_create(const uct_ep_params_t* p, uct_ep_h* ep_p) {
  if (p == nullptr || ep_p == nullptr || !(p->field_mask & UCT_EP_PARAM_FIELD_CM) || p->cm == nullptr)
    return UCS_ERR_INVALID_PARAM;
  // As UCX's base CM: the callbacks may come from any context, and the caller must say it copes.
  if (!(p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS) || !(p->sockaddr_cb_flags & UCT_CB_FLAG_ASYNC))
    return UCS_ERR_UNSUPPORTED;
  if ((p->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB) && p->disconnect_cb == nullptr)
    return UCS_ERR_INVALID_PARAM;
  Cm* cm = cm_of(p->cm);
  AsyncGuard g(cm);
  if (p->field_mask & UCT_EP_PARAM_FIELD_CONN_REQUEST) return server_ep_create(cm, p, ep_p);
  return client_ep_create(cm, p, ep_p);
}

// ---- listeners ----

ucs_status_t listener_create(uct_cm_h tl, const struct sockaddr* sa, socklen_t sl,
                             const uct_listener_params_t* p, uct_listener_h* l_p) {
  Cm* cm = cm_of(tl);
  AsyncGuard g(cm);
  if (p == nullptr || l_p == nullptr || !(p->field_mask & UCT_LISTENER_PARAM_FIELD_CONN_REQUEST_CB) ||
      p->conn_request_cb == nullptr)
    return UCS_ERR_INVALID_PARAM;
  const socklen_t len = addr_len(sa, sl);
  if (len == 0) return UCS_ERR_INVALID_PARAM;
  int backlog = SOMAXCONN;
  if (p->field_mask & UCT_LISTENER_PARAM_FIELD_BACKLOG) {
    if (p->backlog <= 0) return UCS_ERR_INVALID_PARAM;
    backlog = p->backlog < SOMAXCONN ? p->backlog : SOMAXCONN;
  }
  const int fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UCS_ERR_IO_ERROR;
  const int one = 1;
  if (cm->super.config.reuse_addr) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, sa, len) != 0) {
    const int e = errno;
    ::close(fd);
    return e == EADDRINUSE ? UCS_ERR_BUSY : e == EADDRNOTAVAIL ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
  }
  if (::listen(fd, backlog) != 0) {
    const int e = errno;
    ::close(fd);
    return e == EADDRINUSE ? UCS_ERR_BUSY : UCS_ERR_IO_ERROR;
  }
  auto* l = new Listener{};
  l->super.cm = tl;
  l->cm = cm;
  l->fd = fd;
  l->cb = p->conn_request_cb;
  l->arg = (p->field_mask & UCT_LISTENER_PARAM_FIELD_USER_DATA) ? p->user_data : nullptr;
  cm->listeners.push_back(l);
  watch(cm, fd);
  cm->next_scan = 0;
  *l_p = &l->super;
  return UCS_OK;
}

ucs_status_t listener_reject(uct_listener_h tl, uct_conn_request_h req) {
  Listener* l = listener_of(tl);
  AsyncGuard g(l->cm);
  Conn* c = reinterpret_cast<Conn*>(req);
  for (Conn* x : l->conns) {
    if (x != c || !x->delivered) continue;
    const bool sent = send_frame(l->cm, c->fd, kCmReply, UCS_ERR_REJECTED, nullptr, 0);
    conn_drop(c);
    return sent ? UCS_OK : UCS_ERR_IO_ERROR;
  }
  return UCS_ERR_INVALID_PARAM;
}

ucs_status_t listener_query(uct_listener_h tl, uct_listener_attr_t* attr) {
  if (attr == nullptr) return UCS_ERR_INVALID_PARAM;
  if (attr->field_mask & UCT_LISTENER_ATTR_FIELD_SOCKADDR) {
    socklen_t len = sizeof(attr->sockaddr);
    if (getsockname(listener_of(tl)->fd, reinterpret_cast<sockaddr*>(&attr->sockaddr), &len) != 0)
      return UCS_ERR_IO_ERROR;
  }
  return UCS_OK;
}

void listener_destroy(uct_listener_h tl) {
  Listener* l = listener_of(tl);
  AsyncGuard g(l->cm);
  while (!l->conns.empty()) conn_drop(l->conns.front());  // requests nobody took: the clients see EOF
  close_fd(&l->fd);
  l->cm->listeners.remove(l);
  delete l;
}

// ---- the CM ----

ucs_status_t cm_query(uct_cm_h, uct_cm_attr_t* attr) {
  if (attr == nullptr) return UCS_ERR_INVALID_PARAM;
  if (attr->field_mask & UCT_CM_ATTR_FIELD_MAX_CONN_PRIV) attr->max_conn_priv = kSaMaxPriv;
  return UCS_OK;
}

void cm_close(uct_cm_h tl) {
  Cm* cm = cm_of(tl);
  {
    AsyncGuard g(cm);
    while (!cm->listeners.empty()) listener_destroy(&cm->listeners.front()->super);
    while (!cm->eps.empty()) ep_destroy(&cm->eps.begin()->second->super.super);
  }
  uct_worker_progress_unregister_safe(cm->worker, &cm->prog_id);
  release_device(cm->dev);
  delete cm;
}

uct_cm_ops_t g_cm_ops = {cm_close,        cm_query,         listener_create, listener_reject,
                         listener_query,  listener_destroy, cm_ep_create};

}  // namespace

ucs_status_t cm_open(uct_component_t* component, uct_worker_h worker, const uct_cm_config_t* config,
                     uct_cm_h* cm_p) {
  if (worker == nullptr || config == nullptr || cm_p == nullptr) return UCS_ERR_INVALID_PARAM;
  std::vector<backend::DeviceInfo> devs;
  std::string backend_name, why;
  auto* async = reinterpret_cast<uct_priv_worker_t*>(worker)->async;
  if (async == nullptr ||
      reinterpret_cast<xpufab_async_context_head_t*>(async)->mode == UCS_ASYNC_MODE_SIGNAL)
    return UCS_ERR_UNSUPPORTED;
  if (list_devices(&backend_name, &devs, &why) != 0 || devs.empty()) return UCS_ERR_NO_DEVICE;
  SharedDevice* dev = nullptr;
  // The first device, as the tl resources name it; held open so that the srd interfaces of this
  // process opened later share its identity (the device address the peers are told).
  if (acquire_device(devs.front().name, &dev) != 0) return UCS_ERR_NO_DEVICE;
  auto* cm = new Cm();
  cm->dev = dev;
  std::memcpy(cm->gid, dev->attr.gid, sizeof(cm->gid));
  std::memset(&cm->super, 0, sizeof(cm->super));
  cm->super.ops = &g_cm_ops;
  cm->super.component = component;
  cm->super.iface.super.ops = g_cm_iface_ops;
  cm->super.iface.internal_ops = &uct_base_iface_internal_ops;
  cm->super.iface.worker = reinterpret_cast<uct_priv_worker_t*>(worker);
  cm->super.iface.prog.id = UCS_CALLBACKQ_ID_NULL;
  cm->super.config.failure_level = static_cast<ucs_log_level_t>(config->failure);
  cm->super.config.reuse_addr = config->reuse_addr;
  cm->worker = worker;
  cm->prog_id = UCS_CALLBACKQ_ID_NULL;
  cm->dev_name = devs.front().name;
  uct_worker_progress_register_safe(worker, cm_progress, cm, 0, &cm->prog_id);
  *cm_p = &cm->super;
  return UCS_OK;
}

}  // namespace uct
}  // namespace xpufab
