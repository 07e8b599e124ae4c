// A process's claim on its run directory: creates it 0700, takes an flock on `<dir>/<lock>`
// (the kernel drops it even on kill -9, so a lock held means a live instance), and removes a
// stale socket of a dead instance, which is ours to remove once we hold the lock. The socket
// is unlinked on destruction; the lock file stays (unlinking a held lock file would let a
// newcomer lock a fresh inode while we still run).
#pragma once
#include <string>

namespace waste {

class RunDirClaim {
 public:
  // `who` names the process in messages ("iod", "compute"). Throws Error when another
  // instance holds the lock or the directory cannot be made.
  RunDirClaim(const std::string& dir, const std::string& lock_name, const std::string& socket_name,
              const std::string& who);
  ~RunDirClaim();
  RunDirClaim(const RunDirClaim&) = delete;
  RunDirClaim& operator=(const RunDirClaim&) = delete;

  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string socket_path_;
  int lock_fd_ = -1;
};

}  // namespace waste
