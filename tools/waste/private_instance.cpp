#include "tools/waste/private_instance.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "shared/ipc/shm_segment.h"
#include "shared/util/error.h"
#include "shared/util/private_dir.h"
#include "tools/iobench/private_iod.h"

namespace waste::cli {

namespace fs = std::filesystem;

using iobench::become_owned_child;  // its own process group, stopped with its owner
using iobench::terminate_child;     // SIGTERM, SIGKILL after a grace period, reaped

std::string find_compute_binary() {
  if (const char* env = std::getenv("WASTE_COMPUTE"); env && *env) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p : {self.parent_path() / "waste-compute", self.parent_path() / ".." / "compute" / "server" / "waste-compute"})
      if (fs::exists(p, ec)) return p.lexically_normal().string();
  }
  return "waste-compute";  // from PATH
}

PrivateInstance::PrivateInstance(const PrivateInstanceOptions& o, const std::atomic<bool>* abort) {
  // stop() removes it, on the throw below too.
  run_dir_ = PrivateDir("waste-private").release();
  instance_id_ = ipc::instance_id_for(run_dir_);
  try {
    std::vector<std::string> iod = {iobench::find_iod_binary(), "--model", o.model, "--run-dir", run_dir_};
    if (!o.budget.empty()) iod.insert(iod.end(), {"--budget", o.budget});
    // iod's plan counts the session state at compute's context (one planner, the same inputs).
    if (o.context > 0) iod.insert(iod.end(), {"--ctx", std::to_string(o.context)});
    iod_ = spawn("iod", iod);
    await("iod", iod_, run_dir_ + "/iod.sock", o, abort);
    std::vector<std::string> comp = {find_compute_binary(), "--model", o.model, "--run-dir", run_dir_,
                                     "--iod", run_dir_ + "/iod.sock"};
    if (o.context > 0) comp.insert(comp.end(), {"--ctx", std::to_string(o.context)});
    compute_ = spawn("compute", comp);
    await("compute", compute_, run_dir_ + "/compute.sock", o, abort);
  } catch (...) {
    stop();
    throw;
  }
}

PrivateInstance::~PrivateInstance() { stop(); }

pid_t PrivateInstance::spawn(const std::string& name, const std::vector<std::string>& argv) {
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls (the front end may have threads).
  const std::string log = run_dir_ + "/" + name + ".log";
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  require(pid >= 0, "cannot start " + argv[0] + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    // If the front end dies without stopping us (SIGKILL), we stop too; iod then removes its
    // segment.
    become_owned_child(parent);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) ::dup2(out, 1), ::dup2(out, 2);
    ::execvp(cargv[0], cargv.data());
    const char msg[] = "cannot execute the binary (set WASTE_IOD / WASTE_COMPUTE)\n";
    if (::write(2, msg, sizeof msg - 1) < 0) {}
    ::_exit(127);
  }
  return pid;
}

void PrivateInstance::await(const std::string& name, pid_t& pid, const std::string& socket,
                            const PrivateInstanceOptions& o, const std::atomic<bool>* abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  for (;;) {
    bool exited = false;
    // Short waits so that a signal (abort) is noticed within a fraction of a second.
    if (iobench::wait_for_socket(socket, pid, 0.2, &exited)) return;
    if (exited) {
      pid = -1;  // reaped by wait_for_socket
      throw Error("the private " + name + " (" + o.model + ") exited before answering:\n" + log_tail(name));
    }
    if (abort && abort->load()) throw Error("interrupted while starting the private " + name);
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error("the private " + name + " did not answer on " + socket + " within " + std::to_string(int(o.timeout_s)) +
                  " s:\n" + log_tail(name));
  }
}

std::string PrivateInstance::log_tail(const std::string& name) const {
  std::ifstream f(run_dir_ + "/" + name + ".log");
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) {
    lines.push_back(std::move(l));
    if (lines.size() > 20) lines.erase(lines.begin());  // the last 20 lines
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out.empty() ? "  (" + name + ".log is empty)\n" : out;
}

void PrivateInstance::stop() {
  // compute first (it holds iod's segment mapped), then iod. 20 s each before SIGKILL, as the
  // supervisor does.
  terminate_child(compute_, 20);
  terminate_child(iod_, 20);
  if (run_dir_.empty()) return;
  // A cleanly stopped iod has removed its segment; one that was killed has not.
  ipc::remove_instance_segments(instance_id_);
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  run_dir_.clear();
}

}  // namespace waste::cli
