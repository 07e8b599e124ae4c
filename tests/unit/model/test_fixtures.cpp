// The forward pass against the fixtures' independent reference logits (f32, lossless
// weights from the checkpoint): 24-token prefill, then 16 single-token decode steps along
// the reference greedy continuation. Tolerance from fixtures/README.md.
#include <doctest/doctest.h>

#include "tests/unit/fixture_dir.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/file.h"

using namespace waste;

namespace {

std::vector<float> read_f32(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path, 64 << 20);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

std::vector<int32_t> read_ids(const std::string& path, const char* key) {
  auto j = nlohmann::json::parse(read_file_text(path, 1 << 20));
  return j.at(key).get<std::vector<int32_t>>();
}

int argmax(const float* v, int64_t n) { return int(std::max_element(v, v + n) - v); }

struct Result {
  double max_diff = 0;
  int argmax_mismatches = 0;
};

Result compare_rows(const float* got, const float* want, int64_t rows, int64_t vocab) {
  Result r;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < vocab; ++i) r.max_diff = std::max(r.max_diff, double(std::fabs(got[t * vocab + i] - want[t * vocab + i])));
    if (argmax(got + t * vocab, vocab) != argmax(want + t * vocab, vocab)) ++r.argmax_mismatches;
  }
  return r;
}

void run_fixture(const std::string& name) {
  const std::string dir = fixture_dir(name.c_str());
  Checkpoint ckpt = Checkpoint::open(dir);
  const ModelConfig& c = ckpt.config();
  CheckpointWeights weights(ckpt);
  CheckpointExperts experts(ckpt);
  Model model = Model::create(weights, experts, c);

  const std::vector<int32_t> prompt = read_ids(dir + "/tokens.json", "input_ids");
  const std::vector<int32_t> full = read_ids(dir + "/reference_greedy.json", "full_ids");
  const std::vector<float> ref = read_f32(dir + "/reference_logits.f32");
  const std::vector<float> ref_all = read_f32(dir + "/reference_logits_all.f32");
  const int64_t V = c.vocab, P = int64_t(prompt.size()), N = int64_t(full.size());
  REQUIRE(P == 24);
  REQUIRE(N == 40);
  REQUIRE(int64_t(ref.size()) == P * V);
  REQUIRE(int64_t(ref_all.size()) == N * V);

  Session s = model.new_session(64);
  std::vector<float> logits(size_t(N * V));
  std::vector<float> hidden;
  model.forward(s, prompt, logits.data(), LogitRows::All, &hidden);

  // Which layer drifts, if any: the residual stream after each layer vs debug_hidden_states.
  const std::vector<float> ref_hidden = read_f32(dir + "/debug_hidden_states.f32");
  REQUIRE(ref_hidden.size() == hidden.size());
  const size_t per_layer = hidden.size() / size_t(c.n_layers);
  std::string layer_diffs;
  for (int L = 0; L < c.n_layers; ++L) {
    double d = 0;
    for (size_t i = 0; i < per_layer; ++i)
      d = std::max(d, double(std::fabs(hidden[L * per_layer + i] - ref_hidden[L * per_layer + i])));
    layer_diffs += " " + std::to_string(d);
    CHECK_MESSAGE(d <= 1e-3, name, ": hidden state after layer ", L, " differs by ", d);
  }
  MESSAGE(name, ": max |hidden diff| per layer:", layer_diffs);

  // Decode along the reference continuation, checking that our own greedy choice matches.
  int greedy_mismatches = 0;
  for (int64_t p = P; p < N; ++p) {
    if (argmax(&logits[size_t((p - 1) * V)], V) != full[size_t(p)]) ++greedy_mismatches;
    model.forward(s, {&full[size_t(p)], 1}, &logits[size_t(p * V)]);
  }
  CHECK(s.position() == N);

  const Result prefill = compare_rows(logits.data(), ref.data(), P, V);
  const Result all = compare_rows(logits.data(), ref_all.data(), N, V);
  MESSAGE(name, ": max |logit diff| prefill ", prefill.max_diff, ", all 40 rows ", all.max_diff);
  CHECK(prefill.max_diff <= 1e-3);
  CHECK(all.max_diff <= 1e-3);
  CHECK(prefill.argmax_mismatches == 0);
  CHECK(all.argmax_mismatches == 0);
  CHECK(greedy_mismatches == 0);
}

}  // namespace

TEST_CASE("fixture kimi-linear: prefill and decode match the reference logits") { run_fixture("kimi-linear"); }
TEST_CASE("fixture kimi-k3: prefill and decode match the reference logits") { run_fixture("kimi-k3"); }
TEST_CASE("fixture deepseek-v3: prefill and decode match the reference logits") { run_fixture("deepseek-v3"); }
TEST_CASE("fixture deepseek-v3-fp8: prefill and decode match the reference logits") { run_fixture("deepseek-v3-fp8"); }
