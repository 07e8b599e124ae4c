// Wall time per phase of the forward pass, for `waste bench` and the per-token stats. The
// model adds to a PhaseTimes only when one is attached (Model::set_profile); timing never
// changes results.
#pragma once
#include <chrono>

namespace waste {

struct PhaseTimes {
  double embed = 0, attention = 0, router = 0, fetch_wait = 0, experts = 0, mlp = 0, head = 0, other = 0;
  double total() const { return embed + attention + router + fetch_wait + experts + mlp + head + other; }
};

// Adds the time since construction (or the last lap) to a counter; a null target is a no-op.
class PhaseClock {
 public:
  explicit PhaseClock(PhaseTimes* p) : p_(p), t_(p ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  void lap(double PhaseTimes::*field) {
    if (!p_) return;
    const auto now = std::chrono::steady_clock::now();
    p_->*field += std::chrono::duration<double>(now - t_).count();
    t_ = now;
  }

 private:
  PhaseTimes* p_;
  std::chrono::steady_clock::time_point t_;
};

}  // namespace waste
