// Linux's usable memory, read from the kernel's files (the implementation of
// platform::usable_memory, shared/platform/memory.h): the smallest of physical RAM
// (/proc/meminfo MemTotal), every cgroup v2 memory.max and memory.high from this process's
// cgroup up to the root of the cgroup2 mount, and every cgroup v1 memory.limit_in_bytes up the
// memory hierarchy where v1 is mounted (hybrid hosts have both). Cgroups are located with
// /proc/self/cgroup and /proc/self/mountinfo. Kernel files are parsed defensively: "max",
// absurdly large values (v1 writes 2^63 - 4096 for "unlimited"), missing or unreadable files and
// garbage all mean "no limit here", never an error; only a missing MemTotal is an error.
#pragma once
#include <cstdint>
#include <string>

#include "shared/platform/memory.h"

namespace waste::platform {

// Where /proc and the mount points live; tests point both into a temporary tree.
struct SystemRoots {
  std::string proc = "/proc";
  std::string fs;  // prefix for the absolute mount points read from mountinfo ("" = real root)
};

UsableMemory usable_memory_from(const SystemRoots& roots);

// A cgroup limit file's value: 0 (no limit) for "max", empty, garbage or >= 2^62.
uint64_t parse_cgroup_limit(const std::string& text);

}  // namespace waste::platform
