// `waste up MODEL` / `waste down` / `waste status`: thin wrappers over the supervisor script
// (tools/waste-supervise), which runs iod, compute and the HTTP front end of one instance.
// `status` adds what only compute knows (sessions, tok/s, hit rate) through Engine RPC.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/image/image_budget.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/ipc/rpc_call.h"
#include "shared/ipc/shm_segment.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "shared/util/progress.h"
#include "tools/libwaste/engine_client.h"
#include "tools/waste/commands.h"

extern char** environ;

namespace waste::cli {

namespace {

// WASTE_SUPERVISE, else waste-supervise next to this executable (installed, or copied into the
// build tree), else the source tree's copy.
std::string supervisor_path() {
  if (const char* p = ::getenv("WASTE_SUPERVISE"); p && *p) return p;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "waste-supervise";
    if (std::filesystem::exists(beside)) return beside.string();
  }
  return "waste-supervise";
}

// Starts the supervisor with `args` as its argv (no shell: a run directory may hold any
// character). With `actions`, its file descriptors are arranged so first.
pid_t spawn_supervisor(const std::vector<std::string>& args, const posix_spawn_file_actions_t* actions) {
  std::vector<std::string> argv = {"python3", supervisor_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, "python3", actions, nullptr, cargv.data(), environ);
  require(err == 0, "cannot start python3 " + supervisor_path() + ": " + std::strerror(err));
  return pid;
}

int exit_status_of(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// Runs the supervisor with `args`, output passed through; returns its exit status.
int run_supervisor(const std::vector<std::string>& args) { return exit_status_of(spawn_supervisor(args, nullptr)); }

// Runs the supervisor with `args` and returns its standard output (its stderr passes through).
std::string capture_supervisor(const std::vector<std::string>& args, int* status) {
  int out_pipe[2];
  require(::pipe2(out_pipe, O_CLOEXEC) == 0, std::string("status: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC
  pid_t pid = -1;
  try {
    pid = spawn_supervisor(args, &actions);
  } catch (...) {
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw;
  }
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  std::string out;
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = ::read(out_pipe[0], buf.data(), buf.size());
    if (n > 0) {
      out.append(buf.data(), size_t(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out_pipe[0]);
  *status = exit_status_of(pid);
  return out;
}

// The health of an instance, each process asked with a deadline: compute through Engine.health
// (which also says what compute knows of its iod), iod directly on its socket. "ok" in every
// part that exists is healthy. What `waste health` prints and the supervisor's probe reads.
nlohmann::json instance_health(const std::string& dir, int64_t timeout_ms) {
  nlohmann::json compute, iod;
  try {
    client::Client cl(dir, timeout_ms);
    const client::Health h = cl.health(uint32_t(std::min<int64_t>(timeout_ms, 1'000'000)));
    compute = {{"state", "ok"}, {"busy_seconds", h.busy_seconds}, {"iod_seen", h.iod}, {"reattaches", h.reattaches}};
    if (!h.iod_detail.empty()) compute["iod_detail"] = h.iod_detail;
  } catch (const std::exception& e) {
    compute = {{"state", unanswered(e) ? "not_answering" : "unreachable"}, {"detail", e.what()}};
  }
  const std::string iod_sock = dir + "/iod.sock";
  std::error_code ec;
  if (!std::filesystem::exists(iod_sock, ec)) {
    iod = {{"state", compute.value("iod_seen", "") == "none" ? "none" : "unreachable"}};
  } else if (const std::optional<Error> why = ipc::probe_iod(iod_sock, timeout_ms); !why) {
    iod = {{"state", "ok"}};
  } else {
    iod = {{"state", why->unanswered() ? "not_answering" : "unreachable"}, {"detail", why->what()}};
  }
  const auto fine = [](const nlohmann::json& p) { return p["state"] == "ok" || p["state"] == "none"; };
  return {{"ok", fine(compute) && fine(iod)}, {"run_dir", dir}, {"compute", compute}, {"iod", iod}};
}

}  // namespace

void register_up_commands(CLI::App& app) {
  struct UpOptions {
    std::string model, budget, http, run_dir, prompt_cache, image_dir, api_key_file, park_dir, shm;
    bool foreground = false;
    int ctx = 0, threads = 0, max_sessions = 0, sessions = 0, max_batch = -1, image_patches = 0;
    double wedge_timeout = -1;  // < 0: the supervisor's default
    int64_t iod_timeout_ms = 0, compute_timeout_ms = 0;  // 0: the processes' defaults
  };
  auto o = std::make_shared<UpOptions>();
  CLI::App* up = app.add_subcommand("up", "Start an instance (iod, compute, optionally HTTP) under the supervisor");
  up->add_option("model", o->model, "Container directory (.waste)")->required();
  up->add_option("--budget", o->budget, "Expert cache budget (48G, ...; default: the memory planner's)");
  up->add_option("--http", o->http, "Also serve the OpenAI API on HOST:PORT (e.g. 127.0.0.1:8080)");
  up->add_option("--image-dir", o->image_dir,
                 "With --http: image_url parts may name local files (file:///...) under this directory only (off by default)");
  up->add_option("--api-key-file", o->api_key_file,
                 "With --http: the API keys, one a line (# comments; a regular file others may not read); "
                 "else WASTE_API_KEY is passed through");
  up->add_option("--run-dir", o->run_dir, "Run directory (default: WASTE_RUN_DIR, $XDG_RUNTIME_DIR/waste, /tmp/waste-UID)");
  up->add_flag("--foreground", o->foreground, "Keep the supervisor attached (for service managers)");
  // 0 would mean "the default" below and be dropped without a word: refused instead.
  up->add_option("--ctx", o->ctx, "Session context in tokens")->check(CLI::Range(1, int(limits::kMaxContextTokens)));
  up->add_option("--image-patches", o->image_patches,
                 "Patch budget per image (1024: at most 256 image tokens; each costs a text token's prefill)")
      ->check(CLI::Range(waste::kMinImagePatches, waste::kMaxImagePatches));
  up->add_option("--threads", o->threads, "Compute threads")->check(CLI::Range(1, limits::kMaxThreads));
  up->add_option("--max-sessions", o->max_sessions,
                 "Open sessions at most (" + std::to_string(limits::kDefaultMaxSessions) + ")")
      ->check(CLI::Range(1, limits::kMaxSessions));
  up->add_option("--sessions", o->sessions,
                 "Session states in memory at once, what the memory plan counts (" +
                     std::to_string(limits::kDefaultLiveSessions) +
                     "): more sessions' requests wait for one, idle sessions' states are parked on disk")
      ->check(CLI::Range(1, limits::kMaxSessions));
  up->add_option("--park-dir", o->park_dir, "Directory for parked session states (default: $TMPDIR or /var/tmp)");
  up->add_option("--shm", o->shm,
                 "Where iod keeps the expert cache: auto (default: /dev/shm with huge pages, else a private file on "
                 "2 MiB pages, else /dev/shm), huge-file or named (README, huge pages)")
      ->check(ipc::segment_backing_problem);
  up->add_option("--max-batch", o->max_batch, "Sessions per compute step at most (0: every ready session; 1: unbatched)")
      ->check(CLI::Range(0, limits::kMaxBatch));
  up->add_option("--iod-timeout", o->iod_timeout_ms, "ms compute waits for an answer of iod (10000)")
      ->check(CLI::Range(int64_t(1), int64_t(3'600'000)));
  up->add_option("--compute-timeout", o->compute_timeout_ms, "With --http: ms waste-serve waits for an answer of compute (10000)")
      ->check(CLI::Range(int64_t(1), int64_t(3'600'000)));
  up->add_option("--wedge-timeout", o->wedge_timeout,
                 "Seconds a child may answer nothing before the supervisor kills and restarts it (30; 0: never)")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--prompt-cache", o->prompt_cache,
                 "Prompt-cache checkpoint bytes (4G, 512M, ...; 0: off; default: the memory planner's)");
  up->callback([o] {
    // Sizes are checked here, so a bad one is an error naming this command's flag (the
    // supervisor's argparse would read "-5G" as an option and blame its own parser).
    if (!o->budget.empty()) parse_size(o->budget, "--budget");
    if (!o->prompt_cache.empty()) parse_size(o->prompt_cache, "--prompt-cache");
    // Values go as --flag=value: a value that begins with "-" stays a value for argparse.
    auto with = [](const char* flag, const std::string& value) { return std::string(flag) + "=" + value; };
    std::vector<std::string> a = {"up", o->model, with("--run-dir", o->run_dir.empty() ? client::default_run_dir() : o->run_dir)};
    if (!o->budget.empty()) a.push_back(with("--budget", o->budget));
    if (!o->http.empty()) a.push_back(with("--http", o->http));
    if (!o->image_dir.empty()) a.push_back(with("--image-dir", o->image_dir));
    if (!o->api_key_file.empty()) a.push_back(with("--api-key-file", o->api_key_file));
    if (o->foreground) a.push_back("--foreground");
    if (o->ctx) a.insert(a.end(), {"--ctx", std::to_string(o->ctx)});
    if (o->image_patches) a.insert(a.end(), {"--image-patches", std::to_string(o->image_patches)});
    if (o->threads) a.insert(a.end(), {"--threads", std::to_string(o->threads)});
    if (o->max_sessions) a.insert(a.end(), {"--max-sessions", std::to_string(o->max_sessions)});
    if (o->sessions) a.insert(a.end(), {"--sessions", std::to_string(o->sessions)});
    if (!o->park_dir.empty()) a.push_back(with("--park-dir", o->park_dir));
    if (!o->shm.empty()) a.push_back(with("--shm", o->shm));
    if (o->max_batch >= 0) a.insert(a.end(), {"--max-batch", std::to_string(o->max_batch)});
    if (!o->prompt_cache.empty()) a.push_back(with("--prompt-cache", o->prompt_cache));
    if (o->iod_timeout_ms) a.insert(a.end(), {"--iod-timeout", std::to_string(o->iod_timeout_ms)});
    if (o->compute_timeout_ms) a.insert(a.end(), {"--compute-timeout", std::to_string(o->compute_timeout_ms)});
    if (o->wedge_timeout >= 0) a.insert(a.end(), {"--wedge-timeout", std::to_string(o->wedge_timeout)});
    if (int rc = run_supervisor(a); rc != 0) std::exit(rc);
  });

  auto down_dir = std::make_shared<std::string>();
  CLI::App* down = app.add_subcommand("down", "Stop the instance of a run directory (HTTP, compute, iod in that order)");
  down->add_option("--run-dir", *down_dir, "Run directory");
  down->callback([down_dir] {
    if (int rc = run_supervisor({"down", "--run-dir", down_dir->empty() ? client::default_run_dir() : *down_dir}); rc != 0)
      std::exit(rc);
  });

  struct HealthOptions {
    std::string run_dir;
    int64_t timeout_ms = 3000;
    bool json = false;
  };
  auto ho = std::make_shared<HealthOptions>();
  CLI::App* health = app.add_subcommand(
      "health", "Ask compute and iod of a running instance whether they answer (exit 0: both do, 1: not)");
  health->add_option("--run-dir", ho->run_dir, "Run directory");
  health->add_option("--timeout-ms", ho->timeout_ms, "How long each process may take to answer (3000)")
      ->check(CLI::Range(int64_t(1), int64_t(600'000)));
  health->add_flag("--json", ho->json, "One JSON object");
  health->callback([ho] {
    const std::string dir = ho->run_dir.empty() ? client::default_run_dir() : ho->run_dir;
    const nlohmann::json h = instance_health(dir, ho->timeout_ms);
    if (ho->json) {
      std::printf("%s\n", h.dump().c_str());
    } else {
      for (const char* part : {"compute", "iod"}) {
        const nlohmann::json& p = h[part];
        std::printf("%-8s %s%s\n", part, p["state"].get<std::string>().c_str(),
                    p.contains("detail") ? (" (" + p["detail"].get<std::string>() + ")").c_str() : "");
      }
    }
    std::exit(h["ok"].get<bool>() ? 0 : 1);
  });

  struct StatusOptions {
    std::string run_dir;
    bool json = false;
  };
  auto so = std::make_shared<StatusOptions>();
  CLI::App* status = app.add_subcommand("status", "Pids, uptime, budget, sessions and hit rate of a running instance");
  status->add_option("--run-dir", so->run_dir, "Run directory");
  status->add_flag("--json", so->json,
                   "One JSON object: the supervisor's status, \"health\", and compute's \"engine\" and \"sessions\" "
                   "(Engine.stats) when it answers");
  status->callback([so] {
    const std::string dir = so->run_dir.empty() ? client::default_run_dir() : so->run_dir;
    int rc = 0;
    const std::string out = capture_supervisor({"status", "--json", "--run-dir", dir}, &rc);
    nlohmann::json st = nlohmann::json::parse(out, nullptr, false);
    require(!st.is_discarded(), "status: the supervisor answered: " + out);
    if (!st.value("running", false)) {
      if (so->json)
        std::printf("%s\n", st.dump().c_str());
      else
        std::printf("not running (%s)\n", dir.c_str());
      std::exit(3);
    }
    if (so->json) {
      st["health"] = instance_health(dir, 3000);
      if (st["health"]["compute"]["state"] == "ok") {
        try {
          const nlohmann::json s = client::Client(dir, 3000).stats();
          st["engine"] = s["engine"];
          st["sessions"] = s["sessions"];
        } catch (const std::exception& e) {
          st["engine_error"] = e.what();
        }
      }
      std::printf("%s\n", st.dump().c_str());
      return;
    }
    std::printf("run dir %s\nmodel   %s\nbudget  %s\nup      %.0f s (supervisor pid %d)\n", dir.c_str(),
                st["model"].get<std::string>().c_str(), st["budget"].get<std::string>().c_str(),
                st["uptime_seconds"].get<double>(), st["supervisor_pid"].get<int>());
    if (!st["http"].get<std::string>().empty()) std::printf("http    http://%s\n", st["http"].get<std::string>().c_str());
    for (const auto& c : st["children"])
      std::printf("  %-8s pid %-8s %-8s up %6.0f s  restarts %d (wedged %d)\n", c["name"].get<std::string>().c_str(),
                  c["pid"].is_null() ? "-" : std::to_string(c["pid"].get<int>()).c_str(),
                  c["alive"].get<bool>() ? "running" : "DOWN", c["uptime_seconds"].get<double>(),
                  c["restarts"].get<int>(), c.value("wedged", 0));
    const nlohmann::json h = instance_health(dir, 3000);
    std::printf("health  compute %s, iod %s\n", h["compute"]["state"].get<std::string>().c_str(),
                h["iod"]["state"].get<std::string>().c_str());
    if (h["compute"]["state"] != "ok") return;  // asking it more would only wait again
    try {
      client::Client cl(dir, 3000);
      const auto info = cl.info();
      const nlohmann::json s = cl.stats()["engine"];
      const double hits = s["hits"].get<double>(), misses = s["misses"].get<double>();
      std::printf("experts %s (cache %s)\n", info.expert_path.c_str(), format_bytes(double(info.budget_bytes)).c_str());
      std::printf("sessions %d of %d, queued %d\n", s["sessions"].get<int>(), s["max_sessions"].get<int>(),
                  s["queued"].get<int>());
      std::printf("tokens  %.0f generated, %.1f tok/s aggregate, %.0f requests (%.0f failed)\n",
                  s["tokens"].get<double>(), s["tok_per_s"].get<double>(), s["requests"].get<double>(),
                  s["failed"].get<double>());
      std::printf("cache   %.0f hits, %.0f misses, hit rate %.1f%%, %.3f GB read\n", hits, misses,
                  hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0.0, s["bytes_read"].get<double>() / 1e9);
      const nlohmann::json& pc = s["prompt_cache"];
      const double lookups = pc["lookups"].get<double>(), phits = pc["hits"].get<double>();
      if (pc["budget_bytes"].get<uint64_t>() == 0)
        std::printf("prompts cache off\n");
      else
        std::printf("prompts %s of %s in %llu checkpoints; %.0f of %.0f prompts hit (%.1f%%), %.0f tokens not prefilled\n",
                    format_bytes(pc["bytes"].get<double>()).c_str(), format_bytes(pc["budget_bytes"].get<double>()).c_str(),
                    (unsigned long long)pc["entries"].get<uint64_t>(), phits, lookups,
                    lookups > 0 ? 100.0 * phits / lookups : 0.0, pc["cached_tokens"].get<double>());
    } catch (const std::exception& e) {
      std::printf("compute: not answering (%s)\n", e.what());
    }
  });
}

}  // namespace waste::cli
