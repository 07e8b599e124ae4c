// The test's end of compute's step gate (compute/server/step_gate.h): a FIFO in a temporary
// directory, passed to compute in WASTE_COMPUTE_TEST_STEP_GATE, through which the test lets
// compute's forward steps run: step(n) lets n more run, open() lets all run, close() none.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "process.h"
#include "scoped_env.h"

namespace waste::test {

class StepGateFifo {
 public:
  StepGateFifo() : path_(dir_ / "step-gate") {
    if (::mkfifo(path_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path_);
    // O_RDWR: opening never blocks for a reader, and writes before compute opens its end stay
    // in the pipe (a FIFO keeps its data while any end is open).
    fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("open " + path_);
  }
  ~StepGateFifo() { ::close(fd_); }
  StepGateFifo(const StepGateFifo&) = delete;
  StepGateFifo& operator=(const StepGateFifo&) = delete;

  // The environment that gives compute this gate, for a ScopedEnv.
  std::pair<std::string, std::string> env() const { return {"WASTE_COMPUTE_TEST_STEP_GATE", path_}; }

  void step(int n = 1) { send(std::string(size_t(n), 's')); }
  void open() { send("o"); }
  void close() { send("c"); }

 private:
  void send(const std::string& bytes) {
    if (::write(fd_, bytes.data(), bytes.size()) != ssize_t(bytes.size()))
      throw std::runtime_error("write " + path_);
  }
  TempDir dir_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace waste::test
