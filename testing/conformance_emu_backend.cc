#include "testing/conformance_emu_backend.h"

#include <cerrno>
#include <memory>
#include <mutex>
#include <vector>

#include "api/backend/backend.h"
#include "emu/device.h"
#include "emu/options_env.h"

namespace xpufab::testing {
namespace {

using backend::Device;

std::mutex g_mu;
emu::Profile g_profile = emu::default_profile();
bool g_engine_thread = true;

class TestDevice;
TestDevice* g_open = nullptr;  // guarded by g_mu

// Forwards to an emulated device and remembers the QPs it created.
class TestDevice : public Device {
 public:
  explicit TestDevice(std::unique_ptr<emu::EmuDevice> d) : d_(std::move(d)) {}
  ~TestDevice() override {
    std::lock_guard<std::mutex> g(g_mu);
    if (g_open == this) g_open = nullptr;
  }

  int fail_last(int status) {
    backend::Qp* qp;
    {
      std::lock_guard<std::mutex> g(qp_mu_);
      if (qps_.empty()) return -ENODEV;
      qp = qps_.back();
    }
    return d_->set_qp_failed(qp, status);
  }

  int query(backend::DeviceAttr* a) const override { return d_->query(a); }
  int alloc_pd(backend::Pd** p) override { return d_->alloc_pd(p); }
  int dealloc_pd(backend::Pd* p) override { return d_->dealloc_pd(p); }
  int reg_mr(backend::Pd* pd, const backend::MrInitAttr& a, backend::Mr** m) override {
    return d_->reg_mr(pd, a, m);
  }
  int dereg_mr(backend::Mr* m) override { return d_->dereg_mr(m); }
  int create_cq(const backend::CqInitAttr& a, backend::Cq** c) override { return d_->create_cq(a, c); }
  int destroy_cq(backend::Cq* c) override { return d_->destroy_cq(c); }
  int create_qp(const backend::QpInitAttr& a, backend::Qp** q) override {
    int rc = d_->create_qp(a, q);
    if (rc == 0) {
      std::lock_guard<std::mutex> g(qp_mu_);
      qps_.push_back(*q);
    }
    return rc;
  }
  int destroy_qp(backend::Qp* q) override {
    {
      std::lock_guard<std::mutex> g(qp_mu_);
      for (auto it = qps_.begin(); it != qps_.end(); ++it) {
        if (*it == q) {
          qps_.erase(it);
          break;
        }
      }
    }
    return d_->destroy_qp(q);
  }
  int create_ah(backend::Pd* pd, const uint8_t gid[16], backend::Ah** a) override {
    return d_->create_ah(pd, gid, a);
  }
  int destroy_ah(backend::Ah* a) override { return d_->destroy_ah(a); }
  int create_comp_cntr(const backend::CompCntrInitAttr& a, backend::CompCntr** c) override {
    return d_->create_comp_cntr(a, c);
  }
  int destroy_comp_cntr(backend::CompCntr* c) override { return d_->destroy_comp_cntr(c); }
  int local_address(const backend::Qp* q, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const override {
    return d_->local_address(q, gid, qpn, qkey);
  }
  int set_qp_failed(backend::Qp* q, int status) override { return d_->set_qp_failed(q, status); }
  void set_event_handler(backend::EventHandler* h) override { d_->set_event_handler(h); }
  int progress(int budget) override { return d_->progress(budget); }

 private:
  std::unique_ptr<emu::EmuDevice> d_;
  std::mutex qp_mu_;
  std::vector<backend::Qp*> qps_;
};

class TestBackend : public backend::Backend {
 public:
  const char* name() const override { return kEmuTestBackend; }
  int enumerate(std::vector<backend::DeviceInfo>* out) override {
    if (!out) return -EINVAL;
    backend::DeviceInfo i{};
    i.name = "efa_emutest0";
    out->assign(1, i);
    return 0;
  }
  int open_device(const std::string& name, std::unique_ptr<Device>* out) override {
    if (!out) return -EINVAL;
    if (name != "efa_emutest0") return -ENODEV;
    std::lock_guard<std::mutex> g(g_mu);
    if (g_open) return -EBUSY;
    emu::DeviceOptions o;
    o.name = name;
    o.profile = &g_profile;
    o.engine_thread = g_engine_thread;
    o.log = emu::log_to_stderr;
    int rc = emu::device_options_from_env(&o, nullptr);
    if (rc) return rc;
    std::unique_ptr<emu::EmuDevice> d;
    rc = emu::create_device(o, &d);
    if (rc) return rc;
    auto* td = new TestDevice(std::move(d));
    g_open = td;
    out->reset(td);
    return 0;
  }
};

int probe() { return 0; }
int open(std::unique_ptr<backend::Backend>* b) {
  b->reset(new TestBackend());
  return 0;
}

XPUFAB_REGISTER_BACKEND(g_registered, (backend::BackendFactory{kEmuTestBackend, probe, open}));

}  // namespace

void set_emu_test_device(const emu::Profile& profile, bool engine_thread) {
  std::lock_guard<std::mutex> g(g_mu);
  g_profile = profile;
  g_engine_thread = engine_thread;
}

int fail_last_qp(int status) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_open) return -ENODEV;
  return g_open->fail_last(status);
}

}  // namespace xpufab::testing
