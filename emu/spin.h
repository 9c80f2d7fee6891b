// The pause a spin-wait loop takes between two looks at a word another thread will change: it
// saves power and, on a machine with hyper-threads, gives the sibling the core.
#ifndef XPUFAB_EMU_SPIN_H_
#define XPUFAB_EMU_SPIN_H_

namespace xpufab {
namespace emu {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_SPIN_H_
