#include "shared/platform/linux/proc_memory.h"

#include <fstream>
#include <sstream>

#include "shared/util/error.h"

namespace waste::platform {

namespace {

// Kernel pseudo-files are small; read at most this much of any of them.
constexpr size_t kMaxProcFileBytes = 1u << 20;
// At or above this a limit is "unlimited" (v1 reports 2^63 - 4096; nobody has 4 EiB of RAM).
constexpr uint64_t kUnlimited = 1ull << 62;

bool read_small_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(kMaxProcFileBytes, '\0');
  f.read(out.data(), std::streamsize(out.size()));
  out.resize(size_t(f.gcount()));
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

struct CgroupMount {
  std::string root;   // mountinfo field 4: the cgroup path the mount shows at its mount point
  std::string point;  // mount point (absolute, without the fs prefix)
};

struct Mounts {
  std::vector<CgroupMount> v2, v1_memory;
};

Mounts find_cgroup_mounts(const SystemRoots& r) {
  Mounts m;
  std::string text;
  if (!read_small_file(r.proc + "/self/mountinfo", text)) {
    // No mountinfo: assume the usual places.
    m.v2.push_back({"/", "/sys/fs/cgroup"});
    m.v2.push_back({"/", "/sys/fs/cgroup/unified"});
    m.v1_memory.push_back({"/", "/sys/fs/cgroup/memory"});
    return m;
  }
  for (const std::string& line : split(text, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, super;
    if (!(head >> id >> parent >> dev >> root >> point)) continue;
    if (!(tail >> fstype >> source)) continue;
    tail >> super;
    if (fstype == "cgroup2") m.v2.push_back({root, point});
    else if (fstype == "cgroup") {
      for (const std::string& opt : split(super, ','))
        if (opt == "memory") m.v1_memory.push_back({root, point});
    }
  }
  return m;
}

// The directories from the process's cgroup up to the mount point, deepest first.
std::vector<std::string> cgroup_dirs(const SystemRoots& r, const CgroupMount& mount, const std::string& cgroup_path) {
  std::vector<std::string> dirs;
  // A path that escapes the mount (or is not absolute) is not ours to follow.
  if (cgroup_path.empty() || cgroup_path[0] != '/' || cgroup_path.find("/..") != std::string::npos) return dirs;
  std::string rel = cgroup_path;
  if (mount.root != "/") {
    // Not visible through this mount unless the root is a whole-component prefix
    // (root /docker/c1 must not match /docker/c10/...).
    const bool under_root = rel.compare(0, mount.root.size(), mount.root) == 0 &&
                            (rel.size() == mount.root.size() || rel[mount.root.size()] == '/');
    if (!under_root) return dirs;
    rel = rel.substr(mount.root.size());
  }
  if (rel == "/") rel.clear();
  std::string base = r.fs + mount.point;
  for (;;) {
    dirs.push_back(base + rel);
    if (rel.empty()) break;
    size_t slash = rel.rfind('/');
    rel = rel.substr(0, slash == std::string::npos ? 0 : slash);
  }
  return dirs;
}

void consider(UsableMemory& u, const std::string& file) {
  std::string text;
  if (!read_small_file(file, text)) return;
  uint64_t v = parse_cgroup_limit(text);
  if (v == 0) return;
  u.limits.push_back({v, file});
  if (v < u.usable) {
    u.usable = v;
    u.source = file;
  }
}

}  // namespace

uint64_t parse_cgroup_limit(const std::string& text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return 0;
  size_t e = text.find_last_not_of(" \t\r\n");
  std::string v = text.substr(b, e - b + 1);
  if (v == "max" || v.size() > 20) return 0;
  uint64_t x = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return 0;
    if (x > (UINT64_MAX - 9) / 10) return 0;
    x = x * 10 + uint64_t(c - '0');
  }
  return x >= kUnlimited ? 0 : x;
}

UsableMemory usable_memory_from(const SystemRoots& r) {
  UsableMemory u;
  std::string meminfo;
  const std::string meminfo_path = r.proc + "/meminfo";
  require(read_small_file(meminfo_path, meminfo), meminfo_path + ": cannot read (needed for physical RAM)");
  for (const std::string& line : split(meminfo, '\n')) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream in(line.substr(9));
    uint64_t kib = 0;
    std::string unit;
    if ((in >> kib) && kib > 0 && kib < (1ull << 50)) u.physical = kib * 1024;
  }
  require(u.physical > 0, meminfo_path + ": no valid MemTotal line");
  u.usable = u.physical;
  u.source = meminfo_path + " MemTotal";
  u.limits.push_back({u.physical, u.source});

  std::string cgroups;
  if (!read_small_file(r.proc + "/self/cgroup", cgroups)) return u;
  std::string v2_path, v1_memory_path;
  for (const std::string& line : split(cgroups, '\n')) {
    // hierarchy-id:controllers:path
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string id = line.substr(0, c1), ctl = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    if (id == "0" && ctl.empty()) v2_path = path;
    for (const std::string& c : split(ctl, ','))
      if (c == "memory") v1_memory_path = path;
  }
  Mounts mounts = find_cgroup_mounts(r);
  if (!v2_path.empty())
    for (const CgroupMount& m : mounts.v2)
      for (const std::string& dir : cgroup_dirs(r, m, v2_path)) {
        consider(u, dir + "/memory.max");
        consider(u, dir + "/memory.high");
      }
  if (!v1_memory_path.empty())
    for (const CgroupMount& m : mounts.v1_memory)
      for (const std::string& dir : cgroup_dirs(r, m, v1_memory_path)) consider(u, dir + "/memory.limit_in_bytes");
  return u;
}

}  // namespace waste::platform
