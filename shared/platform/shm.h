// What the operating system says about named shared memory: iod's expert cache is one POSIX
// shared-memory object (Boost.Interprocess, shared/ipc/shm_segment.h) that compute maps
// read-only. This file holds what Boost does not: the longest name the system accepts, finding
// the segments a crashed iod left behind, and whether the segment can sit on huge pages.
//
// Linux: objects are files in /dev/shm, a tmpfs (linux/shm.cpp). What a macOS or Windows port
// supplies instead: docs/PORTING.md, "shm".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace waste::platform {

#if defined(__linux__)
// A name is a file name in /dev/shm: NAME_MAX bytes (Boost adds no prefix on Linux).
inline constexpr size_t kShmNameMax = 255;
#else
#error "shared/platform/shm.h: no shared-memory name limit for this system; docs/PORTING.md says what a port supplies"
#endif

// Names of the existing shared-memory objects that start with `prefix` (no leading '/'), to
// remove a crashed instance's segments. Empty where the system cannot list them.
std::vector<std::string> shm_names_with_prefix(const std::string& prefix);

// Whether an object of that name exists.
bool shm_exists(const std::string& name);

// The huge page mode of the shared-memory file system: on Linux the /dev/shm mount's huge=
// option ("always", "within_size", "advise", "never", "deny"), or "force" when
// /sys/kernel/mm/transparent_hugepage/shmem_enabled forces it for all shared memory;
// "unknown" where there is no such mount. On 4 KiB pages the hardware prefetcher stops at every
// page boundary (README, "Huge pages for the expert cache"; docs/MEASUREMENTS.md).
std::string shm_huge_page_mode();

// True when segments get huge pages in that mode (for "advise", after advise_huge_pages, which
// ShmSegment::create does).
bool shm_huge_pages_enabled(const std::string& mode);

// The command that turns them on (root), for log messages; "" where there is none.
const char* shm_huge_pages_hint();

// A shared-memory file of `bytes` (zero-filled) on 2 MiB pages whatever the /dev/shm mount
// says, for a user without root: an unnamed file on a tmpfs mounted with huge=within_size in a
// user and mount namespace of its own (linux/private_huge_shm.cpp). Returns a read-write
// descriptor (close-on-exec) that other processes of this user open as /proc/<pid>/fd/<n>; it
// has no name, so no exit path leaves it behind. -1 with `why` where the system refuses (user
// namespaces disabled, a seccomp filter, a kernel without transparent huge pages): the caller
// falls back to a named object.
int create_private_huge_shm(uint64_t bytes, std::string& why);

}  // namespace waste::platform
