// A test hook that lets a test decide when compute's forward steps run (env
// WASTE_COMPUTE_TEST_STEP_GATE=FIFO). A test that must act while a reply is still streaming
// (stop compute mid-stream, Ctrl-C a chat) used to slow every step with a sleep and hope the
// reply outlived its action; with the gate the reply cannot move until the test lets it.
//
// The test writes bytes into the FIFO, which compute opened at start:
//   's'  one more forward step may run
//   'o'  open: steps run freely (until 'c')
//   'c'  closed: no step runs until 's' or 'o' (the permits left are dropped)
// A newline is ignored; any other byte is ignored with a warning, so a typo cannot open the gate.
// While the gate holds, session control (reset, save, load) still runs and cancels still end
// their requests: only steps wait.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace waste::server {

class StepGate {
 public:
  // Opens `fifo` (it must be a FIFO owned by this user; not followed if it is a symlink) and
  // reads it on its own thread; `changed` runs on that thread after each byte that may let a
  // step run, so the worker can wake.
  StepGate(const std::string& fifo, std::function<void()> changed);
  ~StepGate();
  StepGate(const StepGate&) = delete;
  StepGate& operator=(const StepGate&) = delete;

  // True when a step may run now (without taking a permit).
  bool open() const;
  // Takes one permit for the step about to run; false (nothing taken) when the gate holds.
  bool take();

 private:
  void read_loop();

  int fd_ = -1;       // the FIFO, O_RDWR: it never reads end-of-file when the test closes its end
  int stop_fd_ = -1;  // an eventfd the destructor writes to end read_loop
  std::function<void()> changed_;
  mutable std::mutex mu_;
  bool free_ = false;      // 'o' was the last mode byte
  uint64_t permits_ = 0;   // 's' bytes not yet taken
  std::thread reader_;
};

}  // namespace waste::server
