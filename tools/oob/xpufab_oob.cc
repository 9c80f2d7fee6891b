// Exchanges one string per process through the OOB rendezvous and prints them all, one line per
// rank: `xpufab_oob -s [-p PORT] [-n PROCS] [TEXT]` on one host, `xpufab_oob SERVER [-p PORT]
// [TEXT]` on the others. TEXT defaults to the host name; scripts pass an fi_getname blob in hex.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/oob/oob.h"

int main(int argc, char** argv) {
  xpufab::oob::Options o;
  std::string text;
  bool have_server = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-s") {
      o.server = true;
      o.host = "0.0.0.0";
    } else if (a == "-p" && i + 1 < argc) {
      o.port = static_cast<uint16_t>(std::atoi(argv[++i]));
    } else if (a == "-n" && i + 1 < argc) {
      o.size = std::atoi(argv[++i]);
    } else if (a == "-t" && i + 1 < argc) {
      o.timeout_ms = std::atoi(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s -s [-p port] [-n procs] [-t ms] [text]\n       %s SERVER [-p port] [-t ms] [text]\n",
                  argv[0], argv[0]);
      return 0;
    } else if (!o.server && !have_server) {
      o.host = a;
      have_server = true;
    } else {
      text = a;
    }
  }
  if (!o.server && !have_server) {
    std::fprintf(stderr, "%s: give -s or a server address (see -h)\n", argv[0]);
    return 2;
  }
  if (text.empty()) {
    char h[256] = {};
    gethostname(h, sizeof(h) - 1);
    text = h;
  }
  xpufab::oob::Session s;
  int rc = s.open(o);
  if (rc == 0 && o.server) std::fprintf(stderr, "listening on port %u for %d processes\n", s.port(), o.size);
  std::vector<std::string> all;
  if (rc == 0) rc = s.allgather(text, &all);
  if (rc != 0) {
    std::fprintf(stderr, "oob: %s\n", std::strerror(-rc));
    return 1;
  }
  for (size_t i = 0; i < all.size(); ++i) std::printf("%zu %s\n", i, all[i].c_str());
  return 0;
}
