// The fid export/import calls of <rdma/fi_ext.h>, library functions since
// libfabric 2.0.  fi_import goes through fi_open, which has no named core
// objects ("logging", "mr_cache") here, so importing fails cleanly.
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

extern "C" {

int fi_export_fid(struct fid* fid, uint64_t flags, struct fid** expfid, void* context) {
  if (!fid || !expfid) return -FI_EINVAL;
  fi_fid_export exp{expfid, flags, context};
  return fi_control(fid, FI_EXPORT_FID, &exp);
}

int fi_import_fid(struct fid* fid, struct fid* expfid, uint64_t flags) {
  if (!fid || !expfid) return -FI_EINVAL;
  if (!FI_CHECK_OP(fid->ops, struct fi_ops, bind)) return -FI_ENOSYS;
  return fid->ops->bind(fid, expfid, flags);
}

int fi_import(uint32_t version, const char* name, void* attr, size_t attr_len, uint64_t flags,
              struct fid* fid, void* context) {
  if (!fid) return -FI_EINVAL;
  struct fid* open_fid = nullptr;
  int rc = fi_open(version, name, attr, attr_len, flags, &open_fid, context);
  if (rc) return rc;
  rc = fi_import_fid(open_fid, fid, flags);
  fi_close(open_fid);
  return rc;
}

int fi_import_log(uint32_t version, uint64_t flags, struct fid_logging* log_fid) {
  if (!log_fid || !log_fid->ops) return -FI_EINVAL;
  log_fid->fid.fclass = FI_CLASS_LOG;
  log_fid->ops->size = sizeof(struct fi_ops_log);
  return fi_import(version, "logging", nullptr, 0, flags, &log_fid->fid, log_fid);
}

}  // extern "C"
