// Test hook (WASTE_IOD_TEST_CHECK_GATE=FIFO): holds each record in CHECKING, before its payload
// checksum, until the test lets it go, so a test can act while compute holds a record whose
// check has not ended (docs/PROTOCOL.md, CHECKING). The test writes to the FIFO: 'l' lets one
// check run, 'o' lets every check run from then on. A check held longer than kHoldLimit opens
// the gate for good (logged): a test that forgot it slows its iod once, it never hangs it.
#pragma once
#include <chrono>
#include <mutex>
#include <string>

namespace waste::iod {

class CheckGate {
 public:
  // Opens the FIFO (O_NOFOLLOW; refused unless it is a FIFO of this user). Throws Error.
  explicit CheckGate(const std::string& fifo);
  ~CheckGate();
  CheckGate(const CheckGate&) = delete;
  CheckGate& operator=(const CheckGate&) = delete;

  // Waits for the test's word for one check. Any thread that checks (the checker thread, the
  // pread pool's threads, a stopping checker's caller): one at a time, each taking one word.
  void pass();

  static constexpr std::chrono::seconds kHoldLimit{30};

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;      // one check waits at a time (a gate lets them through one by one)
  bool open_ = false;  // under mu_: 'o' seen, a read failed or a hold expired: every check passes
};

}  // namespace waste::iod
