// Helpers for tests that run peer processes: a free TCP port for the out-of-band rendezvous,
// the test's scratch directory, and spawning/reaping peers with a deadline so a stuck peer fails
// the test instead of hanging it.
#ifndef XPUFAB_TESTING_SUPPORT_PROCESS_UTIL_H_
#define XPUFAB_TESTING_SUPPORT_PROCESS_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace xpufab::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t free_port();

// $TEST_TMPDIR, or /tmp outside Bazel.
std::string tmpdir();

// Starts argv[0] (searched in PATH) with this process's environment plus `env` ("K=V" entries,
// later ones win). Returns the pid, or -1.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// Runs this program again as a peer: a fresh image (so the peer gets its own emulated device
// identity, which a forked copy would share), started as `name FLAG FD` where FD is the peer's end
// of a socketpair. Returns the pid and sets *fd to this end, or returns -1.
pid_t spawn_self(const char* name, const char* flag, int* fd);

// The exit status (128 + signal for a signalled process), or -1 after killing a process that
// outlived `seconds`.
int wait_exit(pid_t pid, int seconds);

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_SUPPORT_PROCESS_UTIL_H_
