#include "emu/options_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu/faults/plan.h"
#include "emu/profile.h"

namespace xpufab {
namespace emu {
namespace {

// Null for an unset variable.
const char* env(const char* name) { return std::getenv(name); }

bool env_true(const char* name) {
  const char* v = env(name);
  return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "yes") == 0 ||
                          std::strcmp(v, "true") == 0);
}

}  // namespace

int profile_from_env(const Profile** profile_p) {
  const char* name = env("FI_EFA_EMU_PROFILE");
  const Profile* p = (name == nullptr || name[0] == '\0') ? &default_profile() : find_profile(name);
  if (p == nullptr) return -EINVAL;
  const char* clear_env = env("FI_EFA_EMU_CAPS_CLEAR");
  uint32_t clear = 0;
  if (clear_env != nullptr && parse_caps(clear_env, &clear) != 0) return -EINVAL;
  *profile_p = profile_without_caps(p, clear);
  return 0;
}

int device_options_from_env(DeviceOptions* o, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  if (o->profile == nullptr && profile_from_env(&o->profile) != 0) {
    const char* p = env("FI_EFA_EMU_PROFILE");
    const char* c = env("FI_EFA_EMU_CAPS_CLEAR");
    *error = std::string("FI_EFA_EMU_PROFILE / FI_EFA_EMU_CAPS_CLEAR: no such profile or cap: '") +
             (p ? p : "") + "' / '" + (c ? c : "") + "'";
    return -EINVAL;
  }
  if (env_true("FI_EFA_EMU_STRICT")) o->strict = true;
  if (env_true("FI_EFA_EMU_CHECK_BATCH")) o->check_batch = true;
  if (const char* s = env("FI_EFA_EMU_SEED")) o->seed = std::strtoull(s, nullptr, 0);
  const char* faults = env("FI_EFA_EMU_FAULTS");
  if (o->faults == nullptr && o->fault_plan.empty() && faults != nullptr && faults[0] != '\0') {
    std::string text, err;
    faults::PlanSpec spec;
    int rc = faults::read_plan_text(faults, &text, &err);
    if (rc == 0) rc = faults::parse_plan(text, &spec, &err);
    if (rc != 0) {
      *error = "fault plan rejected (FI_EFA_EMU_FAULTS): " + err;
      return -EINVAL;
    }
    o->fault_plan = text;
  }
  if (const char* t = env("FI_EFA_EMU_TRACE")) {
    if (t[0] != '\0') o->trace_prefix = t;
  }
  if (const char* m = env("FI_EFA_EMU_TRACE_MAX")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(m, &end, 10);
    if (end == m || *end != '\0' || v == 0) {
      *error = std::string("FI_EFA_EMU_TRACE_MAX: not a positive number: '") + m + "'";
      return -EINVAL;
    }
    o->trace_capacity = static_cast<size_t>(v);
  }
  if (const char* st = env("FI_EFA_EMU_STATS")) o->stats_prefix = st;
  if (const char* r = env("FI_EFA_EMU_MIN_RTO_US")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(r, &end, 10);
    if (end == r || *end != '\0' || v == 0 || v > (1u << 30)) {
      *error = std::string("FI_EFA_EMU_MIN_RTO_US: not a positive number: '") + r + "'";
      return -EINVAL;
    }
    o->min_rto_us = static_cast<uint32_t>(v);
    o->initial_rto_us = std::max(o->initial_rto_us, o->min_rto_us);
  }
  if (const char* pm = env("FI_EFA_EMU_PARK_MAX_US")) {
    // How long a silent stop of the caller may go unnoticed (two parks): a trade of the engine
    // thread's wakeups while callers drive against that hand-over.
    char* end = nullptr;
    unsigned long long v = std::strtoull(pm, &end, 10);
    if (end == pm || *end != '\0' || v == 0 || v > 10000000) {
      *error = std::string("FI_EFA_EMU_PARK_MAX_US: not a number from 1 to 10000000: '") + pm + "'";
      return -EINVAL;
    }
    o->park_max_us = static_cast<uint32_t>(v);
  }
  if (const char* c = env("FI_EFA_EMU_ONE_COPY")) o->one_copy = std::strcmp(c, "0") != 0;
  if (const char* c = env("FI_EFA_EMU_POSITION_ANSWERS")) o->position_answers = std::strcmp(c, "0") != 0;
  if (const char* q = env("FI_EFA_EMU_MAX_QP")) {
    // QPNs travel in 16 bits (AH lookups, CQEs), so 65535 is the most a device can number.
    char* end = nullptr;
    unsigned long long v = std::strtoull(q, &end, 10);
    if (end == q || *end != '\0' || v == 0 || v > 65535) {
      *error = std::string("FI_EFA_EMU_MAX_QP: not a number from 1 to 65535: '") + q + "'";
      return -EINVAL;
    }
    o->max_qp = static_cast<uint32_t>(v);
  }
  return 0;
}

int backend_env(BackendEnv* e, std::string* error) {
  *e = BackendEnv();
  if (const char* n = env("FI_EFA_EMU_DEVICES")) {
    if (n[0] != '\0') {
      long v = std::strtol(n, nullptr, 10);
      e->devices = v < 1 ? 1 : (v > 64 ? 64 : static_cast<int>(v));
    }
  }
  const char* f = env("FI_EFA_EMU_FABRIC");
  std::string kind = f ? f : "";
  if (kind == "inproc") {
    e->fabric = FabricKind::kInProc;
  } else if (kind == "udp") {
    e->fabric = FabricKind::kUdp;
  } else if (!kind.empty() && kind != "shm") {
    if (error != nullptr) *error = "FI_EFA_EMU_FABRIC: not inproc, shm or udp: '" + kind + "'";
    return -EINVAL;
  }
  if (const char* a = env("FI_EFA_EMU_UDP_ADDR")) {
    std::string addr(a);
    size_t colon = addr.find(':');
    e->has_udp_addr = true;
    e->udp_addr = addr.substr(0, colon);
    if (colon != std::string::npos) {
      e->udp_port = static_cast<uint16_t>(std::strtoul(addr.c_str() + colon + 1, nullptr, 10));
    }
  }
  if (const char* t = env("FI_EFA_EMU_TIMEOUT_MS")) e->timeout_ms = std::strtoull(t, nullptr, 10);
  if (const char* t = env("FI_EFA_EMU_ENGINE_THREAD")) e->engine_thread = std::strcmp(t, "0") != 0;
  return 0;
}

void apply_timeout_ms(uint64_t timeout_ms, DeviceOptions* o) {
  uint64_t us = timeout_ms * 1000;
  if (us == 0) return;
  o->response_timeout_us =
      static_cast<uint32_t>(std::min<uint64_t>(us / (o->max_retransmits + 1), 1u << 30));
}

void log_to_stderr(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace emu
}  // namespace xpufab
