#include "api/core/log.h"

#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace xpufab::core {
namespace {

constexpr const char* kLevelNames[] = {"warn", "trace", "info", "debug"};
constexpr const char* kSubsysNames[] = {"core", "fabric",  "domain", "ep_ctrl",
                                        "ep_data", "av",   "cq",     "eq",
                                        "mr",   "cntr"};
constexpr int kNumSubsys = sizeof(kSubsysNames) / sizeof(kSubsysNames[0]);

struct LogConfig {
  int max_level = -1;  // -1: silent
  unsigned subsys_mask = ~0u;
  std::string prov;    // empty: every provider
  bool prov_negated = false;
};

std::mutex g_mu;
LogConfig g_config;                   // guarded by g_mu
std::function<void(const std::string&)> g_sink;  // guarded by g_mu
// Fast-path copy of g_config.max_level; -2 means "not read yet".
std::atomic<int> g_max_level{-2};

void load_env_locked() {
  LogConfig c;
  LogLevel level;
  const char* lvl = getenv("FI_LOG_LEVEL");
  if (lvl && log_parse_level(lvl, &level)) c.max_level = static_cast<int>(level);
  if (const char* prov = getenv("FI_LOG_PROV"); prov && *prov) {
    c.prov_negated = prov[0] == '^';
    c.prov = prov + (c.prov_negated ? 1 : 0);
  }
  if (const char* subsys = getenv("FI_LOG_SUBSYS"); subsys && *subsys) {
    c.subsys_mask = 0;
    for (int i = 0; i < kNumSubsys; ++i)
      if (strcasecmp(subsys, kSubsysNames[i]) == 0) c.subsys_mask = 1u << i;
  }
  g_config = c;
  g_max_level.store(c.max_level, std::memory_order_release);
}

int max_level() {
  int v = g_max_level.load(std::memory_order_acquire);
  if (v == -2) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_max_level.load(std::memory_order_relaxed) == -2) load_env_locked();
    v = g_max_level.load(std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

bool log_parse_level(const char* name, LogLevel* level_p) {
  if (!name || !level_p) return false;
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(name, kLevelNames[i]) == 0) {
      *level_p = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

bool log_enabled(LogLevel level, const char* prov, LogSubsys subsys) {
  if (static_cast<int>(level) > max_level()) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  int s = static_cast<int>(subsys);
  if (s < 0 || s >= kNumSubsys || !(g_config.subsys_mask & (1u << s))) return false;
  if (!g_config.prov.empty()) {
    bool same = prov && strcasecmp(prov, g_config.prov.c_str()) == 0;
    if (same == g_config.prov_negated) return false;
  }
  return true;
}

void log_write(LogLevel level, const char* prov, LogSubsys subsys,
               const char* func, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  int l = static_cast<int>(level);
  int s = static_cast<int>(subsys);
  char head[256];
  snprintf(head, sizeof(head), "xpufab:%d:%s:%s:%s():%d<%s> ",
           static_cast<int>(getpid()), prov ? prov : "core",
           (s >= 0 && s < kNumSubsys) ? kSubsysNames[s] : "unknown",
           func ? func : "?", line, (l >= 0 && l < 4) ? kLevelNames[l] : "unknown");
  std::string out = std::string(head) + msg;
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink) {
    g_sink(out);
  } else {
    fputs(out.c_str(), stderr);
  }
}

void log_reload_env() {
  std::lock_guard<std::mutex> lock(g_mu);
  load_env_locked();
}

void log_set_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = std::move(sink);
}

}  // namespace xpufab::core
