// EngineService's session states in memory (on the worker): at most options_.live_sessions of
// them, the figure the memory planner counts, however many sessions are open. A request whose
// session has no state in memory waits in `waiting_` until one is free; an idle session's state
// is parked in a session file (compute/model/session_file.h: the state itself, checked on the
// way back) in a private directory, and read back when its next request starts. So the memory
// a session costs while idle is its token ids, and an open session never loses its state.
#include "compute/server/engine_service.h"

#include <fcntl.h>
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
    std::string templ = base + "/waste-compute-parked-XXXXXX";
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
  if (::rmdir(park_dir_.c_str()) != 0)
    spdlog::warn("compute: could not remove {}: {}", park_dir_, std::strerror(errno));
  park_dir_.clear();
}

}  // namespace waste::server
