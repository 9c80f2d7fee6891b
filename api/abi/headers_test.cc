// The headers from C11 and host C++: the C TU links and its inline
// wrappers behave, and fi_xpu_device.h dispatches to -FI_ENOSYS.
#include <cstring>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_xpu.h>
#include <rdma/fi_xpu_device.h>

#include "api/abi/all_headers_c11.h"
#include "gtest/gtest.h"

namespace {

TEST(Headers, C11TranslationUnitSeesVersion27) {
  EXPECT_EQ(all_headers_c11_version(), static_cast<uint32_t>(FI_VERSION(2, 7)));
  fid_xpu_ep ep{};
  ep.fid.prov_id = 77;
  EXPECT_EQ(all_headers_c11_xpu_send(&ep), -FI_ENOSYS);
}

// From C, collectives on an endpoint without them and profiling on an object
// without ops_open fail with -FI_ENOSYS.
TEST(Headers, C11UnsupportedCallsFailCleanly) {
  fid_ep ep{};
  EXPECT_EQ(all_headers_c11_barrier(&ep), -FI_ENOSYS);
  uint64_t in = 1, out = 0;
  EXPECT_EQ(all_headers_c11_allreduce(&ep, &in, &out), -FI_ENOSYS);
  fi_ops ops{};
  ops.size = offsetof(fi_ops, ops_open);  // a table from before ops_open
  fid f{};
  f.ops = &ops;
  EXPECT_EQ(all_headers_c11_profile_open(&f), -FI_ENOSYS);
  // A triggered context stands in for the operation's fi_context.
  EXPECT_EQ(all_headers_c11_triggered_context_size(), sizeof(fi_context));
}

TEST(Headers, DeviceDispatchUnknownProviderIsEnosys) {
  fid_xpu_ep ep{};
  fid_xpu_cq cq{};
  fid_xpu_cntr cntr{};
  for (uint32_t id : {0u, static_cast<uint32_t>(FI_XPU_PROV_EFA), 99u}) {
    ep.fid.prov_id = cq.fid.prov_id = cntr.fid.prov_id = id;
    char buf[8] = {};
    EXPECT_EQ(fi_xpu_write(&ep, buf, 8, nullptr, 0, nullptr, 0, 0, nullptr, 0,
                           FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_read(&ep, buf, 8, nullptr, nullptr, 0, 0, nullptr, 0,
                          FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_send(&ep, buf, 8, nullptr, 0, nullptr, nullptr, 0,
                          FI_XPU_SUBGROUP), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_recv(&ep, buf, 8, nullptr, nullptr, nullptr, 0,
                          FI_XPU_WORK_GROUP), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_tsend(&ep, buf, 8, nullptr, 0, nullptr, 1, nullptr, 0,
                           FI_XPU_DEVICE), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_trecv(&ep, buf, 8, nullptr, nullptr, 1, 0, nullptr, 0,
                           FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_atomic(&ep, buf, 1, nullptr, nullptr, 0, 0, FI_UINT64,
                            FI_SUM, nullptr, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_fetch_atomic(&ep, buf, 1, nullptr, buf, nullptr, nullptr,
                                  0, 0, FI_UINT64, FI_SUM, nullptr, 0,
                                  FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_compare_atomic(&ep, buf, 1, nullptr, buf, nullptr, buf,
                                    nullptr, nullptr, 0, 0, FI_UINT64,
                                    FI_CSWAP, nullptr, 0, FI_XPU_WORK_ITEM),
              -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cntr_read(&cntr, FI_XPU_WORK_ITEM), 0u);
    EXPECT_EQ(fi_xpu_cntr_readerr(&cntr, FI_XPU_WORK_ITEM), 0u);
    fi_xpu_cntr_wait(&cntr, 1, 0, FI_XPU_WORK_ITEM);  // returns at once
    EXPECT_EQ(fi_xpu_cntr_add(&cntr, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cntr_set(&cntr, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cntr_adderr(&cntr, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cntr_seterr(&cntr, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cq_read(&cq, buf, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cq_readfrom(&cq, buf, 1, buf, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cq_readerr(&cq, buf, 0, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cq_sread(&cq, buf, 1, 1, FI_XPU_WORK_ITEM), -FI_ENOSYS);
    EXPECT_EQ(fi_xpu_cq_sreadfrom(&cq, buf, 1, buf, 1, FI_XPU_WORK_ITEM),
              -FI_ENOSYS);
  }
}

// An ops table built against an older layout (size ends before the 2.7
// members) must make the XPU wrappers return -FI_ENOSYS, not read past it.
int FakeQuery(fid_xpu_ctx*, fi_xpu_ctx_attr* attr) {
  attr->caps = FI_XPU_CAP_EP;
  return 0;
}

TEST(Headers, XpuWrappersCheckOpsTableSize) {
  fi_ops_domain dops{};
  dops.size = offsetof(fi_ops_domain, xpu_ctx);  // pre-2.7 table
  fid_domain domain{};
  domain.ops = &dops;
  fid_xpu_ctx* ctx = nullptr;
  fi_xpu_attr attr{};
  EXPECT_EQ(fi_xpu_ctx(&domain, &attr, &ctx, nullptr), -FI_ENOSYS);
  dops.size = sizeof(dops);  // full table, op unset
  EXPECT_EQ(fi_xpu_ctx(&domain, &attr, &ctx, nullptr), -FI_ENOSYS);

  fi_ops_xpu_ctx xops{};
  fid_xpu_ctx xctx{};
  xctx.ops = &xops;
  fi_xpu_ctx_attr cattr{};
  xops.size = sizeof(size_t);
  xops.query = FakeQuery;
  EXPECT_EQ(fi_xpu_ctx_query(&xctx, &cattr), -FI_ENOSYS);
  xops.size = sizeof(xops);
  EXPECT_EQ(fi_xpu_ctx_query(&xctx, &cattr), 0);
  EXPECT_EQ(cattr.caps, FI_XPU_CAP_EP);

  fi_ops_ep eops{};
  eops.size = offsetof(fi_ops_ep, export_xpu);
  fid_ep ep{};
  ep.ops = &eops;
  fid_xpu_ep xep{};
  EXPECT_EQ(fi_ep_export_xpu(&ep, 0, &xep), -FI_ENOSYS);

  fi_ops_cq cops{};
  cops.size = offsetof(fi_ops_cq, export_xpu);
  fid_cq cq{};
  cq.ops = &cops;
  fid_xpu_cq xcq{};
  EXPECT_EQ(fi_cq_export_xpu(&cq, 0, &xcq), -FI_ENOSYS);

  fi_ops_cntr nops{};
  nops.size = offsetof(fi_ops_cntr, export_xpu);
  fid_cntr cntr{};
  cntr.ops = &nops;
  fid_xpu_cntr xcntr{};
  EXPECT_EQ(fi_cntr_export_xpu(&cntr, 0, &xcntr), -FI_ENOSYS);

  fi_ops_av aops{};
  aops.size = offsetof(fi_ops_av, lookup2);
  fid_av av{};
  av.ops = &aops;
  size_t len = 0;
  EXPECT_EQ(fi_av_lookup2(&av, 0, nullptr, &len, 0, nullptr), -FI_ENOSYS);
}

}  // namespace
