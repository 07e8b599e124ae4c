// The Engine on a real container: a fixture written losslessly (f32) is opened, the trunk
// loaded, the embedding read per token from disk, and generate() reproduces the fixture's
// reference greedy continuation; chunked prefill matches the reference logits; stop reasons;
// the compute service's batched steps (fair to decoders, tokens as alone, cancel); the service's
// eval (Engine::prefill's and step_all's logits bit for bit, on a fresh state).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "compute/engine.h"
#include "compute/experts/resident_experts.h"
#include "compute/server/engine_service.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tests/support/fixture_container.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/fixture_dir.h"

using namespace waste;

namespace {

struct Fixture {
  test::TempDir tmp{"waste-unit-engine"};
  std::string model;
  std::vector<int32_t> prompt, greedy;
  std::vector<float> ref;
  Fixture() {
    const std::string dir = fixture_dir("kimi-linear");
    model = tmp / "kl.waste";
    test::write_fixture_container(Checkpoint::open(dir), model, test::FixtureStorage::F32, "unit-engine test");
    const auto j = nlohmann::json::parse(read_file_text(dir + "/reference_greedy.json", 1 << 20));
    prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
    greedy = j.at("generated_ids").get<std::vector<int32_t>>();
    const auto bytes = read_file_bytes(dir + "/reference_logits.f32", 64 << 20);
    ref.resize(bytes.size() / 4);
    std::memcpy(ref.data(), bytes.data(), bytes.size());
  }
};

EngineOptions options(const std::string& model) {
  EngineOptions o;
  o.model = model;
  o.context = 64;
  o.progress = false;
  return o;
}

std::vector<int32_t> generate(Engine& e, Session& s, std::span<const int32_t> prompt, int n, GenerateStats* st = nullptr) {
  SamplingParams p;  // greedy
  p.max_tokens = n;
  std::vector<int32_t> out;
  GenerateStats g = e.generate(s, prompt, p, [&](int32_t id, std::string_view) {
    if (id >= 0) out.push_back(id);
    return true;
  });
  if (st) *st = g;
  return out;
}

}  // namespace

TEST_CASE("engine: greedy generate reproduces the fixture's continuation; chunked prefill matches the reference") {
  Fixture f;
  Engine e(options(f.model));
  CHECK_FALSE(e.has_tokenizer());
  CHECK_THROWS_AS(e.tokenizer(), Error);

  Session s = e.new_session();
  CHECK(s.max_context() == 64);
  GenerateStats st;
  CHECK(generate(e, s, f.prompt, 16, &st) == f.greedy);
  CHECK(st.prompt_tokens == 24);
  CHECK(st.tokens == 16);
  CHECK(st.stop_reason == "max_tokens");
  CHECK(st.experts.hits + st.experts.misses > 0);
  CHECK(s.position() == 24 + 15);  // the last sampled token is not fed

  // Prefill in chunks of 5 (the last one short), every row against the reference.
  EngineOptions o = options(f.model);
  o.prefill_chunk = 5;
  Engine chunked(o);
  Session s2 = chunked.new_session();
  const int64_t V = chunked.config().vocab;
  std::vector<float> logits(f.prompt.size() * size_t(V));
  chunked.prefill(s2, f.prompt, logits.data(), LogitRows::All);
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, double(std::fabs(logits[i] - f.ref[i])));
  CHECK(worst <= 1e-3);

  // Every expert resident in RAM: the same tokens.
  Container c = Container::open(f.model);
  ResidentExperts resident(c, false);
  CHECK(resident.resident_bytes() > 0);
  o = options(f.model);
  o.experts = &resident;
  Engine with_resident(o);
  Session s3 = with_resident.new_session();
  CHECK(generate(with_resident, s3, f.prompt, 16) == f.greedy);
}

TEST_CASE("engine: stop reasons and context limits") {
  Fixture f;
  Engine e(options(f.model));
  SamplingParams p;
  p.max_tokens = 16;
  {
    Session s = e.new_session();
    int calls = 0;
    GenerateStats st = e.generate(s, f.prompt, p, [&](int32_t, std::string_view) { return ++calls < 2; });
    CHECK(st.stop_reason == "callback");
    CHECK(st.tokens == 2);
  }
  {
    Session s = e.new_session(26);  // room for the prompt and two fed tokens
    GenerateStats st;
    const auto out = generate(e, s, f.prompt, 16, &st);
    CHECK(st.stop_reason == "context");
    CHECK(out == std::vector<int32_t>(f.greedy.begin(), f.greedy.begin() + 3));
  }
  {
    Session s = e.new_session(24);  // the prompt alone fills it: refused
    CHECK_THROWS_AS(generate(e, s, f.prompt, 4), Error);
  }
  EngineOptions bad = options(f.model);
  bad.prefill_chunk = 0;
  CHECK_THROWS_AS(Engine{bad}, Error);
  CHECK_THROWS_AS(Engine{options(f.tmp / "missing.waste")}, Error);
}

namespace {

// One request through the service; the result once its done callback ran.
struct Request {
  std::vector<int32_t> ids;
  std::promise<server::GenerateOutcome> outcome;
  std::function<void(int32_t)> on_token;  // extra work per token, on the worker thread
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);

  void submit(server::EngineService& svc, uint64_t session, std::vector<int32_t> prompt, int n) {
    SamplingParams p;  // greedy
    p.max_tokens = n;
    server::GenerateCallbacks cb;
    cb.token = [this](server::TokenEvent ev) {
      const int32_t id = ev.id;
      if (id < 0) return;
      ids.push_back(id);
      if (on_token) on_token(id);
    };
    cb.done = [this](server::GenerateOutcome o) { outcome.set_value(std::move(o)); };
    svc.generate(session, std::move(prompt), p, {}, cancel, std::move(cb));
  }
  server::GenerateOutcome wait() { return outcome.get_future().get(); }
};

}  // namespace

TEST_CASE("service: sessions decode in shared steps, a long prefill does not starve a decoder, tokens as alone") {
  Fixture f;
  server::ServiceOptions o;
  o.model = f.model;
  o.context = 64;
  o.prefill_chunk = 4;
  o.prompt_cache_bytes = 0;  // this test counts prefill steps: every prompt is prefilled whole
  o.live_sessions = 2;       // the two sessions' states in memory at once, so they share steps
  server::EngineService svc(o);
  const std::vector<int32_t> long_prompt(f.prompt.begin(), f.prompt.begin() + 24);  // 6 chunks
  const std::vector<int32_t> short_prompt(f.prompt.begin() + 3, f.prompt.begin() + 5);

  // Alone, one after the other.
  Request ya, xa;
  ya.submit(svc, svc.open(0), short_prompt, 30);
  REQUIRE(ya.wait().error.empty());
  xa.submit(svc, svc.open(0), long_prompt, 12);
  REQUIRE(xa.wait().error.empty());
  CHECK(xa.ids == std::vector<int32_t>(f.greedy.begin(), f.greedy.begin() + 12));
  const server::ServiceStats st0 = svc.stats();
  CHECK(st0.max_batch == 1);

  // Together: Y decodes; on its first token it submits X's long prompt (6 prefill chunks). Every
  // step takes Y's next token and one chunk of X: Y gets a token in each of X's prefill steps.
  const uint64_t ys = svc.open(0), xs = svc.open(0);
  Request y, x;
  size_t y_tokens_at_x_first = 0;
  x.on_token = [&](int32_t) {
    if (y_tokens_at_x_first == 0) y_tokens_at_x_first = y.ids.size();
  };
  y.on_token = [&](int32_t) {
    if (y.ids.size() == 1) x.submit(svc, xs, long_prompt, 12);
  };
  y.submit(svc, ys, short_prompt, 30);
  const server::GenerateOutcome oy = y.wait(), ox = x.wait();
  REQUIRE_MESSAGE(oy.error.empty(), oy.error);
  REQUIRE_MESSAGE(ox.error.empty(), ox.error);
  CHECK(y.ids == ya.ids);
  CHECK(x.ids == xa.ids);
  // Y's first token, then one per X prefill step (6), then the step of X's first token, in which
  // Y's token comes first.
  CHECK(y_tokens_at_x_first == 1 + 6 + 1);
  const server::ServiceStats st = svc.stats();
  CHECK(st.max_batch == 2);
  // Y feeds in 30 steps (its prompt, then 29 of its 30 tokens: the last is not fed), X in 17
  // (6 chunks, 11 tokens), all of X's inside Y's: 30 steps, 47 sessions in them.
  CHECK(st.batches - st0.batches == 30);
  CHECK(st.batched_sessions - st0.batched_sessions == 47);

  // Cancelled on its first token: ends "cancelled" after that token; the other goes on.
  Request c, d;
  c.on_token = [&](int32_t) { c.cancel->store(true); };
  c.submit(svc, svc.open(0), short_prompt, 30);
  d.submit(svc, svc.open(0), short_prompt, 5);
  CHECK(c.wait().stop_reason == "cancelled");
  CHECK(c.ids.size() == 1);
  CHECK(d.wait().stop_reason == "max_tokens");
  CHECK(d.ids == std::vector<int32_t>(ya.ids.begin(), ya.ids.begin() + 5));
}

namespace {

struct EvalResult {
  std::string error;
  std::vector<float> logits;
};

EvalResult eval_sync(server::EngineService& svc, uint64_t session, std::vector<int32_t> ids, bool stepwise) {
  std::promise<EvalResult> p;
  svc.eval(session, std::move(ids), stepwise,
           [&](std::exception_ptr failure, std::vector<float> logits) {
             std::string error;
             try {
               if (failure) std::rethrow_exception(failure);
             } catch (const std::exception& e) {
               error = e.what();
             }
             p.set_value({std::move(error), std::move(logits)});
           });
  return p.get_future().get();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("service: eval gives Engine::prefill's / step_all's logits bit for bit on a fresh state; the session is untouched") {
  Fixture f;
  server::ServiceOptions o;
  o.model = f.model;
  o.context = 64;
  o.max_context = 40000;
  o.prefill_chunk = 5;  // 24 ids: four full chunks and a short one
  server::EngineService svc(o);
  const size_t V = size_t(svc.config().vocab);

  // In-process references with the same prefill chunk.
  EngineOptions eo = options(f.model);
  eo.prefill_chunk = 5;
  Engine e(eo);
  std::vector<float> prefill_ref(f.prompt.size() * V), step_ref(f.prompt.size() * V);
  {
    Session s = e.new_session();
    e.prefill(s, f.prompt, prefill_ref.data(), LogitRows::All);
    Session t = e.new_session();
    e.step_all(t, f.prompt, step_ref.data());
  }

  // A session with a conversation: eval must neither read nor change it.
  const std::vector<int32_t> first(f.prompt.begin(), f.prompt.begin() + 6), more(f.prompt.begin() + 6, f.prompt.begin() + 9);
  const uint64_t a = svc.open(0), b = svc.open(0);
  Request ga, gb;
  ga.submit(svc, a, first, 4);
  gb.submit(svc, b, first, 4);
  REQUIRE(ga.wait().error.empty());
  REQUIRE(gb.wait().error.empty());
  const int64_t pos = svc.position(a);
  CHECK(pos == 6 + 4);

  const EvalResult pre = eval_sync(svc, a, f.prompt, false);
  REQUIRE_MESSAGE(pre.error.empty(), pre.error);
  CHECK(pre.logits.size() == f.prompt.size() * V);
  CHECK(same_bits(pre.logits, prefill_ref));
  const EvalResult step = eval_sync(svc, a, f.prompt, true);
  REQUIRE_MESSAGE(step.error.empty(), step.error);
  CHECK(same_bits(step.logits, step_ref));
  // Against the fixture's reference, as `waste eval` is checked (tests/integration/test_eval.cpp).
  double worst = 0, worst_step = 0;
  for (size_t i = 0; i < pre.logits.size(); ++i) {
    worst = std::max(worst, double(std::fabs(pre.logits[i] - f.ref[i])));
    worst_step = std::max(worst_step, double(std::fabs(step.logits[i] - pre.logits[i])));
  }
  CHECK(worst <= 1e-3);
  CHECK(worst_step <= 1e-3);
  // Again: the same bits (no state carried from one eval to the next).
  CHECK(same_bits(eval_sync(svc, a, f.prompt, false).logits, prefill_ref));

  CHECK(svc.position(a) == pos);
  CHECK(svc.snapshot(a).counters.requests == 1);
  // The session continues as one that never evaluated.
  Request ca, cb;
  ca.submit(svc, a, more, 6);
  cb.submit(svc, b, more, 6);
  REQUIRE(ca.wait().error.empty());
  REQUIRE(cb.wait().error.empty());
  CHECK(ca.ids == cb.ids);
  CHECK(ga.ids == gb.ids);

  // Refusals, at once and naming the limit.
  CHECK_THROWS_WITH_AS(svc.eval(a, {}, false, [](std::exception_ptr, std::vector<float>) {}), doctest::Contains("no tokens"), Error);
  CHECK_THROWS_WITH_AS(svc.eval(a, {1, int32_t(V)}, false, [](std::exception_ptr, std::vector<float>) {}),
                       doctest::Contains("outside the vocabulary"), Error);
  CHECK_THROWS_WITH_AS(svc.eval(a, std::vector<int32_t>(65, 0), false, [](std::exception_ptr, std::vector<float>) {}),
                       doctest::Contains("context of 64"), Error);
  const size_t over = server::EngineService::kMaxEvalLogitsBytes / (V * sizeof(float)) + 1;
  const uint64_t big = svc.open(int64_t(over));
  CHECK_THROWS_WITH_AS(svc.eval(big, std::vector<int32_t>(over, 0), false, [](std::exception_ptr, std::vector<float>) {}),
                       doctest::Contains("64 MiB"), Error);
  svc.close(big);
  CHECK_THROWS_AS(svc.eval(big, {1}, false, [](std::exception_ptr, std::vector<float>) {}), Error);  // closed
  // A full context is fine (at most the session's context).
  const uint64_t small = svc.open(int64_t(f.prompt.size()));
  const EvalResult full = eval_sync(svc, small, f.prompt, false);
  REQUIRE_MESSAGE(full.error.empty(), full.error);
  CHECK(same_bits(full.logits, prefill_ref));
}
