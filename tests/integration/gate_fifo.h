// The test's end of a process's test gate: a FIFO in a temporary directory, named to the process
// in an environment variable, through which the test lets the process go on a word at a time.
//   StepGateFifo: compute's forward steps (compute/server/step_gate.h,
//     WASTE_COMPUTE_TEST_STEP_GATE): step(n) lets n more run, open() lets all run, close() none.
//   CheckGateFifo: iod's record checks (iod/io/check_gate.h, WASTE_IOD_TEST_CHECK_GATE): each
//     record waits in CHECKING; let(n) lets n more checks run, open() lets all run.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "process.h"
#include "scoped_env.h"

namespace waste::test {

class GateFifo {
 public:
  GateFifo(std::string env_name, const std::string& file) : env_name_(std::move(env_name)), path_(dir_ / file) {
    if (::mkfifo(path_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path_);
    // O_RDWR: opening never blocks for a reader, and writes before the process opens its end
    // stay in the pipe (a FIFO keeps its data while any end is open).
    fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("open " + path_);
  }
  ~GateFifo() { ::close(fd_); }
  GateFifo(const GateFifo&) = delete;
  GateFifo& operator=(const GateFifo&) = delete;

  // The environment that gives the process this gate, for a ScopedEnv.
  std::pair<std::string, std::string> env() const { return {env_name_, path_}; }

 protected:
  void send(const std::string& bytes) {
    if (::write(fd_, bytes.data(), bytes.size()) != ssize_t(bytes.size()))
      throw std::runtime_error("write " + path_);
  }

 private:
  TempDir dir_;
  std::string env_name_;
  std::string path_;
  int fd_ = -1;
};

class StepGateFifo : public GateFifo {
 public:
  StepGateFifo() : GateFifo("WASTE_COMPUTE_TEST_STEP_GATE", "step-gate") {}
  void step(int n = 1) { send(std::string(size_t(n), 's')); }
  void open() { send("o"); }
  void close() { send("c"); }
};

class CheckGateFifo : public GateFifo {
 public:
  CheckGateFifo() : GateFifo("WASTE_IOD_TEST_CHECK_GATE", "check-gate") {}
  void let(int n = 1) { send(std::string(size_t(n), 'l')); }
  void open() { send("o"); }
};

}  // namespace waste::test
