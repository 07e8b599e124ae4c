#include "tools/iobench/private_iod.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "shared/util/error.h"

namespace waste::iobench {

std::string find_iod_binary() {
  if (const char* env = std::getenv("WASTE_IOD"); env && *env) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto p : {self.parent_path() / "waste-iod", self.parent_path() / ".." / "iod" / "waste-iod"})
      if (std::filesystem::exists(p, ec)) return p.lexically_normal().string();
  }
  return "waste-iod";  // from PATH
}

bool wait_for_socket(const std::string& path, pid_t pid, double timeout_s, bool* exited) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pid > 0) {
      int st;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        if (exited) *exited = true;
        return false;
      }
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling interval, bounded by the deadline
  }
  return false;
}

int terminate_child(pid_t& pid, double grace_s) {
  if (pid <= 0) return -1;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child's exit, bounded by the deadline
  }
  pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

PrivateIod::PrivateIod(const std::vector<std::string>& args, const std::string& run_dir, double timeout_s,
                       const std::atomic<bool>* abort, const std::string& owner) {
  const std::string bin = find_iod_binary();
  std::vector<std::string> argv = {bin};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--run-dir");
  argv.push_back(run_dir);
  socket_ = run_dir + "/iod.sock";
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls (the owner may have threads).
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int out[2];
  require(::pipe2(out, O_CLOEXEC) == 0, owner + ": pipe: " + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    const int err = errno;
    ::close(out[0]), ::close(out[1]);
    throw Error(owner + ": fork: " + std::strerror(err));
  }
  if (pid_ == 0) {
    ::dup2(out[1], 1);  // dup2 clears O_CLOEXEC on the copies
    ::dup2(out[1], 2);
    become_owned_child(parent);
    ::execvp(cargv[0], cargv.data());
    const char msg[] = "cannot run the waste-iod binary (set WASTE_IOD)\n";
    if (::write(2, msg, sizeof msg - 1) < 0) {}
    ::_exit(127);
  }
  ::close(out[1]);
  // Ends at the daemon's exit (the pipe's last writer gone); joined by stop().
  relay_ = std::thread([this, fd = out[0]] { relay_output(fd); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool exited = false;
    // Short waits so that an abort (a signal) is noticed within a fraction of a second.
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (wait_for_socket(socket_, pid_, std::min(0.2, std::max(0.0, left)), &exited)) return;
    if (exited) {
      pid_ = -1;  // reaped by wait_for_socket
      stop();     // joins the relay: all of its output is in
      throw Error(owner + ": the private iod (" + bin + ") exited before answering: " + last_error_line());
    }
    if (abort && abort->load()) {
      stop();
      throw Error(owner + ": interrupted while starting the private iod");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      stop();
      throw Error(owner + ": the private iod (" + bin + ") did not answer on " + socket_ + " within " +
                  std::to_string(int(timeout_s)) + " s");
    }
  }
}

void become_owned_child(pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(1);  // the owner died before the line above took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
}

int PrivateIod::stop() {
  const int status = terminate_child(pid_, kStopGraceSeconds);
  if (relay_.joinable()) relay_.join();
  return status;
}

void PrivateIod::relay_output(int fd) {
  // A closed stderr (`waste bench 2>&1 | head`) must make write() fail with EPIPE here, not kill
  // the process with SIGPIPE before it has stopped its iod: SIGPIPE is directed at the writing
  // thread, so blocking it in this thread alone is enough.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(2, buf + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // stderr is gone: the tail is still kept
      done += w;
    }
    std::lock_guard<std::mutex> lock(tail_mutex_);
    tail_.append(buf, size_t(n));
    if (tail_.size() > 16384) tail_.erase(0, tail_.size() - 8192);  // the last lines are what matter
  }
  ::close(fd);
}

std::string PrivateIod::last_error_line() {
  std::lock_guard<std::mutex> lock(tail_mutex_);
  std::string last, last_error;
  size_t at = 0;
  while (at < tail_.size()) {
    size_t end = tail_.find('\n', at);
    if (end == std::string::npos) end = tail_.size();
    std::string line = tail_.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    // "[12:00:00.000] [error] reason": the reason alone.
    if (const size_t e = line.find("[error] "); e != std::string::npos) last_error = line.substr(e + 8);
    last = line;
  }
  if (!last_error.empty()) return last_error;
  return last.empty() ? "it printed nothing" : last;
}

PrivateIod::~PrivateIod() { stop(); }

}  // namespace waste::iobench
