#include "shared/ipc/shm_huge_pages.h"

#include <fstream>
#include <sstream>

namespace waste::ipc {

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

std::string shm_huge_page_mode_of(const std::string& mounts, const std::string& shmem_enabled) {
  // A system-wide "force" applies to every tmpfs mount.
  if (shmem_enabled.find("[force]") != std::string::npos) return "force";
  std::istringstream in(mounts);
  std::string line, mode = "unknown";
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, point, type, options;
    if (!(fields >> device >> point >> type >> options)) continue;
    if (point != "/dev/shm") continue;
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

}  // namespace waste::ipc
