/*
 * api/core/log.h - the project's internal logging, controlled like libfabric's.
 *
 * FI_LOG_LEVEL selects the most verbose level printed: warn, trace, info or
 * debug (libfabric's order: each level includes those before it).  Unset or
 * unknown means silent.  FI_LOG_PROV (a provider name, "^name" to exclude it)
 * and FI_LOG_SUBSYS (core, fabric, domain, ep_ctrl, ep_data, av, cq, eq, mr,
 * cntr) narrow the output further.  Lines go to stderr as
 *   xpufab:PID:PROV:SUBSYS:FUNC():LINE<LEVEL> message
 *
 * Thread-safety: every function may be called from any thread.  The
 * environment is read once, on first use; log_reload_env() rereads it.
 */
#ifndef XPUFAB_API_CORE_LOG_H_
#define XPUFAB_API_CORE_LOG_H_

#include <functional>
#include <string>

namespace xpufab::core {

// Values match libfabric's enum fi_log_level.
enum class LogLevel : int { kWarn = 0, kTrace = 1, kInfo = 2, kDebug = 3 };

// Values match libfabric's enum fi_log_subsys.
enum class LogSubsys : int {
  kCore = 0,
  kFabric,
  kDomain,
  kEpCtrl,
  kEpData,
  kAv,
  kCq,
  kEq,
  kMr,
  kCntr,
};

// True when a message at `level` from provider `prov` in `subsys` would be
// printed.  Cheap: callers test it before formatting.
bool log_enabled(LogLevel level, const char* prov, LogSubsys subsys);

// Formats and emits one line (a trailing newline is added when missing).
void log_write(LogLevel level, const char* prov, LogSubsys subsys,
               const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 6, 7)));

// Rereads FI_LOG_LEVEL, FI_LOG_PROV and FI_LOG_SUBSYS.
void log_reload_env();

// Replaces stderr as the destination of finished lines; an empty function
// restores stderr.  Meant for tests.
void log_set_sink(std::function<void(const std::string&)> sink);

// Parses a level name ("warn", "trace", "info", "debug", any case).
// Returns false for anything else.
bool log_parse_level(const char* name, LogLevel* level_p);

}  // namespace xpufab::core

#define XPUFAB_LOG(level, prov, subsys, ...)                                \
  do {                                                                      \
    if (::xpufab::core::log_enabled((level), (prov), (subsys)))             \
      ::xpufab::core::log_write((level), (prov), (subsys), __func__,        \
                                __LINE__, __VA_ARGS__);                     \
  } while (0)

#define XPUFAB_WARN(prov, subsys, ...) \
  XPUFAB_LOG(::xpufab::core::LogLevel::kWarn, prov, subsys, __VA_ARGS__)
#define XPUFAB_TRACE(prov, subsys, ...) \
  XPUFAB_LOG(::xpufab::core::LogLevel::kTrace, prov, subsys, __VA_ARGS__)
#define XPUFAB_INFO(prov, subsys, ...) \
  XPUFAB_LOG(::xpufab::core::LogLevel::kInfo, prov, subsys, __VA_ARGS__)
#define XPUFAB_DEBUG(prov, subsys, ...) \
  XPUFAB_LOG(::xpufab::core::LogLevel::kDebug, prov, subsys, __VA_ARGS__)

#endif  // XPUFAB_API_CORE_LOG_H_
