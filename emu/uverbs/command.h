// One uverbs write() command as the dispatcher hands it to a handler, and the handlers of each
// command family. A handler returns 0 or -errno; it validates the request as the EFA kernel
// driver does (reserved fields and unknown driver tails must be zero) and writes the responses
// with respond(). All run with State::mu held.
#ifndef XPUFAB_EMU_UVERBS_COMMAND_H_
#define XPUFAB_EMU_UVERBS_COMMAND_H_

#include <cstddef>
#include <cstdint>

#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {

struct Cmd {
  uint32_t command;
  bool extended;
  const uint8_t* core;   // core request (after the headers)
  size_t core_len;
  const uint8_t* drv;    // driver request
  size_t drv_len;
  uint64_t response;     // user pointer
  size_t out_len;        // core response size
  uint64_t drv_response; // user pointer of the driver response
  size_t drv_out_len;
};

// Legacy commands carry the response pointer as the first u64 of the core request: splits the
// request into core and driver parts and locates both responses.
int legacy_split(Cmd* c, size_t core_size, size_t core_out);
// Writes the core and driver responses, each cut to what the caller has room for.
int respond(const Cmd& c, const void* core, size_t core_size, const void* drv, size_t drv_size);

// cmd_device.cc
int cmd_get_context(State& s, Ctx* ctx, Cmd& c);
int cmd_query_device(State& s, Ctx* ctx, Cmd& c);
int cmd_ex_query_device(State& s, Ctx* ctx, Cmd& c);
int cmd_query_port(State& s, Ctx* ctx, Cmd& c);

// cmd_pd_mr_ah.cc
int cmd_alloc_pd(State& s, Ctx* ctx, Cmd& c);
int cmd_dealloc_pd(State& s, Ctx* ctx, Cmd& c);
int cmd_reg_mr(State& s, Ctx* ctx, Cmd& c);
int cmd_dereg_mr(State& s, Ctx* ctx, Cmd& c);
int cmd_create_ah(State& s, Ctx* ctx, Cmd& c);
int cmd_destroy_ah(State& s, Ctx* ctx, Cmd& c);

// comp_channel.cc
int cmd_create_comp_channel(State& s, Ctx* ctx, Cmd& c);

// cmd_cq.cc
int cmd_create_cq(State& s, Ctx* ctx, Cmd& c);
int cmd_ex_create_cq(State& s, Ctx* ctx, Cmd& c);
int cmd_destroy_cq(State& s, Ctx* ctx, Cmd& c);

// cmd_qp.cc
int cmd_create_qp(State& s, Ctx* ctx, Cmd& c);
int cmd_query_qp(State& s, Ctx* ctx, Cmd& c);
int cmd_modify_qp(State& s, Ctx* ctx, Cmd& c);
int cmd_destroy_qp(State& s, Ctx* ctx, Cmd& c);

}  // namespace uverbs
}  // namespace xpufab

#endif  // XPUFAB_EMU_UVERBS_COMMAND_H_
