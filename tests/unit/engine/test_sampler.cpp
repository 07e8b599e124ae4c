// Sampler and stop strings: each filter removes exactly what it should, seeds replay.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "compute/sampler.h"
#include "shared/util/error.h"

using namespace waste;

namespace {

std::vector<float> random_logits(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(int64_t(g() % 2001) - 1000) / 250.0f;
  return v;
}

std::map<int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int draws) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits, {})];
  return h;
}

}  // namespace

TEST_CASE("greedy picks the argmax, lowest id on ties") {
  Sampler s(SamplingParams{});
  std::vector<float> l{0.5f, 3.0f, -1.0f, 3.0f};
  CHECK(s.sample(l, {}) == 1);
  l[2] = 7.0f;
  CHECK(s.sample(l, {}) == 2);
}

TEST_CASE("top-k = 1 at any temperature equals greedy") {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto l = random_logits(1000, seed);
    SamplingParams p;
    p.temperature = 1.5f;
    p.top_k = 1;
    p.seed = seed;
    Sampler s(p), g(SamplingParams{});
    CHECK(s.sample(l, {}) == g.sample(l, {}));
  }
}

TEST_CASE("same seed, same tokens; another seed, other tokens") {
  const auto l = random_logits(500, 7);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a.sample(l, {}));
    tb.push_back(b.sample(l, {}));
    tc.push_back(c.sample(l, {}));
  }
  CHECK(ta == tb);
  CHECK(ta != tc);
}

TEST_CASE("top-k keeps only the k best") {
  std::vector<float> l{1.0f, 5.0f, 4.0f, 0.0f, 4.5f, -2.0f};
  SamplingParams p;
  p.temperature = 10.0f;  // nearly flat: every survivor is drawn
  p.top_k = 3;
  const auto h = histogram(p, l, 3000);
  CHECK(h.size() == 3);
  CHECK(h.count(1) == 1);
  CHECK(h.count(4) == 1);
  CHECK(h.count(2) == 1);
}

TEST_CASE("min-p removes tokens below min_p times the top probability") {
  // probabilities at T=1 proportional to exp(l): 1, e^-1, e^-2, e^-3 relative to the top
  std::vector<float> l{0.0f, -1.0f, -2.0f, -3.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;  // keeps 1 and e^-1 = 0.37; drops e^-2 = 0.135 and e^-3
  const auto h = histogram(p, l, 4000);
  CHECK(h.size() == 2);
  CHECK(h.count(0) == 1);
  CHECK(h.count(1) == 1);
  // The survivors keep their ratio: e^-1 / (1 + e^-1) = 0.269.
  CHECK(std::abs(double(h.at(1)) / 4000.0 - 0.2689) < 0.03);
}

TEST_CASE("top-p keeps the smallest prefix reaching the mass") {
  // probs 0.5, 0.3, 0.2 (logits are their logs)
  std::vector<float> l{std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: ids 1 and 2
  const auto h = histogram(p, l, 3000);
  CHECK(h.size() == 2);
  CHECK(h.count(0) == 0);
  p.top_p = 0.45f;  // the first alone reaches it
  CHECK(histogram(p, l, 200).size() == 1);
}

TEST_CASE("sampled frequencies follow the softmax at the temperature") {
  std::vector<float> l{0.0f, std::log(3.0f)};  // 1 : 3 at T=1, 1 : sqrt(3) at T=2
  SamplingParams p;
  p.temperature = 2.0f;
  p.seed = 5;
  const auto h = histogram(p, l, 20000);
  const double expect = std::sqrt(3.0) / (1.0 + std::sqrt(3.0));
  CHECK(std::abs(double(h.at(1)) / 20000.0 - expect) < 0.015);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of seen ids") {
  std::vector<float> l{2.0f, -2.0f, 1.0f, 3.0f};
  const std::vector<int32_t> hist{0, 1, 0, 99};
  apply_repetition_penalty(l, hist, 2.0f, 64);
  CHECK(l[0] == 1.0f);  // once, even though 0 appears twice
  CHECK(l[1] == -4.0f);
  CHECK(l[2] == 1.0f);
  CHECK(l[3] == 3.0f);
  // Only the window counts.
  std::vector<float> m{2.0f, 2.0f};
  apply_repetition_penalty(m, std::vector<int32_t>{0, 1}, 2.0f, 1);
  CHECK(m[0] == 2.0f);
  CHECK(m[1] == 1.0f);
  // Through the sampler: greedy switches away from the repeated token.
  SamplingParams p;
  p.repetition_penalty = 4.0f;
  Sampler s(p);
  std::vector<float> g{3.0f, 1.0f};
  CHECK(s.sample(g, std::vector<int32_t>{0}) == 1);
}

TEST_CASE("bad parameters are refused") {
  SamplingParams p;
  p.top_p = 0.0f;
  CHECK_THROWS(Sampler{p});
  p = {};
  p.min_p = 1.0f;
  CHECK_THROWS(Sampler{p});
  p = {};
  p.top_k = -1;
  CHECK_THROWS(Sampler{p});
}

TEST_CASE("stop strings: split across pieces, never shown, prefix held back") {
  StopMatcher m({"</s>", "STOP"});
  CHECK(m.push("hello <") == "hello ");
  CHECK(m.push("/") == "");
  CHECK(m.push("x") == "</x");  // not a stop after all
  CHECK(m.push(" ST") == " ");
  CHECK(m.push("OP tail") == "");
  CHECK(m.stopped());
  CHECK(m.push("more") == "");
  StopMatcher n({"end"});
  CHECK(n.push("the en") == "the ");
  CHECK(n.flush() == "en");
  CHECK(!n.stopped());
  StopMatcher none({});
  CHECK(none.push("abc") == "abc");
}

TEST_CASE("sampling refuses NaN and +Inf logits (damaged weights), takes a constraint's -Inf") {
  SamplingParams p;
  Sampler greedy(p);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f};
  CHECK(greedy.sample(logits, {}) == 1);
  logits[0] = -std::numeric_limits<float>::infinity();
  CHECK(greedy.sample(logits, {}) == 1);
  logits[2] = std::nanf("");
  CHECK_THROWS_WITH_AS(greedy.sample(logits, {}), doctest::Contains("NaN or infinite logits"), waste::Error);
  logits[2] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(greedy.sample(logits, {}), waste::Error);
}
