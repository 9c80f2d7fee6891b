// Which registered backend a provider runs on. FI_EFA_BACKEND names one ("emu", "hw", ...) or
// asks for "auto" (also when unset or empty): the highest-priority backend that reports at least
// one usable device (real devices if present, else emulated ones).
#ifndef XPUFAB_API_BACKEND_CHOICE_H_
#define XPUFAB_API_BACKEND_CHOICE_H_

#include <functional>
#include <string>
#include <vector>

#include "api/backend/backend.h"

namespace xpufab {
namespace backend {

inline constexpr const char* kAutoBackend = "auto";

// FI_EFA_BACKEND, or kAutoBackend when it is unset or empty.
std::string requested_backend();

struct BackendChoice {
  std::string name;
  std::vector<DeviceInfo> devices;  // as the backend enumerated them, never empty
};

// Opens a backend by name, or returns the caller's already open instance (the caller owns it,
// so that one process keeps one instance per backend). 0 or a negative errno.
using BackendOpener = std::function<int(const std::string& name, Backend** backend_p)>;

// Chooses the backend `request` (a name or kAutoBackend) asks for. A named backend is used or
// fails on its own, with no fallback; "auto" walks backends_by_priority() and takes the first
// that opens and enumerates at least one device. Returns 0 and fills *choice, or:
//   -EINVAL   `request` is neither "auto" nor a registered name;
//   -ENODEV   the backend(s) opened but offered no devices;
//   otherwise the last open (probe) or enumerate error.
// On failure *why (if given) says what was tried and why each attempt failed.
int choose_backend(const std::string& request, const BackendOpener& open, BackendChoice* choice,
                   std::string* why);

}  // namespace backend
}  // namespace xpufab

#endif  // XPUFAB_API_BACKEND_CHOICE_H_
