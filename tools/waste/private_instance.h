// A private WASTE instance for one front-end command (`waste chat --model M` when nothing is
// running): waste-iod and waste-compute in a fresh temporary run directory, each in its own
// process group (a Ctrl-C at the terminal reaches only the front end, which turns it into a
// cancel) and with its output in <run-dir>/<name>.log (stdout stays the generated text).
// stop() (also the destructor) stops compute, then iod, removes iod's shared memory segment if
// it is still there and deletes the run directory. A child also gets SIGTERM when the front end
// dies without cleaning up (PR_SET_PDEATHSIG).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace waste::cli {

// WASTE_COMPUTE, else waste-compute next to this executable, else ../compute/server/waste-compute
// from it (the build tree), else waste-compute from PATH.
std::string find_compute_binary();

struct PrivateInstanceOptions {
  std::string model;      // container directory
  std::string budget;     // iod cache bytes ("4G"); empty: iod's own plan
  uint32_t context = 0;   // compute --ctx; 0: compute's default
  double timeout_s = 600; // for each child to answer (a big trunk takes a while to load)
};

class PrivateInstance {
 public:
  // Starts both and returns once compute.sock accepts. Throws Error (with the tail of the
  // failing child's log) when a child exits or does not answer in time, or when *abort turns
  // true while waiting (a signal); everything started so far is stopped first.
  explicit PrivateInstance(const PrivateInstanceOptions& o, const std::atomic<bool>* abort = nullptr);
  ~PrivateInstance();
  PrivateInstance(const PrivateInstance&) = delete;
  PrivateInstance& operator=(const PrivateInstance&) = delete;

  const std::string& run_dir() const { return run_dir_; }
  pid_t iod_pid() const { return iod_; }
  pid_t compute_pid() const { return compute_; }
  void stop();  // idempotent

 private:
  pid_t spawn(const std::string& name, const std::vector<std::string>& argv);
  void await(const std::string& name, pid_t& pid, const std::string& socket, const PrivateInstanceOptions& o,
             const std::atomic<bool>* abort);
  std::string log_tail(const std::string& name) const;

  std::string run_dir_;
  uint64_t instance_id_ = 0;  // names iod's segment (ipc::instance_id_for of the run dir)
  pid_t iod_ = -1, compute_ = -1;
};

}  // namespace waste::cli
