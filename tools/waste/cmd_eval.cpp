// `waste eval MODEL --tokens FILE.json --logits OUT.f32 [--step]`: the logits of every position
// as little-endian f32 [positions x vocab]. By default the ids go through as one prompt (chunked
// prefill); with --step one at a time through the decode path. --reference compares with a
// file of the same layout and prints the error and top-1 agreement.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tools/waste/commands.h"
#include "tools/waste/engine_cli.h"
#include "tools/waste/quit_signals.h"

namespace waste::cli {

namespace {

struct EvalOptions {
  EngineCliOptions engine;
  std::string tokens, logits, key, reference;
  std::vector<std::string> images;  // each media placeholder id takes the next, expanded
  std::string pad_embeddings;       // or: the placeholders take these rows as they are
  int image_patches = 0;
  bool step = false;
};

// A JSON array of ids, or an object holding one under `key` (default: the first of ids,
// input_ids, full_ids, tokens).
std::vector<int32_t> read_token_file(const std::string& path, const std::string& key, int64_t vocab) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_text(path, 64ull << 20));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not JSON: " + e.what());
  }
  const nlohmann::json* arr = nullptr;
  if (j.is_array()) {
    arr = &j;
  } else if (j.is_object()) {
    for (const char* k : {"ids", "input_ids", "full_ids", "tokens"})
      if ((key.empty() || key == k) && j.contains(k)) {
        arr = &j[k];
        break;
      }
    if (!key.empty() && !arr && j.contains(key)) arr = &j[key];
  }
  require(arr && arr->is_array(), path + ": expected an array of token ids" +
                                      (key.empty() ? " (or an object with ids/input_ids/full_ids/tokens)" : " under \"" + key + "\""));
  std::vector<int32_t> ids;
  for (const auto& v : *arr) {
    require(v.is_number_integer(), path + ": token " + std::to_string(ids.size()) + " is not an integer");
    const int64_t id = v.get<int64_t>();
    require(id >= 0 && id < vocab, path + ": token " + std::to_string(ids.size()) + " = " + std::to_string(id) +
                                       " is outside the vocabulary of " + std::to_string(vocab));
    ids.push_back(int32_t(id));
  }
  require(!ids.empty(), path + ": no token ids");
  return ids;
}

void compare(const std::vector<float>& got, const std::string& ref_path, size_t rows, size_t vocab) {
  const std::vector<uint8_t> bytes = read_file_bytes(ref_path, uint64_t(rows) * vocab * 4 + (1ull << 30));
  require(bytes.size() % (vocab * 4) == 0, ref_path + ": size is not a whole number of rows of " +
                                               std::to_string(vocab) + " floats");
  const size_t ref_rows = bytes.size() / (vocab * 4), n = std::min(rows, ref_rows);
  const float* ref = reinterpret_cast<const float*>(bytes.data());
  double max_abs = 0, sum_abs = 0, max_ref = 0;
  size_t agree = 0;
  for (size_t r = 0; r < n; ++r) {
    size_t a = 0, b = 0;
    for (size_t v = 0; v < vocab; ++v) {
      const float x = got[r * vocab + v], y = ref[r * vocab + v];
      const double d = std::fabs(double(x) - double(y));
      max_abs = std::max(max_abs, d);
      sum_abs += d;
      max_ref = std::max(max_ref, std::fabs(double(y)));
      if (x > got[r * vocab + a]) a = v;
      if (y > ref[r * vocab + b]) b = v;
    }
    agree += a == b;
  }
  std::printf("compared %zu rows with %s: max |diff| %.6g, mean |diff| %.6g (max |ref| %.4g), top-1 agreement %zu/%zu (%.1f%%)\n",
              n, ref_path.c_str(), max_abs, sum_abs / double(n * vocab), max_ref, agree, n, 100.0 * double(agree) / double(n));
}

void run_eval(const EvalOptions& o) {
  EngineHandle h(o.engine);
  Engine& e = h.engine();
  const size_t V = size_t(e.config().vocab);
  require(o.images.empty() || o.pad_embeddings.empty(), "give --image or --pad-embeddings, not both");
  std::vector<std::vector<uint8_t>> files;
  for (const std::string& f : o.images) files.push_back(read_file_bytes(f, ImageLimits{}.max_bytes));
  std::vector<int32_t> given = read_token_file(o.tokens, o.key, e.config().vocab);
  MediaPrompt prompt;
  if (o.pad_embeddings.empty()) {
    prompt = e.with_images(given, files, "--image", o.image_patches);
  } else {
    // The placeholders take the given rows as they are: no expansion.
    prompt.ids = std::move(given);
    require(e.vision().available(), o.pad_embeddings + ": the model has no vision tower, so no placeholder id");
    const std::vector<uint8_t> bytes = read_file_bytes(o.pad_embeddings, 1ull << 30);
    require(bytes.size() % 4 == 0, o.pad_embeddings + ": not a whole number of f32");
    std::vector<float> rows(bytes.size() / 4);
    std::memcpy(rows.data(), bytes.data(), bytes.size());
    prompt.images = placeholder_rows(prompt.ids, int32_t(e.vision().placeholder_id()), rows, e.config().hidden,
                                     o.pad_embeddings);
  }
  const std::vector<int32_t>& ids = prompt.ids;
  Session s = e.new_session(std::max<int64_t>(o.engine.context, int64_t(ids.size())));
  std::vector<float> logits(ids.size() * V);
  if (o.step)
    e.step_all(s, ids, logits.data(), prompt.images);
  else
    e.prefill(s, ids, logits.data(), LogitRows::All, prompt.images);
  if (quit::requested.load()) return;  // a signal came during the forward: no logits file, no figures
  write_file_atomic(o.logits, logits.data(), logits.size() * sizeof(float));
  std::fprintf(stderr, "wrote %zu x %zu logits to %s (%s, experts: %s)\n", ids.size(), V, o.logits.c_str(),
               o.step ? "decode steps" : "prefill", h.expert_path().c_str());
  if (!o.reference.empty()) compare(logits, o.reference, ids.size(), V);
}

}  // namespace

void register_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "Logits of every position of a token sequence (f32 [positions x vocab])");
  add_engine_options(cmd, o->engine);
  cmd->add_option("--tokens", o->tokens, "JSON file: an array of ids, or an object with ids/input_ids/full_ids/tokens")
      ->required();
  cmd->add_option("--key", o->key, "Which array of the JSON object to use");
  cmd->add_option("--logits", o->logits, "Output file (little-endian f32)")->required();
  cmd->add_option("--image", o->images,
                  "PNG/JPEG for the next media placeholder id of the tokens (repeatable); each expands into one "
                  "position per image token, so the logits have a row per expanded position");
  cmd->add_option("--pad-embeddings", o->pad_embeddings,
                  "f32 [k, hidden]: the k placeholder ids take these rows, not expanded (the tower's output given "
                  "directly, e.g. from `waste vision --embeddings`)");
  cmd->add_option("--image-patches", o->image_patches, "Patch budget per image (default 1024)");
  cmd->add_flag("--step", o->step, "One token at a time through the decode path (default: one prefill)");
  cmd->add_option("--reference", o->reference, "Compare with this f32 file: max |diff| and top-1 agreement");
  // SIGINT/SIGTERM/SIGHUP: once the forward in progress ends, the private iod and its run
  // directory go, then this process by the signal.
  cmd->callback([o] { quit::run_until_signal([&] { run_eval(*o); }); });
}

}  // namespace waste::cli
