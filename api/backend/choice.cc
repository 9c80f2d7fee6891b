#include "api/backend/choice.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace xpufab {
namespace backend {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

std::string requested_backend() {
  const char* env = std::getenv("FI_EFA_BACKEND");
  return env != nullptr && env[0] != '\0' ? env : kAutoBackend;
}

int choose_backend(const std::string& request, const BackendOpener& open, BackendChoice* choice,
                   std::string* why) {
  if (!open || choice == nullptr) return -EINVAL;
  std::string reasons;
  auto note = [&](const std::string& s) { reasons += (reasons.empty() ? "" : "; ") + s; };
  std::vector<std::string> order;
  if (request == kAutoBackend) {
    order = backends_by_priority();
  } else {
    const std::vector<std::string> known = registered_backends();
    if (std::find(known.begin(), known.end(), request) == known.end()) {
      if (why != nullptr) {
        *why = "FI_EFA_BACKEND=" + request + " names no backend (registered: " + joined(known) +
               "; or auto)";
      }
      return -EINVAL;
    }
    order = {request};
  }
  int last = -ENODEV;
  for (const std::string& name : order) {
    Backend* b = nullptr;
    int rc = open(name, &b);
    if (rc != 0 || b == nullptr) {
      last = rc != 0 ? rc : -ENODEV;
      note(name + ": unavailable (" + std::to_string(last) + ")");
      continue;
    }
    std::vector<DeviceInfo> devices;
    rc = b->enumerate(&devices);
    if (rc != 0 || devices.empty()) {
      last = rc != 0 ? rc : -ENODEV;
      note(name + (rc != 0 ? ": enumerate failed (" + std::to_string(rc) + ")" : ": no devices"));
      continue;
    }
    choice->name = name;
    choice->devices = std::move(devices);
    return 0;
  }
  if (order.empty()) note("no backend takes part in auto");
  if (why != nullptr) *why = "FI_EFA_BACKEND=" + request + ": " + reasons;
  return last;
}

}  // namespace backend
}  // namespace xpufab
