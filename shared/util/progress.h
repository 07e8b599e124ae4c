// A progress line on stderr for long work (convert, synth, trunk load): done/total, rate and
// ETA. Redraws in place on a terminal; elsewhere (logs, CI) prints at most one line every few
// seconds. Thread-safe: workers may call add() concurrently.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace waste {

class Progress {
 public:
  // unit: "B" formats as bytes (KiB, MiB, ...); anything else is a plain count.
  Progress(std::string label, uint64_t total, std::string unit, bool enabled = true);
  ~Progress();
  void add(uint64_t n);
  void set(uint64_t done);
  void finish();  // prints the final line once

 private:
  void draw(bool final);
  std::string label_, unit_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mutex_;
};

std::string format_bytes(double bytes);     // "1.50 GiB"
std::string format_seconds(double seconds);  // "1m05s"
// Parses sizes like 4096, 900M, 12G, 1.5GiB, 2T (binary units). Throws Error naming `what`.
uint64_t parse_size(const std::string& text, const std::string& what);

}  // namespace waste
