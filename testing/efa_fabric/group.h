// Runs one function in several forked processes of a test, which exchange blobs (fi_getname
// addresses, MR keys and buffer addresses) through the parent: an allgather over socketpairs,
// with a deadline, so that a stuck process fails the test instead of hanging it. The children
// check with GROUP_CHECK, which ends the process with status 1 and a line naming the check;
// gtest's assertions belong to the parent only.
#ifndef XPUFAB_TESTING_EFA_FABRIC_GROUP_H_
#define XPUFAB_TESTING_EFA_FABRIC_GROUP_H_

#include <functional>
#include <string>
#include <vector>

namespace xpufab::efa_fabric {

[[noreturn]] void group_check_failed(const char* file, int line, const char* cond);

#define GROUP_CHECK(cond)                                                             \
  do {                                                                                \
    if (!(cond)) ::xpufab::efa_fabric::group_check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

// A child's view of its group.
class Member {
 public:
  Member(int rank, int size, int fd) : rank_(rank), size_(size), fd_(fd) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every member's blob by rank; a failed exchange fails the process.
  std::vector<std::string> allgather(const std::string& mine);
  void barrier() { allgather(std::string()); }
  // Runs while an exchange waits for the others: a protocol endpoint whose progress is its
  // reader's must keep progressing, or a peer waiting on it never finishes.
  void set_idle(std::function<void()> idle) { idle_ = std::move(idle); }

 private:
  int rank_, size_, fd_;
  std::function<void()> idle_;
};

// Forks `size` children that run `fn` (a return is exit status 0) and relays their exchanges.
// Returns every child's exit status (128 + signal when signalled, -1 when it was killed for
// outliving `seconds`).
std::vector<int> run_group(int size, int seconds, void (*fn)(Member&, void*), void* arg);

// The same for a callable.
template <typename Fn>
std::vector<int> run_group(int size, int seconds, Fn fn) {
  return run_group(size, seconds, [](Member& m, void* a) { (*static_cast<Fn*>(a))(m); }, &fn);
}

}  // namespace xpufab::efa_fabric

#endif  // XPUFAB_TESTING_EFA_FABRIC_GROUP_H_
