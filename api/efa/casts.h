// Provider objects from the fids an application hands back. Every provider object starts with its
// libfabric fid (EfaEp::ep, EfaCq::cq, ...), so the object and the fid share an address; the cast
// checks the fid's class first, so a fid of another kind (an AV passed where a CQ belongs, a
// closed-and-reused pointer) gives nullptr, which callers answer with -FI_EINVAL, instead of a
// reinterpretation of the wrong memory.
#ifndef XPUFAB_API_EFA_CASTS_H_
#define XPUFAB_API_EFA_CASTS_H_

#include "api/efa/efa.h"

namespace xpufab::efa {

namespace casts_internal {
template <typename Obj>
Obj* checked(fid* f, size_t fclass) {
  return f != nullptr && f->fclass == fclass ? reinterpret_cast<Obj*>(f) : nullptr;
}
}  // namespace casts_internal

inline EfaFabric* to_fabric(fid* f) { return casts_internal::checked<EfaFabric>(f, FI_CLASS_FABRIC); }
inline EfaDomain* to_domain(fid* f) { return casts_internal::checked<EfaDomain>(f, FI_CLASS_DOMAIN); }
inline EfaAv* to_av(fid* f) { return casts_internal::checked<EfaAv>(f, FI_CLASS_AV); }
inline EfaMr* to_mr(fid* f) { return casts_internal::checked<EfaMr>(f, FI_CLASS_MR); }
inline EfaCq* to_cq(fid* f) { return casts_internal::checked<EfaCq>(f, FI_CLASS_CQ); }
inline EfaCntr* to_cntr(fid* f) { return casts_internal::checked<EfaCntr>(f, FI_CLASS_CNTR); }
inline EfaEp* to_ep(fid* f) { return casts_internal::checked<EfaEp>(f, FI_CLASS_EP); }
inline EfaXpuCtx* to_xpu_ctx(fid* f) { return casts_internal::checked<EfaXpuCtx>(f, FI_CLASS_XPU_CTX); }

inline EfaFabric* to_fabric(fid_fabric* f) { return to_fabric(f ? &f->fid : nullptr); }
inline EfaDomain* to_domain(fid_domain* f) { return to_domain(f ? &f->fid : nullptr); }
inline EfaAv* to_av(fid_av* f) { return to_av(f ? &f->fid : nullptr); }
inline EfaMr* to_mr(fid_mr* f) { return to_mr(f ? &f->fid : nullptr); }
inline EfaCq* to_cq(fid_cq* f) { return to_cq(f ? &f->fid : nullptr); }
inline EfaCntr* to_cntr(fid_cntr* f) { return to_cntr(f ? &f->fid : nullptr); }
inline EfaEp* to_ep(fid_ep* f) { return to_ep(f ? &f->fid : nullptr); }
inline EfaXpuCtx* to_xpu_ctx(fid_xpu_ctx* f) { return to_xpu_ctx(f ? &f->fid : nullptr); }

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_CASTS_H_
