// Run-time binding to rdma-core: libibverbs and libefa are dlopen()ed, never linked, so the
// project builds and runs where only an old rdma-core (or none) is installed.
//
// Loading reports one of three absence reasons:
//   -ENOENT  a library is missing (or lacks the basic verbs/efadv entry points it must have);
//   -ENOSYS  rdma-core is too old: efadv_query_qp_wqs / efadv_query_cq (v59) are found neither in
//            libefa nor in the global namespace (where an LD_PRELOAD shim may supply them);
//   -ENODEV  (from device discovery, not from here) no EFA device.
// Loaded libraries are never unloaded: libibverbs keeps provider state in globals for the life of
// the process.
#ifndef XPUFAB_HW_RDMA_LOADER_H_
#define XPUFAB_HW_RDMA_LOADER_H_

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "hw/efadv_compat.h"

namespace xpufab {
namespace hw {

// Library file names passed to dlopen(); injectable so tests can point at missing ones.
struct LibraryNames {
  std::string verbs = "libibverbs.so.1";
  std::string efa = "libefa.so.1";
};

// Every rdma-core entry point the hardware backend calls. Required ones are non-null after a
// successful load; the optional ones (marked) may be null and make the feature -EOPNOTSUPP.
struct RdmaApi {
  // libibverbs (IBVERBS_1.1 unless noted).
  ibv_device** (*get_device_list)(int* num);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* dev);
  ibv_context* (*open_device)(ibv_device* dev);
  int (*close_device)(ibv_context* ctx);
  int (*query_device)(ibv_context* ctx, ibv_device_attr* attr);
  int (*query_port)(ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr);
  int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* ctx);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  ibv_mr* (*reg_mr_iova2)(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                          unsigned int access);  // IBVERBS_1.8, optional
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                           int access);  // IBVERBS_1.12, optional
  int (*dereg_mr)(ibv_mr* mr);
  ibv_comp_channel* (*create_comp_channel)(ibv_context* ctx);  // IBVERBS_1.0
  int (*destroy_comp_channel)(ibv_comp_channel* channel);      // IBVERBS_1.0
  int (*get_cq_event)(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
  void (*ack_cq_events)(ibv_cq* cq, unsigned int nevents);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);  // UD QPs (SRD goes through efadv)
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
  int (*destroy_qp)(ibv_qp* qp);
  ibv_ah* (*create_ah)(ibv_pd* pd, ibv_ah_attr* attr);
  int (*destroy_ah)(ibv_ah* ah);
  ibv_compat_destroy_comp_cntr_fn destroy_comp_cntr;       // optional
  ibv_compat_qp_attach_comp_cntr_fn qp_attach_comp_cntr;   // optional

  // libefa.
  efadv_compat_query_device_fn efadv_query_device;  // EFA_1.1
  efadv_compat_create_qp_ex_fn efadv_create_qp_ex;  // EFA_1.1
  efadv_compat_query_ah_fn efadv_query_ah;          // EFA_1.1
  efadv_compat_create_cq_fn efadv_create_cq;        // EFA_1.2
  efadv_compat_query_qp_wqs_fn efadv_query_qp_wqs;  // EFA_1.4 or the global namespace
  efadv_compat_query_cq_fn efadv_query_cq;          // EFA_1.4 or the global namespace
  efadv_compat_create_comp_cntr_fn efadv_create_comp_cntr;  // optional

  // Where the two v59 queries came from: "libefa" or "global" (a preloaded shim).
  const char* queries_from;
};

// Loads both libraries and resolves every symbol. Returns 0, -ENOENT or -ENOSYS (see above) and,
// on failure, a one-line explanation in *reason. Never crashes, whatever the libraries are.
int load_rdma(const LibraryNames& names, std::shared_ptr<const RdmaApi>* api_p,
              std::string* reason);

// Converts an rdma-core failure to a negative errno, in the one place that knows the
// conventions: 0 stays 0; a positive errno (modify/destroy/dealloc/query calls) is negated; -1
// means "look at errno" (get_cq_event); a pointer-returning call that gave NULL passes -1 too.
// A failure that left errno at 0 becomes -EIO.
int rdma_error(int rc);

}  // namespace hw
}  // namespace xpufab

#endif  // XPUFAB_HW_RDMA_LOADER_H_
