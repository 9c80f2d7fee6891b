#include "api/core/param.h"

#include <rdma/fi_errno.h>
#include <strings.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace xpufab::core {
namespace {

struct Param {
  std::string env_name;
  fi_param_type type;
  std::string help;
};

struct Params {
  std::mutex mu;
  std::vector<Param> list;             // guarded by mu
  std::vector<void (*)()> declarers;   // guarded by mu
};

Params& params() {
  static Params* p = [] {
    auto* ps = new Params;
    ps->list.push_back({"FI_PROVIDER", FI_PARAM_STRING,
                        "Only use the named providers (comma list; ^ excludes them)"});
    ps->list.push_back({"FI_LOG_LEVEL", FI_PARAM_STRING,
                        "Log level: warn, trace, info or debug (default: none)"});
    ps->list.push_back({"FI_LOG_PROV", FI_PARAM_STRING,
                        "Only log this provider (^name: all but it)"});
    ps->list.push_back({"FI_LOG_SUBSYS", FI_PARAM_STRING,
                        "Only log this subsystem (core, fabric, domain, ep_ctrl, ep_data, "
                        "av, cq, eq, mr, cntr)"});
    return ps;
  }();
  return *p;
}

std::string env_name(const char* prov, const char* name) {
  std::string s = "FI_";
  if (prov && *prov) {
    s += prov;
    s += "_";
  }
  s += name;
  for (char& c : s) c = (c == '-') ? '_' : static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int define_param(const char* prov, const char* name, fi_param_type type, const char* help) {
  if (!name || !*name) return -FI_EINVAL;
  std::string env = env_name(prov, name);
  Params& p = params();
  std::lock_guard<std::mutex> lock(p.mu);
  for (const Param& q : p.list)
    if (q.env_name == env) return -FI_EALREADY;
  p.list.push_back({env, type, help ? help : ""});
  return 0;
}

void add_param_declarer(void (*declare)()) {
  if (declare == nullptr) return;
  Params& p = params();
  std::lock_guard<std::mutex> lock(p.mu);
  p.declarers.push_back(declare);
}

// Runs the declarers on a copy of their list: each takes the lock itself in define_param().
void run_param_declarers() {
  Params& p = params();
  std::vector<void (*)()> declarers;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    declarers = p.declarers;
  }
  for (void (*declare)() : declarers) declare();
}

bool get_param_str(const char* prov, const char* name, std::string* value_p) {
  if (!name || !value_p) return false;
  const char* v = getenv(env_name(prov, name).c_str());
  if (!v) return false;
  *value_p = v;
  return true;
}

bool get_param_bool(const char* prov, const char* name, bool* value_p) {
  std::string v;
  if (!value_p || !get_param_str(prov, name, &v)) return false;
  for (const char* t : {"1", "yes", "true", "on", "y"})
    if (strcasecmp(v.c_str(), t) == 0) return *value_p = true, true;
  for (const char* f : {"0", "no", "false", "off", "n"})
    if (strcasecmp(v.c_str(), f) == 0) return *value_p = false, true;
  return false;
}

bool get_param_int(const char* prov, const char* name, long long* value_p) {
  std::string v;
  if (!value_p || !get_param_str(prov, name, &v) || v.empty()) return false;
  char* end = nullptr;
  long long n = strtoll(v.c_str(), &end, 10);
  if (!end || *end) return false;
  *value_p = n;
  return true;
}

}  // namespace xpufab::core

extern "C" {

int fi_getparams(struct fi_param** params_p, int* count_p) {
  using namespace xpufab::core;
  if (!params_p || !count_p) return -FI_EINVAL;
  run_param_declarers();
  Params& p = params();
  std::lock_guard<std::mutex> lock(p.mu);
  size_t n = p.list.size();
  // One extra zeroed entry terminates the array, as libfabric's does.
  auto* out = static_cast<fi_param*>(calloc(n + 1, sizeof(fi_param)));
  if (!out) return -FI_ENOMEM;
  for (size_t i = 0; i < n; ++i) {
    const Param& q = p.list[i];
    const char* v = getenv(q.env_name.c_str());
    out[i].name = strdup(q.env_name.c_str());
    out[i].type = q.type;
    out[i].help_string = strdup(q.help.c_str());
    out[i].value = v ? strdup(v) : nullptr;
    if (!out[i].name || !out[i].help_string || (v && !out[i].value)) {
      for (size_t j = 0; j <= i; ++j) {
        free(const_cast<char*>(out[j].name));
        free(const_cast<char*>(out[j].help_string));
        free(const_cast<char*>(out[j].value));
      }
      free(out);
      return -FI_ENOMEM;
    }
  }
  *params_p = out;
  *count_p = static_cast<int>(n);
  return 0;
}

void fi_freeparams(struct fi_param* params) {
  if (!params) return;
  for (fi_param* q = params; q->name; ++q) {
    free(const_cast<char*>(q->name));
    free(const_cast<char*>(q->help_string));
    free(const_cast<char*>(q->value));
  }
  free(params);
}

}  // extern "C"
