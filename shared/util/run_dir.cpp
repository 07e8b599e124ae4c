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
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(who + ": cannot create run directory " + dir + ": " + std::strerror(errno));
  // An existing directory is taken only if it is a real directory of ours: one another local
  // user made first (e.g. /tmp/waste-UID) would let them plant symlinks where we write.
  struct stat st;
  require(::lstat(dir.c_str(), &st) == 0, who + ": cannot stat " + dir + ": " + std::strerror(errno));
  require(S_ISDIR(st.st_mode), who + ": run directory " + dir + " is not a directory (a symlink or a file): refusing it");
  require(st.st_uid == ::geteuid(), who + ": run directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                        ", not to you (uid " + std::to_string(::geteuid()) +
                                        "): refusing it (another user may have made it)");
  if ((st.st_mode & 077) != 0)
    require(::chmod(dir.c_str(), 0700) == 0, who + ": cannot chmod 0700 " + dir + ": " + std::strerror(errno));
  const std::string lock_path = dir + "/" + lock_name;
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
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
