#include "emu/faults/plan.h"

#include <arpa/inet.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "device/efa_io_defs.h"

namespace xpufab {
namespace emu {
namespace faults {
namespace {

struct StatusName {
  const char* name;
  uint8_t value;
};

// Short names first: status_name() prints the first match.
const StatusName kStatuses[] = {
    {"OK", EFA_IO_COMP_STATUS_OK},
    {"FLUSHED", EFA_IO_COMP_STATUS_FLUSHED},
    {"QP_INTERNAL_ERROR", EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR},
    {"UNSUPPORTED_OP", EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP},
    {"INVALID_OP_TYPE", EFA_IO_COMP_STATUS_LOCAL_ERROR_UNSUPPORTED_OP},
    {"INVALID_AH", EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH},
    {"BAD_LKEY", EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY},
    {"INVALID_LKEY", EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY},
    {"BAD_LENGTH", EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH},
    {"BAD_ADDRESS", EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS},
    {"ABORT", EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT},
    {"BAD_DEST_QPN", EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN},
    {"RNR", EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR},
    {"REMOTE_BAD_LENGTH", EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH},
    {"BAD_STATUS", EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS},
    {"UNRESP_REMOTE", EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE},
    {"UNKNOWN_PEER", EFA_IO_COMP_STATUS_REMOTE_ERROR_UNKNOWN_PEER},
    {"UNREACH_REMOTE", EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE},
    {"FEATURE_MISMATCH", EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH},
};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  *v = x;
  return true;
}

bool parse_u32(const std::string& s, uint32_t* v) {
  uint64_t x;
  if (!parse_u64(s, &x) || x > UINT32_MAX) return false;
  *v = static_cast<uint32_t>(x);
  return true;
}

// A probability: 0..1, or a percentage "N%".
bool parse_prob(const std::string& s, double* p) {
  if (s.empty()) return false;
  bool pct = s.back() == '%';
  std::string num = pct ? s.substr(0, s.size() - 1) : s;
  if (num.empty() || !(std::isdigit(static_cast<unsigned char>(num[0])) || num[0] == '.')) return false;
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(num.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  if (pct) x /= 100.0;
  if (!(x >= 0.0 && x <= 1.0)) return false;
  *p = x;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool parse_size_range(const std::string& s, uint32_t* lo, uint32_t* hi) {
  if (s.compare(0, 2, ">=") == 0) {
    *hi = UINT32_MAX;
    return parse_u32(s.substr(2), lo);
  }
  if (s.compare(0, 2, "<=") == 0) {
    *lo = 0;
    return parse_u32(s.substr(2), hi);
  }
  size_t dash = s.find('-');
  if (dash == std::string::npos) {
    if (!parse_u32(s, lo)) return false;
    *hi = *lo;
    return true;
  }
  return parse_u32(s.substr(0, dash), lo) && parse_u32(s.substr(dash + 1), hi) && *lo <= *hi;
}

int parse_fail(const std::string& item, const std::string& value, FailRule* rule, std::string* err) {
  rule->text = item;
  bool have_status = false, have_count = false;
  std::set<std::string> seen;
  for (const std::string& raw : split(value, ',')) {
    std::string f = trim(raw);
    size_t colon = f.find(':');
    if (colon == std::string::npos) {
      *err = "'" + item + "': field '" + f + "' is not name:value";
      return -EINVAL;
    }
    std::string k = trim(f.substr(0, colon)), v = trim(f.substr(colon + 1));
    if (!seen.insert(k).second) {
      *err = "'" + item + "': field '" + k + "' given twice";
      return -EINVAL;
    }
    bool ok = true;
    if (k == "op") {
      rule->ops = 0;
      for (const std::string& o : split(v, '+')) {
        if (o == "send") rule->ops |= kOpSend;
        else if (o == "read") rule->ops |= kOpRead;
        else if (o == "write") rule->ops |= kOpWrite;
        else if (o == "any") rule->ops |= kOpAny;
        else ok = false;
      }
    } else if (k == "qp") {
      ok = parse_u32(v, &rule->qpn) && rule->qpn != 0;
    } else if (k == "peer") {
      ok = parse_gid(v, &rule->peer);
      rule->has_peer = true;
    } else if (k == "size") {
      ok = parse_size_range(v, &rule->min_size, &rule->max_size);
    } else if (k == "nth" || k == "every") {
      uint64_t n = 0;
      ok = !have_count && parse_u64(v, &n) && n != 0;
      have_count = true;
      if (k == "nth") rule->nth = n; else rule->every = n;
    } else if (k == "status") {
      int s = parse_status(v);
      ok = s > 0;  // failing with OK is no fault
      if (ok) rule->status = static_cast<uint8_t>(s);
      have_status = true;
    } else {
      *err = "'" + item + "': unknown field '" + k + "' (op, qp, peer, size, nth, every, status)";
      return -EINVAL;
    }
    if (!ok) {
      *err = "'" + item + "': bad value for " + k + ": '" + v + "'";
      return -EINVAL;
    }
  }
  if (!have_status) {
    *err = "'" + item + "': status:NAME is required";
    return -EINVAL;
  }
  return 0;
}

// GID@MS or GID1,GID2@A-B
int parse_peer(const std::string& item, const std::string& value, bool pair, PeerWindow* w,
               std::string* err) {
  size_t at = value.rfind('@');
  auto bad = [&](const char* why) {
    *err = "'" + item + "': " + why;
    return -EINVAL;
  };
  if (at == std::string::npos) return bad(pair ? "expected GID1,GID2@FROM_MS-TO_MS" : "expected GID@AFTER_MS");
  std::string gids = trim(value.substr(0, at)), when = trim(value.substr(at + 1));
  w->pair = pair;
  if (pair) {
    size_t comma = gids.find(',');
    if (comma == std::string::npos || !parse_gid(trim(gids.substr(0, comma)), &w->a) ||
        !parse_gid(trim(gids.substr(comma + 1)), &w->b)) {
      return bad("expected two GIDs separated by ','");
    }
    size_t dash = when.find('-');
    if (dash == std::string::npos || !parse_u64(when.substr(0, dash), &w->from_ms) ||
        !parse_u64(when.substr(dash + 1), &w->to_ms) || w->from_ms > w->to_ms) {
      return bad("expected FROM_MS-TO_MS with FROM <= TO after '@'");
    }
  } else {
    if (!parse_gid(gids, &w->a)) return bad("bad GID");
    if (!parse_u64(when, &w->from_ms)) return bad("expected milliseconds after '@'");
  }
  return 0;
}

uint64_t mix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool gid_eq(const std::array<uint8_t, 16>& a, const GidBytes& b) { return a == b; }

uint8_t op_bit(uint8_t op) {
  switch (op) {
    case EFA_IO_SEND: return kOpSend;
    case EFA_IO_RDMA_READ: return kOpRead;
    case EFA_IO_RDMA_WRITE: return kOpWrite;
    default: return 0;
  }
}

}  // namespace

bool PlanSpec::lossy() const {
  return drop > 0 || dup > 0 || corrupt > 0 || !peers.empty();
}

bool PlanSpec::empty() const {
  return drop == 0 && dup == 0 && corrupt == 0 && reorder == 0 && delay_us == 0 && stall_us == 0 &&
         cq_delay_us == 0 && fails.empty() && peers.empty();
}

int parse_status(const std::string& name) {
  std::string n = upper(trim(name));
  uint64_t v;
  if (parse_u64(n, &v)) {
    for (const StatusName& s : kStatuses) {
      if (s.value == v) return static_cast<int>(v);
    }
    return -1;
  }
  for (const char* prefix : {"EFA_IO_COMP_STATUS_", "LOCAL_ERROR_", "REMOTE_ERROR_"}) {
    if (n.compare(0, std::strlen(prefix), prefix) == 0) n = n.substr(std::strlen(prefix));
  }
  // "REMOTE_ERROR_BAD_LENGTH" became "BAD_LENGTH" above; keep it distinct from the local one.
  std::string full = upper(trim(name));
  if (full.find("REMOTE_ERROR_BAD_LENGTH") != std::string::npos) return EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH;
  if (full.find("REMOTE_ERROR_ABORT") != std::string::npos || n == "REMOTE_ABORT") {
    return EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT;
  }
  for (const StatusName& s : kStatuses) {
    if (n == s.name) return s.value;
  }
  return -1;
}

const char* status_name(uint8_t status) {
  for (const StatusName& s : kStatuses) {
    if (s.value == status) return s.name;
  }
  return "UNKNOWN_STATUS";
}

bool parse_gid(const std::string& text, GidBytes* gid) {
  std::string t = trim(text);
  if (t.size() == 32 && t.find(':') == std::string::npos) {
    for (size_t i = 0; i < 16; ++i) {
      unsigned v = 0;
      for (size_t j = 0; j < 2; ++j) {
        char c = static_cast<char>(std::tolower(static_cast<unsigned char>(t[2 * i + j])));
        if (c >= '0' && c <= '9') v = v * 16 + static_cast<unsigned>(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + static_cast<unsigned>(c - 'a' + 10);
        else return false;
      }
      (*gid)[i] = static_cast<uint8_t>(v);
    }
    return true;
  }
  in6_addr a;
  if (inet_pton(AF_INET6, t.c_str(), &a) != 1) return false;
  std::memcpy(gid->data(), &a, 16);
  return true;
}

std::string gid_text(const GidBytes& gid) {
  char buf[INET6_ADDRSTRLEN];
  in6_addr a;
  std::memcpy(&a, gid.data(), 16);
  if (inet_ntop(AF_INET6, &a, buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

int parse_plan(const std::string& text, PlanSpec* spec, std::string* error) {
  std::string dummy;
  std::string* err = error != nullptr ? error : &dummy;
  if (spec == nullptr) {
    *err = "no output";
    return -EINVAL;
  }
  PlanSpec s;
  std::set<std::string> seen;
  // Items: ';' or newline separated; '#' to end of line is a comment.
  std::string cleaned;
  bool comment = false;
  for (char c : text) {
    if (c == '\n') {
      comment = false;
      cleaned += ';';
    } else if (c == '#') {
      comment = true;
    } else if (!comment) {
      cleaned += c;
    }
  }
  for (const std::string& raw : split(cleaned, ';')) {
    std::string item = trim(raw);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      *err = "'" + item + "': expected key=value";
      return -EINVAL;
    }
    std::string k = trim(item.substr(0, eq)), v = trim(item.substr(eq + 1));
    bool repeatable = k == "fail" || k == "kill_peer" || k == "partition";
    if (!repeatable && !seen.insert(k).second) {
      *err = "'" + item + "': " + k + " given twice";
      return -EINVAL;
    }
    bool ok = true;
    if (k == "seed") ok = parse_u64(v, &s.seed);
    else if (k == "stream") ok = s.has_stream = parse_u64(v, &s.stream);
    else if (k == "drop") ok = parse_prob(v, &s.drop);
    else if (k == "dup") ok = parse_prob(v, &s.dup);
    else if (k == "corrupt") ok = parse_prob(v, &s.corrupt);
    else if (k == "reorder") ok = parse_prob(v, &s.reorder);
    else if (k == "window") ok = parse_u32(v, &s.window) && s.window >= 1 && s.window <= 4096;
    else if (k == "delay_us") ok = parse_u32(v, &s.delay_us) && s.delay_us <= 10000000;
    else if (k == "jitter_us") ok = parse_u32(v, &s.jitter_us) && s.jitter_us <= 10000000;
    else if (k == "delay_p") ok = parse_prob(v, &s.delay_p);
    else if (k == "stall_us") ok = parse_u32(v, &s.stall_us) && s.stall_us <= 10000000;
    else if (k == "stall_p") ok = parse_prob(v, &s.stall_p);
    else if (k == "cq_delay_us") ok = parse_u32(v, &s.cq_delay_us) && s.cq_delay_us <= 10000000;
    else if (k == "cq_delay_p") ok = parse_prob(v, &s.cq_delay_p);
    else if (k == "fail") {
      FailRule r;
      int rc = parse_fail(item, v, &r, err);
      if (rc != 0) return rc;
      s.fails.push_back(r);
    } else if (k == "kill_peer" || k == "partition") {
      PeerWindow w;
      int rc = parse_peer(item, v, k == "partition", &w, err);
      if (rc != 0) return rc;
      s.peers.push_back(w);
    } else {
      *err = "'" + item + "': unknown key '" + k + "'";
      return -EINVAL;
    }
    if (!ok) {
      *err = "'" + item + "': bad value '" + v + "'";
      return -EINVAL;
    }
  }
  struct Needs {
    const char* modifier;
    const char* base;
    bool base_set;
  };
  const Needs needs[] = {{"window", "reorder", seen.count("reorder") != 0},
                         {"jitter_us", "delay_us", seen.count("delay_us") != 0},
                         {"delay_p", "delay_us", seen.count("delay_us") != 0},
                         {"stall_p", "stall_us", seen.count("stall_us") != 0},
                         {"cq_delay_p", "cq_delay_us", seen.count("cq_delay_us") != 0}};
  for (const Needs& n : needs) {
    if (seen.count(n.modifier) && !n.base_set) {
      *err = std::string("'") + n.modifier + "' needs '" + n.base + "'";
      return -EINVAL;
    }
  }
  *spec = s;
  return 0;
}

int read_plan_text(const std::string& value, std::string* text, std::string* error) {
  if (value.empty() || value[0] != '@') {
    *text = value;
    return 0;
  }
  std::ifstream in(value.substr(1));
  if (!in) {
    if (error != nullptr) *error = "cannot read fault plan file '" + value.substr(1) + "'";
    return -EINVAL;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return 0;
}

int plan_from_env(PlanSpec* spec, bool* present, std::string* error) {
  *present = false;
  const char* env = std::getenv("FI_EFA_EMU_FAULTS");
  if (env == nullptr || env[0] == '\0') return 0;
  *present = true;
  std::string text;
  int rc = read_plan_text(env, &text, error);
  if (rc != 0) return rc;
  return parse_plan(text, spec, error);
}

FaultPlan::FaultPlan(const PlanSpec& spec, uint64_t start_ns)
    : spec_(spec), start_ns_(start_ns), rng_(spec.seed), matched_(spec.fails.size(), 0) {}

void FaultPlan::personalize(const std::string& device, uint64_t process) {
  const std::string who = device + "/" + std::to_string(spec_.has_stream ? spec_.stream : process);
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : who) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  rng_ = spec_.seed ^ h;
}

double FaultPlan::uniform() { return static_cast<double>(mix(&rng_) >> 11) * (1.0 / 9007199254740992.0); }

bool FaultPlan::chance(double p) { return p > 0 && (p >= 1 || uniform() < p); }

bool FaultPlan::peer_blocked(const FaultContext& ctx) const {
  if (!ctx.has_peer) return false;
  uint64_t ms = ctx.now_ns >= start_ns_ ? (ctx.now_ns - start_ns_) / 1000000 : 0;
  for (const PeerWindow& w : spec_.peers) {
    if (ms < w.from_ms || ms >= w.to_ms) continue;
    if (w.pair) {
      if ((gid_eq(ctx.local, w.a) && gid_eq(ctx.peer, w.b)) ||
          (gid_eq(ctx.local, w.b) && gid_eq(ctx.peer, w.a))) {
        return true;
      }
    } else if (gid_eq(ctx.local, w.a) || gid_eq(ctx.peer, w.a)) {
      return true;
    }
  }
  return false;
}

FaultDecision FaultPlan::packet_in(const FaultContext& ctx) {
  FaultDecision d;
  if (chance(spec_.drop)) {
    d.action = FaultAction::kDrop;
  } else if (chance(spec_.corrupt)) {
    d.action = FaultAction::kCorrupt;
    d.bit = static_cast<uint32_t>(mix(&rng_));
  } else if (chance(spec_.dup)) {
    d.action = FaultAction::kDup;
  } else if (chance(spec_.reorder)) {
    d.action = FaultAction::kHold;
    d.hold = 1 + static_cast<uint32_t>(mix(&rng_) % spec_.window);
  } else if (spec_.delay_us != 0 && chance(spec_.delay_p)) {
    d.action = FaultAction::kDelay;
    d.delay_us = spec_.delay_us +
                 (spec_.jitter_us ? static_cast<uint32_t>(mix(&rng_) % spec_.jitter_us) : 0u);
  }
  (void)ctx;
  return d;
}

FaultDecision FaultPlan::wqe(const FaultContext& ctx) {
  FaultDecision d;
  for (size_t i = 0; i < spec_.fails.size(); ++i) {
    const FailRule& r = spec_.fails[i];
    if (!(r.ops & op_bit(ctx.op))) continue;
    if (r.qpn != 0 && r.qpn != ctx.qpn) continue;
    if (r.has_peer && (!ctx.has_peer || !gid_eq(ctx.peer, r.peer))) continue;
    if (ctx.size < r.min_size || ctx.size > r.max_size) continue;
    uint64_t n = ++matched_[i];
    bool hit = r.nth != 0 ? n == r.nth : n % r.every == 0;
    if (hit && d.action == FaultAction::kPass) {
      d.action = FaultAction::kFail;
      d.status = r.status;
    }
  }
  return d;
}

FaultDecision FaultPlan::at(const FaultContext& ctx) {
  if (start_ns_ == 0) start_ns_ = ctx.now_ns;
  FaultDecision d;
  switch (ctx.point) {
    case FaultPoint::kDoorbellRead:
      if (spec_.stall_us != 0) {
        auto it = stall_until_.find(ctx.slot);
        if (it == stall_until_.end()) {
          if (chance(spec_.stall_p)) {
            stall_until_[ctx.slot] = ctx.now_ns + uint64_t{spec_.stall_us} * 1000;
            d.action = FaultAction::kDrop;
          }
        } else if (ctx.now_ns < it->second) {
          // Still stalled: the same fault, not a new one.
          d.action = FaultAction::kDrop;
          d.repeat = true;
          return d;
        } else {
          stall_until_.erase(it);
        }
      }
      break;
    case FaultPoint::kWqeFetch:
      d = wqe(ctx);
      break;
    case FaultPoint::kPacketOut:
      if (peer_blocked(ctx)) d.action = FaultAction::kDrop;
      break;
    case FaultPoint::kPacketIn:
      d = peer_blocked(ctx) ? FaultDecision{FaultAction::kDrop} : packet_in(ctx);
      break;
    case FaultPoint::kCompletionWrite:
      if (spec_.cq_delay_us != 0 && chance(spec_.cq_delay_p)) {
        d.action = FaultAction::kDelay;
        d.delay_us = spec_.cq_delay_us;
      }
      break;
  }
  if (d.action != FaultAction::kPass) ++injected_;
  return d;
}

int make_plan(const std::string& text, std::unique_ptr<FaultPlan>* plan, std::string* error) {
  PlanSpec spec;
  int rc = parse_plan(text, &spec, error);
  if (rc != 0) return rc;
  plan->reset(new FaultPlan(spec));
  return 0;
}

}  // namespace faults
}  // namespace emu
}  // namespace xpufab
