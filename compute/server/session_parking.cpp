// EngineService's session states in memory (on the worker): at most options_.live_sessions of
// them, the figure the memory planner counts, however many sessions are open. A request whose
// session has no state in memory waits in `waiting_` until one is free; an idle session's state
// is parked in a session file (compute/model/session_file.h: the state itself, checked on the
// way back) in a private directory, and read back when its next request starts. So the memory
// a session costs while idle is its token ids, and an open session never loses its state.
#include "compute/server/engine_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "compute/model/session_file.h"
#include "compute/server/engine_service_state.h"
#include "shared/util/error.h"

namespace waste::server {

namespace {

constexpr const char* kParkPrefix = "waste-compute-parked-";  // + pid + "-XXXXXX"

// A compute killed without its clean-up (SIGKILL, the OOM killer) leaves its directory of
// parked states in `base`: those of this user whose process (the pid in the name) is gone are
// removed. A live pid, even reused by another program, keeps its directory.
void remove_orphaned_park_dirs(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (!d) return;
  const size_t prefix = std::strlen(kParkPrefix);
  std::vector<std::string> orphans;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix, kParkPrefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix, nullptr, 10);
    struct stat st {};
    const std::string path = base + "/" + name;
    if (pid <= 0 || ::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) orphans.push_back(path);
  }
  ::closedir(d);
  for (const std::string& path : orphans) {
    spdlog::info("compute: removing {} (parked states of a compute that is gone)", path);
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // never follows a symlink inside
  }
}

}  // namespace

// Runs every step (admit): a scan under the lock, nothing allocated.
size_t EngineService::live_states(const std::vector<std::shared_ptr<Job>>& jobs) const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (const auto& s : sessions_) n += s->model.has_value();
  // A running job's session makes its state in its first step; a closed one (no longer in
  // sessions_) holds its state until its job ends.
  for (const auto& j : jobs) n += j->s->closed || !j->s->model;
  return n;
}

bool EngineService::park_one_idle(const std::vector<std::shared_ptr<Job>>& jobs) {
  // Idle: no request of it running. One that waits may be parked: with every state held by
  // sessions whose requests wait behind the head of the queue, nothing else makes room.
  const auto running = [&](const SessionState* s) {
    return std::any_of(jobs.begin(), jobs.end(), [&](const auto& j) { return j->s.get() == s; });
  };
  std::shared_ptr<SessionState> oldest;  // held: a close on another thread cannot free it
  {
    std::lock_guard lk(mu_);
    for (const auto& s : sessions_)
      if (s->model && !running(s.get()) && (!oldest || s->last_used < oldest->last_used)) oldest = s;
  }
  if (!oldest) return false;
  park(*oldest);  // outside the lock: a write of the whole state
  return true;
}

void EngineService::enforce_live_limit(const std::vector<std::shared_ptr<Job>>& jobs) {
  try {
    while (live_states(jobs) > size_t(options_.live_sessions) && park_one_idle(jobs)) {
    }
  } catch (const std::exception& e) {
    // The state stays in memory (a failed park changes nothing): over the limit until the
    // next admission parks again, which then fails the request that needs the room.
    spdlog::warn("compute: could not park an idle session's state: {}", e.what());
  }
}

void EngineService::admit(std::vector<std::shared_ptr<Job>>& jobs) {
  std::erase_if(waiting_, [&](const std::shared_ptr<Job>& j) { return end_if_cancelled(*j); });
  while (!waiting_.empty()) {
    Job& j = *waiting_.front();
    const auto has_room = [&] { return j.s->model.has_value() || live_states(jobs) < size_t(options_.live_sessions); };
    bool room = has_room();
    if (!room) {
      try {
        // Idle states out, oldest first, until this session's fits (one, unless control or a
        // lower limit left more in memory).
        while (!room && park_one_idle(jobs)) room = has_room();
      } catch (const std::exception& e) {
        // No room can be made for it now: this request fails alone, its session untouched.
        finish(j, std::string("no session state could be freed for this request: ") + e.what(),
               ErrorKind::Unavailable, "compute");
        waiting_.pop_front();
        continue;
      }
    }
    if (!room) break;  // every state in memory belongs to a running request: wait for one to end
    j.s->last_used = ++use_clock_;
    jobs.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  const size_t live = live_states(jobs);
  std::lock_guard lk(mu_);
  live_ = uint32_t(live);
  running_ = int(jobs.size());
}

void EngineService::park(SessionState& s) {
  if (!park_dir_) {
    // /var/tmp without --park-dir or $TMPDIR: on disk where /tmp may be RAM.
    const std::string base = options_.park_dir.empty() ? temp_base("/var/tmp") : options_.park_dir;
    remove_orphaned_park_dirs(base);
    // 0700 and ours: nobody else can place or read a file in it. Removed with its files when
    // the service goes, whatever sessions were open or closing then.
    park_dir_.emplace(kParkPrefix + std::to_string(::getpid()), base, "a directory for parked session states (--park-dir)");
  }
  const std::string path = park_dir_->path() + "/session-" + std::to_string(s.id);
  write_session_file(path, engine_->model(), engine_->container().container_id(), *s.model, s.fed, s.unfed);
  // The file is on disk (fsynced): its pages need not stay in the page cache, which a memory
  // cgroup would charge to this instance.
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC); fd >= 0) {
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  s.model.reset();
  s.parked = path;
  std::lock_guard lk(mu_);
  ++parked_;
}

void EngineService::unpark(SessionState& s) {
  SessionFileContents f = read_session_file(s.parked, engine_->model(), engine_->container().container_id(), s.context);
  require(f.ids == s.fed && f.unfed == s.unfed,
          "the parked state of session " + std::to_string(s.id) + " (" + s.parked + ") holds other tokens than the session");
  s.model.emplace(std::move(f.state));
  s.drop_parked();
  std::lock_guard lk(mu_);
  ++unparked_;
}

}  // namespace waste::server
