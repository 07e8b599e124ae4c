// A private waste-iod for `waste iobench` (and tests): fork/exec the daemon binary in a fresh
// run directory, wait (bounded) until its socket accepts, SIGTERM it when done.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace waste::iobench {

// WASTE_IOD, else waste-iod next to this executable, else ../iod/waste-iod from it (build tree).
std::string find_iod_binary();

class PrivateIod {
 public:
  // args: everything after the binary except --run-dir, which this adds.
  PrivateIod(const std::vector<std::string>& args, const std::string& run_dir, double timeout_s = 120);
  ~PrivateIod();  // SIGTERM, wait
  const std::string& socket_path() const { return socket_; }
  pid_t pid() const { return pid_; }
  int stop();     // SIGTERM and wait; returns the exit status (-1 when killed)

 private:
  pid_t pid_ = -1;
  std::string socket_;
};

// Polls until a unix socket accepts a connection, the process exits, or timeout passes.
// *exited is set when the process ended (and was reaped) while waiting.
bool wait_for_socket(const std::string& path, pid_t pid, double timeout_s, bool* exited = nullptr);

}  // namespace waste::iobench
