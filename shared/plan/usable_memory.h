// How much RAM this process may use: the smallest of physical RAM (/proc/meminfo MemTotal),
// every cgroup v2 memory.max and memory.high from this process's cgroup up to the root of the
// cgroup2 mount, and every cgroup v1 memory.limit_in_bytes up the memory hierarchy where v1 is
// mounted (hybrid hosts have both). Cgroups are located with /proc/self/cgroup and
// /proc/self/mountinfo. Kernel files are parsed defensively: "max", absurdly large values
// (v1 writes 2^63 - 4096 for "unlimited"), missing or unreadable files and garbage all mean
// "no limit here", never an error; only a missing MemTotal is an error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace waste::plan {

// Where /proc and the mount points live; tests point both into a temporary tree.
struct SystemRoots {
  std::string proc = "/proc";
  std::string fs;  // prefix for the absolute mount points read from mountinfo ("" = real root)
};

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // e.g. "/sys/fs/cgroup/memory/a/memory.limit_in_bytes" or "/proc/meminfo MemTotal"
};

struct UsableMemory {
  uint64_t physical = 0;
  uint64_t usable = 0;
  std::string source;                // the limit that won
  std::vector<MemoryLimit> limits;   // every finite limit found, physical first
};

UsableMemory usable_memory(const SystemRoots& roots = {});

// A cgroup limit file's value: nullopt-like 0 for "max", empty, garbage or >= 2^62.
uint64_t parse_cgroup_limit(const std::string& text);

}  // namespace waste::plan
