// emustat: prints emulated-EFA statistics per device and per QP, like `ethtool -S` and
// `rdma statistic`.
//
//   emustat FILE...            print the stats files devices wrote (FI_EFA_EMU_STATS=prefix
//                              makes each device write <prefix>.<device>.stats when destroyed)
//   emustat -z FILE...         only counters that are not zero
//   emustat -q QPN FILE...     only that QP's counters (device lines omitted)
//   emustat -d BEFORE AFTER    the difference of two stats files of one device
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

struct Line {
  std::string key;  // "name" or "qp N name"
  unsigned long long value = 0;
};

struct File {
  std::string device;
  std::vector<Line> lines;
};

int load(const char* path, File* f) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "emustat: cannot read %s: %s\n", path, std::strerror(errno));
    return 1;
  }
  std::string s;
  int n = 0;
  while (std::getline(in, s)) {
    ++n;
    if (s.compare(0, 7, "device ") == 0) {
      f->device = s.substr(7);
      continue;
    }
    size_t colon = s.rfind(": ");
    char* end = nullptr;
    unsigned long long v = colon == std::string::npos ? 0 : std::strtoull(s.c_str() + colon + 2, &end, 10);
    if (colon == std::string::npos || end == nullptr || *end != '\0') {
      std::fprintf(stderr, "emustat: %s:%d: not a stats line: %s\n", path, n, s.c_str());
      return 1;
    }
    f->lines.push_back(Line{s.substr(0, colon), v});
  }
  if (f->device.empty()) {
    std::fprintf(stderr, "emustat: %s: no 'device' line; not a stats file\n", path);
    return 1;
  }
  return 0;
}

void print(const File& f, bool nonzero, long qpn) {
  std::printf("%s:\n", f.device.c_str());
  std::string want = qpn >= 0 ? "qp " + std::to_string(qpn) + " " : "";
  std::string cur_qp;
  for (const Line& l : f.lines) {
    bool is_qp = l.key.compare(0, 3, "qp ") == 0;
    if (qpn >= 0 && (!is_qp || l.key.compare(0, want.size(), want) != 0)) continue;
    if (nonzero && l.value == 0) continue;
    std::string name = l.key;
    if (is_qp) {
      size_t sp = l.key.find(' ', 3);
      std::string q = l.key.substr(0, sp);
      if (q != cur_qp) {
        std::printf("  %s:\n", q.c_str());
        cur_qp = q;
      }
      std::printf("      %s: %llu\n", l.key.substr(sp + 1).c_str(), l.value);
    } else {
      std::printf("     %s: %llu\n", name.c_str(), l.value);
    }
  }
}

int usage() {
  std::fprintf(stderr, "usage: emustat [-z] [-q QPN] FILE...\n       emustat -d BEFORE AFTER\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool nonzero = false, diff = false;
  long qpn = -1;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    if (std::strcmp(argv[i], "-z") == 0) {
      nonzero = true;
    } else if (std::strcmp(argv[i], "-d") == 0) {
      diff = true;
    } else if (std::strcmp(argv[i], "-q") == 0 && i + 1 < argc) {
      char* end = nullptr;
      qpn = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || qpn < 0) return usage();
    } else {
      return usage();
    }
  }
  if (i >= argc) return usage();
  if (diff) {
    if (argc - i != 2) return usage();
    File a, b;
    if (load(argv[i], &a) != 0 || load(argv[i + 1], &b) != 0) return 1;
    std::map<std::string, unsigned long long> before;
    for (const Line& l : a.lines) before[l.key] = l.value;
    std::printf("%s (delta):\n", b.device.c_str());
    for (const Line& l : b.lines) {
      long long d = static_cast<long long>(l.value) - static_cast<long long>(before[l.key]);
      if (d != 0 || !nonzero) std::printf("     %s: %+lld\n", l.key.c_str(), d);
    }
    return 0;
  }
  int rc = 0;
  for (; i < argc; ++i) {
    File f;
    if (load(argv[i], &f) != 0) {
      rc = 1;
      continue;
    }
    print(f, nonzero, qpn);
  }
  return rc;
}
