// Linux shared memory: POSIX objects are files of the tmpfs on /dev/shm, so they can be listed
// and their mount's huge= option read from /proc/self/mounts.
#include "shared/platform/shm.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "shared/platform/linux/shm_mounts.h"

namespace waste::platform {

namespace {

// The value of option `key=` in a comma-separated mount option list, or "" when absent.
std::string option_value(const std::string& options, const std::string& key) {
  std::istringstream in(options);
  std::string opt;
  while (std::getline(in, opt, ','))
    if (opt.rfind(key + "=", 0) == 0) return opt.substr(key.size() + 1);
  return "";
}

}  // namespace

std::vector<std::string> shm_names_with_prefix(const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;  // no /dev/shm (a container without it): nothing to find
  for (const auto& e : std::filesystem::directory_iterator(kShmDir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(std::move(name));
  }
  return names;
}

bool shm_exists(const std::string& name) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(kShmDir) / name, ec);
}

std::string shm_huge_page_mode_of(const std::string& mounts, const std::string& shmem_enabled) {
  // A system-wide "force" applies to every tmpfs mount.
  if (shmem_enabled.find("[force]") != std::string::npos) return "force";
  std::istringstream in(mounts);
  std::string line, mode = "unknown";
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, point, type, options;
    if (!(fields >> device >> point >> type >> options)) continue;
    if (point != kShmDir) continue;
    const std::string huge = option_value(options, "huge");
    mode = huge.empty() ? "never" : huge;  // the last mount on /dev/shm is the one in use
  }
  return mode;
}

std::string shm_huge_page_mode() {
  auto read_all = [](const char* path) {
    std::ifstream f(path);
    std::ostringstream text;
    text << f.rdbuf();
    return text.str();
  };
  return shm_huge_page_mode_of(read_all("/proc/self/mounts"),
                               read_all("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
}

bool shm_huge_pages_enabled(const std::string& mode) {
  return mode == "always" || mode == "within_size" || mode == "advise" || mode == "force";
}

const char* shm_huge_pages_hint() { return "mount -o remount,huge=within_size /dev/shm"; }

}  // namespace waste::platform
