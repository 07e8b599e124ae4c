// Whether iod's shared-memory segment can sit on huge pages. Boost.Interprocess puts the
// segment on /dev/shm (tmpfs): on 4 KiB pages the hardware prefetcher stops at every page
// boundary and the expert kernels read a cached record 1.5-2x slower than the same record in
// private (transparent-huge-page) memory (docs/MEASUREMENTS.md, session 4). tmpfs hands out
// huge pages only when mounted with huge=always|within_size|advise (or when the system forces
// them for all shared memory), which most distributions do not do by default.
#pragma once
#include <string>

namespace waste::ipc {

// The huge page mode of the /dev/shm mount ("always", "within_size", "advise", "never",
// "deny" or "force" when /sys/kernel/mm/transparent_hugepage/shmem_enabled forces it), or
// "unknown" where there is no such mount (other systems).
std::string shm_huge_page_mode();
// The same from the texts of /proc/self/mounts and of shmem_enabled (tests).
std::string shm_huge_page_mode_of(const std::string& mounts, const std::string& shmem_enabled);

// True when segments on /dev/shm get huge pages (for "advise", after madvise(MADV_HUGEPAGE),
// which ShmSegment::create does).
bool shm_huge_pages_enabled(const std::string& mode);

// The command that turns them on (root), for log messages and docs.
inline const char* shm_huge_pages_hint() { return "mount -o remount,huge=within_size /dev/shm"; }

}  // namespace waste::ipc
