#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <cstring>
#include <string>

#include "api/core/test_provider.h"
#include "gtest/gtest.h"

namespace xpufab::core::testing {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST(TostrTest, InfoPrintsEverySectionAndThe27Fields) {
  fi_info* i = default_offer("tfab", "tdom");
  i->fabric_attr->prov_name = strdup("tprov");
  i->fabric_attr->prov_version = FI_VERSION(3, 1);
  i->fabric_attr->api_version = FI_VERSION(2, 7);
  std::string s = fi_tostr(i, FI_TYPE_INFO);
  for (const char* part :
       {"fi_info:\n", "    caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC",
        "FI_XPU", "    mode: [ FI_CONTEXT ]", "addr_format: FI_ADDR_EFA",
        "src_addrlen: 16", "dest_addr: (null)", "    fi_tx_attr:\n",
        "        inject_size: 32\n", "        msg_order: [ FI_ORDER_SAS ]",
        "        comp_order: [ FI_ORDER_NONE ]", "    fi_rx_attr:\n",
        "    fi_ep_attr:\n", "        type: FI_EP_RDM\n", "protocol: FI_PROTO_EFA",
        "mem_tag_format: 0xaaaaaaaaaaaaaaaa", "        xpu_ctx: (nil)\n",
        "    fi_domain_attr:\n", "        name: tdom\n", "threading: FI_THREAD_SAFE",
        "data_progress: FI_PROGRESS_MANUAL", "resource_mgmt: FI_RM_ENABLED",
        "mr_mode: [ FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY, "
        "FI_MR_HMEM, FI_MR_XPU_DESC ]",
        "        max_xpu_ctx_cnt: 1\n", "    fi_fabric_attr:\n", "        name: tfab\n",
        "prov_name: tprov", "prov_version: 3.1", "api_version: 2.7", "    nic:\n",
        "bus_type: FI_BUS_PCI", "state: FI_LINK_UP"}) {
    EXPECT_TRUE(has(s, part)) << "missing: " << part << "\n" << s;
  }
  fi_freeinfo(i);
}

// Programs print a list by walking it (fi_info -v prints "---" and then each entry), so an entry
// prints alone, never the entries after it.
TEST(TostrTest, InfoPrintsOneEntryNotTheListAfterIt) {
  fi_info* first = default_offer("tfab", "first_dom");
  fi_info* second = default_offer("tfab", "second_dom");
  first->next = second;
  std::string s = fi_tostr(first, FI_TYPE_INFO);
  EXPECT_TRUE(has(s, "name: first_dom")) << s;
  EXPECT_FALSE(has(s, "second_dom")) << s;
  EXPECT_EQ(s.find("fi_info:"), s.rfind("fi_info:")) << s;
  EXPECT_TRUE(has(fi_tostr(second, FI_TYPE_INFO), "name: second_dom"));
  fi_freeinfo(first);
}

TEST(TostrTest, FlagAndEnumTypes) {
  uint64_t caps = FI_MSG | FI_XPU | FI_REMOTE_COMM;
  EXPECT_STREQ(fi_tostr(&caps, FI_TYPE_CAPS), "[ FI_MSG, FI_XPU, FI_REMOTE_COMM ]");
  uint64_t none = 0;
  EXPECT_STREQ(fi_tostr(&none, FI_TYPE_CAPS), "[  ]");
  uint64_t mode = FI_CONTEXT | FI_CONTEXT2;
  EXPECT_STREQ(fi_tostr(&mode, FI_TYPE_MODE), "[ FI_CONTEXT, FI_CONTEXT2 ]");
  fi_ep_type ep = FI_EP_RDM;
  EXPECT_STREQ(fi_tostr(&ep, FI_TYPE_EP_TYPE), "FI_EP_RDM");
  uint32_t fmt = FI_SOCKADDR_IN6;
  EXPECT_STREQ(fi_tostr(&fmt, FI_TYPE_ADDR_FORMAT), "FI_SOCKADDR_IN6");
  fi_progress prog = FI_PROGRESS_AUTO;
  EXPECT_STREQ(fi_tostr(&prog, FI_TYPE_PROGRESS), "FI_PROGRESS_AUTO");
  fi_threading th = FI_THREAD_DOMAIN;
  EXPECT_STREQ(fi_tostr(&th, FI_TYPE_THREADING), "FI_THREAD_DOMAIN");
  int mr = FI_MR_LOCAL | FI_MR_XPU_DESC;
  EXPECT_STREQ(fi_tostr(&mr, FI_TYPE_MR_MODE), "[ FI_MR_LOCAL, FI_MR_XPU_DESC ]");
  uint64_t ops = FI_COMPLETION | FI_INJECT | FI_MORE;
  EXPECT_STREQ(fi_tostr(&ops, FI_TYPE_OP_FLAGS), "[ FI_MORE, FI_COMPLETION, FI_INJECT ]");
  fi_cq_format cqf = FI_CQ_FORMAT_TAGGED;
  EXPECT_STREQ(fi_tostr(&cqf, FI_TYPE_CQ_FORMAT), "FI_CQ_FORMAT_TAGGED");
  fi_wait_obj w = FI_WAIT_FD;
  EXPECT_STREQ(fi_tostr(&w, FI_TYPE_WAIT_OBJ), "FI_WAIT_FD");
  fi_hmem_iface hm = FI_HMEM_CUDA;
  EXPECT_STREQ(fi_tostr(&hm, FI_TYPE_HMEM_IFACE), "FI_HMEM_CUDA");
  fi_av_type av = FI_AV_TABLE;
  EXPECT_STREQ(fi_tostr(&av, FI_TYPE_AV_TYPE), "FI_AV_TABLE");
  fi_datatype dt = FI_UINT64;
  EXPECT_STREQ(fi_tostr(&dt, FI_TYPE_ATOMIC_TYPE), "FI_UINT64");
  fi_op op = FI_CSWAP;
  EXPECT_STREQ(fi_tostr(&op, FI_TYPE_ATOMIC_OP), "FI_CSWAP");
  uint32_t ver = FI_VERSION(1, 5);
  EXPECT_STREQ(fi_tostr(&ver, FI_TYPE_VERSION), "2.7");  // the library's version, not the argument
  EXPECT_STREQ(fi_tostr("1", FI_TYPE_VERSION), "2.7");
  uint32_t proto = FI_PROTO_EFA;
  EXPECT_STREQ(fi_tostr(&proto, FI_TYPE_PROTOCOL), "FI_PROTO_EFA");
  uint64_t order = FI_ORDER_SAS | FI_ORDER_RMA_WAW;
  EXPECT_STREQ(fi_tostr(&order, FI_TYPE_MSG_ORDER), "[ FI_ORDER_SAS, FI_ORDER_RMA_WAW ]");
  int unknown_ep = 9;
  EXPECT_STREQ(fi_tostr(&unknown_ep, FI_TYPE_EP_TYPE), "Unknown(9)");
  uint64_t odd = FI_MSG | (1ULL << 7);
  EXPECT_STREQ(fi_tostr(&odd, FI_TYPE_CAPS), "[ FI_MSG, 0x80 ]");
}

TEST(TostrTest, XpuFieldsOfCqAndCntrAttr) {
  fi_cq_attr cq{};
  cq.size = 128;
  cq.flags = FI_XPU;
  cq.format = FI_CQ_FORMAT_DATA;
  cq.xpu_ctx = reinterpret_cast<fid_xpu_ctx*>(0x1000);
  std::string s = fi_tostr(&cq, FI_TYPE_CQ_ATTR);
  EXPECT_TRUE(has(s, "size: 128")) << s;
  EXPECT_TRUE(has(s, "flags: [ FI_XPU ]")) << s;
  EXPECT_TRUE(has(s, "format: FI_CQ_FORMAT_DATA")) << s;
  EXPECT_TRUE(has(s, "xpu_ctx: 0x1000")) << s;
  fi_cntr_attr cntr{};
  cntr.flags = FI_XPU;
  cntr.xpu_ctx = reinterpret_cast<fid_xpu_ctx*>(0x2000);
  s = fi_tostr(&cntr, FI_TYPE_CNTR_ATTR);
  EXPECT_TRUE(has(s, "xpu_ctx: 0x2000")) << s;
  EXPECT_TRUE(has(s, "events: FI_CNTR_EVENTS_COMP")) << s;
}

TEST(TostrTest, ReentrantVariantTruncatesSafely) {
  uint64_t caps = FI_MSG | FI_RMA;
  char buf[10];
  ASSERT_EQ(fi_tostr_r(buf, sizeof(buf), &caps, FI_TYPE_CAPS), buf);
  EXPECT_STREQ(buf, "[ FI_MSG,");
  char big[64];
  EXPECT_STREQ(fi_tostr_r(big, sizeof(big), &caps, FI_TYPE_CAPS), "[ FI_MSG, FI_RMA ]");
  EXPECT_EQ(fi_tostr_r(nullptr, 10, &caps, FI_TYPE_CAPS), nullptr);
  EXPECT_EQ(fi_tostr_r(big, 0, &caps, FI_TYPE_CAPS), nullptr);
  EXPECT_EQ(fi_tostr_r(big, sizeof(big), nullptr, FI_TYPE_CAPS), nullptr);
  EXPECT_EQ(fi_tostr(nullptr, FI_TYPE_INFO), nullptr);
  EXPECT_STREQ(fi_tostr(&caps, static_cast<fi_type>(1000)), "Unknown type");
}

}  // namespace
}  // namespace xpufab::core::testing
