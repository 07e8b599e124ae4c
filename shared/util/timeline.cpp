#include "shared/util/timeline.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "shared/util/error.h"

namespace waste::timeline {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

struct Event {
  const char* name;
  const char* cat;
  int64_t ts_ns, dur_ns;  // dur_ns < 0: an instant
  int32_t tid, layer, expert;
};

// The recording of this process. `claimed` hands out buffer indices; `written` counts events
// whose fields are complete, so stop() knows when the last writer has finished.
struct Recorder {
  std::mutex mu;  // start/stop only
  std::string path, process_name;
  std::unique_ptr<Event[]> events;
  size_t capacity = 0;
  std::atomic<size_t> claimed{0}, written{0};
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

int32_t this_tid() {
  thread_local const int32_t tid = int32_t(::syscall(SYS_gettid));
  return tid;
}

void record(const char* name, const char* cat, int64_t ts, int64_t dur, int layer, int expert) {
  Recorder& r = recorder();
  const size_t i = r.claimed.fetch_add(1, std::memory_order_relaxed);
  if (i < r.capacity) r.events[i] = Event{name, cat, ts, dur, this_tid(), layer, expert};
  r.written.fetch_add(1, std::memory_order_release);
}

// JSON string body of a literal name: they are ours, but escape quotes and backslashes anyway.
void put_string(std::FILE* f, const char* s) {
  std::fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') std::fputc('\\', f);
    std::fputc(*s, f);
  }
  std::fputc('"', f);
}

}  // namespace

int64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void start(const std::string& path, const std::string& process_name, size_t max_events) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mu);
  require(!detail::g_on.load(), "timeline: already recording to " + r.path);
  require(max_events > 0 && max_events <= (size_t(1) << 26), "timeline: max_events out of range");
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error("timeline: cannot create " + path + ": " + std::strerror(errno));
  std::fclose(f);
  r.path = path;
  r.process_name = process_name;
  r.events = std::make_unique<Event[]>(max_events);
  r.capacity = max_events;
  r.claimed.store(0);
  r.written.store(0);
  detail::g_on.store(true, std::memory_order_release);
}

size_t stop() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mu);
  if (!detail::g_on.exchange(false)) return 0;
  // Writers that saw `on` before the exchange may still be filling their event: wait for them
  // (each takes nanoseconds; the bound only guards against a thread descheduled mid-write).
  for (int spins = 0; r.written.load(std::memory_order_acquire) < r.claimed.load() && spins < 100000; ++spins)
    std::this_thread::yield();
  const size_t claimed = r.claimed.load();
  const size_t n = std::min(claimed, r.capacity);
  std::FILE* f = std::fopen(r.path.c_str(), "w");
  if (!f) throw Error("timeline: cannot write " + r.path + ": " + std::strerror(errno));
  const int pid = int(::getpid());
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"CLOCK_MONOTONIC\",\"dropped_events\":%zu},\n",
               claimed - n);
  std::fprintf(f, "\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
  put_string(f, r.process_name.c_str());
  std::fputs("}}", f);
  for (size_t i = 0; i < n; ++i) {
    const Event& e = r.events[i];
    std::fputs(",\n{\"name\":", f);
    put_string(f, e.name);
    std::fputs(",\"cat\":", f);
    put_string(f, e.cat);
    // Chrome traces count microseconds; keep the nanoseconds as fractions.
    if (e.dur_ns >= 0)
      std::fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f", double(e.ts_ns) / 1e3, double(e.dur_ns) / 1e3);
    else
      std::fprintf(f, ",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f", double(e.ts_ns) / 1e3);
    std::fprintf(f, ",\"pid\":%d,\"tid\":%d", pid, e.tid);
    if (e.layer >= 0 || e.expert >= 0) {
      std::fputs(",\"args\":{", f);
      if (e.layer >= 0) std::fprintf(f, "\"layer\":%d", e.layer);
      if (e.expert >= 0) std::fprintf(f, "%s\"expert\":%d", e.layer >= 0 ? "," : "", e.expert);
      std::fputc('}', f);
    }
    std::fputc('}', f);
  }
  std::fputs("\n]}\n", f);
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  if (!ok) throw Error("timeline: writing " + r.path + " failed: " + std::strerror(errno));
  r.events.reset();
  r.capacity = 0;
  return n;
}

void span(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, int layer, int expert) {
  if (!enabled()) return;
  record(name, cat, begin_ns, end_ns > begin_ns ? end_ns - begin_ns : 0, layer, expert);
}

void instant(const char* name, const char* cat, int layer, int expert) {
  if (!enabled()) return;
  record(name, cat, now_ns(), -1, layer, expert);
}

void merge(const std::string& out, const std::string* inputs, size_t count, uint64_t max_bytes) {
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < count; ++i) {
    const std::string& in = inputs[i];
    std::error_code ec;
    const auto size = std::filesystem::file_size(in, ec);
    if (ec) throw Error("timeline merge: " + in + ": " + ec.message());
    require(size <= max_bytes, "timeline merge: " + in + " is larger than the limit");
    std::ifstream f(in);
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
      throw Error("timeline merge: " + in + " is not a Chrome trace (no traceEvents array)");
    for (auto& e : j["traceEvents"]) all.push_back(std::move(e));
  }
  std::ofstream o(out);
  if (!o) throw Error("timeline merge: cannot create " + out);
  o << nlohmann::json{{"displayTimeUnit", "ms"}, {"traceEvents", std::move(all)}}.dump() << '\n';
  if (!o) throw Error("timeline merge: writing " + out + " failed");
}

}  // namespace waste::timeline
