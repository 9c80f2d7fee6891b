// Memory the emulated NIC touches on a remote peer's behalf: an RDMA write landing in an MR, an
// RDMA read served from one.
//
// Nothing in this process orders those bytes with the application's own accesses: the
// application orders them through its protocol with the peer (a message, a barrier over a channel
// of its own), which ThreadSanitizer cannot follow into another process. Real DMA is invisible to
// it as well, so within a RemoteDma scope the thread's reads and writes go unchecked. Everything
// else the engine does (its state, the queues, CQEs, the local side of every operation, which a
// doorbell or a CQE orders) stays checked.
//
// Internal to emu/.
#ifndef XPUFAB_EMU_REMOTE_DMA_H_
#define XPUFAB_EMU_REMOTE_DMA_H_

#if defined(__SANITIZE_THREAD__)
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace xpufab {
namespace emu {

class RemoteDma {
 public:
#if defined(__SANITIZE_THREAD__)
  RemoteDma() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~RemoteDma() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  RemoteDma() {}   // user-provided: a scope object, never "unused"
  ~RemoteDma() {}
#endif
  RemoteDma(const RemoteDma&) = delete;
  RemoteDma& operator=(const RemoteDma&) = delete;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_REMOTE_DMA_H_
