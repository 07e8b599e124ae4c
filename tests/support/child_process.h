// Processes a test starts or stops, owned so that every exit path of the test (a failed REQUIRE
// throws) cleans up after them: no child left running, no zombie left unreaped, no process left
// stopped. OwnedPid: a fork()ed child, killed and reaped on destruction. ChildProcess: a program
// the test talks to while it runs (stdin a pipe the test writes to, stdout and stderr read
// apart, bounded waits for what the test expects in them). ScopedStop: SIGSTOP for a scope.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace waste::test {

// A child this process fork()ed. The destructor kills (SIGKILL) and reaps it unless it was
// reaped already; only pids > 0 are ever signalled (in the fork's child the value is 0, and
// kill(0) would signal the whole process group).
class OwnedPid {
 public:
  explicit OwnedPid(pid_t pid = -1) : pid_(pid) {}
  ~OwnedPid() { kill_and_reap(); }
  OwnedPid(const OwnedPid&) = delete;
  OwnedPid& operator=(const OwnedPid&) = delete;
  OwnedPid(OwnedPid&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  OwnedPid& operator=(OwnedPid&& o) noexcept {
    if (this != &o) kill_and_reap(), pid_ = std::exchange(o.pid_, -1);
    return *this;
  }

  pid_t get() const { return pid_; }
  // SIGKILL and wait for it: the end of a child that would otherwise run on.
  void kill_and_reap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Waits for a child that ends by itself; true when waitpid returned it (*status: its raw
  // wait status). false: no such child (or waitpid failed); it is then not waited for again.
  bool reap(int* status) {
    if (pid_ <= 0) return false;
    const bool ok = ::waitpid(pid_, status, 0) == pid_;
    pid_ = -1;
    return ok;
  }
  // Non-blocking reap: true once the child has ended and was reaped (*status as above).
  bool try_reap(int* status) {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }

 private:
  pid_t pid_;
};

// SIGSTOP for a scope, SIGCONT on every exit path: a failed check never leaves a process stopped
// (and whatever later waits for it, e.g. a SIGTERM at the end of the test, never waits forever).
class ScopedStop {
 public:
  explicit ScopedStop(pid_t pid) : pid_(pid), stopped_(pid > 0 && ::kill(pid, SIGSTOP) == 0) {}
  ~ScopedStop() { resume(); }
  ScopedStop(const ScopedStop&) = delete;
  ScopedStop& operator=(const ScopedStop&) = delete;

  bool stopped() const { return stopped_; }
  // SIGCONT now; true when it was delivered (false also when it was resumed already).
  bool resume() {
    if (!stopped_) return false;
    stopped_ = false;
    return ::kill(pid_, SIGCONT) == 0;
  }

 private:
  pid_t pid_;
  bool stopped_;
};

class ChildProcess {
 public:
  // argv[0] is looked up in PATH; env: variables set (or, with an empty value, unset) for it;
  // cwd: its working directory (empty: this one).
  explicit ChildProcess(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& env = {}, const std::string& cwd = "") {
    ::signal(SIGPIPE, SIG_IGN);  // a write to a child that has exited fails instead of killing the test
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return;
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      for (const auto& [k, v] : env) v.empty() ? ::unsetenv(k.c_str()) : ::setenv(k.c_str(), v.c_str(), 1);
      ::execvp(cargv[0], cargv.data());
      ::_exit(127);
    }
    ::close(in[0]), ::close(out[1]), ::close(err[1]);
    in_ = in[1], out_ = out[0], err_ = err[0];
    if (pid < 0) close_all();
    else child_ = OwnedPid(pid);
  }
  ~ChildProcess() {
    child_.kill_and_reap();  // before the pipes close: it never sees them close while it runs
    close_all();
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return child_.get() > 0; }
  pid_t pid() const { return child_.get(); }
  const std::string& out() const { return out_text_; }
  const std::string& err() const { return err_text_; }

  bool write(const std::string& s) {
    if (in_ < 0) return false;
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::write(in_, s.data() + done, s.size() - done);
      if (n <= 0) return false;
      done += size_t(n);
    }
    return true;
  }
  void close_stdin() {
    if (in_ >= 0) ::close(in_), in_ = -1;
  }
  void signal(int sig) {
    if (child_.get() > 0) ::kill(child_.get(), sig);
  }

  // Reads the child's output until done() holds (true) or timeout_s passes / the output ends (false).
  bool wait_for(const std::function<bool()>& done, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!done()) {
      // Rounded up: a wait of under a millisecond still polls (and reads) for one.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(int(left.count()))) return done();
    }
    return true;
  }
  // Reads to the end of its output, then reaps it: the exit status, 128 + signal when a signal
  // ended it, -2 when it did not end within timeout_s (it is killed then).
  int wait_exit(double timeout_s) {
    wait_for([] { return false; }, timeout_s);
    if (child_.get() <= 0) return status_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(1.0);
    int st = 0;
    bool reaped;
    // The pipes closed; the exit itself follows at once (bounded poll for the zombie).
    while (!(reaped = child_.try_reap(&st)) && std::chrono::steady_clock::now() < deadline) ::usleep(1000);
    if (!reaped) {
      child_.kill_and_reap();
      return status_ = -2;
    }
    return status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

 private:
  // One poll round; false when both outputs have ended or the wait timed out.
  bool read_some(int timeout_ms) {
    if (out_ < 0 && err_ < 0) return false;
    pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    const int r = ::poll(p, 2, timeout_ms);
    if (r <= 0) return r < 0 && errno == EINTR;
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      char buf[4096];
      const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      int& fd = i == 0 ? out_ : err_;
      if (n > 0) (i == 0 ? out_text_ : err_text_).append(buf, size_t(n));
      else if (n == 0 || errno != EINTR) ::close(fd), fd = -1;
    }
    return true;
  }
  void close_all() {
    for (int* fd : {&in_, &out_, &err_})
      if (*fd >= 0) ::close(*fd), *fd = -1;
  }

  OwnedPid child_;
  int in_ = -1, out_ = -1, err_ = -1;
  int status_ = -1;
  std::string out_text_, err_text_;
};

}  // namespace waste::test
