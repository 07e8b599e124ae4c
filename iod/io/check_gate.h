// Test hook (WASTE_IOD_TEST_CHECK_GATE=FIFO): holds each record in CHECKING, before its payload
// checksum, until the test lets it go, so a test can act while compute holds a record whose
// check has not ended (docs/PROTOCOL.md, CHECKING). The test writes to the FIFO: 'c' lets one
// check run, 'o' lets every check run from then on. A check held longer than kHoldLimit runs
// anyway (logged): a test that forgot the gate slows its iod, it never hangs it.
#pragma once
#include <chrono>
#include <string>

namespace waste::iod {

class CheckGate {
 public:
  // Opens the FIFO (O_NOFOLLOW; refused unless it is a FIFO of this user). Throws Error.
  explicit CheckGate(const std::string& fifo);
  ~CheckGate();
  CheckGate(const CheckGate&) = delete;
  CheckGate& operator=(const CheckGate&) = delete;

  // Waits for the test's word for one check (called by the one thread that checks).
  void pass();

  static constexpr std::chrono::seconds kHoldLimit{30};

 private:
  std::string path_;
  int fd_ = -1;
  bool open_ = false;  // 'o' seen: every check passes
};

}  // namespace waste::iod
