// Registration of component "xpufab" and transport "srd" into the running libuct, from this
// library's constructor (LD_PRELOAD, DT_NEEDED or dlopen before uct_query_components), and only
// when the running UCX is the release ucx_compat.h describes.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "api/uct/srd.h"

namespace xpufab {
namespace uct {

uct_tl_t g_tl = {
    {'s', 'r', 'd', 0},
    query_devices,
    iface_open,
    {"srd transport", "SRD_", g_iface_config_table, sizeof(SrdIfaceConfig), {}},
    {nullptr, nullptr},
};

namespace {

using GetVersion = void (*)(unsigned*, unsigned*, unsigned*);

// libuct and libucs export no version query; libucp of the same installation does. It is taken
// from the directory the running libuct came from, so a libucp elsewhere cannot vouch for it.
bool running_version(unsigned* major, unsigned* minor, unsigned* release, std::string* why) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&uct_tl_register), &info) == 0 || info.dli_fname == nullptr) {
    *why = "cannot locate the running libuct";
    return false;
  }
  std::string dir = info.dli_fname;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
  const std::string ucp = dir + "/libucp.so.0";
  void* h = dlopen(ucp.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen(ucp.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    *why = "no " + ucp + " to read the UCX version from";
    return false;
  }
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "ucp_get_version"));
  if (get == nullptr) {
    *why = ucp + " has no ucp_get_version";
    return false;
  }
  get(major, minor, release);
  return true;
}

bool layout_matches(std::string* why) {
  unsigned major = 0, minor = 0, release = 0;
  if (!running_version(&major, &minor, &release, why)) return false;
  if (major != XPUFAB_UCX_COMPAT_MAJOR || minor != XPUFAB_UCX_COMPAT_MINOR) {
    char b[128];
    std::snprintf(b, sizeof(b), "UCX %u.%u.%u is running, the layouts here are UCX %d.%d's", major,
                  minor, release, XPUFAB_UCX_COMPAT_MAJOR, XPUFAB_UCX_COMPAT_MINOR);
    *why = b;
    return false;
  }
  // The class descriptors carry the sizes libuct was built with (stats on or off, ...).
  if (uct_base_iface_t_class.size != sizeof(uct_base_iface_t) ||
      uct_base_ep_t_class.size != sizeof(uct_base_ep_t) || uct_cm_t_class.size != sizeof(uct_cm_t) ||
      uct_listener_t_class.size != sizeof(uct_listener_t)) {
    char b[256];
    std::snprintf(b, sizeof(b),
                  "libuct's uct_base_iface_t/uct_base_ep_t/uct_cm_t/uct_listener_t are "
                  "%zu/%zu/%zu/%zu bytes, not %zu/%zu/%zu/%zu",
                  uct_base_iface_t_class.size, uct_base_ep_t_class.size, uct_cm_t_class.size,
                  uct_listener_t_class.size, sizeof(uct_base_iface_t), sizeof(uct_base_ep_t),
                  sizeof(uct_cm_t), sizeof(uct_listener_t));
    *why = b;
    return false;
  }
  return true;
}

bool g_registered = false;

__attribute__((constructor)) void register_transport() {
  std::string why;
  if (!layout_matches(&why)) {
    std::fprintf(stderr, "xpufab: UCT transport srd not registered: %s\n", why.c_str());
    return;
  }
  uct_tl_register(&g_component, &g_tl);
  uct_component_register(&g_component);
  g_registered = true;
}

__attribute__((destructor)) void unregister_transport() {
  if (!g_registered) return;
  uct_component_unregister(&g_component);
  uct_tl_unregister(&g_tl);
  g_registered = false;
}

}  // namespace
}  // namespace uct
}  // namespace xpufab
