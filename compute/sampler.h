// Next-token choice from logits (greedy, temperature, top-k, top-p, min-p, repetition penalty,
// seeded), and stop-string matching over streamed text. Pure functions of their inputs: the
// same logits, history and seed give the same tokens on every machine (own RNG-to-float
// conversion, no std::*_distribution whose output is implementation-defined).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

struct SamplingParams {
  float temperature = 0.0f;        // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;                   // 0: off
  float top_p = 1.0f;              // nucleus: smallest set whose probability reaches top_p; 1: off
  float min_p = 0.0f;              // drop tokens with p < min_p * p_max; 0: off
  float repetition_penalty = 1.0f; // CTRL-style on ids in the recent history; 1: off
  int repetition_window = 256;     // how many recent ids the penalty looks at
  // OpenAI's: each id generated so far loses presence_penalty + frequency_penalty x its count
  // from its logit; 0: off. Over this request's generated ids (as vLLM does), not the prompt.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int max_tokens = 256;
  std::vector<std::string> stop;   // generation ends before the first occurrence of any
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next id from logits[vocab]; `history` is every id so far (prompt + generated),
  // history[generated_from..] the generated ones.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated_from = 0);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> order_;
};

// Applies the repetition penalty in place: for each distinct id among the last `window` of
// history, a positive logit is divided by `penalty`, a negative one multiplied.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty, int window);

// Subtracts presence + frequency x count from the logit of every id in `generated`.
void apply_presence_frequency_penalty(std::span<float> logits, std::span<const int32_t> generated, float presence,
                                      float frequency);

// Streams generated text through, holding back any tail that could still become a stop string.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what may be shown now. After a match, stopped() is true and the
  // returned text ends just before the stop string (the stop string itself is never shown).
  std::string push(std::string_view text);
  // What is still held back, at the end of generation without a match.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace waste
