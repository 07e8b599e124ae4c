// A real WASTE instance for integration tests: a synthetic tiny Kimi-Linear container and the
// supervisor (tools/waste-supervise) running waste-iod + waste-compute (+ waste-serve) in a
// temporary run directory, stopped with `down` at the end. Binaries come from the environment
// (tests/integration/meson.build sets WASTE_BIN, WASTE_IOD, WASTE_COMPUTE, WASTE_SERVE,
// WASTE_SUPERVISE, WASTE_HELLO).
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/process.h"
#include "tests/teardown.h"

namespace waste::test {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// A TCP port nothing listens on right now (bound to 0, read, closed).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// host:port on loopback with a port nothing listens on right now (for `up --http`).
inline std::string free_loopback_address() { return "127.0.0.1:" + std::to_string(free_port()); }

class Instance {
 public:
  // extra: more arguments for `up` (e.g. "--http 127.0.0.1:PORT --ctx 256").
  // preset: the `waste synth` preset of the model (tiny-k3 for K3's chat format).
  // before_up: runs on the synthesised model before `up` (e.g. damages a record); "" to go on,
  // else why the instance is not started.
  explicit Instance(const std::string& extra = "", const std::string& budget = "512M",
                    const std::string& preset = "tiny-kimi-linear",
                    const std::function<std::string(const std::string& model)>& before_up = {}) {
    model_ = dir_ / "tiny.waste";
    run_ = dir_ / "run";
    auto s = run_command(waste_bin() + " synth --preset " + preset + " --out " + model_ + " --no-progress");
    synth_output_ = s.output;
    synth_ok_ = s.status == 0;
    if (synth_ok_ && before_up) {
      const std::string why = before_up(model_);
      synth_output_ += why;
      synth_ok_ = why.empty();
    }
    if (!synth_ok_) return;
    auto u = run_command(supervise() + " up " + model_ + " --run-dir " + run_ + " --budget " + budget + " " + extra);
    up_output_ = u.output;
    up_ok_ = u.status == 0;
    // Registered whatever `up` said: a failed up may still have left a supervisor running. The
    // temporary directory (model, run directory, logs) goes with it: ~TempDir does not run either.
    teardown_ = register_teardown([down = supervise() + " down --run-dir " + run_, dir = dir_.path()] {
      run_command(down);
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    });
  }
  ~Instance() {
    if (teardown_) unregister_teardown(teardown_);
    stop();
  }
  // `down` now (what the destructor does; then again is nothing).
  void stop() {
    if (up_ok_) run_command(supervise() + " down --run-dir " + run_);
    up_ok_ = false;
  }
  static std::string supervise() { return "python3 " + env_or("WASTE_SUPERVISE", "tools/waste-supervise"); }

  bool ok() const { return synth_ok_ && up_ok_; }
  std::string why() const { return synth_output_ + up_output_ + log("iod") + log("compute") + log("serve") + log("supervise"); }
  const std::string& run_dir() const { return run_; }
  const std::string& up_output() const { return up_output_; }  // what `up` printed
  const std::string& model() const { return model_; }
  std::string log(const std::string& name) const {
    std::ifstream f(run_ + "/" + name + ".log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // The pid of a child ("iod", "compute", "serve") from the supervisor's state file.
  int pid_of(const std::string& name) const {
    std::ifstream f(run_ + "/supervise.json");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded()) return -1;
    for (const auto& c : j["children"])
      if (c["name"] == name && c["pid"].is_number_integer()) return c["pid"].get<int>();
    return -1;
  }

 private:
  TempDir dir_;
  std::string model_, run_;
  std::string synth_output_, up_output_;
  bool synth_ok_ = false, up_ok_ = false;
  uint64_t teardown_ = 0;  // register_teardown: `down` if the test binary is interrupted
};

}  // namespace waste::test
