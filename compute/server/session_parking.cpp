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

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "compute/model/session_file.h"
#include "compute/server/engine_service_state.h"
#include "shared/util/error.h"

namespace waste::server {

namespace {

constexpr const char* kParkPrefix = "waste-compute-parked-";

// Removes every entry of directory `dir` (our own: files we wrote, no subdirectories), then
// the directory. Through the directory's fd, so a name swapped underneath changes nothing.
void remove_private_dir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  if (DIR* d = ::fdopendir(dfd)) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ::unlinkat(dfd, e->d_name, 0);
    ::closedir(d);  // closes dfd
  } else {
    ::close(dfd);
  }
  if (::rmdir(dir.c_str()) != 0) spdlog::warn("compute: could not remove {}: {}", dir, std::strerror(errno));
}

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
    remove_private_dir(path);
  }
}

}  // namespace

size_t EngineService::live_states(const std::vector<std::shared_ptr<Job>>& jobs) const {
  std::vector<std::shared_ptr<SessionState>> open;
  {
    std::lock_guard lk(mu_);
    open = sessions_;
  }
  std::unordered_set<const SessionState*> live;
  for (const auto& s : open)
    if (s->model) live.insert(s.get());
  for (const auto& j : jobs) live.insert(j->s.get());  // has a state, or makes one in its first step
  return live.size();
}

bool EngineService::park_one_idle(const std::vector<std::shared_ptr<Job>>& jobs) {
  std::vector<std::shared_ptr<SessionState>> open;
  {
    std::lock_guard lk(mu_);
    open = sessions_;
  }
  std::unordered_set<const SessionState*> running;
  for (const auto& j : jobs) running.insert(j->s.get());
  SessionState* oldest = nullptr;
  for (const auto& s : open)
    if (s->model && !running.count(s.get()) && (!oldest || s->last_used < oldest->last_used)) oldest = s.get();
  if (!oldest) return false;
  park(*oldest);
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
  if (park_dir_.empty()) {
    std::string base = options_.park_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/var/tmp";  // /var/tmp: on disk where /tmp may be RAM
    }
    remove_orphaned_park_dirs(base);
    std::string templ = base + "/" + kParkPrefix + std::to_string(::getpid()) + "-XXXXXX";
    if (!::mkdtemp(templ.data())) {  // 0700, ours: nobody else can place or read a file in it
      const int e = errno;
      throw Error("cannot make a directory for parked session states in " + base + " (--park-dir): " +
                  std::strerror(e));
    }
    park_dir_ = templ;
  }
  const std::string path = park_dir_ + "/session-" + std::to_string(s.id);
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
  ::unlink(s.parked.c_str());
  s.parked.clear();
  std::lock_guard lk(mu_);
  ++unparked_;
}

void EngineService::remove_park_dir() {
  if (park_dir_.empty()) return;
  std::vector<std::shared_ptr<SessionState>> open;
  {
    std::lock_guard lk(mu_);
    open = sessions_;
  }
  for (const auto& s : open) s->forget();  // unlinks its parked file
  // ... and any file of a session closed while the worker stopped (its forget never ran).
  remove_private_dir(park_dir_);
  park_dir_.clear();
}

}  // namespace waste::server
