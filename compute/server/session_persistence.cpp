// EngineService's session files: a session's state saved and loaded (on the worker).
#include "compute/server/engine_service.h"

#include <filesystem>

#include "compute/model/session_file.h"
#include "compute/server/engine_service_state.h"
#include "shared/util/error.h"

namespace waste::server {

void EngineService::save(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require_request(!s->busy, "save: session " + std::to_string(session) + " is generating");
    control_.push_back([this, s, path, done] {
      try {
        const Clock::time_point t0 = Clock::now();
        ensure_model_session(*s);
        FileResult r;
        r.bytes = write_session_file(path, engine_->model(), engine_->container().container_id(), *s->model, s->fed, s->unfed);
        r.tokens = s->fed.size() + (s->unfed ? 1 : 0);
        r.seconds = seconds_between(t0, Clock::now());
        done(nullptr, r);
      } catch (...) {
        done(std::current_exception(), {});
      }
    });
  }
  wake_.notify_all();
}

void EngineService::load(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require_request(!s->busy, "load: session " + std::to_string(session) + " is generating");
    control_.push_back([this, s, path, done] {
      try {
        const Clock::time_point t0 = Clock::now();
        // Read whole before anything changes: a refused file leaves the session as it was.
        SessionFileContents f = read_session_file(path, engine_->model(), engine_->container().container_id(), s->context);
        FileResult r;
        r.bytes = std::filesystem::file_size(path);
        s->drop_parked();  // replaced by the file's state
        s->model.emplace(std::move(f.state));
        s->last_used = ++use_clock_;  // the newest state: if one must be parked, not this one
        s->fed = std::move(f.ids);
        s->unfed = f.unfed;
        r.tokens = s->fed.size() + (s->unfed ? 1 : 0);
        {
          std::lock_guard lk2(mu_);
          s->position = int64_t(r.tokens);
        }
        r.seconds = seconds_between(t0, Clock::now());
        done(nullptr, r);
      } catch (...) {
        done(std::current_exception(), {});
      }
    });
  }
  wake_.notify_all();
}

}  // namespace waste::server
