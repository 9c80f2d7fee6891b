// The FI_EFA_EMU_* variables the emu backend and its devices read (emu/options_env.h, the
// fabrics), with a line of help each: the backend registers them so that fi_getparams lists them.
#ifndef XPUFAB_EMU_SETTINGS_H_
#define XPUFAB_EMU_SETTINGS_H_

#include <cstddef>

#include "api/backend/backend.h"

namespace xpufab {
namespace emu {

extern const backend::BackendSetting kEmuSettings[];
extern const size_t kNumEmuSettings;

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_SETTINGS_H_
