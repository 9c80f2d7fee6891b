/* Compiled as C11: efadv_compat.h must stay valid C for the preload shim. */
#include "hw/efadv_compat.h"

size_t xpufab_efadv_compat_wq_attr_size(void) { return sizeof(struct efadv_compat_wq_attr); }
