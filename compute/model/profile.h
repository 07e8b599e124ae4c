// Wall time per phase of the forward pass, for `waste bench` and the per-token stats. The
// model adds to a PhaseTimes only when one is attached (Model::set_profile); timing never
// changes results.
#pragma once
#include <chrono>
#include <cstdint>

#include "shared/util/timeline.h"

namespace waste {

struct PhaseTimes {
  double embed = 0, attention = 0, router = 0, fetch_wait = 0, experts = 0, mlp = 0, head = 0, other = 0;
  double total() const { return embed + attention + router + fetch_wait + experts + mlp + head + other; }
};

// Adds the time since construction (or the last lap) to a counter; a null target is a no-op.
// While a timeline is recording (shared/util/timeline.h) each lap is also a span named after
// the phase, with the layer and expert it was given.
class PhaseClock {
 public:
  explicit PhaseClock(PhaseTimes* p) : p_(p), on_(p != nullptr || timeline::enabled()) {
    if (on_) t_ = std::chrono::steady_clock::now();
  }
  void lap(double PhaseTimes::*field, int layer = -1, int expert = -1) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (p_) p_->*field += std::chrono::duration<double>(now - t_).count();
    if (timeline::enabled()) {
      // steady_clock is CLOCK_MONOTONIC on Linux, the timeline's clock.
      const auto ns = [](std::chrono::steady_clock::time_point t) {
        return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
      };
      timeline::span(phase_name(field), "compute", ns(t_), ns(now), layer, expert);
    }
    t_ = now;
  }

  static const char* phase_name(double PhaseTimes::*field) {
    if (field == &PhaseTimes::embed) return "embed";
    if (field == &PhaseTimes::attention) return "attention";
    if (field == &PhaseTimes::router) return "router";
    if (field == &PhaseTimes::fetch_wait) return "fetch_wait";
    if (field == &PhaseTimes::experts) return "expert_kernel";
    if (field == &PhaseTimes::mlp) return "mlp";
    if (field == &PhaseTimes::head) return "head";
    return "other";
  }

 private:
  PhaseTimes* p_;
  bool on_;
  std::chrono::steady_clock::time_point t_{};
};

}  // namespace waste
