// A process-wide timeline of spans (attention, router, fetch, kernel per expert, reads in iod)
// written as Chrome trace JSON (loads in Perfetto and chrome://tracing). Times come from
// CLOCK_MONOTONIC, which every process on the machine shares, so the files of compute and iod
// line up; `waste timeline merge` joins them into one trace.
//
// Off by default and then costs one relaxed atomic load per call site. When on, events go
// into a buffer sized at start (no allocation while recording); events past its end are
// counted as dropped and the count is written into the file. Names and categories must be
// string literals (stored as pointers).
//
//   timeline::start("compute.json", "waste-compute");
//   { timeline::Span s("attention", "compute", layer); ... }
//   timeline::stop();  // writes the file
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace waste::timeline {

// Nanoseconds of CLOCK_MONOTONIC.
int64_t now_ns();

namespace detail {
extern std::atomic<bool> g_on;
}

inline bool enabled() { return detail::g_on.load(std::memory_order_relaxed); }

// Starts recording for this process into `path` (written by stop()). Throws Error when the
// file cannot be created (checked now, not at the end of a long run).
void start(const std::string& path, const std::string& process_name, size_t max_events = size_t(1) << 20);
// Writes the file and stops recording; returns the number of events written. No-op when off.
size_t stop();

// A finished span [begin_ns, end_ns); layer/expert < 0 are left out of the event's args.
void span(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, int layer = -1, int expert = -1);
// A point in time.
void instant(const char* name, const char* cat, int layer = -1, int expert = -1);

// Records [construction, destruction) as one span.
class Span {
 public:
  Span(const char* name, const char* cat, int layer = -1, int expert = -1)
      : name_(name), cat_(cat), layer_(layer), expert_(expert), begin_(enabled() ? now_ns() : 0) {}
  ~Span() {
    if (begin_ != 0 && enabled()) span(name_, cat_, begin_, now_ns(), layer_, expert_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int layer_, expert_;
  int64_t begin_;
};

// Joins Chrome trace files (each {"traceEvents": [...]}) into one at `out`; throws Error naming
// a file that is missing, too large (> max_bytes) or not a trace.
void merge(const std::string& out, const std::string* inputs, size_t count, uint64_t max_bytes = uint64_t(4) << 30);

}  // namespace waste::timeline
