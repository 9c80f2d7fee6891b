#include "api/core/no_ops.h"

#include <rdma/fi_errno.h>

namespace xpufab::core {
namespace {

ssize_t no_barrier(fid_ep*, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_broadcast(fid_ep*, void*, size_t, void*, fi_addr_t, fi_addr_t, fi_datatype, uint64_t,
                     void*) {
  return -FI_ENOSYS;
}
// alltoall, allgather: one result buffer, no reduction op.
ssize_t no_gather_all(fid_ep*, const void*, size_t, void*, void*, void*, fi_addr_t, fi_datatype,
                      uint64_t, void*) {
  return -FI_ENOSYS;
}
// allreduce, reduce_scatter: a reduction op, no root.
ssize_t no_reduce_all(fid_ep*, const void*, size_t, void*, void*, void*, fi_addr_t, fi_datatype,
                      fi_op, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_reduce(fid_ep*, const void*, size_t, void*, void*, void*, fi_addr_t, fi_addr_t,
                  fi_datatype, fi_op, uint64_t, void*) {
  return -FI_ENOSYS;
}
// scatter, gather: a root, no reduction op.
ssize_t no_rooted(fid_ep*, const void*, size_t, void*, void*, void*, fi_addr_t, fi_addr_t,
                  fi_datatype, uint64_t, void*) {
  return -FI_ENOSYS;
}
ssize_t no_msg(fid_ep*, const fi_msg_collective*, fi_ioc*, void**, size_t, uint64_t) {
  return -FI_ENOSYS;
}
ssize_t no_barrier2(fid_ep*, fi_addr_t, uint64_t, void*) { return -FI_ENOSYS; }

fi_ops_collective g_no_collective = {
    sizeof(fi_ops_collective), no_barrier,    no_broadcast, no_gather_all,
    no_reduce_all,             no_gather_all, no_reduce_all, no_reduce,
    no_rooted,                 no_rooted,     no_msg,        no_barrier2,
};

int no_set_op(fid_av_set*, const fid_av_set*) { return -FI_ENOSYS; }
int no_set_addr_op(fid_av_set*, fi_addr_t) { return -FI_ENOSYS; }
int no_set_coll_addr(fid_av_set*, fi_addr_t*) { return -FI_ENOSYS; }

fi_ops_av_set g_no_av_set = {
    sizeof(fi_ops_av_set), no_set_op,      no_set_op,      no_set_op,
    no_set_addr_op,        no_set_addr_op, no_set_coll_addr,
};

}  // namespace

fi_ops_collective* no_collective_ops() { return &g_no_collective; }
fi_ops_av_set* no_av_set_ops() { return &g_no_av_set; }

}  // namespace xpufab::core
