// Handlers for the optional fid ops the provider's objects do not offer, and the op groups of
// capabilities efa-direct does not have (tagged messages, atomics).
#include "api/efa/efa.h"

namespace xpufab::efa {

int fi_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int fi_no_control(fid*, int, void*) { return -FI_ENOSYS; }
int fi_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int fi_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int fi_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

namespace {

ssize_t no_trecv(fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_trecvv(fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_trecvmsg(fid_ep*, const fi_msg_tagged*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_tsend(fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_tsendv(fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_tsendmsg(fid_ep*, const fi_msg_tagged*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_tinject(fid_ep*, const void*, size_t, fi_addr_t, uint64_t) { return -FI_ENOSYS; }
ssize_t no_tsenddata(fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_tinjectdata(fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t) {
  return -FI_ENOSYS;
}

fi_ops_tagged g_no_tagged = {sizeof(fi_ops_tagged), no_trecv,    no_trecvv,   no_trecvmsg,
                             no_tsend,              no_tsendv,   no_tsendmsg, no_tinject,
                             no_tsenddata,          no_tinjectdata};

ssize_t no_awrite(fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, fi_datatype,
                  fi_op, void*) {
  return -FI_ENOSYS;
}
ssize_t no_awritev(fid_ep*, const fi_ioc*, void**, size_t, fi_addr_t, uint64_t, uint64_t,
                   fi_datatype, fi_op, void*) {
  return -FI_ENOSYS;
}
ssize_t no_awritemsg(fid_ep*, const fi_msg_atomic*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_ainject(fid_ep*, const void*, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype,
                   fi_op) {
  return -FI_ENOSYS;
}
ssize_t no_areadwrite(fid_ep*, const void*, size_t, void*, void*, void*, fi_addr_t, uint64_t,
                      uint64_t, fi_datatype, fi_op, void*) {
  return -FI_ENOSYS;
}
ssize_t no_areadwritev(fid_ep*, const fi_ioc*, void**, size_t, fi_ioc*, void**, size_t, fi_addr_t,
                       uint64_t, uint64_t, fi_datatype, fi_op, void*) {
  return -FI_ENOSYS;
}
ssize_t no_areadwritemsg(fid_ep*, const fi_msg_atomic*, fi_ioc*, void**, size_t, uint64_t) {
  return -FI_ENOSYS;
}
ssize_t no_acompwrite(fid_ep*, const void*, size_t, void*, const void*, void*, void*, void*,
                      fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op, void*) {
  return -FI_ENOSYS;
}
ssize_t no_acompwritev(fid_ep*, const fi_ioc*, void**, size_t, const fi_ioc*, void**, size_t,
                       fi_ioc*, void**, size_t, fi_addr_t, uint64_t, uint64_t, fi_datatype, fi_op,
                       void*) {
  return -FI_ENOSYS;
}
ssize_t no_acompwritemsg(fid_ep*, const fi_msg_atomic*, const fi_ioc*, void**, size_t, fi_ioc*,
                         void**, size_t, uint64_t) {
  return -FI_ENOSYS;
}
// The *valid queries answer -FI_ENOSYS too: the endpoint has no atomic operations at all, which
// is what libfabric's providers report for a missing atomic op group.
int no_avalid(fid_ep*, fi_datatype, fi_op, size_t*) { return -FI_ENOSYS; }

fi_ops_atomic g_no_atomic = {sizeof(fi_ops_atomic), no_awrite,        no_awritev,
                             no_awritemsg,          no_ainject,       no_areadwrite,
                             no_areadwritev,        no_areadwritemsg, no_acompwrite,
                             no_acompwritev,        no_acompwritemsg, no_avalid,
                             no_avalid,             no_avalid};

}  // namespace

fi_ops_tagged* no_tagged_ops() { return &g_no_tagged; }
fi_ops_atomic* no_atomic_ops() { return &g_no_atomic; }

}  // namespace xpufab::efa
