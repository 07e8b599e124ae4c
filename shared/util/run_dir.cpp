#include "shared/util/run_dir.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shared/util/error.h"

namespace waste {

RunDirClaim::RunDirClaim(const std::string& dir, const std::string& lock_name, const std::string& socket_name,
                         const std::string& who) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  require(!ec, who + ": cannot create run directory " + dir + ": " + ec.message());
  require(::chmod(dir.c_str(), 0700) == 0, who + ": cannot chmod 0700 " + dir + ": " + std::strerror(errno));
  const std::string lock_path = dir + "/" + lock_name;
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  require(lock_fd_ >= 0, who + ": cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);  // a throwing constructor runs no destructor
    throw Error(who + ": another " + who + " is running in " + dir + " (" + lock_path + " is locked)");
  }
  socket_path_ = dir + "/" + socket_name;
  if (::unlink(socket_path_.c_str()) == 0) spdlog::info("{}: removed a stale socket {}", who, socket_path_);
}

RunDirClaim::~RunDirClaim() {
  ::unlink(socket_path_.c_str());
  ::close(lock_fd_);
}

}  // namespace waste
