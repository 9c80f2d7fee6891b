// fi_dupinfo / fi_freeinfo (fi_allocinfo is the header's inline
// fi_dupinfo(NULL)) and the fid_nic helpers.
#include "api/core/info.h"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

namespace xpufab::core {
namespace {

char* dup_str(const char* s, bool* ok) {
  if (!s) return nullptr;
  char* d = strdup(s);
  if (!d) *ok = false;
  return d;
}

void* dup_bytes(const void* p, size_t len, bool* ok) {
  if (!p || len == 0) return nullptr;
  void* d = malloc(len);
  if (!d) {
    *ok = false;
    return nullptr;
  }
  memcpy(d, p, len);
  return d;
}

template <typename T>
T* dup_struct(const T* src, bool* ok) {
  T* d = static_cast<T*>(calloc(1, sizeof(T)));
  if (!d) {
    *ok = false;
    return nullptr;
  }
  if (src) *d = *src;
  return d;
}

void free_device_attr(fi_device_attr* a) {
  if (!a) return;
  free(a->name);
  free(a->device_id);
  free(a->device_version);
  free(a->vendor_id);
  free(a->driver);
  free(a->firmware);
  free(a);
}

void free_link_attr(fi_link_attr* a) {
  if (!a) return;
  free(a->address);
  free(a->network_type);
  free(a);
}

int nic_close(struct fid* fid) {
  nic_free(reinterpret_cast<fid_nic*>(fid));
  return 0;
}

int nic_control(struct fid* fid, int command, void* arg) {
  if (command != FI_DUP) return -FI_ENOSYS;
  if (!arg) return -FI_EINVAL;
  fid_nic* copy = nic_dup(reinterpret_cast<fid_nic*>(fid));
  if (!copy) return -FI_ENOMEM;
  *static_cast<struct fid**>(arg) = &copy->fid;
  return 0;
}

int nic_bind(struct fid*, struct fid*, uint64_t) { return -FI_ENOSYS; }
int nic_ops_open(struct fid*, const char*, uint64_t, void**, void*) {
  return -FI_ENOSYS;
}
int nic_tostr(const struct fid*, char*, size_t) { return -FI_ENOSYS; }
int nic_ops_set(struct fid*, const char*, uint64_t, void*, void*) {
  return -FI_ENOSYS;
}

fi_ops g_nic_ops = {sizeof(fi_ops), nic_close,  nic_bind,   nic_control,
                    nic_ops_open,   nic_tostr,  nic_ops_set};

void free_info_members(fi_info* info) {
  free(info->src_addr);
  free(info->dest_addr);
  free(info->tx_attr);
  free(info->rx_attr);
  if (info->ep_attr) {
    free(info->ep_attr->auth_key);
    free(info->ep_attr);
  }
  if (info->domain_attr) {
    free(info->domain_attr->name);
    free(info->domain_attr->auth_key);
    free(info->domain_attr);
  }
  if (info->fabric_attr) {
    free(info->fabric_attr->name);
    free(info->fabric_attr->prov_name);
    free(info->fabric_attr);
  }
  if (info->nic) {
    // A nic the core did not make is released through its own close op.
    if (info->nic->fid.ops && info->nic->fid.ops != &g_nic_ops &&
        info->nic->fid.ops->close) {
      info->nic->fid.ops->close(&info->nic->fid);
    } else {
      nic_free(info->nic);
    }
  }
}

}  // namespace

fid_nic* nic_alloc() {
  bool ok = true;
  fid_nic* nic = dup_struct<fid_nic>(nullptr, &ok);
  if (!nic) return nullptr;
  nic->fid.fclass = FI_CLASS_NIC;
  nic->fid.ops = &g_nic_ops;
  nic->device_attr = dup_struct<fi_device_attr>(nullptr, &ok);
  nic->bus_attr = dup_struct<fi_bus_attr>(nullptr, &ok);
  nic->link_attr = dup_struct<fi_link_attr>(nullptr, &ok);
  if (!ok) {
    nic_free(nic);
    return nullptr;
  }
  return nic;
}

fid_nic* nic_dup(const fid_nic* src) {
  if (!src) return nullptr;
  bool ok = true;
  fid_nic* nic = dup_struct<fid_nic>(nullptr, &ok);
  if (!nic) return nullptr;
  nic->fid.fclass = FI_CLASS_NIC;
  nic->fid.context = src->fid.context;
  nic->fid.ops = &g_nic_ops;
  nic->prov_attr = src->prov_attr;
  if (src->device_attr) {
    const fi_device_attr* s = src->device_attr;
    fi_device_attr* d = dup_struct<fi_device_attr>(nullptr, &ok);
    nic->device_attr = d;
    if (d) {
      d->name = dup_str(s->name, &ok);
      d->device_id = dup_str(s->device_id, &ok);
      d->device_version = dup_str(s->device_version, &ok);
      d->vendor_id = dup_str(s->vendor_id, &ok);
      d->driver = dup_str(s->driver, &ok);
      d->firmware = dup_str(s->firmware, &ok);
    }
  }
  if (src->bus_attr) nic->bus_attr = dup_struct(src->bus_attr, &ok);
  if (src->link_attr) {
    const fi_link_attr* s = src->link_attr;
    fi_link_attr* d = dup_struct<fi_link_attr>(nullptr, &ok);
    nic->link_attr = d;
    if (d) {
      d->mtu = s->mtu;
      d->speed = s->speed;
      d->state = s->state;
      d->address = dup_str(s->address, &ok);
      d->network_type = dup_str(s->network_type, &ok);
    }
  }
  if (!ok) {
    nic_free(nic);
    return nullptr;
  }
  return nic;
}

void nic_free(fid_nic* nic) {
  if (!nic) return;
  free_device_attr(nic->device_attr);
  free(nic->bus_attr);
  free_link_attr(nic->link_attr);
  free(nic);
}

bool replace_string(char** dst, const char* src) {
  char* copy = nullptr;
  if (src) {
    copy = strdup(src);
    if (!copy) return false;
  }
  free(*dst);
  *dst = copy;
  return true;
}

fi_info* dup_one_info(const fi_info* src) {
  bool ok = true;
  fi_info* info = dup_struct<fi_info>(nullptr, &ok);
  if (!info) return nullptr;
  if (!src) {
    info->tx_attr = dup_struct<fi_tx_attr>(nullptr, &ok);
    info->rx_attr = dup_struct<fi_rx_attr>(nullptr, &ok);
    info->ep_attr = dup_struct<fi_ep_attr>(nullptr, &ok);
    info->domain_attr = dup_struct<fi_domain_attr>(nullptr, &ok);
    info->fabric_attr = dup_struct<fi_fabric_attr>(nullptr, &ok);
  } else {
    *info = *src;
    info->next = nullptr;
    // Pointers copied from src must not be freed if a later step fails.
    info->src_addr = info->dest_addr = nullptr;
    info->tx_attr = nullptr;
    info->rx_attr = nullptr;
    info->ep_attr = nullptr;
    info->domain_attr = nullptr;
    info->fabric_attr = nullptr;
    info->nic = nullptr;
    info->src_addr = dup_bytes(src->src_addr, src->src_addrlen, &ok);
    info->dest_addr = dup_bytes(src->dest_addr, src->dest_addrlen, &ok);
    if (!info->src_addr) info->src_addrlen = src->src_addr ? src->src_addrlen : 0;
    if (!info->dest_addr) info->dest_addrlen = src->dest_addr ? src->dest_addrlen : 0;
    if (src->tx_attr) info->tx_attr = dup_struct(src->tx_attr, &ok);
    if (src->rx_attr) info->rx_attr = dup_struct(src->rx_attr, &ok);
    if (src->ep_attr) {
      info->ep_attr = dup_struct(src->ep_attr, &ok);
      if (info->ep_attr) {
        info->ep_attr->auth_key = static_cast<uint8_t*>(
            dup_bytes(src->ep_attr->auth_key, src->ep_attr->auth_key_size, &ok));
      }
    }
    if (src->domain_attr) {
      info->domain_attr = dup_struct(src->domain_attr, &ok);
      if (info->domain_attr) {
        info->domain_attr->name = nullptr;
        info->domain_attr->auth_key = nullptr;
        info->domain_attr->name = dup_str(src->domain_attr->name, &ok);
        info->domain_attr->auth_key = static_cast<uint8_t*>(dup_bytes(
            src->domain_attr->auth_key, src->domain_attr->auth_key_size, &ok));
      }
    }
    if (src->fabric_attr) {
      info->fabric_attr = dup_struct(src->fabric_attr, &ok);
      if (info->fabric_attr) {
        info->fabric_attr->name = nullptr;
        info->fabric_attr->prov_name = nullptr;
        info->fabric_attr->name = dup_str(src->fabric_attr->name, &ok);
        info->fabric_attr->prov_name = dup_str(src->fabric_attr->prov_name, &ok);
      }
    }
    if (src->nic) {
      if (src->nic->fid.ops && src->nic->fid.ops != &g_nic_ops &&
          FI_CHECK_OP(src->nic->fid.ops, struct fi_ops, control)) {
        struct fid* copy = nullptr;
        if (src->nic->fid.ops->control(&src->nic->fid, FI_DUP, &copy) == 0 && copy)
          info->nic = reinterpret_cast<fid_nic*>(copy);
        else
          ok = false;
      } else {
        info->nic = nic_dup(src->nic);
        if (!info->nic) ok = false;
      }
    }
  }
  if (!ok) {
    free_info_members(info);
    free(info);
    return nullptr;
  }
  return info;
}

}  // namespace xpufab::core

extern "C" {

struct fi_info* fi_dupinfo(const struct fi_info* info) {
  return xpufab::core::dup_one_info(info);
}

void fi_freeinfo(struct fi_info* info) {
  while (info) {
    fi_info* next = info->next;
    xpufab::core::free_info_members(info);
    free(info);
    info = next;
  }
}

}  // extern "C"
