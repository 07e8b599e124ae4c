// waste-bench-batch: the compute side of batched decode across sessions, without iod or a server.
//
//   waste-bench-batch MODEL [--sessions 1,2,4,8] [-n STEPS] [--ctx TOKENS] [--batched-only]
//
// Every routed expert is read into RAM first (ResidentExperts), so a step is compute only. For
// each session count N, N sessions decode STEPS tokens two ways, interleaved step by step in one
// run so the machine's load hits both alike: one Model::forward_batch of all N per step
// ("batched"), and N forward() calls one after the other ("alone", the unbatched schedule).
// Token ids are a fixed pseudo-random sequence per session (random weights collapse when
// sampled). --batched-only skips the "alone" schedule (for a profiler attached to the process).
// Prints wall ms per step, aggregate tok/s, process CPU ms per step (less sensitive
// to other processes on a shared machine than wall time) and the ratios.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "compute/engine.h"
#include "compute/experts/resident_experts.h"
#include "compute/model/profile.h"
#include "shared/container/reader.h"
#include "shared/util/error.h"

using namespace waste;

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double wall = 0, cpu = 0;
};

// N sessions with their own id streams, each prefilled with a few ids.
struct Sessions {
  std::vector<Session> s;
  std::vector<std::vector<int32_t>> ids;  // per session, one id per decode step
  std::vector<std::vector<float>> logits;
};

Sessions make_sessions(const Engine& e, int n, int steps, int64_t ctx, uint64_t seed) {
  Sessions out;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(e.config().vocab - 1));
  for (int i = 0; i < n; ++i) {
    out.s.push_back(e.new_session(ctx));
    std::vector<int32_t> prompt(4), stream(static_cast<size_t>(steps));
    for (auto& x : prompt) x = id(rng);
    for (auto& x : stream) x = id(rng);
    out.logits.emplace_back(size_t(e.config().vocab));
    e.prefill(out.s.back(), prompt, out.logits.back().data());
    out.ids.push_back(std::move(stream));
  }
  return out;
}

// Phase times of one mode, attached to the model only while that mode runs.
struct Profiled {
  PhaseTimes phases;
  Timing t;
};

void step_batched(Model& m, Sessions& b, int step, Profiled& p) {
  Timing& t = p.t;
  m.set_profile(&p.phases);
  std::vector<BatchItem> items;
  for (size_t i = 0; i < b.s.size(); ++i)
    items.push_back({&b.s[i], {&b.ids[i][size_t(step)], 1}, b.logits[i].data(), LogitRows::Last});
  const double w0 = wall_seconds(), c0 = process_cpu_seconds();
  m.forward_batch(items);
  t.wall += wall_seconds() - w0;
  t.cpu += process_cpu_seconds() - c0;
  m.set_profile(nullptr);
}

void step_alone(Model& m, Sessions& a, int step, Profiled& p) {
  Timing& t = p.t;
  m.set_profile(&p.phases);
  const double w0 = wall_seconds(), c0 = process_cpu_seconds();
  for (size_t i = 0; i < a.s.size(); ++i) m.forward(a.s[i], {&a.ids[i][size_t(step)], 1}, a.logits[i].data());
  t.wall += wall_seconds() - w0;
  t.cpu += process_cpu_seconds() - c0;
  m.set_profile(nullptr);
}

void print_phases(const char* mode, const PhaseTimes& p, int steps) {
  const double k = 1e3 / steps;
  std::printf("          %-8s ms/step: attention %.1f  router %.1f  experts %.1f  fetch %.1f  mlp %.1f  head %.1f  "
              "embed %.1f  other %.1f\n",
              mode, k * p.attention, k * p.router, k * p.experts, k * p.fetch_wait, k * p.mlp, k * p.head, k * p.embed,
              k * p.other);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string part = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const int n = std::atoi(part.c_str());
    require(n >= 1 && n <= 64, "--sessions: each count must be 1..64, got '" + part + "'");
    v.push_back(n);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return v;
}

int run(int argc, char** argv) {
  std::string model, sessions = "1,2,4,8";
  int steps = 16;
  int64_t ctx = 512;
  bool batched_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      require(i + 1 < argc, a + " needs a value");
      return argv[++i];
    };
    if (a == "--sessions") sessions = value();
    else if (a == "-n") steps = std::atoi(value().c_str());
    else if (a == "--ctx") ctx = std::atoll(value().c_str());
    else if (a == "--batched-only") batched_only = true;
    else if (model.empty() && a[0] != '-') model = a;
    else throw Error("unknown argument " + a);
  }
  require(!model.empty(), "usage: waste-bench-batch MODEL [--sessions 1,2,4,8] [-n STEPS] [--ctx TOKENS] [--batched-only]");
  require(steps >= 1 && steps <= 4096, "-n must be 1..4096");
  require(ctx >= steps + 8, "--ctx must hold the 4 prompt ids, the warm-up and the steps");
  const std::vector<int> counts = parse_list(sessions);

  Container container = Container::open(model);
  ResidentExperts experts(container, false);
  EngineOptions eo;
  eo.model = model;
  eo.context = ctx;
  eo.progress = false;
  eo.experts = &experts;
  Engine engine(eo);
  Model& m = engine.model();

  std::printf("sessions  steps   batched: ms/step  tok/s  cpu_ms   alone: ms/step  tok/s  cpu_ms   batched/alone  vs 1\n");
  double one = 0;
  for (int n : counts) {
    Sessions b = make_sessions(engine, n, steps + 2, ctx, 1), a = make_sessions(engine, n, steps + 2, ctx, 1);
    Profiled pb, pa, skip;
    for (int w = 0; w < 2; ++w) {  // warm-up: caches, pages, the thread pool
      step_batched(m, b, w, skip);
      if (!batched_only) step_alone(m, a, w, skip);
    }
    // Both schedules decode the same ids, so route to the same experts: whichever runs second
    // finds them warm in the CPU cache. The order alternates step by step so neither is favoured.
    for (int s = 2; s < steps + 2; ++s) {
      if (batched_only) {
        step_batched(m, b, s, pb);
      } else if (s % 2 == 0) {
        step_batched(m, b, s, pb);
        step_alone(m, a, s, pa);
      } else {
        step_alone(m, a, s, pa);
        step_batched(m, b, s, pb);
      }
    }
    const Timing &tb = pb.t, &ta = pa.t;
    const double tok_b = n * steps / tb.wall, tok_a = batched_only ? 0.0 : n * steps / ta.wall;
    if (one == 0) one = tok_b / n;
    std::printf("%8d  %5d   %16.1f  %5.1f  %6.1f   %14.1f  %5.1f  %6.1f   %12.2fx  %4.2fx\n", n, steps,
                1e3 * tb.wall / steps, tok_b, 1e3 * tb.cpu / steps, 1e3 * ta.wall / steps, tok_a, 1e3 * ta.cpu / steps,
                tok_a > 0 ? tok_b / tok_a : 0.0, tok_b / one);
    print_phases("batched", pb.phases, steps);
    if (!batched_only) print_phases("alone", pa.phases, steps);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste-bench-batch: %s\n", e.what());
    return 1;
  }
}
