#include "emu/fabric.h"

#include <cerrno>
#include <mutex>

namespace xpufab {
namespace emu {

int InProcFabric::attach(const Gid& gid, PacketSink* sink) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  return sinks_.emplace(gid, sink).second ? 0 : -EEXIST;
}

void InProcFabric::detach(const Gid& gid) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  sinks_.erase(gid);
}

int InProcFabric::send(const Gid& dst, Packet&& pkt) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = sinks_.find(dst);
  if (it == sinks_.end()) return -EHOSTUNREACH;
  it->second->deliver(std::move(pkt));
  return 0;
}

std::shared_ptr<InProcFabric> InProcFabric::process_fabric() {
  static std::shared_ptr<InProcFabric>* f = new std::shared_ptr<InProcFabric>(new InProcFabric());
  return *f;
}

}  // namespace emu
}  // namespace xpufab
