// UCX 1.13.x internal structures a transport registered from outside libuct must share with it.
//
// Debian installs UCX's public headers (uct/api/uct.h, tl.h, ucs/...) but not src/uct/base/*.h,
// where the component, transport, memory-domain and base-interface structs live. They are
// declared here once, field by field, from the v1.13.1 layout (reference/ucx-plugin.md §2.3-2.4),
// for Debian's build configuration (no ENABLE_STATS, so no stats nodes). Sizes are checked below
// against the measured x86-64 values; at run time register.cc additionally compares them with the
// sizes libuct's own class descriptors carry and registers nothing on any other UCX (§2.5): a
// wrong layout must never run.
#ifndef XPUFAB_API_UCT_UCX_COMPAT_H_
#define XPUFAB_API_UCT_UCX_COMPAT_H_

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include <ucs/async/async_fwd.h>
#include <ucs/config/parser.h>
#include <ucs/config/types.h>
#include <ucs/datastruct/list.h>
#include <ucs/sys/topo/base/topo.h>
#include <ucs/type/class.h>
#include <ucs/type/status.h>
#include <ucs/type/spinlock.h>
#include <ucs/type/thread_mode.h>
#include <uct/api/uct.h>
#include <uct/api/version.h>

#ifdef __cplusplus
extern "C" {
#endif

// The UCX minor release these layouts describe; checked against the running library.
#define XPUFAB_UCX_COMPAT_MAJOR 1
#define XPUFAB_UCX_COMPAT_MINOR 13

// ---- uct/base/uct_component.h ----

typedef struct uct_component uct_component_t;

typedef ucs_status_t (*uct_component_query_md_resources_func_t)(uct_component_t* component,
                                                                uct_md_resource_desc_t** resources_p,
                                                                unsigned* num_resources_p);
typedef ucs_status_t (*uct_component_md_open_func_t)(uct_component_t* component, const char* md_name,
                                                     const uct_md_config_t* config, uct_md_h* md_p);
typedef ucs_status_t (*uct_component_cm_open_func_t)(uct_component_t* component, uct_worker_h worker,
                                                     const uct_cm_config_t* config, uct_cm_h* cm_p);
typedef ucs_status_t (*uct_component_rkey_unpack_func_t)(uct_component_t* component,
                                                         const void* rkey_buffer, uct_rkey_t* rkey_p,
                                                         void** handle_p);
typedef ucs_status_t (*uct_component_rkey_ptr_func_t)(uct_component_t* component, uct_rkey_t rkey,
                                                      void* handle, uint64_t remote_addr,
                                                      void** local_addr_p);
typedef ucs_status_t (*uct_component_rkey_release_func_t)(uct_component_t* component,
                                                          uct_rkey_t rkey, void* handle);
typedef void (*uct_component_md_vfs_init_func_t)(uct_md_h md);

struct uct_component {
  char name[UCT_COMPONENT_NAME_MAX];
  uct_component_query_md_resources_func_t query_md_resources;
  uct_component_md_open_func_t md_open;
  uct_component_cm_open_func_t cm_open;
  uct_component_rkey_unpack_func_t rkey_unpack;
  uct_component_rkey_ptr_func_t rkey_ptr;
  uct_component_rkey_release_func_t rkey_release;
  ucs_config_global_list_entry_t md_config;
  ucs_config_global_list_entry_t cm_config;
  ucs_list_link_t tl_list;
  ucs_list_link_t list;
  uint64_t flags;
  uct_component_md_vfs_init_func_t md_vfs_init;
};

void uct_component_register(uct_component_t* component);
void uct_component_unregister(uct_component_t* component);
ucs_status_t uct_md_query_single_md_resource(uct_component_t* component,
                                             uct_md_resource_desc_t** resources_p,
                                             unsigned* num_resources_p);

// ---- uct/api/v2/uct_v2.h (not installed in 1.13) ----

typedef struct uct_md_mem_dereg_params {
  uint64_t field_mask;
  unsigned flags;
  uct_mem_h memh;
  uct_completion_t* comp;
} uct_md_mem_dereg_params_t;

#define XPUFAB_UCT_MD_MEM_DEREG_FIELD_MEMH (1ull << 0)
#define XPUFAB_UCT_MD_MEM_DEREG_FIELD_FLAGS (1ull << 1)
#define XPUFAB_UCT_MD_MEM_DEREG_FIELD_COMPLETION (1ull << 2)

typedef struct uct_md_mkey_pack_params {
  uint64_t field_mask;
  unsigned flags;
} uct_md_mkey_pack_params_t;

typedef struct uct_perf_attr uct_perf_attr_t;  // only passed through to libuct

// ---- uct/base/uct_md.h ----

struct uct_md_config {
  char dummy;
};

struct uct_md_ops {
  void (*close)(uct_md_h md);
  ucs_status_t (*query)(uct_md_h md, uct_md_attr_t* md_attr);
  ucs_status_t (*mem_alloc)(uct_md_h md, size_t* length_p, void** address_p,
                            ucs_memory_type_t mem_type, unsigned flags, const char* alloc_name,
                            uct_mem_h* memh_p);
  ucs_status_t (*mem_free)(uct_md_h md, uct_mem_h memh);
  ucs_status_t (*mem_advise)(uct_md_h md, uct_mem_h memh, void* addr, size_t length,
                             unsigned advice);
  ucs_status_t (*mem_reg)(uct_md_h md, void* address, size_t length, unsigned flags,
                          uct_mem_h* memh_p);
  ucs_status_t (*mem_dereg)(uct_md_h md, const uct_md_mem_dereg_params_t* params);
  ucs_status_t (*mem_query)(uct_md_h md, const void* address, size_t length,
                            uct_md_mem_attr_t* mem_attr);
  ucs_status_t (*mkey_pack)(uct_md_h md, uct_mem_h memh, const uct_md_mkey_pack_params_t* params,
                            void* rkey_buffer);
  int (*is_sockaddr_accessible)(uct_md_h md, const ucs_sock_addr_t* sockaddr,
                                uct_sockaddr_accessibility_t mode);
  ucs_status_t (*detect_memory_type)(uct_md_h md, const void* addr, size_t length,
                                     ucs_memory_type_t* mem_type_p);
};
typedef struct uct_md_ops uct_md_ops_t;

struct uct_md {
  uct_md_ops_t* ops;
  uct_component_t* component;
};
typedef struct uct_md uct_md_t;

extern ucs_config_field_t uct_md_config_table[];

// ---- uct/base/uct_worker.h ----

typedef struct uct_priv_worker {
  uct_worker_t super;
  ucs_async_context_t* async;
  ucs_thread_mode_t thread_mode;
  ucs_list_link_t tl_data;
} uct_priv_worker_t;

typedef struct uct_worker_progress {
  uct_worker_cb_id_t id;
  uint32_t refcount;
} uct_worker_progress_t;

// ---- uct/base/uct_iface.h ----

typedef struct uct_am_handler {
  uct_am_callback_t cb;
  void* arg;
  uint32_t flags;
} uct_am_handler_t;

typedef struct uct_iface_internal_ops {
  ucs_status_t (*iface_estimate_perf)(uct_iface_h iface, uct_perf_attr_t* perf_attr);
  void (*iface_vfs_refresh)(uct_iface_h iface);
  ucs_status_t (*ep_query)(uct_ep_h ep, uct_ep_attr_t* ep_attr);
  ucs_status_t (*ep_invalidate)(uct_ep_h ep, unsigned flags);
} uct_iface_internal_ops_t;

typedef struct uct_base_iface {
  uct_iface_t super;
  uct_iface_internal_ops_t* internal_ops;
  uct_md_h md;
  uct_priv_worker_t* worker;
  uct_am_handler_t am[UCT_AM_ID_MAX];
  uct_am_tracer_t am_tracer;
  void* am_tracer_arg;
  uct_error_handler_t err_handler;
  void* err_handler_arg;
  uint32_t err_handler_flags;
  uct_worker_progress_t prog;
  unsigned progress_flags;
  struct {
    unsigned num_alloc_methods;
    uct_alloc_method_t alloc_methods[UCT_ALLOC_METHOD_LAST];
    ucs_log_level_t failure_level;
    size_t max_num_eps;
  } config;
} uct_base_iface_t;

typedef struct uct_base_ep {
  uct_ep_t super;
} uct_base_ep_t;

typedef struct uct_tl_device_resource {
  char name[UCT_DEVICE_NAME_MAX];
  uct_device_type_t type;
  ucs_sys_device_t sys_device;
} uct_tl_device_resource_t;

typedef struct uct_tl {
  char name[UCT_TL_NAME_MAX];
  ucs_status_t (*query_devices)(uct_md_h md, uct_tl_device_resource_t** tl_devices_p,
                                unsigned* num_tl_devices_p);
  ucs_status_t (*iface_open)(uct_md_h md, uct_worker_h worker, const uct_iface_params_t* params,
                             const uct_iface_config_t* config, uct_iface_h* iface_p);
  ucs_config_global_list_entry_t config;
  ucs_list_link_t list;
} uct_tl_t;

struct uct_iface_config {
  struct {
    uct_alloc_method_t* methods;
    unsigned count;
  } alloc_methods;
  int failure;
  size_t max_num_eps;
};

// Exported by libuct.so.0 (names as UCS_CLASS_* spells them).
extern ucs_class_t uct_base_iface_t_class;
extern ucs_class_t uct_base_ep_t_class;
extern uct_iface_internal_ops_t uct_base_iface_internal_ops;
extern ucs_config_field_t uct_iface_config_table[];

ucs_status_t uct_base_iface_t_init(uct_base_iface_t* self, ucs_class_t* myclass, int* init_count,
                                   uct_iface_ops_t* ops, uct_iface_internal_ops_t* internal_ops,
                                   uct_md_h md, uct_worker_h worker,
                                   const uct_iface_params_t* params,
                                   const uct_iface_config_t* config);
ucs_status_t uct_base_ep_t_init(uct_base_ep_t* self, ucs_class_t* myclass, int* init_count,
                                uct_base_iface_t* iface);
void uct_base_iface_query(uct_base_iface_t* iface, uct_iface_attr_t* iface_attr);
void uct_base_iface_progress_enable(uct_iface_h tl_iface, unsigned flags);
void uct_base_iface_progress_disable(uct_iface_h tl_iface, unsigned flags);
ucs_status_t uct_base_ep_am_short_iov(uct_ep_h ep, uint8_t id, const uct_iov_t* iov,
                                      size_t iovcnt);
ucs_status_t uct_iface_handle_ep_err(uct_iface_h iface, uct_ep_h ep, ucs_status_t status);
ucs_status_t uct_single_device_resource(uct_md_h md, const char* dev_name,
                                        uct_device_type_t dev_type, ucs_sys_device_t sys_device,
                                        uct_tl_device_resource_t** tl_devices_p,
                                        unsigned* num_tl_devices_p);
void uct_tl_register(uct_component_t* component, uct_tl_t* tl);
void uct_tl_unregister(uct_tl_t* tl);

// ---- uct/base/uct_cm.h ----

struct uct_cm_config {
  int failure;
  int reuse_addr;
};

typedef struct uct_cm_ops {
  void (*close)(uct_cm_h cm);
  ucs_status_t (*cm_query)(uct_cm_h cm, uct_cm_attr_t* cm_attr);
  ucs_status_t (*listener_create)(uct_cm_h cm, const struct sockaddr* saddr, socklen_t socklen,
                                  const uct_listener_params_t* params, uct_listener_h* listener_p);
  ucs_status_t (*listener_reject)(uct_listener_h listener, uct_conn_request_h conn_request);
  ucs_status_t (*listener_query)(uct_listener_h listener, uct_listener_attr_t* listener_attr);
  void (*listener_destroy)(uct_listener_h listener);
  ucs_status_t (*ep_create)(const uct_ep_params_t* params, uct_ep_h* ep_p);
} uct_cm_ops_t;

// uct_cm_open/close/query and uct_listener_* call through ops; endpoints of a CM have &iface as
// their interface, so uct_ep_connect/disconnect/destroy call through iface.super.ops.
struct uct_cm {
  uct_cm_ops_t* ops;
  uct_component_h component;
  uct_base_iface_t iface;
  struct {
    ucs_log_level_t failure_level;
    int reuse_addr;
  } config;
};
typedef struct uct_cm uct_cm_t;

extern ucs_config_field_t uct_cm_config_table[];
extern ucs_class_t uct_cm_t_class;        // its size is checked at registration
extern ucs_class_t uct_listener_t_class;  // uct_listener_t (uct/api/tl.h): the cm pointer only

// ---- ucs/async/async.h, thread.h, signal.h: the head of ucs_async_context_t ----
// UCP runs the CM callbacks' work under its worker's async lock and asserts that it is held
// (UCS_ASYNC_BLOCK, an inline macro on these fields), as UCX's own CMs call them from async
// handlers. Debian builds UCX with assertions on, which gives the mutex its owner and count.

typedef struct xpufab_async_thread_mutex {
  pthread_mutex_t lock;
  pthread_t owner;
  unsigned count;
} xpufab_async_thread_mutex_t;

typedef struct xpufab_async_signal_context {
  pid_t tid;
  int block_count;
  pthread_t pthread;
  timer_t timer;
} xpufab_async_signal_context_t;

typedef struct xpufab_async_context_head {
  union {
    ucs_recursive_spinlock_t spinlock;   // UCS_ASYNC_MODE_THREAD_SPINLOCK
    xpufab_async_thread_mutex_t mutex;   // UCS_ASYNC_MODE_THREAD_MUTEX
    xpufab_async_signal_context_t signal;
    int poll_block;                      // UCS_ASYNC_MODE_POLL
  };
  ucs_async_mode_t mode;
} xpufab_async_context_head_t;

// libucs.so.0
void ucs_class_call_cleanup_chain(ucs_class_t* cls, void* obj, int limit);

#ifdef __cplusplus
}  // extern "C"
#endif

// Sizes measured against the v1.13.1 headers with Debian's config.h (reference/ucx-plugin.md
// §2.4). A mismatch here means this header no longer describes UCX 1.13.
#if defined(__x86_64__)
static_assert(sizeof(uct_component_t) == 208, "uct_component_t layout (UCX 1.13)");
static_assert(sizeof(uct_tl_t) == 96, "uct_tl_t layout (UCX 1.13)");
static_assert(sizeof(uct_md_t) == 16, "uct_md_t layout (UCX 1.13)");
static_assert(sizeof(uct_md_ops_t) == 88, "uct_md_ops_t: 11 entries in UCX 1.13");
static_assert(sizeof(uct_md_config_t) == 1, "uct_md_config_t layout (UCX 1.13)");
static_assert(sizeof(uct_iface_ops_t) == 400, "uct_iface_ops_t: 50 ops");
static_assert(sizeof(uct_base_iface_t) == 1280, "uct_base_iface_t layout (UCX 1.13, no stats)");
static_assert(sizeof(uct_base_ep_t) == 8, "uct_base_ep_t layout (UCX 1.13, no stats)");
static_assert(sizeof(uct_iface_internal_ops_t) == 32, "uct_iface_internal_ops_t: 4 ops in 1.13");
static_assert(sizeof(ucs_config_global_list_entry_t) == 48, "ucs_config_global_list_entry_t (1.13)");
static_assert(offsetof(uct_component_t, md_config) == 64, "uct_component_t.md_config offset");
static_assert(offsetof(uct_base_iface_t, am) == 424, "uct_base_iface_t.am offset");
static_assert(offsetof(xpufab_async_context_head_t, mode) == 56, "ucs_async_context_t.mode offset (1.13)");
static_assert(sizeof(uct_cm_ops_t) == 56, "uct_cm_ops_t: 7 ops in UCX 1.13");
static_assert(sizeof(uct_cm_t) == 1304, "uct_cm_t layout (UCX 1.13, no stats)");
static_assert(offsetof(uct_cm_t, iface) == 16, "uct_cm_t.iface offset");
static_assert(sizeof(uct_cm_config_t) == 8, "uct_cm_config_t layout (UCX 1.13)");
static_assert(sizeof(uct_listener_t) == 8, "uct_listener_t layout (UCX 1.13)");
#endif

#endif  // XPUFAB_API_UCT_UCX_COMPAT_H_
