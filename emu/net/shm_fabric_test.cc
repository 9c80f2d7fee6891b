#include "emu/net/shm_fabric.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "emu/clock.h"
#include "emu/net/test_sink.h"

namespace xpufab {
namespace emu {
namespace net {
namespace {

std::string tmp_base() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

ShmFabricOptions opts(const std::string& key) {
  ShmFabricOptions o;
  o.base_dir = tmp_base();
  o.key = key + std::to_string(getpid());
  o.ring_bytes = 256u << 10;  // small, so that big packets wrap and fragment
  o.fragment_bytes = 16u << 10;
  return o;
}

Gid gid_of(uint8_t n) { return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 't', 0, 0, 0, 0, 0, n}; }

// Two views of one fabric, as two processes have, with a device attached to each: gid_of(ga)
// and its sink sa in *a, gid_of(gb) and sb in *b.
void open_two(const ShmFabricOptions& o, std::shared_ptr<ShmFabric>* a, uint8_t ga, TestSink* sa,
              std::shared_ptr<ShmFabric>* b, uint8_t gb, TestSink* sb) {
  ASSERT_EQ(ShmFabric::create(o, a), 0);
  ASSERT_EQ(ShmFabric::create(o, b), 0);
  ASSERT_EQ((*a)->attach(gid_of(ga), sa), 0);
  ASSERT_EQ((*b)->attach(gid_of(gb), sb), 0);
}

TEST(ShmFabric, DeliversSmallAndLargePacketsIntact) {
  std::shared_ptr<ShmFabric> a, b;
  ASSERT_EQ(ShmFabric::create(opts("deliver"), &a), 0);
  ASSERT_EQ(ShmFabric::create(opts("deliver"), &b), 0);
  ASSERT_EQ(a->dir(), b->dir());
  struct stat st;
  ASSERT_EQ(stat(a->dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  TestSink sa, sb;
  ASSERT_EQ(a->attach(gid_of(1), &sa), 0);
  ASSERT_EQ(b->attach(gid_of(2), &sb), 0);
  EXPECT_EQ(b->attach(gid_of(1), &sb), -EEXIST);  // owned by a live fabric
  ASSERT_EQ(stat((a->dir() + "/fe80000000000000027400000000000" + "1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const size_t sizes[] = {0, 1, 64, 8928, 70000, 1u << 20, 3u << 20};
  uint64_t token = 1;
  for (size_t s : sizes) ASSERT_EQ(a->send(gid_of(2), make_packet(gid_of(1), token++, s)), 0);
  ASSERT_EQ(sb.wait_for(7, 10000), 7u);
  for (const Packet& p : sb.take()) EXPECT_TRUE(packet_ok(p)) << p.token;
  ASSERT_EQ(b->send(gid_of(1), make_packet(gid_of(2), 99, 100)), 0);
  ASSERT_EQ(sa.wait_for(1, 10000), 1u);
  EXPECT_TRUE(packet_ok(sa.take()[0]));
  EXPECT_EQ(a->send(gid_of(9), make_packet(gid_of(1), 5, 5)), -EHOSTUNREACH);
  EXPECT_EQ(a->stats().packets_tx, 7u);
  EXPECT_GT(a->stats().fragments_tx, 7u);
  EXPECT_EQ(b->stats().malformed, 0u);
}

// Pages of the file at `path` that hold data (written at least once), by mincore(2).
size_t resident_pages(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  struct stat st;
  fstat(fd, &st);
  const size_t len = static_cast<size_t>(st.st_size);
  void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return 0;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((len + page - 1) / page);
  size_t n = 0;
  if (mincore(m, len, in.data()) == 0) n = std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; });
  munmap(m, len);
  return n;
}

// A consumer that keeps up (a ping-pong's) finds each record where the last one began again
// once the ring is emptied past its first pages: 1 MiB of traffic through a 4 MiB ring writes
// only those pages, which stay mapped and warm instead of faulting in one after another.
TEST(ShmFabric, LightTrafficKeepsToTheRingsFirstPages) {
  ShmFabricOptions o = opts("recycle");
  o.ring_bytes = 4u << 20;
  // tmpfs, as by default: a page of the file holds memory only once written.
  o.base_dir = "/dev/shm";
  std::shared_ptr<ShmFabric> a, b;
  TestSink sa, sb;
  open_two(o, &a, 1, &sa, &b, 2, &sb);
  constexpr int kPackets = 5000;  // about 1 MiB of records
  for (int i = 0; i < kPackets; ++i) {
    ASSERT_EQ(a->send(gid_of(2), make_packet(gid_of(1), i + 1, 64)), 0);
    ASSERT_EQ(sb.wait_for(1, 10000), 1u) << i;
    for (const Packet& p : sb.take()) ASSERT_TRUE(packet_ok(p)) << i;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // The header page, the first kRecycleBytes, and the record that crossed them.
  const size_t most = 1 + (o.recycle_bytes + 2 * page - 1) / page;
  const size_t pages = resident_pages(b->dir() + "/fe800000000000000274000000000002");
  EXPECT_GT(pages, 1u);
  EXPECT_LE(pages, most);
  // Without recycling, the same traffic writes a page for every 20 records.
  o.recycle_bytes = 0;
  o.key += "-off";
  std::shared_ptr<ShmFabric> c, d;
  TestSink sc, sd;
  open_two(o, &c, 3, &sc, &d, 4, &sd);
  for (int i = 0; i < kPackets; ++i) {
    ASSERT_EQ(c->send(gid_of(4), make_packet(gid_of(3), i + 1, 64)), 0);
    ASSERT_EQ(sd.wait_for(1, 10000), 1u) << i;
    sd.take();
  }
  EXPECT_GT(resident_pages(d->dir() + "/fe800000000000000274000000000004"), 4 * most);
  EXPECT_EQ(b->stats().malformed, 0u);
}

// A mailbox holds the pages small messages use from its start (header, ring up to the recycle
// point, and the page past it), so that a job's first messages take no page faults there; the
// rest of the ring is left to the traffic that reaches it.
TEST(ShmFabric, AMailboxHoldsTheRingsFirstPagesFromTheStart) {
  ShmFabricOptions o = opts("hot");
  o.ring_bytes = 4u << 20;
  o.base_dir = "/dev/shm";  // tmpfs: a page holds memory only once written (or populated)
  std::shared_ptr<ShmFabric> a;
  TestSink sa;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(a->attach(gid_of(1), &sa), 0);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t hot = 1 + (o.recycle_bytes + page) / page;
  const size_t pages = resident_pages(a->dir() + "/fe800000000000000274000000000001");
  // A kernel before 5.14 has no MADV_POPULATE_WRITE (EINVAL): the pages fault in as they come.
  void* scratch = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(scratch, MAP_FAILED);
  const bool populates = madvise(scratch, page, MADV_POPULATE_WRITE) == 0;
  munmap(scratch, page);
  if (!populates) GTEST_SKIP() << "this kernel does not populate ranges (MADV_POPULATE_WRITE)";
  EXPECT_EQ(pages, hot);
}

// An address handle made to a device of another process opens that device's mailbox then (as a
// NIC sets up an address handle when it is created), not at the first send: the first message
// of a job costs no file open and mapping on its way. Devices of this process, and devices not
// there yet, open nothing.
TEST(ShmFabric, PreparingAPeerOpensItsMailboxBeforeTheFirstSend) {
  std::shared_ptr<ShmFabric> a, b;
  TestSink sa, sb, sc;
  open_two(opts("prepare"), &a, 1, &sa, &b, 2, &sb);
  ASSERT_EQ(a->attach(gid_of(3), &sc), 0);
  EXPECT_EQ(a->stats().open_peers, 0u);
  a->prepare_peer(gid_of(3));  // attached to the same fabric object: delivered without a mailbox
  a->prepare_peer(gid_of(9));  // nobody owns it: opened, if ever, at a send
  EXPECT_EQ(a->stats().open_peers, 0u);
  a->prepare_peer(gid_of(2));
  EXPECT_EQ(a->stats().open_peers, 1u);
  a->prepare_peer(gid_of(2));
  EXPECT_EQ(a->stats().open_peers, 1u);
  ASSERT_EQ(a->send(gid_of(2), make_packet(gid_of(1), 1, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  EXPECT_EQ(a->stats().open_peers, 1u);
  EXPECT_EQ(a->stats().reopened, 0u);
  a->detach(gid_of(3));
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool kill_child(pid_t pid) {
  kill(pid, SIGKILL);
  int status;
  return waitpid(pid, &status, 0) == pid;
}

// A child process that runs body(report): body sets up what the test needs and calls report(text),
// which hands text to the parent and waits, inside body's frame, to be killed; a body that
// returns has failed. The child's pid and *text, or -1 when body failed or the child never
// reported. A child forked from a process whose other threads run may wedge before it reports
// (ThreadSanitizer's runtime can, in a child of a multi-threaded process); one that stays silent
// for kChildReportMs is killed and forked again, twice at most.
template <class Body>
pid_t child_reporting(Body body, std::string* text) {
  constexpr int kChildReportMs = 15000, kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(pipefd[0]);
      body([&](const std::string& r) {
        if (write(pipefd[1], r.data(), r.size()) != static_cast<ssize_t>(r.size())) _exit(1);
        pause();
        _exit(0);
      });
      _exit(1);
    }
    close(pipefd[1]);  // so that a child that dies closes the pipe's last write end
    if (pid < 0) {
      close(pipefd[0]);
      return -1;
    }
    pollfd pfd{pipefd[0], POLLIN, 0};
    char buf[512];
    ssize_t n = -1;
    if (poll(&pfd, 1, kChildReportMs) == 1) n = read(pipefd[0], buf, sizeof(buf));
    close(pipefd[0]);
    if (n > 0) {
      text->assign(buf, static_cast<size_t>(n));
      return pid;
    }
    kill_child(pid);
    if (n == 0) return -1;  // it exited without a report: body failed
    std::fprintf(stderr, "child %d did not report in %d ms; forking another\n", pid, kChildReportMs);
  }
  return -1;
}

// A child process with a fabric of `o` and gid_of(7) attached, which waits to be killed; *dir
// is its fabric's directory. -1 when it could not be started.
pid_t child_with_mailbox(const ShmFabricOptions& o, std::string* dir) {
  return child_reporting(
      [&o](auto report) {
        std::shared_ptr<ShmFabric> c;
        TestSink s;
        if (ShmFabric::create(o, &c) != 0 || c->attach(gid_of(7), &s) != 0) return;
        report(c->dir());
      },
      dir);
}

// A key's directory lives while a fabric of the key does, or a live process's mailbox: the last
// fabric to go removes it, so that jobs with keys of their own leave nothing behind.
TEST(ShmFabric, TheLastFabricOfAKeyRemovesItsDirectory) {
  const ShmFabricOptions o = opts("last");
  std::shared_ptr<ShmFabric> a, b;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  const std::string dir = a->dir();
  TestSink sb;
  ASSERT_EQ(b->attach(gid_of(2), &sb), 0);
  a.reset();
  EXPECT_TRUE(exists(dir + "/senders"));  // b lives
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(a->send(gid_of(2), make_packet(gid_of(1), 1, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  b.reset();
  EXPECT_TRUE(exists(dir));  // a lives
  a.reset();
  EXPECT_FALSE(exists(dir));
  // A fabric of the key made afterwards starts a fresh directory.
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  EXPECT_TRUE(exists(dir + "/senders"));
  a.reset();
  EXPECT_FALSE(exists(dir));
}

// Fabrics of one key made and dropped on several threads at once (their directory removed and
// made again many times meanwhile): every one is made, every pair made together reaches each
// other, and nothing is left at the end.
TEST(ShmFabric, FabricsComingAndGoingShareTheirDirectory) {
  const ShmFabricOptions o = opts("churn");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::shared_ptr<ShmFabric> a, b;
        TestSink sa, sb;
        const uint8_t ga = static_cast<uint8_t>(2 * t + 1), gb = static_cast<uint8_t>(2 * t + 2);
        if (ShmFabric::create(o, &a) != 0 || ShmFabric::create(o, &b) != 0 || a->attach(gid_of(ga), &sa) != 0 ||
            b->attach(gid_of(gb), &sb) != 0 || a->send(gid_of(gb), make_packet(gid_of(ga), 1, 64)) != 0 ||
            sb.wait_for(1, 10000) != 1u) {
          failures++;
        }
        b.reset();  // its receive thread is done with sb first
        a.reset();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::shared_ptr<ShmFabric> probe;
  ASSERT_EQ(ShmFabric::create(o, &probe), 0);
  const std::string dir = probe->dir();
  probe.reset();
  EXPECT_FALSE(exists(dir));
}

// A process leaving at exit, its fabric still in use: its mailboxes close at once (senders find
// no successor), it still reaches the others, and the last fabric of the key to leave takes the
// directory; destroying them afterwards spares the key's next directory.
TEST(ShmFabric, ALeavingFabricClosesItsMailboxesAndTheLastTakesTheDirectory) {
  const ShmFabricOptions o = opts("leave");
  std::shared_ptr<ShmFabric> a, b;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 1, &sa, &b, 2, &sb));
  const std::string dir = a->dir();
  const std::string mailbox_a = dir + "/fe800000000000000274000000000001";
  ASSERT_TRUE(exists(mailbox_a));
  a->leave();
  EXPECT_FALSE(exists(mailbox_a));
  EXPECT_EQ(b->send(gid_of(1), make_packet(gid_of(2), 1, 64)), -EHOSTUNREACH);
  EXPECT_TRUE(exists(dir + "/senders"));  // b lives
  ASSERT_EQ(a->send(gid_of(2), make_packet(gid_of(1), 2, 5000)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  EXPECT_TRUE(packet_ok(sb.take()[0]));
  b->leave();
  EXPECT_FALSE(exists(dir));
  std::shared_ptr<ShmFabric> next;
  ASSERT_EQ(ShmFabric::create(o, &next), 0);
  TestSink sn;
  ASSERT_EQ(next->attach(gid_of(1), &sn), 0);  // the GID a left, in the key's next directory
  a.reset();
  b.reset();
  EXPECT_TRUE(exists(mailbox_a));
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  ASSERT_EQ(b->send(gid_of(1), make_packet(gid_of(2), 3, 64)), 0);
  ASSERT_EQ(sn.wait_for(1, 10000), 1u);
}

// Directories of keys whose processes were all killed are swept by a process leaving; those of a
// live fabric, and one still being made (no senders file yet), stay.
TEST(ShmFabric, LeavingSweepsTheDirectoriesOfDeadKeys) {
  ShmFabricOptions o = opts("sweep-keys");
  o.base_dir = tmp_base() + "/sweep-keys-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(o.base_dir.c_str(), 0700), 0);
  ShmFabricOptions dead = o, live = o;
  dead.key += "-dead";
  live.key += "-live";
  std::string dead_dir;
  const pid_t pid = child_with_mailbox(dead, &dead_dir);
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(exists(dead_dir + "/fe800000000000000274000000000007"));  // the killed child's
  std::shared_ptr<ShmFabric> l, leaver;
  TestSink sl;
  ASSERT_EQ(ShmFabric::create(live, &l), 0);
  ASSERT_EQ(l->attach(gid_of(8), &sl), 0);
  const std::string making = o.base_dir + "/xpufab-" + std::to_string(getuid()) + "-0123456789abcdef";
  ASSERT_EQ(mkdir(making.c_str(), 0700), 0);
  ASSERT_EQ(ShmFabric::create(o, &leaver), 0);
  leaver->leave();
  EXPECT_FALSE(exists(dead_dir));
  EXPECT_FALSE(exists(leaver->dir()));
  EXPECT_TRUE(exists(l->dir() + "/fe800000000000000274000000000008"));
  EXPECT_TRUE(exists(making));
  EXPECT_EQ(leaver->sweep_dead_keys(), 0);
}

TEST(ShmFabric, RefusesADirectoryOthersCanEnter) {
  ShmFabricOptions o = opts("perm");
  std::shared_ptr<ShmFabric> a;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(chmod(a->dir().c_str(), 0755), 0);
  std::shared_ptr<ShmFabric> b;
  EXPECT_EQ(ShmFabric::create(o, &b), -EACCES);
  ASSERT_EQ(chmod(a->dir().c_str(), 0700), 0);
  EXPECT_EQ(ShmFabric::create(o, &b), 0);
}

// A child process attaches a GID and dies without detaching: senders see the peer as
// unreachable and its mailbox is removed.
TEST(ShmFabric, DeadOwnerIsDetectedAndSwept) {
  ShmFabricOptions o = opts("dead");
  std::string dir;
  const pid_t pid = child_with_mailbox(o, &dir);
  ASSERT_GT(pid, 0);
  std::shared_ptr<ShmFabric> a;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(a->send(gid_of(7), make_packet(gid_of(1), 1, 10)), 0);  // alive: accepted
  kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  int rc = 0;
  for (int i = 0; i < 200 && rc == 0; ++i) {
    rc = a->send(gid_of(7), make_packet(gid_of(1), 2, 10));
    usleep(5000);
  }
  EXPECT_EQ(rc, -EHOSTUNREACH);
  EXPECT_EQ(a->stats().dead_peers, 1u);
  struct stat st;
  EXPECT_NE(stat((a->dir() + "/fe800000000000000274000000000007").c_str(), &st), 0);
  // The GID can be taken again.
  TestSink s;
  EXPECT_EQ(a->attach(gid_of(7), &s), 0);
}

// A producer killed while it holds a mailbox's lock, its record half written: other producers
// wait while it lives (and give up with -ENOBUFS, not hang), take the lock over once it died,
// and the receiver gets their packets intact and nothing of the half record.
TEST(ShmFabric, AProducerThatDiesHoldingTheLockDoesNotWedgeTheMailbox) {
  ShmFabricOptions o = opts("deadlock");
  o.full_timeout_ms = 200;
  std::shared_ptr<ShmFabric> a, b;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 61, &sa, &b, 62, &sb));
  ASSERT_EQ(a->send(gid_of(62), make_packet(gid_of(61), 1, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  // A child takes the lock, writes half a record and stays until killed.
  auto abandon_in_child = [&o] {
    std::string report;
    return child_reporting(
        [&o](auto report) {
          ShmFabricOptions co = o;
          co.test_abandon_lock = true;
          std::shared_ptr<ShmFabric> c;
          if (ShmFabric::create(co, &c) != 0) return;
          if (c->send(gid_of(62), make_packet(gid_of(63), 666, 3000)) == -EIO) report("abandoned");
        },
        &report);
  };
  pid_t pid = abandon_in_child();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(a->send(gid_of(62), make_packet(gid_of(61), 2, 64)), -ENOBUFS);  // the holder lives
  EXPECT_EQ(a->stats().lock_steals, 0u);
  ASSERT_TRUE(kill_child(pid));
  for (uint64_t t = 3; t < 6; ++t) ASSERT_EQ(a->send(gid_of(62), make_packet(gid_of(61), t, 100 * t)), 0);
  EXPECT_EQ(a->stats().lock_steals, 1u);
  // Again, and a fabric made after the holder died takes its slot in the senders file: the lock
  // still counts as the dead holder's, not the newcomer's.
  pid = abandon_in_child();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(kill_child(pid));
  std::shared_ptr<ShmFabric> newcomer;
  ASSERT_EQ(ShmFabric::create(o, &newcomer), 0);
  for (uint64_t t = 6; t < 8; ++t) ASSERT_EQ(a->send(gid_of(62), make_packet(gid_of(61), t, 100 * t)), 0);
  EXPECT_EQ(a->stats().lock_steals, 2u);
  ASSERT_EQ(sb.wait_for(6, 10000), 6u);
  std::vector<Packet> got = sb.take();
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, i + 2);
    EXPECT_TRUE(packet_ok(got[i])) << got[i].token;
  }
  EXPECT_EQ(sb.wait_for(1, 50), 0u);
  EXPECT_EQ(b->stats().malformed, 0u);
}

// Producers in several fabric objects, threads and a second process share one mailbox: every
// packet arrives once and intact, fragments of large ones interleaved with others on a ring small
// enough to fill.
TEST(ShmFabric, ProducersOfManyThreadsAndProcessesShareAMailbox) {
  ShmFabricOptions o = opts("many");
  std::shared_ptr<ShmFabric> b;
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  TestSink sb;
  ASSERT_EQ(b->attach(gid_of(72), &sb), 0);
  const size_t sizes[] = {0, 64, 5000, 40000};
  constexpr uint64_t kPerSender = 120;
  auto run_sender = [&](ShmFabric* f, uint64_t first) {
    int failed = 0;
    for (uint64_t t = first; t < first + kPerSender; ++t) {
      if (f->send(gid_of(72), make_packet(gid_of(71), t, sizes[t % 4])) != 0) ++failed;
    }
    return failed;
  };
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::shared_ptr<ShmFabric> c;
    if (ShmFabric::create(o, &c) != 0) _exit(2);
    _exit(run_sender(c.get(), 0) == 0 ? 0 : 1);
  }
  std::vector<std::shared_ptr<ShmFabric>> fabrics(2);
  for (auto& f : fabrics) ASSERT_EQ(ShmFabric::create(o, &f), 0);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { failed += run_sender(fabrics[i % 2].get(), (i + 1) * kPerSender); });
  }
  for (std::thread& t : threads) t.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(failed.load(), 0);
  const size_t total = 5 * kPerSender;
  ASSERT_EQ(sb.wait_for(total, 20000), total);
  std::vector<Packet> got = sb.take();
  std::vector<int> seen(total, 0);
  for (const Packet& p : got) {
    EXPECT_TRUE(packet_ok(p)) << p.token;
    ASSERT_LT(p.token, total);
    ++seen[p.token];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(total));
  EXPECT_EQ(b->stats().malformed, 0u);
  EXPECT_EQ(b->stats().packets_rx, total);
}

TEST(ShmFabric, AttachSweepsStaleMailboxOfTheSameGid) {
  ShmFabricOptions o = opts("stale");
  std::shared_ptr<ShmFabric> a;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  std::string p = a->dir() + "/fe800000000000000274000000000003";
  int fd = open(p.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);  // left behind by a crashed process, unlocked
  close(fd);
  TestSink s;
  EXPECT_EQ(a->attach(gid_of(3), &s), 0);
  EXPECT_EQ(a->stats().stale_removed, 1u);
}

// Two devices of one fabric object (one process) exchange packets without a mailbox, at once,
// and a lent payload is copied for the receiver; other fabric objects still use the mailbox.
TEST(ShmFabric, DevicesOfOneProcessSkipTheMailbox) {
  std::shared_ptr<ShmFabric> a, b;
  ASSERT_EQ(ShmFabric::create(opts("local"), &a), 0);
  ASSERT_EQ(ShmFabric::create(opts("local"), &b), 0);
  TestSink s1, s2, s3;
  ASSERT_EQ(a->attach(gid_of(21), &s1), 0);
  ASSERT_EQ(a->attach(gid_of(22), &s2), 0);
  ASSERT_EQ(b->attach(gid_of(23), &s3), 0);
  Packet big = make_packet(gid_of(21), 5, 100000);
  std::vector<uint8_t> bytes(big.payload.data(), big.payload.data() + big.payload.size());
  Packet lent = big;
  lent.payload.view(bytes.data(), bytes.size());
  ASSERT_EQ(a->send(gid_of(22), std::move(lent)), 0);
  std::fill(bytes.begin(), bytes.end(), 0);
  std::vector<Packet> got = s2.take();  // delivered inside send(): no wait
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].payload.borrowed());
  EXPECT_TRUE(packet_ok(got[0]));
  EXPECT_EQ(a->stats().local_packets, 1u);
  EXPECT_EQ(a->stats().fragments_tx, 0u);
  ASSERT_EQ(a->send(gid_of(23), make_packet(gid_of(21), 6, 64)), 0);
  ASSERT_EQ(s3.wait_for(1, 10000), 1u);
  EXPECT_EQ(a->stats().local_packets, 1u);
  EXPECT_GT(a->stats().fragments_tx, 0u);
  // Detached: no longer local, and no mailbox either.
  a->detach(gid_of(22));
  EXPECT_EQ(a->send(gid_of(22), make_packet(gid_of(21), 7, 64)), -EHOSTUNREACH);
}

// A GID that detaches and attaches again (a reopened device) is reached in its new mailbox by
// the very next send of a sender that mapped the old one; nothing goes to the unlinked file.
TEST(ShmFabric, AReattachedGidIsReachedAtOnce) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("reopen");
  o.liveness_check_ms = 60000;  // only the closed mark can tell
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  TestSink sa;
  ASSERT_EQ(a->attach(gid_of(31), &sa), 0);
  for (int round = 0; round < 5; ++round) {
    TestSink sb;
    ASSERT_EQ(b->attach(gid_of(32), &sb), 0);
    for (uint64_t t = 0; t < 3; ++t) ASSERT_EQ(a->send(gid_of(32), make_packet(gid_of(31), t, 300)), 0);
    ASSERT_EQ(sb.wait_for(3, 10000), 3u) << "round " << round;
    b->detach(gid_of(32));
    // Odd rounds: a send while it is gone. Even rounds: none, so that the next round's first
    // send meets the old mailbox still mapped.
    if (round % 2 == 1) {
      EXPECT_EQ(a->send(gid_of(32), make_packet(gid_of(31), 9, 10)), -EHOSTUNREACH);
    }
  }
  EXPECT_EQ(a->stats().reopened, 4u);  // rounds 1 and 3: twice each
  EXPECT_EQ(a->stats().dead_peers, 0u);
}

size_t open_fds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// Senders find their peer without the table's lock; one that a reopen retires stays mapped while
// a send may still hold it, and goes (file and mapping) once none can.
TEST(ShmFabric, SendersRacingReopensNeitherTouchAFreedPeerNorKeepItsMailbox) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("race");
  o.liveness_check_ms = 60000;  // only the closed mark retires peers
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  TestSink sa;
  ASSERT_EQ(a->attach(gid_of(51), &sa), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> senders;
  for (int i = 0; i < 2; ++i) {
    senders.emplace_back([&, i] {
      for (uint64_t t = 0; !stop.load(); ++t) {
        if (a->send(gid_of(52), make_packet(gid_of(51), t * 2 + i, 64)) == 0) sent.fetch_add(1);
        // Paced: a sender that outruns the receive thread keeps its drain (and the detach after
        // it) going for long under a sanitizer.
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  for (int round = 0; round < 40; ++round) {
    TestSink sb;
    ASSERT_EQ(b->attach(gid_of(52), &sb), 0);
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    b->detach(gid_of(52));
  }
  stop.store(true);
  for (std::thread& t : senders) t.join();
  EXPECT_GT(sent.load(), 0u);
  EXPECT_GT(a->stats().reopened, 0u);
  // Every retired peer is gone after a send outside any race: a leak keeps one file per round.
  const size_t fds = open_fds();
  for (int round = 0; round < 20; ++round) {
    TestSink sb;
    ASSERT_EQ(b->attach(gid_of(52), &sb), 0);
    ASSERT_EQ(a->send(gid_of(52), make_packet(gid_of(51), 1000 + round, 64)), 0);
    ASSERT_EQ(sb.wait_for(1, 10000), 1u) << round;
    EXPECT_TRUE(packet_ok(sb.take()[0]));
    b->detach(gid_of(52));
  }
  EXPECT_EQ(a->send(gid_of(52), make_packet(gid_of(51), 2000, 64)), -EHOSTUNREACH);
  EXPECT_LE(open_fds(), fds + 2);
  // Counts of freed peers are kept.
  EXPECT_EQ(a->stats().packets_tx, sent.load() + 20);
  EXPECT_EQ(a->stats().fragments_tx, sent.load() + 20);
}

// A thread that drives the device drains the mailbox itself; the receive thread stays parked
// meanwhile and takes over once polls stop. Borrowed payloads are copied inside send().
TEST(ShmFabric, PollerDrainsTheMailboxOnItsOwnThread) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("poll");
  o.park_us = 500000;  // long enough that only the poller can have delivered
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 11, &sa, &b, 12, &sb));
  EXPECT_TRUE(a->copies_on_send());
  EXPECT_EQ(b->poll_rx(gid_of(12), 64), 0);  // empty; marks b as polled
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receive thread parks
  EXPECT_EQ(b->poll_rx(gid_of(99), 64), 0);  // not attached here
  Packet big = make_packet(gid_of(11), 7, 100000);
  std::vector<uint8_t> bytes(big.payload.data(), big.payload.data() + big.payload.size());
  Packet borrowed = big;
  borrowed.payload.view(bytes.data(), bytes.size());
  EXPECT_TRUE(borrowed.payload.borrowed());
  ASSERT_EQ(a->send(gid_of(12), std::move(borrowed)), 0);
  std::fill(bytes.begin(), bytes.end(), 0);  // send() is done with the bytes
  for (uint64_t t = 8; t < 12; ++t) ASSERT_EQ(a->send(gid_of(12), make_packet(gid_of(11), t, 64)), 0);
  EXPECT_EQ(sb.wait_for(1, 50), 0u);  // the receive thread is parked
  EXPECT_EQ(b->poll_rx(gid_of(12), 2), 2);
  EXPECT_EQ(b->poll_rx(gid_of(12), 64), 3);
  std::vector<Packet> got = sb.take();
  ASSERT_EQ(got.size(), 5u);
  for (const Packet& p : got) EXPECT_TRUE(packet_ok(p)) << p.token;
  EXPECT_EQ(got[0].token, 7u);
  EXPECT_EQ(got[0].payload.size(), 100000u);
  // Nobody polls now: the receive thread delivers after the park period.
  ASSERT_EQ(a->send(gid_of(12), make_packet(gid_of(11), 20, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  // Detach while another thread keeps polling: no delivery after detach returns.
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    while (!stop.load()) b->poll_rx(gid_of(12), 64);
  });
  for (uint64_t t = 30; t < 60; ++t) a->send(gid_of(12), make_packet(gid_of(11), t, 64));
  b->detach(gid_of(12));
  sb.take();
  stop.store(true);
  poller.join();
  EXPECT_EQ(sb.take().size(), 0u);
}

// A poller that stops for a while says so (poll_rx_stop): the parked receive thread delivers at
// once, though its park would last far longer than the test.
TEST(ShmFabric, APollerThatStopsEndsThePark) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("stop");
  o.park_us = 60u * 1000 * 1000;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 21, &sa, &b, 22, &sb));
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 0);  // marks b as polled
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receive thread parks
  ASSERT_EQ(a->send(gid_of(22), make_packet(gid_of(21), 5, 64)), 0);
  EXPECT_EQ(sb.wait_for(1, 50), 0u);  // parked: only a poller would deliver now
  b->poll_rx_stop(gid_of(99));         // not attached here: nothing happens
  EXPECT_EQ(sb.wait_for(1, 20), 0u);
  b->poll_rx_stop(gid_of(22));
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  std::vector<Packet> got = sb.take();
  EXPECT_TRUE(packet_ok(got[0]));
  // Later packets reach the sink without a poller too.
  ASSERT_EQ(a->send(gid_of(22), make_packet(gid_of(21), 6, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
}

// A poller that polls far less than once per park_us (an engine thread's pass between its idle
// sleeps) does not keep the receive thread parked, however long its parks have grown: packets
// reach the sink without it, and the thread counts them as its own.
TEST(ShmFabric, ARarePollerDoesNotKeepTheReceiveThreadParked) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("rare");
  o.park_us = 200;
  o.park_max_us = 1000000;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 41, &sa, &b, 42, &sb));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint64_t token = 0;
  while (b->stats().rx_thread_packets == 0 && std::chrono::steady_clock::now() < give_up) {
    b->poll_rx(gid_of(42), 64);
    ASSERT_EQ(a->send(gid_of(42), make_packet(gid_of(41), ++token, 64)), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(b->stats().rx_thread_packets, 0u);
  b->detach(gid_of(42));  // its receive thread is done with the sink before the sink goes
}

// Polls for `ms`, in bursts of `burst_us` with gaps of `gap_us` (0: none) between them.
void poll_for(ShmFabric* f, const Gid& gid, int ms, int burst_us, int gap_us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    const auto burst_end = std::chrono::steady_clock::now() + std::chrono::microseconds(burst_us);
    // Each poll yields: where the receive thread shares this core, it then runs right after a
    // poll, as it would beside a poller on a core of its own, rather than a time slice later.
    while (std::chrono::steady_clock::now() < burst_end) {
      f->poll_rx(gid, 64);
      std::this_thread::yield();
    }
    if (gap_us) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
  }
}

// A poller that pauses for longer than park_us between bursts (as one preempted on a loaded
// machine does), but polls far more often than once per park_us on average, keeps the receive
// thread parked, park after park: it neither takes over nor sleeps (where senders would have to
// wake it). A thread that stopped renewing at the first park ending in a pause sleeps after
// nearly every park (until a packet or its sleep's timeout wakes it). The run lasts until 30
// parks, so that a receive thread starved of the CPU on a loaded machine parks less often but
// still passes; such a machine also preempts the poller for longer than the longest park now
// and then (5 sleeps in 20 parks were seen with three ThreadSanitizer runs per core).
TEST(ShmFabric, ABurstyPollerKeepsTheReceiveThreadParked) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("bursty");
  o.park_us = 200;
  o.park_max_us = 4000;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 61, &sa, &b, 62, &sb));
  b->poll_rx(gid_of(62), 64);
  std::this_thread::sleep_for(std::chrono::microseconds(50));  // the receive thread parks
  const uint64_t sleeps = b->stats().rx_sleeps, parks = b->stats().rx_parks;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b->stats().rx_parks - parks < 30 && std::chrono::steady_clock::now() < give_up) {
    poll_for(b.get(), gid_of(62), 20, 1000, 1000);
  }
  const uint64_t parked = b->stats().rx_parks - parks, slept = b->stats().rx_sleeps - sleeps;
  EXPECT_GE(parked, 30u);
  EXPECT_LE(slept * 2, parked) << slept << " sleeps in " << parked << " parks";
  // Polls stop: packets reach the sink without them.
  ASSERT_EQ(a->send(gid_of(62), make_packet(gid_of(61), 1, 64)), 0);
  ASSERT_EQ(sb.wait_for(1, 10000), 1u);
  b->detach(gid_of(62));
}

// Where the device's engine thread takes over from stopped pollers and says so when it stops
// (poll_rx_handed_over), the receive thread's parks grow far beyond park_max_us while polls go
// on: fewer wakeups of its own. poll_rx_stop still ends the park at once.
TEST(ShmFabric, AHandedOverReceiveThreadParksLonger) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("handed");
  o.park_us = 200;
  o.park_max_us = 4000;
  TestSink sa, sb, sc;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 71, &sa, &b, 72, &sb));
  ASSERT_EQ(b->attach(gid_of(73), &sc), 0);
  b->poll_rx_handed_over(gid_of(73));
  // One poller at a time, so that the fabric's count of parks is that receive thread's.
  uint64_t before = b->stats().rx_parks;
  poll_for(b.get(), gid_of(72), 600, 600000, 0);
  const uint64_t own = b->stats().rx_parks - before;
  before = b->stats().rx_parks;
  poll_for(b.get(), gid_of(73), 600, 600000, 0);
  const uint64_t handed = b->stats().rx_parks - before;
  // 600 ms of parks doubling from 200 us up to 4 ms: about 160 on a quiet machine (60 were seen
  // under ThreadSanitizer on 2 loaded cores); up to 256 ms: about 13.
  EXPECT_GT(own, 25u) << b->stats().rx_sleeps << " " << b->stats().rx_park_stops;
  EXPECT_LT(handed, own / 2) << handed << " " << own;
  b->poll_rx_stop(gid_of(73));
  // The handed-over thread, parked for long, still hands packets on once told.
  ASSERT_EQ(a->send(gid_of(73), make_packet(gid_of(71), 1, 64)), 0);
  ASSERT_EQ(sc.wait_for(1, 10000), 1u);
  b->detach(gid_of(73));
  b->detach(gid_of(72));
}

// A receive thread that sleeps between packets is woken by each, whether its producers publish
// with release stores (the consumer fences them before it sleeps: ShmFences) or with seq_cst
// ones: every packet arrives well before the sleep's own 100 ms timeout would end it.
TEST(ShmFabric, ASleepingReceiverIsWokenByEveryPacket) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("wake");
  o.spin_us = 1;  // asleep within microseconds of each packet
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 61, &sa, &b, 62, &sb));
  constexpr int kPackets = 40;
  for (int i = 0; i < kPackets; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the receive thread goes to sleep
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(a->send(gid_of(62), make_packet(gid_of(61), static_cast<uint64_t>(i), 64)), 0);
    ASSERT_EQ(sb.wait_for(static_cast<size_t>(i) + 1, 10000), static_cast<size_t>(i) + 1);
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(waited, std::chrono::milliseconds(50)) << "packet " << i;
  }
  const ShmFabricStats rx = b->stats();
  EXPECT_GT(rx.rx_sleeps, 0u);
  const ShmFences& f = shm_fences();
  // Where the kernel fences other processes' threads, the consumer fenced before sleeping and
  // this process published with release stores; elsewhere neither.
  EXPECT_EQ(rx.rx_fences > 0, f.can_issue);
  EXPECT_EQ(a->stats().light_peers, f.can_issue && f.registered ? 1u : 0u);
}

// A burst of packets into the mailbox of a sleeping receive thread wakes it once: the sender that
// takes the sleep flag back. The others find it awake (or woken, not yet running: on a busy
// machine that lasts milliseconds) and make no system call. Every sleep the thread begins allows
// one wake, so over any run the wakes never outnumber the sleeps begun.
TEST(ShmFabric, ABurstWakesASleepingReceiverOnce) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("burstwake");
  o.spin_us = 1;  // asleep within microseconds of each burst
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 63, &sa, &b, 64, &sb));
  constexpr int kBursts = 20, kPackets = 50;
  size_t sent = 0;
  for (int burst = 0; burst < kBursts; ++burst) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the receive thread goes to sleep
    for (int i = 0; i < kPackets; ++i) {
      ASSERT_EQ(a->send(gid_of(64), make_packet(gid_of(63), sent, 64)), 0);
      ++sent;
    }
    ASSERT_EQ(sb.wait_for(sent, 10000), sent);
  }
  const uint64_t wakes = a->stats().consumer_wakes, tries = b->stats().rx_sleep_tries;
  EXPECT_GE(wakes, 1u);
  EXPECT_LE(wakes, tries) << wakes << " wakes for " << tries << " sleeps begun";
  b->detach(gid_of(64));
}

uint64_t steady_ns() { return clock::mono_ns(); }

// Past the two processes' clocks' disagreement: a pass that starts now began after the last write.
void past_clock_slack() { std::this_thread::sleep_for(std::chrono::microseconds(20 * clock::kSlackNs / 1000)); }

// A receiver counts as having had a packet in hand only once an engine pass that began after the
// packet was written has finished (the next pass started): one that drained it and was then
// preempted has not answered yet.
TEST(ShmFabric, APeerIsBehindUntilAPassBegunAfterOurWriteHasFinished) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("stalled");
  o.park_us = 500000;  // only the poller drains
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 21, &sa, &b, 22, &sb));
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receive thread parks
  EXPECT_FALSE(b->rx_pending(gid_of(22)));
  ASSERT_EQ(a->send(gid_of(22), make_packet(gid_of(21), 1, 64)), 0);
  EXPECT_TRUE(b->rx_pending(gid_of(22)));
  EXPECT_TRUE(a->peer_stalled(gid_of(22), 0));  // not read yet
  past_clock_slack();
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 1);
  EXPECT_FALSE(b->rx_pending(gid_of(22)));
  EXPECT_TRUE(a->peer_stalled(gid_of(22), 0));  // read, but the pass that read it may not be done
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 0);     // the next pass: the previous one finished
  EXPECT_FALSE(a->peer_stalled(gid_of(22), 0));
  EXPECT_TRUE(a->peer_stalled(gid_of(22), steady_ns()));  // no pass finished since now
  EXPECT_FALSE(a->peer_stalled(gid_of(99), 0));            // never sent to: nothing to wait for
  // Every later write asks for a later pass.
  ASSERT_EQ(a->send(gid_of(22), make_packet(gid_of(21), 2, 64)), 0);
  past_clock_slack();
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 1);
  EXPECT_TRUE(a->peer_stalled(gid_of(22), 0));
  EXPECT_EQ(b->poll_rx(gid_of(22), 64), 0);
  EXPECT_FALSE(a->peer_stalled(gid_of(22), 0));
  EXPECT_EQ(sb.take().size(), 2u);
}

// A poller that processes what arrives itself gets it in one batch, intact, and the sink none of
// it; after a detach and an attach under the same GID, the new mailbox is the one polled.
TEST(ShmFabric, PollIntoABatchFindsTheMailboxOfTheLatestAttach) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("batch");
  o.park_us = 500000;  // only the poller drains
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  TestSink sa, sb, sb2;
  ASSERT_EQ(a->attach(gid_of(31), &sa), 0);
  ASSERT_EQ(b->attach(gid_of(32), &sb), 0);
  std::vector<Packet> got;
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 64, 0, &got), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receive thread parks
  for (uint64_t t = 1; t <= 3; ++t) ASSERT_EQ(a->send(gid_of(32), make_packet(gid_of(31), t, 64 * t)), 0);
  ASSERT_EQ(a->send(gid_of(32), make_packet(gid_of(31), 4, 70000)), 0);  // several fragments
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 2, steady_ns(), &got), 2);
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 64, steady_ns(), &got), 2);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, i + 1);
    EXPECT_TRUE(packet_ok(got[i])) << i;
  }
  EXPECT_EQ(sb.take().size(), 0u);
  b->detach(gid_of(32));
  got.clear();
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 64, 0, &got), 0);  // not attached
  ASSERT_EQ(b->attach(gid_of(32), &sb2), 0);
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 64, 0, &got), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(a->send(gid_of(32), make_packet(gid_of(31), 9, 64)), 0);
  EXPECT_EQ(b->poll_rx_batch(gid_of(32), 64, 0, &got), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, 9u);
  EXPECT_EQ(sb2.take().size(), 0u);
}

// A packet's mark says whether its receiver has served it: unread, or read by a pass that has
// not finished, it is unserved; a packet delivered inside the process has no mark.
TEST(ShmFabric, AMarkTellsWhetherThePacketWasServed) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("mark");
  o.park_us = 500000;
  ASSERT_EQ(ShmFabric::create(o, &a), 0);
  ASSERT_EQ(ShmFabric::create(o, &b), 0);
  TestSink sa, sa2, sb;
  ASSERT_EQ(a->attach(gid_of(41), &sa), 0);
  ASSERT_EQ(a->attach(gid_of(43), &sa2), 0);
  ASSERT_EQ(b->attach(gid_of(42), &sb), 0);
  EXPECT_EQ(b->poll_rx(gid_of(42), 64), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t m1 = 0, m2 = 0, local = 1;
  const uint64_t t1 = steady_ns();
  ASSERT_EQ(a->send_marked(gid_of(42), make_packet(gid_of(41), 1, 64), &m1), 0);
  ASSERT_EQ(a->send_marked(gid_of(42), make_packet(gid_of(41), 2, 64), &m2), 0);
  EXPECT_GT(m1, 0u);
  EXPECT_GT(m2, m1);
  EXPECT_TRUE(a->unserved(gid_of(42), m1, t1));
  EXPECT_EQ(b->poll_rx(gid_of(42), 1), 1);       // the first read, in a pass not yet finished
  EXPECT_TRUE(a->unserved(gid_of(42), m1, t1));
  EXPECT_TRUE(a->unserved(gid_of(42), m2, t1));  // the second not even read
  EXPECT_EQ(b->poll_rx(gid_of(42), 1), 1);       // that pass finished; the second is read now
  EXPECT_FALSE(a->unserved(gid_of(42), m1, t1));
  EXPECT_TRUE(a->unserved(gid_of(42), m2, steady_ns()));
  EXPECT_EQ(b->poll_rx(gid_of(42), 64), 0);
  EXPECT_FALSE(a->unserved(gid_of(42), m2, t1));
  EXPECT_FALSE(a->unserved(gid_of(42), 0, t1));  // no mark: nothing known
  ASSERT_EQ(a->send_marked(gid_of(43), make_packet(gid_of(41), 3, 64), &local), 0);
  EXPECT_EQ(local, 0u);  // handed over inside send
  EXPECT_EQ(sa2.take().size(), 1u);
  EXPECT_EQ(sb.take().size(), 2u);
}

// A send given its caller's pass time is written at that time: the receiver's passes are
// compared with it (peer_stalled), not with the clock when the bytes went in.
TEST(ShmFabric, ASendIsWrittenAtItsCallersPassTime) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("passtime");
  o.park_us = 500000;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 51, &sa, &b, 52, &sb));
  std::vector<Packet> got;
  EXPECT_EQ(b->poll_rx_batch(gid_of(52), 64, steady_ns(), &got), 0);
  const uint64_t later = steady_ns() + 3600ull * 1000000000;
  ASSERT_EQ(a->send(gid_of(52), make_packet(gid_of(51), 1, 64), later), 0);
  uint64_t mark = 0;
  ASSERT_EQ(a->send_copy(gid_of(52), make_packet(gid_of(51), 2, 64), &mark, later), 0);
  EXPECT_GT(mark, 0u);
  // Read, and passes finished since, but every one of them began before `later`.
  EXPECT_EQ(b->poll_rx_batch(gid_of(52), 64, steady_ns(), &got), 2);
  EXPECT_EQ(b->poll_rx_batch(gid_of(52), 64, steady_ns(), &got), 0);
  EXPECT_TRUE(a->peer_stalled(gid_of(52), 0));
  // Without a time the write is the clock's: a pass begun after it and finished serves it.
  ASSERT_EQ(a->send(gid_of(52), make_packet(gid_of(51), 3, 64)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(b->poll_rx_batch(gid_of(52), 64, steady_ns(), &got), 1);
  EXPECT_EQ(b->poll_rx_batch(gid_of(52), 64, steady_ns(), &got), 0);
  EXPECT_FALSE(a->peer_stalled(gid_of(52), 0));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].token, 3u);
  EXPECT_EQ(sb.take().size(), 0u);
}

// Answers by position: the responder's executed mark covers what its polls handed over once it
// says so, a requester compares it with its marks, and both ends' wishes and refusals hold.
TEST(ShmFabric, AnExecutedMarkCoversWhatThePollsHandedOver) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("executed");
  o.park_us = 500000;  // only the polls below read the mailboxes
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 61, &sa, &b, 62, &sb));
  std::vector<Packet> got;
  EXPECT_EQ(b->poll_rx_batch(gid_of(62), 64, steady_ns(), &got), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t m1 = 0, m2 = 0;
  ASSERT_EQ(a->send_marked(gid_of(62), make_packet(gid_of(61), 1, 64), &m1), 0);
  ASSERT_EQ(a->send_marked(gid_of(62), make_packet(gid_of(61), 2, 64), &m2), 0);
  uint64_t end = 0;
  EXPECT_EQ(a->executed_mark(gid_of(61), gid_of(62), &end), 0u);  // nothing executed yet
  EXPECT_FALSE(a->mark_covered(0, m1));
  b->executed_polled(gid_of(62));  // nothing handed over: the mark stays
  EXPECT_EQ(a->executed_mark(gid_of(61), gid_of(62), &end), 0u);

  EXPECT_EQ(b->poll_rx_batch(gid_of(62), 1, steady_ns(), &got), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].position_seen);
  EXPECT_EQ(a->executed_mark(gid_of(61), gid_of(62), &end), 0u);  // read, not yet said to have run
  b->executed_polled(gid_of(62));
  uint64_t e = a->executed_mark(gid_of(61), gid_of(62), &end);
  EXPECT_TRUE(a->mark_covered(e, m1));
  EXPECT_FALSE(a->mark_covered(e, m2));
  EXPECT_EQ(b->poll_rx_batch(gid_of(62), 64, steady_ns(), &got), 1);
  b->executed_polled(gid_of(62));
  e = a->executed_mark(gid_of(61), gid_of(62), &end);
  EXPECT_TRUE(a->mark_covered(e, m1));
  EXPECT_TRUE(a->mark_covered(e, m2));

  // A mailbox that replaced another starts its positions again: marks of the old one are never
  // covered by the new one's mark, though their positions may lie below it.
  b->detach(gid_of(62));
  ASSERT_EQ(b->attach(gid_of(62), &sb), 0);
  EXPECT_EQ(b->poll_rx_batch(gid_of(62), 64, steady_ns(), &got), 0);
  uint64_t m3 = 0;
  for (uint64_t t = 3; t < 6; ++t) ASSERT_EQ(a->send_marked(gid_of(62), make_packet(gid_of(61), t, 64), &m3), 0);
  EXPECT_EQ(b->poll_rx_batch(gid_of(62), 64, steady_ns(), &got), 3);
  b->executed_polled(gid_of(62));
  e = a->executed_mark(gid_of(61), gid_of(62), &end);
  EXPECT_TRUE(a->mark_covered(e, m3));
  EXPECT_FALSE(a->mark_covered(e, m1));
  EXPECT_EQ(sb.take().size(), 0u);  // every packet went to the polls

  // An answer packet b sent before its mark lies below the end a read with the mark: a takes
  // the mark only once its polls have handed that packet over.
  std::vector<Packet> at_a;
  EXPECT_EQ(a->poll_rx_batch(gid_of(61), 64, steady_ns(), &at_a), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a's receive thread parks
  ASSERT_EQ(b->send(gid_of(61), make_packet(gid_of(62), 9, 64)), 0);
  b->executed_polled(gid_of(62));  // nothing new: the mark stays where it was
  e = a->executed_mark(gid_of(61), gid_of(62), &end);
  EXPECT_NE(e, 0u);
  EXPECT_FALSE(a->polled_past(gid_of(61), end));
  EXPECT_EQ(a->poll_rx_batch(gid_of(61), 64, steady_ns(), &at_a), 1);
  EXPECT_TRUE(a->polled_past(gid_of(61), end));
  a->detach(gid_of(61));
  b->detach(gid_of(62));
}

TEST(ShmFabric, AResponderAnswersByPositionOnlyWhereTheRequesterWantsIt) {
  std::shared_ptr<ShmFabric> a, b;
  ShmFabricOptions o = opts("wish");
  o.park_us = 500000;
  TestSink sa, sb;
  ASSERT_NO_FATAL_FAILURE(open_two(o, &a, 71, &sa, &b, 72, &sb));
  std::vector<Packet> got;
  EXPECT_EQ(a->poll_rx_batch(gid_of(71), 64, steady_ns(), &got), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a's receive thread parks
  EXPECT_FALSE(b->takes_position_answers(gid_of(72), gid_of(71)));  // b never wrote to 71: no peer yet
  ASSERT_EQ(b->send(gid_of(71), make_packet(gid_of(72), 1, 64)), 0);
  EXPECT_EQ(a->poll_rx_batch(gid_of(71), 64, steady_ns(), &got), 1);
  EXPECT_FALSE(b->takes_position_answers(gid_of(72), gid_of(71)));  // 71 did not ask
  a->set_position_answers(gid_of(71), true);
  EXPECT_TRUE(b->takes_position_answers(gid_of(72), gid_of(71)));
  a->set_position_answers(gid_of(71), false);
  EXPECT_FALSE(b->takes_position_answers(gid_of(72), gid_of(71)));
  a->set_position_answers(gid_of(71), true);
  a->poll_rx_stop(gid_of(71));  // nobody polls 71 now: answers must wake it
  EXPECT_FALSE(b->takes_position_answers(gid_of(72), gid_of(71)));
  EXPECT_EQ(a->poll_rx_batch(gid_of(71), 64, steady_ns(), &got), 0);  // 71 polls again
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // and its receive thread parks

  // A record that no device can run ends the marks of its mailbox: a requester whose request
  // it may have been must get an answer packet, and its own wish counts no more.
  uint64_t m1 = 0, m2 = 0;
  ASSERT_EQ(b->send_marked(gid_of(71), make_packet(gid_of(72), 2, 64), &m1), 0);
  Packet bad = make_packet(gid_of(72), 3, 64);
  bad.type = static_cast<PacketType>(200);
  ASSERT_EQ(b->send_marked(gid_of(71), std::move(bad), &m2), 0);
  EXPECT_EQ(a->poll_rx_batch(gid_of(71), 64, steady_ns(), &got), 1);  // 2; 3 is malformed
  EXPECT_EQ(a->stats().malformed, 1u);
  a->executed_polled(gid_of(71));
  uint64_t end = 0;
  EXPECT_EQ(b->executed_mark(gid_of(72), gid_of(71), &end), 0u);
  a->set_position_answers(gid_of(71), true);
  EXPECT_FALSE(b->takes_position_answers(gid_of(72), gid_of(71)));
  // Nor does a answer by position any more, whoever asks.
  ASSERT_EQ(a->send(gid_of(72), make_packet(gid_of(71), 4, 64)), 0);
  b->set_position_answers(gid_of(72), true);
  TestSink sa3;
  ASSERT_EQ(a->attach(gid_of(73), &sa3), 0);  // another mailbox of a's, with nothing malformed
  EXPECT_TRUE(a->takes_position_answers(gid_of(73), gid_of(72)));
  EXPECT_FALSE(a->takes_position_answers(gid_of(71), gid_of(72)));
  EXPECT_FALSE(a->takes_position_answers(gid_of(99), gid_of(72)));  // not attached here
  // The receive threads deliver to the sinks until their mailboxes go.
  a->detach(gid_of(71));
  a->detach(gid_of(73));
  b->detach(gid_of(72));
}

}  // namespace
}  // namespace net
}  // namespace emu
}  // namespace xpufab
