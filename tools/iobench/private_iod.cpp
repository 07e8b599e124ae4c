#include "tools/iobench/private_iod.h"

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
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  require(pid_ >= 0, owner + ": fork: " + std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);  // own process group: a terminal's Ctrl-C goes to the owner only
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the owner died without stopping us (SIGKILL): stop too
    if (::getppid() != parent) ::_exit(1);  // it died before the line above took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGHUP, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    ::execvp(cargv[0], cargv.data());
    const char msg[] = "cannot run the waste-iod binary (set WASTE_IOD)\n";
    if (::write(2, msg, sizeof msg - 1) < 0) {}
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool exited = false;
    // Short waits so that an abort (a signal) is noticed within a fraction of a second.
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (wait_for_socket(socket_, pid_, std::min(0.2, std::max(0.0, left)), &exited)) return;
    if (exited) {
      pid_ = -1;  // reaped by wait_for_socket
      throw Error(owner + ": the private iod (" + bin + ") exited before answering on " + socket_ +
                  " (its reason is above)");
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

int PrivateIod::stop() { return terminate_child(pid_, kStopGraceSeconds); }

PrivateIod::~PrivateIod() { stop(); }

}  // namespace waste::iobench
