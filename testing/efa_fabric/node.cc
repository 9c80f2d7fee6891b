#include "testing/efa_fabric/node.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "testing/efa_fabric/group.h"

namespace xpufab::efa_fabric {

std::string encode(const Remote& r) {
  std::string s(16, '\0');
  memcpy(&s[0], &r.addr, 8);
  memcpy(&s[8], &r.key, 8);
  return s + r.name;
}

Remote decode(const std::string& blob) {
  Remote r;
  GROUP_CHECK(blob.size() >= 16);
  memcpy(&r.addr, blob.data(), 8);
  memcpy(&r.key, blob.data() + 8, 8);
  r.name = blob.substr(16);
  return r;
}

fi_info* protocol_hints() {
  fi_info* h = fi_allocinfo();
  h->caps = FI_MSG | FI_TAGGED | FI_ATOMIC | FI_DIRECTED_RECV;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->fabric_attr->prov_name = strdup("efa");
  // XPUFAB_TEST_THREAD_DOMAIN=1: an application that serializes its calls (FI_THREAD_DOMAIN),
  // whose endpoints then take no lock of their own.
  const char* td = getenv("XPUFAB_TEST_THREAD_DOMAIN");
  if (td && strcmp(td, "1") == 0) h->domain_attr->threading = FI_THREAD_DOMAIN;
  return h;
}

fi_info* rma_hints() {
  fi_info* h = protocol_hints();
  h->caps |= FI_RMA | FI_RMA_EVENT | FI_FENCE;
  return h;
}

Node::Node(size_t buffer_bytes, fi_info* hints, bool counters) : buf_(buffer_bytes) {
  if (!hints) hints = protocol_hints();
  const int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_);
  // A transmit queue size in the hints is what the application asks of its endpoint.
  const size_t tx_size = hints->tx_attr ? hints->tx_attr->size : 0;
  const bool hints_thread_domain = hints->domain_attr->threading == FI_THREAD_DOMAIN;
  fi_freeinfo(hints);
  GROUP_CHECK(rc == 0);
  if (tx_size && tx_size < info_->tx_attr->size) info_->tx_attr->size = tx_size;
  GROUP_CHECK(strcmp(info_->fabric_attr->name, "efa") == 0);
  GROUP_CHECK(info_->domain_attr->threading ==
              (hints_thread_domain ? FI_THREAD_DOMAIN : FI_THREAD_SAFE));
  GROUP_CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr) == 0);
  GROUP_CHECK(fi_domain(fabric_, info_, &domain_, nullptr) == 0);
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  GROUP_CHECK(fi_av_open(domain_, &aa, &av_, nullptr) == 0);
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  ca.size = 1024;
  GROUP_CHECK(fi_cq_open(domain_, &ca, &cq_, nullptr) == 0);
  GROUP_CHECK(fi_endpoint(domain_, info_, &ep_, nullptr) == 0);
  GROUP_CHECK(fi_ep_bind(ep_, &av_->fid, 0) == 0);
  GROUP_CHECK(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0);
  if (counters) {
    const struct {
      fid_cntr** c;
      uint64_t flag;
    } want[] = {{&cntrs_.send, FI_SEND},
                {&cntrs_.write, FI_WRITE},
                {&cntrs_.read, FI_READ},
                {&cntrs_.remote_write, FI_REMOTE_WRITE},
                {&cntrs_.remote_read, FI_REMOTE_READ}};
    for (const auto& w : want) {
      fi_cntr_attr a{};
      a.events = FI_CNTR_EVENTS_COMP;
      a.wait_obj = FI_WAIT_UNSPEC;
      GROUP_CHECK(fi_cntr_open(domain_, &a, w.c, nullptr) == 0);
      GROUP_CHECK(fi_ep_bind(ep_, &(*w.c)->fid, w.flag) == 0);
    }
  }
  GROUP_CHECK(fi_enable(ep_) == 0);
  GROUP_CHECK(fi_mr_reg(domain_, buf_.data(), buf_.size(),
                        FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0, 0, 0, &mr_, nullptr) == 0);
}

Node::~Node() {
  if (mr_) GROUP_CHECK(fi_close(&mr_->fid) == 0);
  if (ep_) GROUP_CHECK(fi_close(&ep_->fid) == 0);
  for (fid_cntr* c : {cntrs_.send, cntrs_.write, cntrs_.read, cntrs_.remote_write, cntrs_.remote_read})
    if (c) GROUP_CHECK(fi_close(&c->fid) == 0);
  if (cq_) GROUP_CHECK(fi_close(&cq_->fid) == 0);
  if (av_) GROUP_CHECK(fi_close(&av_->fid) == 0);
  if (domain_) GROUP_CHECK(fi_close(&domain_->fid) == 0);
  if (fabric_) GROUP_CHECK(fi_close(&fabric_->fid) == 0);
  fi_freeinfo(info_);
}

Remote Node::self() const {
  Remote r;
  char name[64];
  size_t len = sizeof(name);
  GROUP_CHECK(fi_getname(&ep_->fid, name, &len) == 0);
  r.name.assign(name, len);
  r.addr = reinterpret_cast<uintptr_t>(buf_.data());
  r.key = fi_mr_key(mr_);
  return r;
}

fi_addr_t Node::insert(const Remote& r) {
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  GROUP_CHECK(fi_av_insert(av_, r.name.data(), 1, &a, 0, nullptr) == 1);
  return a;
}

int Node::wait(fi_cq_tagged_entry* e, fi_cq_err_entry* err, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const ssize_t n = fi_cq_read(cq_, e, 1);
    if (n == 1) return 1;
    if (n == -FI_EAVAIL) {
      *err = fi_cq_err_entry{};
      GROUP_CHECK(fi_cq_readerr(cq_, err, 0) == 1);
      return -FI_EAVAIL;
    }
    GROUP_CHECK(n == -FI_EAGAIN);
    if (std::chrono::steady_clock::now() > deadline) return -FI_ETIMEDOUT;
  }
}

fi_cq_tagged_entry Node::expect(int ms) {
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  const int rc = wait(&e, &err, ms);
  if (rc == -FI_EAVAIL)
    fprintf(stderr, "error completion: err %d prov_errno %d len %zu olen %zu tag %#llx\n", err.err,
            err.prov_errno, err.len, err.olen, static_cast<unsigned long long>(err.tag));
  if (rc == -FI_ETIMEDOUT) fprintf(stderr, "no completion within %d ms\n", ms);
  GROUP_CHECK(rc == 1);
  return e;
}

fi_cq_err_entry Node::expect_error(int ms) {
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  const int rc = wait(&e, &err, ms);
  if (rc == 1)
    fprintf(stderr, "success where an error was expected: flags %#llx len %zu\n",
            static_cast<unsigned long long>(e.flags), e.len);
  GROUP_CHECK(rc == -FI_EAVAIL);
  return err;
}

void Node::expect_nothing(int ms) {
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  GROUP_CHECK(wait(&e, &err, ms) == -FI_ETIMEDOUT);
}

}  // namespace xpufab::efa_fabric
