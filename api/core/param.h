/*
 * api/core/param.h - named configuration variables (fi_getparams(3)).
 *
 * A provider declares the environment variables it reads with
 * define_param(); fi_getparams() lists them (with their current values) for
 * tools such as fi_info -e.  Values always come from the environment.
 */
#ifndef XPUFAB_API_CORE_PARAM_H_
#define XPUFAB_API_CORE_PARAM_H_

#include <rdma/fabric.h>

#include <string>

namespace xpufab::core {

// Declares FI_<PROV>_<NAME> (or FI_<NAME> when prov is null), upper-cased.
// Returns 0, -FI_EINVAL for a missing name, -FI_EALREADY if declared before.
int define_param(const char* prov, const char* name, enum fi_param_type type,
                 const char* help);

// Registers a function that fi_getparams() calls, outside any lock, each time before it lists the
// parameters: for declarations that cannot be made at load time (what other libraries register
// during their own static initialization). It may call define_param(); repeats are harmless.
void add_param_declarer(void (*declare)());

// The environment value of a parameter (declared or not); false when unset.
bool get_param_str(const char* prov, const char* name, std::string* value_p);
// Parses "1/0/yes/no/true/false/on/off" (any case); false when unset or
// unparsable.
bool get_param_bool(const char* prov, const char* name, bool* value_p);
// Parses a decimal integer; false when unset or unparsable.
bool get_param_int(const char* prov, const char* name, long long* value_p);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_PARAM_H_
