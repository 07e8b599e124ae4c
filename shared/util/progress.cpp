#include "shared/util/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "shared/util/error.h"

namespace waste {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string format_seconds(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

uint64_t parse_size(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    throw Error(what + ": '" + text + "' is not a size (examples: 4096, 900M, 12G)");
  }
  std::string suffix = text.substr(used);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && suffix[1] == 'i') suffix.pop_back();
  double mul = 1;
  if (suffix.empty()) mul = 1;
  else if (suffix == "K" || suffix == "k") mul = 1024.0;
  else if (suffix == "M" || suffix == "m") mul = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") mul = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t") mul = 1024.0 * 1024 * 1024 * 1024;
  else throw Error(what + ": unknown size unit in '" + text + "' (use K, M, G or T)");
  require(v >= 0 && v * mul < 1.8e19, what + ": '" + text + "' is out of range");
  return uint64_t(v * mul);
}

Progress::Progress(std::string label, uint64_t total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::add(uint64_t n) {
  done_ += n;
  draw(false);
}

void Progress::set(uint64_t done) {
  done_ = done;
  draw(false);
}

void Progress::finish() {
  if (!finished_) draw(true);
  finished_ = true;
}

void Progress::draw(bool final) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (!final && since < (tty_ ? 0.2 : 5.0)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  uint64_t done = done_.load();
  double frac = total_ ? double(done) / double(total_) : 1.0;
  double rate = elapsed > 0 ? double(done) / elapsed : 0;
  double eta = rate > 0 ? double(total_ - std::min(done, total_)) / rate : NAN;
  const int width = 28;
  int filled = int(std::min(1.0, frac) * width);
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  std::string amount = unit_ == "B" ? format_bytes(double(done)) + " / " + format_bytes(double(total_))
                                    : std::to_string(done) + " / " + std::to_string(total_) + " " + unit_;
  std::string speed = unit_ == "B" ? format_bytes(rate) + "/s" : std::to_string(int64_t(rate)) + " " + unit_ + "/s";
  std::fprintf(stderr, "%s%s [%s] %5.1f%% %s  %s  %s %s%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(), frac * 100,
               amount.c_str(), speed.c_str(), final ? "in" : "ETA",
               format_seconds(final ? elapsed : eta).c_str(), (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace waste
