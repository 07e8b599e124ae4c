#include "tools/iobench/private_iod.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

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

PrivateIod::PrivateIod(const std::vector<std::string>& args, const std::string& run_dir, double timeout_s) {
  std::string bin = find_iod_binary();
  std::vector<std::string> argv = {bin};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--run-dir");
  argv.push_back(run_dir);
  socket_ = run_dir + "/iod.sock";
  pid_ = ::fork();
  require(pid_ >= 0, std::string("iobench: fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "iobench: cannot run %s: %s (set WASTE_IOD)\n", bin.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  bool exited = false;
  if (!wait_for_socket(socket_, pid_, timeout_s, &exited)) {
    if (exited) pid_ = -1;
    stop();
    throw Error("iobench: the private iod (" + bin + ") did not come up on " + socket_);
  }
}

int PrivateIod::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

PrivateIod::~PrivateIod() { stop(); }

}  // namespace waste::iobench
