// The parser behind platform::shm_huge_page_mode on Linux (shared/platform/shm.h), apart from
// the files it reads so that tests can give it any mount table.
#pragma once
#include <string>

namespace waste::platform {

// Where POSIX shared-memory objects live as files.
inline constexpr const char* kShmDir = "/dev/shm";

// The huge page mode from the texts of /proc/self/mounts and of
// /sys/kernel/mm/transparent_hugepage/shmem_enabled.
std::string shm_huge_page_mode_of(const std::string& mounts, const std::string& shmem_enabled);

}  // namespace waste::platform
