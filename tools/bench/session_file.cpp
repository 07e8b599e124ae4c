// waste-bench-session-file: how long saving and loading a session's state takes on a running
// instance (Session.save / Session.load, compute/model/session_file.h). A session is filled with
// N pseudo-random ids (one prefill), then saved and loaded back into a fresh session several
// times: the file's size, compute's write time (including fsync) and read time from a warm file
// (just written: in the page cache), and once from a cold one when the page cache can be dropped
// (root). The load is checked too: the loaded session's next logits equal the original's.
//
//   waste up MODEL --ctx 4608 && waste-bench-session-file --tokens 4000 [--connect RUN_DIR] [--json]
#include <algorithm>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "shared/platform/direct_io.h"
#include "tools/libwaste/engine_client.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}


}  // namespace

int main(int argc, char** argv) {
  std::string where, dir;
  uint32_t tokens = 4000, rounds = 3;
  uint64_t seed = 1;
  bool as_json = false;
  CLI::App app{"waste-bench-session-file: save/load time of a session's state on a running instance"};
  app.add_option("--connect", where, "run directory or socket of the instance (default: the default run dir)");
  app.add_option("--tokens", tokens, "ids in the saved session (4000)")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--rounds", rounds, "saves and warm loads (3)")->check(CLI::Range(1u, 100u));
  app.add_option("--dir", dir, "where the session file goes (default: the run directory)");
  app.add_option("--seed", seed, "seed of the ids");
  app.add_flag("--json", as_json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    if (where.empty()) where = waste::client::default_run_dir();
    // Compute takes absolute paths only (its working directory is not ours).
    dir = std::filesystem::absolute(!dir.empty() ? dir : std::filesystem::is_directory(where) ? where : ".").string();
    const std::string path = dir + "/bench.session";
    waste::client::Client c(where);
    const waste::client::Info info = c.info();
    if (info.max_context < tokens + 8) {
      std::fprintf(stderr, "the instance allows sessions of %u tokens, %u are needed (waste up --ctx %u)\n", info.max_context,
                   tokens + 8, tokens + 8);
      return 2;
    }
    auto s = c.open_session(tokens + 8);
    waste::client::Request fill;
    fill.kind = waste::client::Request::Kind::Tokens;
    std::mt19937_64 rng(seed);
    for (uint32_t i = 0; i < tokens; ++i) fill.tokens.push_back(int32_t(rng() % std::min<uint32_t>(info.vocab, 100000)));
    fill.max_tokens = 1;
    std::fprintf(stderr, "filling a session with %u ids (one prefill)...\n", tokens);
    const auto t0 = std::chrono::steady_clock::now();
    const waste::client::Result filled = s->generate(fill, [](int32_t, std::string_view) { return true; });
    const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::vector<double> save_s, load_s, save_wall, load_wall;
    waste::client::FileResult saved, loaded;
    auto s2 = c.open_session(tokens + 8);
    for (uint32_t r = 0; r < rounds; ++r) {
      auto a = std::chrono::steady_clock::now();
      saved = s->save(path);
      save_wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      save_s.push_back(saved.seconds);
      a = std::chrono::steady_clock::now();
      loaded = s2->load(path);
      load_wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      load_s.push_back(loaded.seconds);
    }
    double cold_s = -1;
    if (waste::platform::drop_page_cache().empty()) cold_s = s2->load(path).seconds;

    // The loaded state continues as the original: the same next token and logprob.
    waste::client::Request next;
    next.kind = waste::client::Request::Kind::Tokens;
    next.tokens = {int32_t(rng() % std::min<uint32_t>(info.vocab, 100000))};
    next.max_tokens = 2;
    next.logprobs = true;
    auto run = [&](waste::client::Session& ss) {
      std::vector<std::pair<int32_t, float>> out;
      ss.generate_events(next, [&](const waste::client::TokenEvent& ev) {
        if (ev.id >= 0) out.push_back({ev.id, ev.logprob});
        return true;
      });
      return out;
    };
    const bool same = run(*s) == run(*s2);
    std::filesystem::remove(path);

    const double mb = double(saved.bytes) / 1e6;
    nlohmann::json j = {{"model", info.model},
                        {"family", info.family},
                        {"tokens", saved.tokens},
                        {"file_bytes", saved.bytes},
                        {"bytes_per_token", double(saved.bytes) / double(saved.tokens)},
                        {"fill_prefill_seconds", filled.prefill_seconds},
                        {"save_seconds_median", median(save_s)},
                        {"load_warm_seconds_median", median(load_s)},
                        {"save_wall_seconds_median", median(save_wall)},
                        {"load_wall_seconds_median", median(load_wall)},
                        {"load_cold_seconds", cold_s},
                        {"rounds", rounds},
                        {"continues_identically", same}};
    if (as_json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s (%s): a session of %llu tokens (filled by a %.1f s prefill, %.1f s in all)\n", info.model.c_str(),
                  info.family.c_str(), (unsigned long long)saved.tokens, filled.prefill_seconds, fill_s);
      std::printf("  file        %.1f MB (%.0f B/token)\n", mb, double(saved.bytes) / double(saved.tokens));
      std::printf("  save        %.3f s median of %u (compute, with fsync; %.3f s wall)  %.2f GB/s\n", median(save_s),
                  rounds, median(save_wall), mb / 1e3 / std::max(1e-9, median(save_s)));
      std::printf("  load warm   %.3f s median of %u (compute; %.3f s wall)  %.2f GB/s\n", median(load_s), rounds,
                  median(load_wall), mb / 1e3 / std::max(1e-9, median(load_s)));
      if (cold_s >= 0)
        std::printf("  load cold   %.3f s (page cache dropped)  %.2f GB/s\n", cold_s, mb / 1e3 / std::max(1e-9, cold_s));
      else
        std::printf("  load cold   not measured (the page cache cannot be dropped: not root)\n");
      std::printf("  continues   %s\n", same ? "identically (same next ids and logprobs)" : "DIFFERENTLY: a bug");
    }
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste-bench-session-file: %s\n", e.what());
    return 1;
  }
}
