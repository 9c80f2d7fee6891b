// Connection by socket address (UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR): an endpoint created with
// a sockaddr connects over TCP, sends its private data (sockaddr_pack_cb) with its own SRD
// address, and on the server's acceptance connects to the SRD address the reply carries, as to
// any interface; a rejection reaches the interface's error handler as UCS_ERR_REJECTED
// (sockaddr_wire.h). Everything runs from iface progress on a non-blocking socket.
//
// UCX 1.13's uct_iface_open never hands the SOCKADDR_SERVER/CLIENT open modes to a transport
// (its uct_find_tl(component, NULL) finds nothing: UCS_ERR_NO_DEVICE), so the server side is
// not a UCT interface here: uct_iface_accept/reject report UCS_ERR_UNSUPPORTED. In 1.13 it is
// the component's connection manager (cm.cc), which is what UCP uses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "api/uct/sockaddr_wire.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

static_assert(sizeof(IfaceAddr) == kSaIfaceAddrLen, "sockaddr_wire.h: interface address size");

socklen_t sockaddr_len(const struct sockaddr* sa) {
  if (sa == nullptr) return 0;
  if (sa->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (sa->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

// Writes all of a small message; the socket buffer holds it, so a short wait at most.
bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL);
    if (w > 0) {
      b += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

// Reads what is available into *in; false on EOF or an error.
bool read_some(int fd, std::vector<uint8_t>* in) {
  uint8_t b[2048];
  for (;;) {
    const ssize_t r = ::recv(fd, b, sizeof(b), 0);
    if (r > 0) {
      in->insert(in->end(), b, b + r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

void own_address(SrdIface* iface, uint8_t* dev, uint8_t* addr) {
  iface->super.super.ops.iface_get_device_address(&iface->super.super, reinterpret_cast<uct_device_addr_t*>(dev));
  iface->super.super.ops.iface_get_address(&iface->super.super, reinterpret_cast<uct_iface_addr_t*>(addr));
}

ucs_status_t iface_accept(uct_iface_h, uct_conn_request_h) { return UCS_ERR_UNSUPPORTED; }
ucs_status_t iface_reject(uct_iface_h, uct_conn_request_h) { return UCS_ERR_UNSUPPORTED; }

void client_fail(SrdIface* iface, SrdEp* ep, ucs_status_t st) {
  SaClient* c = ep->sa.get();
  if (c->fd >= 0) ::close(c->fd);
  c->fd = -1;
  c->state = SaClient::kDone;
  ep->sa_connecting = false;
  ep_fail(iface, ep, st);  // ops report its status from now on; the error handler runs once
}

unsigned client_progress(SrdIface* iface, SrdEp* ep) {
  SaClient* c = ep->sa.get();
  if (c->state == SaClient::kConnecting) {
    pollfd p{c->fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      client_fail(iface, ep, UCS_ERR_UNREACHABLE);
      return 1;
    }
    if (!write_all(c->fd, c->out.data(), c->out.size())) {
      client_fail(iface, ep, UCS_ERR_IO_ERROR);
      return 1;
    }
    c->out.clear();
    c->state = SaClient::kWaitReply;
  }
  if (c->state != SaClient::kWaitReply) return 0;
  const bool alive = read_some(c->fd, &c->in);
  if (c->in.size() < sizeof(SaReply)) {
    if (!alive) client_fail(iface, ep, UCS_ERR_UNREACHABLE);
    return alive ? 0 : 1;
  }
  SaReply r;
  std::memcpy(&r, c->in.data(), sizeof(r));
  if (r.magic != kSaMagic) {
    client_fail(iface, ep, UCS_ERR_IO_ERROR);
    return 1;
  }
  if (r.status != UCS_OK) {
    client_fail(iface, ep, static_cast<ucs_status_t>(r.status));
    return 1;
  }
  ::close(c->fd);
  c->fd = -1;
  c->state = SaClient::kDone;
  ep->sa_connecting = false;
  ucs_status_t st = ep_connect_addr(ep, reinterpret_cast<const uct_device_addr_t*>(r.dev), r.iface);
  if (st != UCS_OK) {
    ep_fail(iface, ep, st);
    return 1;
  }
  if (c->cb) {
    uct_cm_remote_data_t rd{};
    rd.field_mask = UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR | UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR_LENGTH;
    rd.dev_addr = reinterpret_cast<const uct_device_addr_t*>(r.dev);
    rd.dev_addr_length = sizeof(r.dev);
    uct_cm_ep_client_connect_args_t a{};
    a.field_mask = UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_REMOTE_DATA | UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_STATUS;
    a.remote_data = &rd;
    a.status = UCS_OK;
    c->cb(&ep->super.super, c->arg, &a);
  }
  return 1;
}

}  // namespace

void sockaddr_query(const SrdIface*, uct_iface_attr_t* attr) {
  attr->cap.flags |= UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR;
  attr->max_conn_priv = kSaMaxPriv;
}

unsigned sockaddr_progress(SrdIface* iface) {
  unsigned n = 0;
  if (iface->sa_clients == 0) return n;
  for (SrdEp* ep : iface->eps)
    if (ep->sa && ep->sa->state != SaClient::kDone) n += client_progress(iface, ep);
  return n;
}

ucs_status_t sockaddr_ep_start(SrdEp* ep, const uct_ep_params_t* params) {
  SrdIface* iface = ep->iface;
  if (params->sockaddr == nullptr) return UCS_ERR_INVALID_PARAM;
  const struct sockaddr* sa = params->sockaddr->addr;
  const socklen_t len = sockaddr_len(sa);
  if (len == 0 || params->sockaddr->addrlen < len) return UCS_ERR_INVALID_PARAM;
  auto c = std::make_unique<SaClient>();
  if (params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT) c->cb = params->sockaddr_cb_client;
  c->arg = (params->field_mask & UCT_EP_PARAM_FIELD_USER_DATA) ? params->user_data : nullptr;
  // The request: our SRD address and the user's private data.
  std::vector<uint8_t> priv(kSaMaxPriv);
  ssize_t plen = 0;
  if ((params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB) && params->sockaddr_pack_cb) {
    uct_cm_ep_priv_data_pack_args_t pa{};
    pa.field_mask = UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME;
    std::strncpy(pa.dev_name, iface->dev->name.c_str(), UCT_DEVICE_NAME_MAX - 1);
    plen = params->sockaddr_pack_cb(c->arg, &pa, priv.data());
    if (plen < 0) return static_cast<ucs_status_t>(plen);
    if (static_cast<size_t>(plen) > kSaMaxPriv) return UCS_ERR_EXCEEDS_LIMIT;
  }
  SaRequest rq{};
  rq.magic = kSaMagic;
  rq.priv_len = static_cast<uint32_t>(plen);
  own_address(iface, rq.dev, rq.iface);
  c->out.resize(sizeof(rq) + static_cast<size_t>(plen));
  std::memcpy(c->out.data(), &rq, sizeof(rq));
  std::memcpy(c->out.data() + sizeof(rq), priv.data(), static_cast<size_t>(plen));
  c->fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->fd < 0) return UCS_ERR_IO_ERROR;
  const int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(c->fd, sa, len) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    ::close(c->fd);
    return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH ? UCS_ERR_UNREACHABLE : UCS_ERR_IO_ERROR;
  }
  c->state = SaClient::kConnecting;
  ep->sa = std::move(c);
  ep->sa_connecting = true;
  iface->sa_clients++;
  return UCS_OK;
}

void sockaddr_ep_gone(SrdEp* ep) {
  if (!ep->sa) return;
  if (ep->sa->fd >= 0) ::close(ep->sa->fd);
  ep->sa->fd = -1;
  ep->iface->sa_clients--;
  ep->sa.reset();
}

int sockaddr_accessible(const ucs_sock_addr_t* sockaddr, uct_sockaddr_accessibility_t mode) {
  if (sockaddr == nullptr) return 0;
  const struct sockaddr* sa = sockaddr->addr;
  const socklen_t len = sockaddr_len(sa);
  if (len == 0 || sockaddr->addrlen < len) return 0;
  if (mode == UCT_SOCKADDR_ACC_REMOTE) return 1;
  // Local: an address of this host, i.e. one a socket can bind to (on any port).
  sockaddr_storage any{};
  std::memcpy(&any, sa, len);
  if (any.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&any)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&any)->sin6_port = 0;
  const int fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const int ok = ::bind(fd, reinterpret_cast<struct sockaddr*>(&any), len) == 0;
  ::close(fd);
  return ok;
}

void fill_sockaddr_ops(uct_iface_ops_t* o) {
  o->iface_accept = iface_accept;
  o->iface_reject = iface_reject;
}

}  // namespace uct
}  // namespace xpufab
