// The connection manager of component xpufab through Debian's public UCT API only, between two
// processes: a server (listener, uct_ep_create on a connection request or uct_listener_reject)
// and this one as client. The private data carries each side's srd addresses, and an active
// message over SRD proves the data path the exchange set up.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uct/api/uct.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/support/process_util.h"

namespace {

constexpr uint8_t kAmId = 7;

// What each side puts in its private data: a text and its srd addresses.
struct Priv {
  char text[32];
  uint8_t dev[32];
  uint8_t iface[64];
};

// A worker, the xpufab component's first MD with an srd interface, and its CM.
struct Side {
  ucs_async_context_t* async = nullptr;
  uct_worker_h worker = nullptr;
  uct_component_h comp = nullptr;
  uct_md_h md = nullptr;
  uct_iface_h iface = nullptr;
  uct_cm_h cm = nullptr;
  std::string dev;
  uint64_t ams = 0;

  static ucs_status_t on_am(void* arg, void*, size_t, unsigned) {
    static_cast<Side*>(arg)->ams++;
    return UCS_OK;
  }

  void open() {
    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async));
    ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker));
    uct_component_h* comps;
    unsigned n;
    ASSERT_EQ(UCS_OK, uct_query_components(&comps, &n));
    for (unsigned i = 0; i < n; ++i) {
      uct_component_attr_t a{};
      a.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_FLAGS;
      ASSERT_EQ(UCS_OK, uct_component_query(comps[i], &a));
      if (std::string(a.name) == "xpufab") {
        comp = comps[i];
        EXPECT_TRUE(a.flags & UCT_COMPONENT_FLAG_CM);
      }
    }
    uct_release_component_list(comps);
    ASSERT_NE(nullptr, comp) << "component xpufab not registered";
    uct_component_attr_t a{};
    a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    ASSERT_EQ(UCS_OK, uct_component_query(comp, &a));
    ASSERT_GE(a.md_resource_count, 1u);
    std::vector<uct_md_resource_desc_t> res(a.md_resource_count);
    a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    a.md_resources = res.data();
    ASSERT_EQ(UCS_OK, uct_component_query(comp, &a));
    dev = res[0].md_name;
    uct_md_config_t* mc;
    ASSERT_EQ(UCS_OK, uct_md_config_read(comp, nullptr, nullptr, &mc));
    ASSERT_EQ(UCS_OK, uct_md_open(comp, dev.c_str(), mc, &md));
    uct_config_release(mc);
    uct_iface_config_t* ic;
    ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, "srd", nullptr, nullptr, &ic));
    uct_iface_params_t p{};
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
    p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name = "srd";
    p.mode.device.dev_name = dev.c_str();
    ASSERT_EQ(UCS_OK, uct_iface_open(md, worker, &p, ic, &iface));
    uct_config_release(ic);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(iface, kAmId, on_am, this, 0));
    uct_cm_config_t* cc;
    ASSERT_EQ(UCS_OK, uct_cm_config_read(comp, nullptr, nullptr, &cc));
    ASSERT_EQ(UCS_OK, uct_cm_open(comp, worker, cc, &cm));
    uct_config_release(cc);
  }

  void close() {
    if (cm) uct_cm_close(cm);
    if (iface) uct_iface_close(iface);
    if (md) uct_md_close(md);
    if (worker) uct_worker_destroy(worker);
    if (async) ucs_async_context_destroy(async);
  }

  Priv priv(const std::string& text) {
    Priv p{};
    std::strncpy(p.text, text.c_str(), sizeof(p.text) - 1);
    EXPECT_EQ(UCS_OK, uct_iface_get_device_address(iface, reinterpret_cast<uct_device_addr_t*>(p.dev)));
    EXPECT_EQ(UCS_OK, uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t*>(p.iface)));
    return p;
  }

  // An srd endpoint to the addresses of a peer's private data.
  uct_ep_h srd_ep(const Priv& to) {
    uct_ep_params_t ep{};
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface = iface;
    ep.dev_addr = reinterpret_cast<const uct_device_addr_t*>(to.dev);
    ep.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(to.iface);
    uct_ep_h e = nullptr;
    EXPECT_EQ(UCS_OK, uct_ep_create(&ep, &e));
    return e;
  }

  void progress() { uct_worker_progress(worker); }
};

// ---- the server process ----

enum : uint8_t { kQuit = 'q', kCounts = 'c', kServerDisconnect = 'd' };

struct Server {
  Side s;
  uct_listener_h listener = nullptr;
  uint64_t requests = 0, accepted = 0, rejected = 0, notifies = 0, disconnects = 0;
  int64_t disconnect_rc = 1;  // what its own uct_ep_disconnect answered after the client's
  std::vector<uct_ep_h> eps;
  std::vector<uct_ep_h> srd_eps;
  std::string dev_name_seen;
  uint64_t bad_requests = 0;

  static void on_notify(uct_ep_h, void* arg, const uct_cm_ep_server_conn_notify_args_t* a) {
    auto* srv = static_cast<Server*>(arg);
    if (a->field_mask & UCT_CM_EP_SERVER_CONN_NOTIFY_ARGS_FIELD_STATUS && a->status == UCS_OK) srv->notifies++;
  }
  // As UCP does: the peer's disconnect is answered by this side's.
  static void on_disconnect(uct_ep_h ep, void* arg) {
    auto* srv = static_cast<Server*>(arg);
    srv->disconnects++;
    srv->disconnect_rc = uct_ep_disconnect(ep, 0);
  }
  static void on_request(uct_listener_h l, void* arg, const uct_cm_listener_conn_request_args_t* a) {
    auto* srv = static_cast<Server*>(arg);
    srv->requests++;
    const uint64_t want = UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_DEV_NAME |
                          UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CONN_REQUEST |
                          UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_REMOTE_DATA |
                          UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CLIENT_ADDR;
    if ((a->field_mask & want) != want || a->remote_data->conn_priv_data_length != sizeof(Priv) ||
        a->client_address.addr == nullptr || a->client_address.addr->sa_family != AF_INET) {
      srv->bad_requests++;
      uct_listener_reject(l, a->conn_request);
      return;
    }
    srv->dev_name_seen = a->dev_name;
    Priv from;
    std::memcpy(&from, a->remote_data->conn_priv_data, sizeof(from));
    if (a->remote_data->dev_addr_length != 16 || std::memcmp(a->remote_data->dev_addr, from.dev, 16) != 0)
      srv->bad_requests++;  // the client's srd device address, as for the client
    if (std::strncmp(from.text, "reject", 6) == 0) {
      if (uct_listener_reject(l, a->conn_request) == UCS_OK) srv->rejected++;
      return;
    }
    Priv reply = srv->s.priv(std::string("accepted:") + from.text);
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_CM | UCT_EP_PARAM_FIELD_CONN_REQUEST | UCT_EP_PARAM_FIELD_USER_DATA |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS | UCT_EP_PARAM_FIELD_SOCKADDR_NOTIFY_CB_SERVER |
                   UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB | UCT_EP_PARAM_FIELD_PRIV_DATA |
                   UCT_EP_PARAM_FIELD_PRIV_DATA_LENGTH;
    p.cm = srv->s.cm;
    p.conn_request = a->conn_request;
    p.user_data = srv;
    p.sockaddr_cb_flags = UCT_CB_FLAG_ASYNC;
    p.sockaddr_cb_server = on_notify;
    p.disconnect_cb = on_disconnect;
    p.private_data = &reply;
    p.private_data_length = sizeof(reply);
    uct_ep_h ep;
    if (uct_ep_create(&p, &ep) != UCS_OK) return;
    srv->accepted++;
    srv->eps.push_back(ep);
    srv->srd_eps.push_back(srv->s.srd_ep(from));  // and the data path back to the client (main loop)
  }
};

[[noreturn]] void server_main(int fd) {
  Server srv;
  srv.s.open();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uct_listener_params_t lp{};
  lp.field_mask = UCT_LISTENER_PARAM_FIELD_CONN_REQUEST_CB | UCT_LISTENER_PARAM_FIELD_USER_DATA;
  lp.conn_request_cb = Server::on_request;
  lp.user_data = &srv;
  if (uct_listener_create(srv.s.cm, reinterpret_cast<sockaddr*>(&a), sizeof(a), &lp, &srv.listener) != UCS_OK) _exit(6);
  uct_listener_attr_t la{};
  la.field_mask = UCT_LISTENER_ATTR_FIELD_SOCKADDR;
  if (uct_listener_query(srv.listener, &la) != UCS_OK) _exit(7);
  const uint16_t port = ntohs(reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port);
  if (write(fd, &port, sizeof(port)) != sizeof(port)) _exit(2);
  size_t greeted = 0;  // srd endpoints that sent their AM
  for (;;) {
    srv.s.progress();
    if (greeted < srv.srd_eps.size() && uct_ep_am_short(srv.srd_eps[greeted], kAmId, 0x5eed, nullptr, 0) == UCS_OK)
      greeted++;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) continue;
    uint8_t cmd;
    if (read(fd, &cmd, 1) != 1 || cmd == kQuit) break;
    if (cmd == kServerDisconnect) {
      int64_t rc = srv.eps.empty() ? 1 : uct_ep_disconnect(srv.eps.back(), 0);
      if (write(fd, &rc, sizeof(rc)) != sizeof(rc)) _exit(4);
    } else if (cmd == kCounts) {
      int64_t r[9] = {static_cast<int64_t>(srv.requests),   static_cast<int64_t>(srv.accepted),
                      static_cast<int64_t>(srv.rejected),   static_cast<int64_t>(srv.notifies),
                      static_cast<int64_t>(srv.disconnects), srv.disconnect_rc,
                      static_cast<int64_t>(srv.s.ams),      static_cast<int64_t>(srv.bad_requests),
                      srv.dev_name_seen == srv.s.dev ? 1 : 0};
      if (write(fd, r, sizeof(r)) != sizeof(r)) _exit(4);
    }
  }
  for (uct_ep_h ep : srv.srd_eps) uct_ep_destroy(ep);
  for (uct_ep_h ep : srv.eps) uct_ep_destroy(ep);
  uct_listener_destroy(srv.listener);
  srv.s.close();
  _exit(0);
}

// ---- the client: this process ----

struct Counts {
  int64_t requests, accepted, rejected, notifies, disconnects, disconnect_rc, ams, bad_requests, dev_name_ok;
};

struct Client {
  explicit Client(const char* t) : text(t) {}
  std::string text;
  Side* side = nullptr;
  int resolved = 0, connected = 0, disconnected = 0;
  ucs_status_t resolve_status = UCS_ERR_LAST, status = UCS_ERR_LAST;
  std::string dev_name;
  Priv reply{};
  size_t reply_len = 0, dev_addr_len = 0;
  uint8_t dev_addr[16] = {};

  static ucs_status_t on_resolve(void* arg, const uct_cm_ep_resolve_args_t* a) {
    auto* c = static_cast<Client*>(arg);
    c->resolved++;
    c->resolve_status = (a->field_mask & UCT_CM_EP_RESOLVE_ARGS_FIELD_STATUS) ? a->status : UCS_OK;
    if (a->field_mask & UCT_CM_EP_RESOLVE_ARGS_FIELD_DEV_NAME) c->dev_name = a->dev_name;
    return UCS_OK;
  }
  static ssize_t pack(void* arg, const uct_cm_ep_priv_data_pack_args_t* a, void* out) {
    auto* c = static_cast<Client*>(arg);
    if (!(a->field_mask & UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME)) return UCS_ERR_INVALID_PARAM;
    c->dev_name = a->dev_name;
    Priv p = c->side->priv(c->text);
    std::memcpy(out, &p, sizeof(p));
    return sizeof(p);
  }
  static void on_connect(uct_ep_h, void* arg, const uct_cm_ep_client_connect_args_t* a) {
    auto* c = static_cast<Client*>(arg);
    c->connected++;
    c->status = a->status;
    if (a->status == UCS_OK && (a->field_mask & UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_REMOTE_DATA)) {
      c->reply_len = a->remote_data->conn_priv_data_length;
      c->dev_addr_len = a->remote_data->dev_addr_length;
      std::memcpy(c->dev_addr, a->remote_data->dev_addr, std::min<size_t>(16, c->dev_addr_len));
      std::memcpy(&c->reply, a->remote_data->conn_priv_data, std::min(sizeof(c->reply), c->reply_len));
    }
  }
  static void on_disconnect(uct_ep_h, void* arg) { static_cast<Client*>(arg)->disconnected++; }
};

class CmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pid_ = xpufab::testing::spawn_self("uct_cm_server", "--cm-server", &fd_);
    ASSERT_GE(pid_, 0);
    local_.open();
    uint16_t port = 0;
    ASSERT_EQ(static_cast<ssize_t>(sizeof(port)), read(fd_, &port, sizeof(port)));
    server_.sin_family = AF_INET;
    server_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    server_.sin_port = htons(port);
  }

  void TearDown() override {
    for (uct_ep_h ep : eps_) uct_ep_destroy(ep);
    local_.close();
    uint8_t q = kQuit;
    EXPECT_EQ(1, write(fd_, &q, 1));
    int st = 0;
    waitpid(pid_, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    ::close(fd_);
  }

  uct_ep_params_t client_params(Client* c, const sockaddr_in* to, ucs_sock_addr_t* sa, bool resolve) {
    *sa = ucs_sock_addr_t{reinterpret_cast<const sockaddr*>(to), sizeof(*to)};
    c->side = &local_;
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_CM | UCT_EP_PARAM_FIELD_SOCKADDR | UCT_EP_PARAM_FIELD_USER_DATA |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS | UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT |
                   UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB |
                   (resolve ? UCT_EP_PARAM_FIELD_CM_RESOLVE_CB : UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB);
    p.cm = local_.cm;
    p.sockaddr = sa;
    p.user_data = c;
    p.sockaddr_cb_flags = UCT_CB_FLAG_ASYNC;
    p.sockaddr_cb_client = Client::on_connect;
    p.disconnect_cb = Client::on_disconnect;
    p.cm_resolve_cb = Client::on_resolve;
    p.sockaddr_pack_cb = Client::pack;
    return p;
  }

  // UCP's way: resolve, then uct_ep_connect with the private data.
  uct_ep_h connect(Client* c) {
    ucs_sock_addr_t sa;
    uct_ep_params_t p = client_params(c, &server_, &sa, true);
    uct_ep_h ep = nullptr;
    EXPECT_EQ(UCS_OK, uct_ep_create(&p, &ep));
    if (ep == nullptr) return nullptr;
    eps_.push_back(ep);
    uct_ep_connect_params_t cp{};
    cp.field_mask = UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA | UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA_LENGTH;
    until([&] { return c->resolved > 0; });
    EXPECT_EQ(UCS_OK, c->resolve_status);
    EXPECT_EQ(local_.dev, c->dev_name);
    Priv mine = local_.priv(c->text);
    cp.private_data = &mine;
    cp.private_data_length = sizeof(mine);
    EXPECT_EQ(UCS_OK, uct_ep_connect(ep, &cp));
    until([&] { return c->connected > 0; });
    return ep;
  }

  void until(const std::function<bool()>& done) {
    auto t0 = std::chrono::steady_clock::now();
    while (!done()) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "never happened";
    }
  }

  Counts counts() {
    uint8_t c = kCounts;
    Counts r{};
    EXPECT_EQ(1, write(fd_, &c, 1));
    EXPECT_EQ(static_cast<ssize_t>(sizeof(r)), read(fd_, &r, sizeof(r)));
    return r;
  }
  Counts until_server(const std::function<bool(const Counts&)>& done) {
    Counts n{};
    auto t0 = std::chrono::steady_clock::now();
    do {
      local_.progress();
      n = counts();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
        ADD_FAILURE() << "the server never got there";
        break;
      }
    } while (!done(n));
    return n;
  }

  Side local_;
  sockaddr_in server_{};
  std::vector<uct_ep_h> eps_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

TEST_F(CmTest, QueryCmAndAcceptedConnectionCarriesPrivateDataBothWays) {
  uct_cm_attr_t ca{};
  ca.field_mask = UCT_CM_ATTR_FIELD_MAX_CONN_PRIV;
  ASSERT_EQ(UCS_OK, uct_cm_query(local_.cm, &ca));
  EXPECT_GE(ca.max_conn_priv, sizeof(Priv));
  Client c("hello");
  uct_ep_h ep = connect(&c);
  ASSERT_NE(nullptr, ep);
  ASSERT_EQ(UCS_OK, c.status);
  ASSERT_EQ(sizeof(Priv), c.reply_len);
  EXPECT_STREQ("accepted:hello", c.reply.text);
  // The remote device address is the server's srd device address: UCP connects the lanes of
  // the peer's packed address with it.
  ASSERT_EQ(16u, c.dev_addr_len);
  EXPECT_EQ(0, std::memcmp(c.dev_addr, c.reply.dev, 16));
  EXPECT_EQ(UCS_OK, uct_cm_client_ep_conn_notify(ep));
  Counts n = until_server([](const Counts& k) { return k.notifies == 1; });
  EXPECT_EQ(1, n.requests);
  EXPECT_EQ(1, n.accepted);
  EXPECT_EQ(0, n.bad_requests);
  EXPECT_EQ(1, n.dev_name_ok) << "the request names the server's srd device";
  // The data path is SRD, both ways, to the addresses the private data carried.
  uct_ep_h srd = local_.srd_ep(c.reply);
  ASSERT_NE(nullptr, srd);
  ucs_status_t st;
  while ((st = uct_ep_am_short(srd, kAmId, 1, nullptr, 0)) == UCS_ERR_NO_RESOURCE) local_.progress();
  EXPECT_EQ(UCS_OK, st);
  until_server([](const Counts& k) { return k.ams == 1; });
  until([&] { return local_.ams == 1; });
  uct_ep_destroy(srd);
  // The client disconnects; the server hears it and disconnects back; the client hears that.
  EXPECT_EQ(UCS_OK, uct_ep_disconnect(ep, 0));
  n = until_server([](const Counts& k) { return k.disconnects == 1; });
  EXPECT_EQ(UCS_OK, n.disconnect_rc);
  until([&] { return c.disconnected == 1; });
  EXPECT_EQ(UCS_ERR_NOT_CONNECTED, uct_ep_disconnect(ep, 0));
  EXPECT_EQ(1, c.connected);
}

TEST_F(CmTest, ServerSideDisconnectReachesTheClient) {
  Client c("pack");
  ucs_sock_addr_t sa;
  uct_ep_params_t p = client_params(&c, &server_, &sa, false);  // private data by pack callback
  uct_ep_h ep;
  ASSERT_EQ(UCS_OK, uct_ep_create(&p, &ep));
  eps_.push_back(ep);
  until([&] { return c.connected > 0; });
  ASSERT_EQ(UCS_OK, c.status);
  EXPECT_STREQ("accepted:pack", c.reply.text);
  EXPECT_EQ(local_.dev, c.dev_name);
  EXPECT_EQ(UCS_OK, uct_cm_client_ep_conn_notify(ep));
  until_server([](const Counts& k) { return k.notifies == 1; });
  uint8_t cmd = kServerDisconnect;
  int64_t rc = 1;
  ASSERT_EQ(1, write(fd_, &cmd, 1));
  ASSERT_EQ(static_cast<ssize_t>(sizeof(rc)), read(fd_, &rc, sizeof(rc)));
  EXPECT_EQ(UCS_OK, rc);
  until([&] { return c.disconnected == 1; });
  EXPECT_EQ(UCS_OK, uct_ep_disconnect(ep, 0));
  EXPECT_EQ(UCS_ERR_NOT_CONNECTED, uct_ep_disconnect(ep, 0)) << "both sides are disconnected";
}

TEST_F(CmTest, RejectReachesTheClientAsRejected) {
  Client c("reject me");
  uct_ep_h ep = connect(&c);
  ASSERT_NE(nullptr, ep);
  EXPECT_EQ(1, c.connected);
  EXPECT_EQ(UCS_ERR_REJECTED, c.status);
  EXPECT_EQ(0, c.disconnected);
  EXPECT_EQ(UCS_ERR_NOT_CONNECTED, uct_ep_disconnect(ep, 0));
  EXPECT_EQ(UCS_ERR_NOT_CONNECTED, uct_cm_client_ep_conn_notify(ep));
  Counts n = counts();
  EXPECT_EQ(1, n.requests);
  EXPECT_EQ(0, n.accepted);
  EXPECT_EQ(1, n.rejected);
}

TEST_F(CmTest, BadParamsAndPeersGetErrors) {
  // Listeners: a callback is required, the address must be IP, a taken port is busy.
  uct_listener_params_t lp{};
  uct_listener_h l;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_listener_create(local_.cm, reinterpret_cast<sockaddr*>(&any), sizeof(any), &lp, &l));
  lp.field_mask = UCT_LISTENER_PARAM_FIELD_CONN_REQUEST_CB;
  lp.conn_request_cb = [](uct_listener_h, void*, const uct_cm_listener_conn_request_args_t*) {};
  sockaddr un{};
  un.sa_family = AF_UNIX;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_listener_create(local_.cm, &un, sizeof(un), &lp, &l));
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_listener_create(local_.cm, reinterpret_cast<sockaddr*>(&any), 4, &lp, &l));
  EXPECT_EQ(UCS_ERR_BUSY, uct_listener_create(local_.cm, reinterpret_cast<sockaddr*>(&server_), sizeof(server_), &lp, &l));
  lp.field_mask |= UCT_LISTENER_PARAM_FIELD_BACKLOG;
  lp.backlog = 0;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_listener_create(local_.cm, reinterpret_cast<sockaddr*>(&any), sizeof(any), &lp, &l));
  lp.backlog = 4;
  ASSERT_EQ(UCS_OK, uct_listener_create(local_.cm, reinterpret_cast<sockaddr*>(&any), sizeof(any), &lp, &l));
  int junk = 0;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_listener_reject(l, reinterpret_cast<uct_conn_request_h>(&junk)));
  uct_listener_destroy(l);

  // Endpoints: the ASYNC callback flag is required (as UCX's own CMs require), a sockaddr, a
  // client callback and exactly one way to give private data; a conn request must be real.
  Client c("x");
  ucs_sock_addr_t sa;
  uct_ep_h ep;
  uct_ep_params_t p = client_params(&c, &server_, &sa, true);
  p.sockaddr_cb_flags = 0;
  EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_ep_create(&p, &ep));
  p = client_params(&c, &server_, &sa, true);
  p.field_mask |= UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
  p = client_params(&c, &server_, &sa, true);
  p.field_mask &= ~static_cast<uint64_t>(UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
  p = client_params(&c, &server_, &sa, true);
  p.sockaddr = nullptr;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
  ucs_sock_addr_t bad{&un, sizeof(un)};
  p.sockaddr = &bad;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
  p = client_params(&c, &server_, &sa, true);
  p.field_mask |= UCT_EP_PARAM_FIELD_CONN_REQUEST;
  p.conn_request = reinterpret_cast<uct_conn_request_h>(&junk);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));

  // Nobody listening: the client hears it as unreachable, at once or through its resolve step.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in dead = any;
  ASSERT_EQ(0, bind(s, reinterpret_cast<sockaddr*>(&dead), sizeof(dead)));
  socklen_t dl = sizeof(dead);
  ASSERT_EQ(0, getsockname(s, reinterpret_cast<sockaddr*>(&dead), &dl));
  ::close(s);
  Client d("dead");
  p = client_params(&d, &dead, &sa, true);
  ucs_status_t st = uct_ep_create(&p, &ep);
  if (st == UCS_OK) {
    eps_.push_back(ep);
    until([&] { return d.resolved > 0; });
    EXPECT_EQ(UCS_ERR_UNREACHABLE, d.resolve_status);
  } else {
    EXPECT_EQ(UCS_ERR_UNREACHABLE, st);
  }

  // A connection the kernel has not made yet (the listener's accept queue is full, its SYN is
  // dropped): uct_ep_connect and uct_ep_disconnect are too early (UCS_ERR_BUSY). The CM runs
  // from the async thread, so only such a peer keeps an endpoint in that state long enough.
  int full = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in fa = any;
  ASSERT_EQ(0, bind(full, reinterpret_cast<sockaddr*>(&fa), sizeof(fa)));
  socklen_t fl = sizeof(fa);
  ASSERT_EQ(0, getsockname(full, reinterpret_cast<sockaddr*>(&fa), &fl));
  ASSERT_EQ(0, listen(full, 0));
  int filler = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(0, ::connect(filler, reinterpret_cast<sockaddr*>(&fa), sizeof(fa)));
  Client w("waiting");
  p = client_params(&w, &fa, &sa, true);
  ASSERT_EQ(UCS_OK, uct_ep_create(&p, &ep));
  uct_ep_connect_params_t early{};
  early.field_mask = UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA | UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA_LENGTH;
  EXPECT_EQ(UCS_ERR_BUSY, uct_ep_connect(ep, &early)) << "before the address is resolved";
  EXPECT_EQ(UCS_ERR_BUSY, uct_ep_disconnect(ep, 0)) << "not connected yet";
  EXPECT_EQ(0, w.resolved);
  uct_ep_destroy(ep);
  ::close(filler);
  ::close(full);

  // A peer that does not speak the protocol never becomes a connection request.
  int raw = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(0, ::connect(raw, reinterpret_cast<sockaddr*>(&server_), sizeof(server_)));
  const char garbage[64] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(static_cast<ssize_t>(sizeof(garbage)), send(raw, garbage, sizeof(garbage), 0));
  char b;
  pollfd pf{raw, POLLIN, 20000};
  ASSERT_EQ(1, poll(&pf, 1, 20000));
  EXPECT_EQ(0, recv(raw, &b, 1, 0)) << "the server closes it";
  ::close(raw);
  EXPECT_EQ(0, counts().requests);
  // The server still serves real clients after it.
  Client ok("after garbage");
  uct_ep_h good = connect(&ok);
  ASSERT_NE(nullptr, good);
  EXPECT_EQ(UCS_OK, ok.status);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("FI_EFA_EMU_FABRIC", "shm", 0);
  setenv("FI_EFA_EMU_FABRIC_KEY", ("uct-cm-" + std::to_string(getpid())).c_str(), 0);
  const char* lib = std::getenv("XPUFAB_UCT_LIB");
  if (lib == nullptr || dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", lib ? lib : "(XPUFAB_UCT_LIB unset)", dlerror());
    return 1;
  }
  if (argc == 3 && std::string(argv[1]) == "--cm-server") server_main(std::atoi(argv[2]));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
