// Prints the OpenUCX memo's support table for the srd transport: one column per backend and
// emulated profile (emu gen1..gen4, hw), each read from a live interface (its uct_iface_ops_t
// entries and the caps uct_iface_query reports) in a process of its own, since the backend and
// profile are chosen per process. A row is "Y" when the op is wired and its capability
// advertised, "-" when it is not wired, "off" when wired but not advertised on that device. The
// connection manager's rows come from a loopback connection through it (probe_cm).
//   uct_table [LIBUCT_XPUFAB]   (default: $XPUFAB_UCT_LIB)
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uct/api/uct.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

struct Row {
  const char* name;
  bool wired;
  uint64_t cap;   // cap.flags bit(s) that must be set too, 0 for none
  bool is_event;  // cap is in cap.event_flags
};

#define OP(o) (ops.o != nullptr)

std::vector<Row> rows(const uct_iface_ops_t& ops) {
  return {
      {"put_short", OP(ep_put_short), UCT_IFACE_FLAG_PUT_SHORT, false},
      {"put_bcopy", OP(ep_put_bcopy), UCT_IFACE_FLAG_PUT_BCOPY, false},
      {"put_zcopy", OP(ep_put_zcopy), UCT_IFACE_FLAG_PUT_ZCOPY, false},
      {"get_short", OP(ep_get_short), UCT_IFACE_FLAG_GET_SHORT, false},
      {"get_bcopy", OP(ep_get_bcopy), UCT_IFACE_FLAG_GET_BCOPY, false},
      {"get_zcopy", OP(ep_get_zcopy), UCT_IFACE_FLAG_GET_ZCOPY, false},
      {"am_short", OP(ep_am_short), UCT_IFACE_FLAG_AM_SHORT, false},
      {"am_short_iov", OP(ep_am_short_iov), UCT_IFACE_FLAG_AM_SHORT, false},
      {"am_bcopy", OP(ep_am_bcopy), UCT_IFACE_FLAG_AM_BCOPY, false},
      {"am_zcopy", OP(ep_am_zcopy), UCT_IFACE_FLAG_AM_ZCOPY, false},
      {"atomic_cswap64", OP(ep_atomic_cswap64), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"atomic_cswap32", OP(ep_atomic_cswap32), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"atomic32_post", OP(ep_atomic32_post), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"atomic64_post", OP(ep_atomic64_post), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"atomic32_fetch", OP(ep_atomic32_fetch), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"atomic64_fetch", OP(ep_atomic64_fetch), UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE, false},
      {"tag_eager_short", OP(ep_tag_eager_short), UCT_IFACE_FLAG_TAG_EAGER_SHORT, false},
      {"tag_eager_bcopy", OP(ep_tag_eager_bcopy), UCT_IFACE_FLAG_TAG_EAGER_BCOPY, false},
      {"tag_eager_zcopy", OP(ep_tag_eager_zcopy), UCT_IFACE_FLAG_TAG_EAGER_ZCOPY, false},
      {"tag_rndv_zcopy", OP(ep_tag_rndv_zcopy), UCT_IFACE_FLAG_TAG_RNDV_ZCOPY, false},
      {"tag_rndv_cancel", OP(ep_tag_rndv_cancel), UCT_IFACE_FLAG_TAG_RNDV_ZCOPY, false},
      {"tag_rndv_request", OP(ep_tag_rndv_request), UCT_IFACE_FLAG_TAG_RNDV_ZCOPY, false},
      {"iface_tag_recv_zcopy", OP(iface_tag_recv_zcopy), UCT_IFACE_FLAG_TAG_EAGER_BCOPY, false},
      {"iface_tag_recv_cancel", OP(iface_tag_recv_cancel), UCT_IFACE_FLAG_TAG_EAGER_BCOPY, false},
      {"ep_pending_add", OP(ep_pending_add), UCT_IFACE_FLAG_PENDING, false},
      {"ep_pending_purge", OP(ep_pending_purge), UCT_IFACE_FLAG_PENDING, false},
      {"ep_flush", OP(ep_flush), 0, false},
      {"ep_fence", OP(ep_fence), 0, false},
      {"ep_check", OP(ep_check), UCT_IFACE_FLAG_EP_CHECK, false},
      {"ep_create", OP(ep_create), 0, false},
      {"ep_destroy", OP(ep_destroy), 0, false},
      {"ep_get_address", OP(ep_get_address), UCT_IFACE_FLAG_CONNECT_TO_EP, false},
      {"ep_connect_to_ep", OP(ep_connect_to_ep), UCT_IFACE_FLAG_CONNECT_TO_EP, false},
      {"iface_accept", OP(iface_accept), UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR, false},
      {"iface_reject", OP(iface_reject), UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR, false},
      {"iface_flush", OP(iface_flush), 0, false},
      {"iface_fence", OP(iface_fence), 0, false},
      {"iface_progress_enable", OP(iface_progress_enable), 0, false},
      {"iface_progress_disable", OP(iface_progress_disable), 0, false},
      {"iface_progress", OP(iface_progress), 0, false},
      {"iface_event_fd_get", OP(iface_event_fd_get), UCT_IFACE_FLAG_EVENT_FD, true},
      {"iface_event_arm", OP(iface_event_arm), UCT_IFACE_FLAG_EVENT_FD, true},
      {"iface_close", OP(iface_close), 0, false},
      {"iface_query", OP(iface_query), 0, false},
      {"iface_get_device_address", OP(iface_get_device_address), 0, false},
      {"iface_get_address", OP(iface_get_address), 0, false},
      {"iface_is_reachable", OP(iface_is_reachable), 0, false},
  };
}

// The connection manager's rows (UCX 1.13 puts the server side of a sockaddr connection there,
// not on the transport interface), each "Y" only when a loopback connection in this process
// went through it: a client rejected, a client accepted, notify and disconnect both ways.
const char* const kCmRows[] = {"cm_open",           "listener_create",   "listener_query",
                               "conn_request_cb",   "listener_reject",   "ep_create (conn_req)",
                               "ep_connect (cm)",   "cm_ep_conn_notify", "ep_disconnect (cm)"};

struct CmProbe {
  uct_conn_request_h req = nullptr;
  int requests = 0, connects = 0, notifies = 0, disconnects = 0;
  ucs_status_t client_status = UCS_ERR_LAST;
  uct_worker_h worker = nullptr;

  void until(const int* counter, int want) {
    for (int i = 0; i < 200000 && *counter < want; ++i) uct_worker_progress(worker);
  }
};

std::map<std::string, bool> probe_cm(uct_component_h comp, uct_worker_h worker) {
  std::map<std::string, bool> ok;
  uct_component_attr_t ca{};
  ca.field_mask = UCT_COMPONENT_ATTR_FIELD_FLAGS;
  uct_cm_config_t* cc;
  uct_cm_h cm;
  if (uct_component_query(comp, &ca) != UCS_OK || !(ca.flags & UCT_COMPONENT_FLAG_CM) ||
      uct_cm_config_read(comp, nullptr, nullptr, &cc) != UCS_OK)
    return ok;
  const ucs_status_t opened = uct_cm_open(comp, worker, cc, &cm);
  uct_config_release(cc);
  if (opened != UCS_OK) return ok;
  ok["cm_open"] = true;
  CmProbe pr;
  pr.worker = worker;
  uct_listener_params_t lp{};
  lp.field_mask = UCT_LISTENER_PARAM_FIELD_CONN_REQUEST_CB | UCT_LISTENER_PARAM_FIELD_USER_DATA;
  lp.conn_request_cb = [](uct_listener_h, void* arg, const uct_cm_listener_conn_request_args_t* a) {
    static_cast<CmProbe*>(arg)->req = a->conn_request;
    static_cast<CmProbe*>(arg)->requests++;
  };
  lp.user_data = &pr;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uct_listener_h l;
  uct_listener_attr_t la{};
  la.field_mask = UCT_LISTENER_ATTR_FIELD_SOCKADDR;
  if (uct_listener_create(cm, reinterpret_cast<sockaddr*>(&sa), sizeof(sa), &lp, &l) != UCS_OK) {
    uct_cm_close(cm);
    return ok;
  }
  ok["listener_create"] = true;
  if (uct_listener_query(l, &la) == UCS_OK && reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port != 0) {
    ok["listener_query"] = true;
    sa.sin_port = reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port;
  }
  ucs_sock_addr_t to{reinterpret_cast<sockaddr*>(&sa), sizeof(sa)};
  auto client = [&](uct_ep_h* ep) {
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_CM | UCT_EP_PARAM_FIELD_SOCKADDR | UCT_EP_PARAM_FIELD_USER_DATA |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS | UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT | UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB;
    p.cm = cm;
    p.sockaddr = &to;
    p.user_data = &pr;
    p.sockaddr_cb_flags = UCT_CB_FLAG_ASYNC;
    p.sockaddr_pack_cb = [](void*, const uct_cm_ep_priv_data_pack_args_t*, void* out) -> ssize_t {
      std::memcpy(out, "probe", 5);
      return 5;
    };
    p.sockaddr_cb_client = [](uct_ep_h, void* arg, const uct_cm_ep_client_connect_args_t* a) {
      static_cast<CmProbe*>(arg)->client_status = a->status;
      static_cast<CmProbe*>(arg)->connects++;
    };
    p.disconnect_cb = [](uct_ep_h, void* arg) { static_cast<CmProbe*>(arg)->disconnects++; };
    return uct_ep_create(&p, ep) == UCS_OK;
  };
  uct_ep_h c1 = nullptr, c2 = nullptr, s2 = nullptr;
  if (client(&c1)) {
    pr.until(&pr.requests, 1);
    ok["conn_request_cb"] = pr.requests == 1;
    if (pr.requests == 1 && uct_listener_reject(l, pr.req) == UCS_OK) {
      pr.until(&pr.connects, 1);
      ok["listener_reject"] = pr.client_status == UCS_ERR_REJECTED;
    }
  }
  if (pr.requests == 1 && client(&c2)) {
    pr.until(&pr.requests, 2);
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_CM | UCT_EP_PARAM_FIELD_CONN_REQUEST | UCT_EP_PARAM_FIELD_USER_DATA |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS | UCT_EP_PARAM_FIELD_SOCKADDR_NOTIFY_CB_SERVER |
                   UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB;
    p.cm = cm;
    p.conn_request = pr.req;
    p.user_data = &pr;
    p.sockaddr_cb_flags = UCT_CB_FLAG_ASYNC;
    p.sockaddr_cb_server = [](uct_ep_h, void* arg, const uct_cm_ep_server_conn_notify_args_t*) {
      static_cast<CmProbe*>(arg)->notifies++;
    };
    p.disconnect_cb = [](uct_ep_h, void* arg) { static_cast<CmProbe*>(arg)->disconnects++; };
    if (pr.requests == 2 && uct_ep_create(&p, &s2) == UCS_OK) {
      pr.until(&pr.connects, 2);
      ok["ep_create (conn_req)"] = pr.client_status == UCS_OK;
      // The client's ops, as a CM endpoint's interface carries them.
      const uct_iface_ops_t& ops = c2->iface->ops;
      ok["ep_connect (cm)"] = ops.ep_connect != nullptr;
      if (ops.cm_ep_conn_notify && uct_cm_client_ep_conn_notify(c2) == UCS_OK) {
        pr.until(&pr.notifies, 1);
        ok["cm_ep_conn_notify"] = pr.notifies == 1;
      }
      if (ops.ep_disconnect && uct_ep_disconnect(c2, 0) == UCS_OK) {
        pr.until(&pr.disconnects, 1);  // the server's callback
        ok["ep_disconnect (cm)"] = pr.disconnects == 1 && uct_ep_disconnect(s2, 0) == UCS_OK;
      }
    }
  }
  for (uct_ep_h e : {c1, c2, s2})
    if (e) uct_ep_destroy(e);
  uct_listener_destroy(l);
  uct_cm_close(cm);
  return ok;
}

// Child side: opens srd on the first xpufab device and prints "row value" lines.
int probe() {
  ucs_async_context_t* async;
  uct_worker_h worker;
  if (ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK ||
      uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) != UCS_OK)
    return 1;
  uct_component_h* comps;
  unsigned n;
  if (uct_query_components(&comps, &n) != UCS_OK) return 1;
  uct_component_h comp = nullptr;
  for (unsigned i = 0; i < n; ++i) {
    uct_component_attr_t a{};
    a.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    if (uct_component_query(comps[i], &a) == UCS_OK && std::string(a.name) == "xpufab") comp = comps[i];
  }
  if (comp == nullptr) return 2;
  uct_component_attr_t a{};
  a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
  if (uct_component_query(comp, &a) != UCS_OK || a.md_resource_count == 0) return 3;  // no device
  std::vector<uct_md_resource_desc_t> res(a.md_resource_count);
  a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
  a.md_resources = res.data();
  uct_md_config_t* mc;
  uct_md_h md;
  uct_iface_config_t* ic;
  uct_iface_h iface;
  if (uct_component_query(comp, &a) != UCS_OK || uct_md_config_read(comp, nullptr, nullptr, &mc) != UCS_OK ||
      uct_md_open(comp, res[0].md_name, mc, &md) != UCS_OK ||
      uct_md_iface_config_read(md, "srd", nullptr, nullptr, &ic) != UCS_OK)
    return 4;
  uct_iface_params_t p{};
  // Opened as UCP opens it: with the unexpected-tag callbacks, which the tag rows need.
  p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE | UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB |
                 UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB;
  p.eager_cb = [](void*, void*, size_t, unsigned, uct_tag_t, uint64_t, void**) { return UCS_OK; };
  p.rndv_cb = [](void*, unsigned, uint64_t, const void*, unsigned, uint64_t, size_t, const void*) { return UCS_OK; };
  p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
  p.mode.device.tl_name = "srd";
  p.mode.device.dev_name = res[0].md_name;
  if (uct_iface_open(md, worker, &p, ic, &iface) != UCS_OK) return 5;
  uct_iface_attr_t attr;
  if (uct_iface_query(iface, &attr) != UCS_OK) return 6;
  for (const Row& r : rows(iface->ops)) {
    const uint64_t have = r.is_event ? attr.cap.event_flags : attr.cap.flags;
    const char* v = !r.wired ? "-" : (r.cap == 0 || (have & r.cap)) ? "Y" : "off";
    // Wired only to refuse (UCS_ERR_UNSUPPORTED rather than a NULL call): not supported.
    const std::string name = r.name;
    if (r.wired && (name == "iface_accept" || name == "iface_reject") &&
        (name == "iface_accept" ? uct_iface_accept(iface, nullptr) : uct_iface_reject(iface, nullptr)) ==
            UCS_ERR_UNSUPPORTED)
      v = "-";
    std::printf("%s %s\n", r.name, v);
  }
  const std::map<std::string, bool> cm = probe_cm(comp, worker);
  for (const char* name : kCmRows) std::printf("%s %s\n", name, cm.count(name) && cm.at(name) ? "Y" : "-");
  std::printf("device %s\n", res[0].md_name);
  uct_iface_close(iface);
  uct_config_release(ic);
  uct_md_close(md);
  uct_config_release(mc);
  uct_release_component_list(comps);
  uct_worker_destroy(worker);
  ucs_async_context_destroy(async);
  return 0;
}

// Parent side: runs the probe under each column's environment, collects its lines.
std::map<std::string, std::string> run_column(const char* self, const char* lib, const std::string& backend,
                                              const std::string& profile, std::string* status) {
  int fds[2];
  std::map<std::string, std::string> out;
  if (pipe(fds) != 0) return out;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    ::close(fds[0]);
    setenv("FI_EFA_BACKEND", backend.c_str(), 1);
    if (!profile.empty()) setenv("FI_EFA_EMU_PROFILE", profile.c_str(), 1);
    execl(self, self, "--probe", lib, static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t k;
  while ((k = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(k));
  ::close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  *status = rc == 0 ? "" : rc == 3 ? "no device" : "probe failed (" + std::to_string(rc) + ")";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    size_t sp = line.rfind(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = line.substr(sp + 1);
    pos = nl + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool probing = argc >= 3 && std::string(argv[1]) == "--probe";
  const char* lib = probing ? argv[2] : (argc >= 2 ? argv[1] : std::getenv("XPUFAB_UCT_LIB"));
  if (lib == nullptr) {
    std::fprintf(stderr, "usage: uct_table LIBUCT_XPUFAB (or XPUFAB_UCT_LIB)\n");
    return 2;
  }
  if (dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "uct_table: %s\n", dlerror());
    return 2;
  }
  if (probing) return probe();
  struct Col {
    std::string title, backend, profile;
  };
  const std::vector<Col> cols = {{"emu gen1", "emu", "gen1"}, {"emu gen2", "emu", "gen2"}, {"emu gen3", "emu", "gen3"},
                                 {"emu gen4", "emu", "gen4"}, {"hw", "hw", ""}};
  std::vector<std::map<std::string, std::string>> vals;
  std::vector<std::string> why(cols.size());
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return 2;
  self[len] = 0;
  for (size_t i = 0; i < cols.size(); ++i) vals.push_back(run_column(self, lib, cols[i].backend, cols[i].profile, &why[i]));
  uct_iface_ops_t none;
  std::memset(&none, 0, sizeof(none));
  std::printf("| %-24s |", "srd (xpufab)");
  for (const Col& c : cols) std::printf(" %-9s |", c.title.c_str());
  std::printf("\n|%s|", std::string(26, '-').c_str());
  for (size_t i = 0; i < cols.size(); ++i) std::printf("%s|", std::string(11, '-').c_str());
  std::printf("\n");
  std::vector<const char*> names;
  for (const Row& r : rows(none)) names.push_back(r.name);
  for (const char* n : kCmRows) names.push_back(n);
  for (const char* name : names) {
    std::printf("| %-24s |", name);
    for (size_t i = 0; i < cols.size(); ++i) {
      auto it = vals[i].find(name);
      std::printf(" %-9s |", why[i].empty() && it != vals[i].end() ? it->second.c_str() : "n/a");
    }
    std::printf("\n");
  }
  for (size_t i = 0; i < cols.size(); ++i) {
    auto d = vals[i].find("device");
    std::printf("%s: %s\n", cols[i].title.c_str(),
                why[i].empty() ? ("device " + (d != vals[i].end() ? d->second : std::string("?"))).c_str()
                               : why[i].c_str());
  }
  return 0;
}
