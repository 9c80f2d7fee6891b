// UCP client/server by socket address over the xpufab connection manager, in the manner of
// UCX's ucp_hello_world: a server process (ucp_listener_create, ucp_ep_create on the connection
// request) and this one as client (ucp_ep_create with UCP_EP_PARAM_FIELD_SOCK_ADDR), with
// UCX_TLS=srd and UCX_SOCKADDR_TLS_PRIORITY=xpufab, exchanging tagged messages and closing;
// a third client is rejected (ucp_listener_reject) and its error handler sees UCS_ERR_REJECTED.
// The server waits for its first connection request asleep on the worker's event fd
// (ucp_worker_arm, then poll: what ucp_worker_wait does), which only the CM's sockets can wake,
// and the first client sleeps the same way while its connection is made and its first message
// goes (the CM's resolve and reply, then the wireup over srd, each wake it).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "testing/support/process_util.h"

namespace {

constexpr ucp_tag_t kTag = 0x1234;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      std::fprintf(stderr, "%s: ", role);                  \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      std::exit(1);                                        \
    }                                                      \
  } while (0)

const char* role = "client";

struct Ucp {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;

  void open(uint64_t features = UCP_FEATURE_TAG) {
    ucp_config_t* cfg;
    CHECK(ucp_config_read(nullptr, nullptr, &cfg) == UCS_OK, "ucp_config_read");
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = features;
    CHECK(ucp_init(&p, cfg, &ctx) == UCS_OK, "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    CHECK(ucp_worker_create(ctx, &wp, &worker) == UCS_OK, "ucp_worker_create");
  }
  void close() {
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
  }

  // Waits for a request (or an immediate status) to finish.
  ucs_status_t wait(void* req) {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    auto t0 = std::chrono::steady_clock::now();
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
      ucp_worker_progress(worker);
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30), "request never completes");
    }
    ucp_request_free(req);
    return st;
  }

  std::string recv() {
    std::vector<char> b(256, 0);
    ucp_request_param_t rp{};
    void* r = ucp_tag_recv_nbx(worker, b.data(), b.size() - 1, kTag, ~ucp_tag_t(0), &rp);
    CHECK(wait(r) == UCS_OK, "tag recv");
    return std::string(b.data());
  }
  void send(ucp_ep_h ep, const std::string& s) {
    ucp_request_param_t rp{};
    void* r = ucp_tag_send_nbx(ep, s.data(), s.size() + 1, kTag, &rp);
    CHECK(wait(r) == UCS_OK, "tag send");
  }
  void close_ep(ucp_ep_h ep) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = 0;  // graceful: flush, then the CM's disconnect both ways
    const ucs_status_t st = wait(ucp_ep_close_nbx(ep, &rp));
    // Both sides close at once. A peer's disconnect that arrives while UCP flushes fails the
    // endpoint (UCS_ERR_CONNECTION_RESET), and the flush then reports the status of UCP's
    // failed-lane placeholders (UCS_ERR_ENDPOINT_TIMEOUT, ucp_ep.c): the peer is gone either way.
    CHECK(st == UCS_OK || st == UCS_ERR_CONNECTION_RESET || st == UCS_ERR_ENDPOINT_TIMEOUT, "ep close: %s",
          ucs_status_string(st));
  }
};

struct ServerState {
  Ucp* u = nullptr;
  ucp_listener_h listener = nullptr;
  std::vector<ucp_ep_h> eps;  // by connection order: the next client may connect before one closes
  int requests = 0;
  int rejected = 0;
};

// The first two requests are accepted, the third rejected.
void on_conn(ucp_conn_request_h req, void* arg) {
  auto* s = static_cast<ServerState*>(arg);
  if (++s->requests > 2) {
    CHECK(ucp_listener_reject(s->listener, req) == UCS_OK, "ucp_listener_reject");
    s->rejected++;
    return;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  ep.conn_request = req;
  ucp_ep_h e;
  CHECK(ucp_ep_create(s->u->worker, &ep, &e) == UCS_OK, "server ep create");
  s->eps.push_back(e);
}

// Arms the worker's event fd: UCS_OK once nothing is left to process.
void arm(Ucp* u) {
  ucs_status_t st;
  while ((st = ucp_worker_arm(u->worker)) == UCS_ERR_BUSY) ucp_worker_progress(u->worker);
  CHECK(st == UCS_OK, "ucp_worker_arm: %s", ucs_status_string(st));
}

// Sleeps on the worker's event fd (armed) until on_conn has run; each wake-up is followed by
// progress, which delivers the request. The poll's limit only turns a wake-up that never comes
// into a failure instead of a hang.
void sleep_until_request(Ucp* u, const ServerState& s) {
  int efd = -1;
  CHECK(ucp_worker_get_efd(u->worker, &efd) == UCS_OK, "ucp_worker_get_efd");
  for (;;) {
    pollfd p{efd, POLLIN, 0};
    CHECK(poll(&p, 1, 20000) == 1, "asleep on the worker's event fd: no connection request woke it");
    while (ucp_worker_progress(u->worker) != 0) {
    }
    if (s.requests > 0) return;
    arm(u);
  }
}

[[noreturn]] void server_main(int fd) {
  role = "server";
  Ucp u;
  u.open(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP);
  ServerState s;
  s.u = &u;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&a);
  lp.sockaddr.addrlen = sizeof(a);
  lp.conn_handler.cb = on_conn;
  lp.conn_handler.arg = &s;
  ucp_listener_h l;
  CHECK(ucp_listener_create(u.worker, &lp, &l) == UCS_OK, "ucp_listener_create");
  s.listener = l;
  ucp_listener_attr_t la{};
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  CHECK(ucp_listener_query(l, &la) == UCS_OK, "ucp_listener_query");
  const uint16_t port = ntohs(reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port);
  // The client connects once it has the port, which it gets once the server's worker is armed:
  // from then on only an event wakes the server.
  arm(&u);
  CHECK(write(fd, &port, sizeof(port)) == sizeof(port), "port");
  sleep_until_request(&u, s);
  // Two rounds: each a client that sends a greeting, gets the answer and closes.
  for (int round = 0; round < 2; ++round) {
    const std::string got = u.recv();
    CHECK(got == "hello " + std::to_string(round), "server got '%s'", got.c_str());
    CHECK(s.eps.size() > static_cast<size_t>(round), "a message but no endpoint");
    u.send(s.eps[round], "welcome " + std::to_string(round));
    // The client closes too; whichever side is first, both hear the other's disconnect.
    u.close_ep(s.eps[round]);
  }
  auto t0 = std::chrono::steady_clock::now();
  while (s.rejected == 0) {
    ucp_worker_progress(u.worker);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30), "no third client");
  }
  CHECK(s.requests == 3, "%d connection requests", s.requests);
  ucp_listener_destroy(l);
  u.close();
  char done = 'd';
  CHECK(write(fd, &done, 1) == 1, "done");
  std::exit(0);
}

// Sleeps on the worker's event fd until req completes: the CM's connection (resolve, reply) and
// the wireup over srd must each wake the worker.
void sleep_until_done(Ucp* u, void* req) {
  if (req == nullptr) return;
  CHECK(!UCS_PTR_IS_ERR(req), "request: %s", ucs_status_string(UCS_PTR_STATUS(req)));
  int efd = -1;
  CHECK(ucp_worker_get_efd(u->worker, &efd) == UCS_OK, "ucp_worker_get_efd");
  // As ucp_worker_wait is meant to be used: progress until there is nothing to do, arm, sleep.
  for (;;) {
    while (ucp_worker_progress(u->worker) != 0) {
    }
    if (ucp_request_check_status(req) != UCS_INPROGRESS) break;
    const ucs_status_t st = ucp_worker_arm(u->worker);
    if (st == UCS_ERR_BUSY) continue;
    CHECK(st == UCS_OK, "ucp_worker_arm: %s", ucs_status_string(st));
    pollfd p{efd, POLLIN, 0};
    CHECK(poll(&p, 1, 20000) == 1, "asleep on the worker's event fd: the send never completes");
  }
  const ucs_status_t st = ucp_request_check_status(req);
  CHECK(st == UCS_OK, "send: %s", ucs_status_string(st));
  ucp_request_free(req);
}

void client_round(Ucp* u, const sockaddr_in& to, int round) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&to);
  ep.sockaddr.addrlen = sizeof(to);
  ucp_ep_h e;
  CHECK(ucp_ep_create(u->worker, &ep, &e) == UCS_OK, "client ep create");
  const std::string hello = "hello " + std::to_string(round);
  if (round == 0) {  // asleep while the connection is made
    ucp_request_param_t rp{};
    sleep_until_done(u, ucp_tag_send_nbx(e, hello.data(), hello.size() + 1, kTag, &rp));
  } else {
    u->send(e, hello);
  }
  const std::string got = u->recv();
  CHECK(got == "welcome " + std::to_string(round), "client got '%s'", got.c_str());
  u->close_ep(e);
}

// A client the server rejects: its endpoint's error handler sees UCS_ERR_REJECTED.
void client_rejected(Ucp* u, const sockaddr_in& to) {
  ucs_status_t seen = UCS_OK;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&to);
  ep.sockaddr.addrlen = sizeof(to);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t st) { *static_cast<ucs_status_t*>(arg) = st; };
  ep.err_handler.arg = &seen;
  ucp_ep_h e;
  CHECK(ucp_ep_create(u->worker, &ep, &e) == UCS_OK, "client ep create");
  auto t0 = std::chrono::steady_clock::now();
  while (seen == UCS_OK) {
    ucp_worker_progress(u->worker);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30), "no rejection seen");
  }
  CHECK(seen == UCS_ERR_REJECTED, "error handler saw %s", ucs_status_string(seen));
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  u->wait(ucp_ep_close_nbx(e, &rp));
}

}  // namespace

int main(int argc, char** argv) {
  setenv("FI_EFA_EMU_FABRIC", "shm", 0);
  setenv("FI_EFA_EMU_FABRIC_KEY", ("ucp-sa-" + std::to_string(getpid())).c_str(), 0);
  setenv("UCX_TLS", "srd", 0);
  setenv("UCX_SOCKADDR_TLS_PRIORITY", "xpufab", 0);
  const char* lib = std::getenv("XPUFAB_UCT_LIB");
  if (lib == nullptr || dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", lib ? lib : "(XPUFAB_UCT_LIB unset)", dlerror());
    return 1;
  }
  if (argc == 3 && std::string(argv[1]) == "--server") server_main(std::atoi(argv[2]));
  int peer = -1;
  const pid_t pid = xpufab::testing::spawn_self("ucp_sockaddr_server", "--server", &peer);
  CHECK(pid >= 0, "spawning the server");
  uint16_t port = 0;
  CHECK(read(peer, &port, sizeof(port)) == sizeof(port), "no port from the server");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  Ucp u;
  u.open(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP);
  for (int round = 0; round < 2; ++round) client_round(&u, to, round);
  client_rejected(&u, to);
  u.close();
  char done = 0;
  CHECK(read(peer, &done, 1) == 1 && done == 'd', "the server did not finish");
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server exit status %d", st);
  std::printf("ucp sockaddr over xpufab cm: 2 rounds and a rejection ok\n");
  return 0;
}
