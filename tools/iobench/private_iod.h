// A private waste-iod for `waste iobench`, `waste run`/`bench` and tests: fork/exec the daemon
// binary in a fresh run directory, wait (bounded) until its socket accepts, SIGTERM it when done
// (SIGKILL after a grace period). The daemon runs in its own process group, so that a Ctrl-C at
// the terminal reaches only its owner, which stops it in order; and it gets SIGTERM when its
// owner dies without stopping it (PR_SET_PDEATHSIG). Its output (stdout and stderr) is passed
// on to the owner's stderr by a thread that keeps the last lines, so that a daemon that exits
// while starting is reported with its own reason.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace waste::iobench {

// WASTE_IOD, else waste-iod next to this executable, else ../iod/waste-iod from it (build tree).
std::string find_iod_binary();

// In a child between fork and exec (async-signal-safe calls only): its own process group (a
// terminal's Ctrl-C reaches the owner only, which stops its children in order), SIGTERM when
// `parent` dies without stopping it (PR_SET_PDEATHSIG; _exit(1) if it died already), and the
// signal mask and the quit signals' and SIGPIPE's dispositions back to the defaults.
void become_owned_child(pid_t parent);

// SIGTERM, then SIGKILL when the child has not exited after `grace_s`; always reaps it and sets
// pid to -1. Returns its exit status (-1 when a signal ended it, or pid <= 0).
int terminate_child(pid_t& pid, double grace_s);

class PrivateIod {
 public:
  // args: everything after the binary except --run-dir, which this adds. Throws Error when the
  // daemon exits or does not answer within timeout_s, or when *abort turns true while waiting (a
  // signal); the daemon is stopped first. `owner` opens those messages ("run", "iobench"); when the
  // daemon exited, the message ends with its last error line.
  PrivateIod(const std::vector<std::string>& args, const std::string& run_dir, double timeout_s = 120,
             const std::atomic<bool>* abort = nullptr, const std::string& owner = "iobench");
  ~PrivateIod();  // stop()
  PrivateIod(const PrivateIod&) = delete;
  PrivateIod& operator=(const PrivateIod&) = delete;
  const std::string& socket_path() const { return socket_; }
  pid_t pid() const { return pid_; }
  // SIGTERM, SIGKILL after kStopGraceSeconds, reaped; returns the exit status (-1 when killed).
  int stop();
  // As waste-supervise and PrivateInstance: time for a clean exit (usage file, timeline part).
  static constexpr double kStopGraceSeconds = 20;

 private:
  void relay_output(int fd);  // the reader thread: the daemon's output to fd 2, keeping the tail
  std::string last_error_line();  // after the relay ended: the daemon's last "[error]" (else last) line

  pid_t pid_ = -1;
  std::string socket_;
  std::thread relay_;
  std::mutex tail_mutex_;
  std::string tail_;  // the end of the daemon's output (bounded)
};

// Polls until a unix socket accepts a connection, the process exits, or timeout passes.
// *exited is set when the process ended (and was reaped) while waiting.
bool wait_for_socket(const std::string& path, pid_t pid, double timeout_s, bool* exited = nullptr);

}  // namespace waste::iobench
