// waste-bench-grammar: the cost of grammar-constrained sampling (compute/constrain/).
//
//   waste-bench-grammar [--vocab synthetic|o200k|FILE.tiktoken] [MODEL.waste] [-n TOKENS] [--rounds R]
//
// (a) Per schema: replies generated with random logits over a full-size vocabulary (the
//     163,840 ids of a `waste synth` Kimi model by default; o200k's 200,019; or a model's own),
//     sampled at temperature 1 the way the engine will (sample; if the grammar refuses the
//     token, mask() and sample again). Random logits make nearly every step call mask(): the
//     worst case. Prints per token the grammar's time (allows + mask + accept), mask() mean,
//     99th percentile and worst, and the trie walks (mask-cache misses).
// (b) With MODEL: decode tok/s of the model in-process (every expert in RAM, as
//     waste-bench-batch) on one prompt, rounds alternating without and with the grammar, so the
//     machine's load hits both alike; a reply that completes starts a new one (a fresh matcher)
//     so every round decodes TOKENS tokens.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/constrain/grammar_matcher.h"
#include "compute/constrain/mask_cache.h"
#include "compute/engine.h"
#include "compute/experts/resident_experts.h"
#include "shared/container/reader.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/error.h"
#include "tools/synth/synth_tokenizer.h"

using namespace waste;
using namespace waste::constrain;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: waste-bench-grammar [--vocab synthetic|o200k|FILE.tiktoken] [MODEL.waste] [-n TOKENS] [--rounds R]\n"
    "                           [--replies N] [--seed S]\n"
    "  --vocab     vocabulary for (a): synthetic (163,840 ids, as `waste synth` makes; default), o200k\n"
    "              (WASTE_SHARED_DIR or ../shared/tokenizers/o200k_base.tiktoken) or a rank file;\n"
    "              with MODEL and no --vocab, the model's tokenizer\n"
    "  MODEL       a container: also measure decode tok/s with and without the grammar\n"
    "  -n          tokens per decode round (default 48); --rounds: rounds per mode (default 3)\n"
    "  --replies   replies per schema in (a) (default 8, each at most 400 tokens)\n";

struct Schema {
  const char* name;
  const char* json;  // nullptr: json_object
};

const Schema kSchemas[] = {
    {"flat", R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
       "email":{"type":"string"}},"required":["name","age","email"],"additionalProperties":false})"},
    {"optional", R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"},
       "c":{"type":"boolean"},"d":{"type":"null"}},"required":["b"]})"},
    {"nested", R"({"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer"},
       "profile":{"type":"object","properties":{"nick":{"type":"string"},"score":{"type":"number"}},
       "required":["nick"]}},"required":["id","profile"]}},"required":["user"]})"},
    {"arrays", R"({"type":"object","properties":{"xs":{"type":"array","items":{"type":"integer"},"minItems":2,
       "maxItems":5},"pairs":{"type":"array","items":{"type":"array","items":{"type":"string"},"minItems":1,
       "maxItems":2},"maxItems":3}},"required":["xs","pairs"]})"},
    {"enums", R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},
       "size":{"enum":[1,2.5,-3,100]}},"required":["color","size"]})"},
    {"anyOf", R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"x":{"type":"number"}},
       "required":["x"]},{"type":"array","items":{"type":"boolean"},"maxItems":3}]})"},
    {"refs", R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
       "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"]}},
       "$ref":"#/$defs/node"})"},
    {"maxLength", R"({"type":"object","properties":{"code":{"type":"string","minLength":2,"maxLength":8},
       "note":{"type":"string","maxLength":40}},"required":["code","note"]})"},
    {"tool-call", R"({"type":"object","properties":{"location":{"type":"string","description":"City"},
       "unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"},
       "details":{"type":"boolean"}},"required":["location","unit"],"additionalProperties":false})"},
    {"json_object", nullptr},
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// This thread's CPU time: immune to the preemptions of a shared, loaded machine (a wall-clock
// worst case there is mostly a time slice given to another process).
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
}

// Wall and CPU time of one measured span.
struct Span {
  Clock::time_point w = Clock::now();
  double c = thread_cpu_ms();
  double wall() const { return ms_since(w); }
  double cpu() const { return thread_cpu_ms() - c; }
};

std::shared_ptr<const Grammar> grammar_of(const Schema& s) {
  return s.json ? compile_json_schema(ojson::parse(s.json), std::string("schema ") + s.name) : any_json_object();
}

// The vocabulary of a `waste synth` Kimi-Linear model (vocab 163,840: 163,584 ranks + specials).
std::unique_ptr<tok::Tokenizer> synthetic_tokenizer() {
  ModelConfig c;
  c.arch = Arch::KimiLinear;
  c.vocab = 163840;
  const SynthTokenizer st = synth_tokenizer(c);
  return std::make_unique<tok::Tokenizer>(tok::BpeRanks::parse(st.ranks_text, "synthetic"),
                                          tok::TokenizerConfig::parse(st.config_json, "synthetic"), "synthetic");
}

std::unique_ptr<tok::Tokenizer> rank_file_tokenizer(const std::string& path) {
  tok::BpeRanks r = tok::BpeRanks::load_file(path);
  const uint32_t n = r.rank_end();
  return std::make_unique<tok::Tokenizer>(std::move(r), tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear, n), path);
}

std::string o200k_path() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  return std::string(dir ? dir : "../shared") + "/tokenizers/o200k_base.tiktoken";
}

// A cheap uniform stream for 163k logits per step.
struct FastRng {
  uint64_t s;
  float next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return float(s >> 40) * (1.0f / float(1 << 24));
  }
};

int sample(const std::vector<float>& logits, std::mt19937_64& rng) {
  float top = -INFINITY;
  for (float l : logits) top = std::max(top, l);
  double total = 0;
  std::vector<double> w(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) total += w[i] = std::isinf(logits[i]) ? 0.0 : std::exp(logits[i] - top);
  double r = std::uniform_real_distribution<double>(0, total)(rng);
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0 && r < w[i]) return int(i);
    r -= w[i];
  }
  return -1;
}

struct Times {
  std::vector<double> step, mask, step_cpu, mask_cpu;  // ms: grammar work per token; each mask() call
  int replies = 0, complete = 0;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// (a): random-logit replies; the closing bias (tokens with '"', '}' or ']' gain 0.1 per step)
// makes replies end, as a model's would.
Times random_replies(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocabulary>& v,
                     int replies, uint64_t seed) {
  Times t;
  std::mt19937_64 rng(seed);
  FastRng fr{seed | 1};
  const uint32_t end_id = v->size();
  std::vector<float> logits(size_t(end_id) + 1);
  std::vector<uint8_t> closer(end_id, 0);
  for (uint32_t id = 0; id < end_id; ++id)
    for (char c : v->bytes(id)) closer[id] |= c == '"' || c == '}' || c == ']';
  for (int r = 0; r < replies; ++r) {
    GrammarMatcher m(g, v);
    ++t.replies;
    for (int step = 0; step < 400; ++step) {
      const float bias = 0.1f * float(step);
      for (uint32_t id = 0; id < end_id; ++id) logits[id] = 4.0f * fr.next() + (closer[id] ? bias : 0.0f);
      logits[end_id] = m.complete() ? 4.0f + bias : -INFINITY;
      int id = sample(logits, rng);
      double wall = 0, cpu = 0;
      Span a;
      const bool allowed = id == int(end_id) || m.allows(uint32_t(id));
      wall += a.wall();
      cpu += a.cpu();
      if (!allowed) {
        Span k;
        m.mask(logits);
        t.mask.push_back(k.wall());
        t.mask_cpu.push_back(k.cpu());
        wall += t.mask.back();
        cpu += t.mask_cpu.back();
        logits[end_id] = m.complete() ? 4.0f + bias : -INFINITY;
        id = sample(logits, rng);  // (sampling itself is not the grammar's cost)
      }
      if (id < 0 || id == int(end_id)) break;
      Span c;
      require(m.accept(uint32_t(id)), "accept refused an allowed token");
      t.step.push_back(wall + c.wall());
      t.step_cpu.push_back(cpu + c.cpu());
      if (!m.can_continue()) break;
    }
    t.complete += m.complete();
  }
  return t;
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct DecodeResult {
  double seconds = 0, cpu_seconds = 0, grammar_seconds = 0;
  int tokens = 0, masks = 0, documents = 0;
};

// One round of N decode steps from a fresh session, with or without the grammar.
DecodeResult decode_round(Engine& e, const std::vector<int32_t>& prompt, int n, const std::shared_ptr<const Grammar>& g,
                          const std::shared_ptr<const TokenVocabulary>& v, uint64_t seed) {
  Session s = e.new_session(int64_t(prompt.size()) + n + 8);
  std::vector<float> logits(size_t(e.config().vocab));
  e.prefill(s, prompt, logits.data());
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = seed;
  Sampler sampler(sp);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::unique_ptr<GrammarMatcher> m;
  if (g) m = std::make_unique<GrammarMatcher>(g, v);
  DecodeResult r;
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  for (int i = 0; i < n; ++i) {
    int32_t id = sampler.sample(logits, history);
    if (m) {
      const auto tg = Clock::now();
      if (!m->allows(uint32_t(id))) {
        m->mask(logits);
        ++r.masks;
        r.grammar_seconds += ms_since(tg) / 1e3;
        id = sampler.sample(logits, history);
      } else {
        r.grammar_seconds += ms_since(tg) / 1e3;
      }
      const auto ta = Clock::now();
      require(m->accept(uint32_t(id)), "decode: accept refused a masked-in token");
      if (!m->can_continue()) {  // a whole document: the next reply starts
        ++r.documents;
        m = std::make_unique<GrammarMatcher>(g, v);
      }
      r.grammar_seconds += ms_since(ta) / 1e3;
    }
    history.push_back(id);
    ++r.tokens;
    e.model().forward(s, std::span<const int32_t>(&history.back(), 1), logits.data());
  }
  r.seconds = ms_since(t0) / 1e3;
  r.cpu_seconds = process_cpu_seconds() - c0;
  return r;
}

int bench(Engine* engine, const std::string& model, std::string vocab_name, int n, int rounds, int replies,
          uint64_t seed);

int run(int argc, char** argv) {
  std::string vocab_name, model;
  int n = 48, rounds = 3, replies = 8;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      require(i + 1 < argc, a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--vocab") vocab_name = value();
    else if (a == "-n") n = std::atoi(value().c_str());
    else if (a == "--rounds") rounds = std::atoi(value().c_str());
    else if (a == "--replies") replies = std::atoi(value().c_str());
    else if (a == "--seed") seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (model.empty() && !a.empty() && a[0] != '-') model = a;
    else throw Error("unknown argument " + a + "\n" + kUsage);
  }
  require(n >= 1 && n <= 4096, "-n must be 1..4096");
  require(rounds >= 1 && rounds <= 100, "--rounds must be 1..100");
  require(replies >= 1 && replies <= 1000, "--replies must be 1..1000");

  if (model.empty()) return bench(nullptr, model, vocab_name, n, rounds, replies, seed);
  // The container outlives the experts read from it, and both the engine.
  Container container = Container::open(model);
  ResidentExperts experts(container, false);
  EngineOptions eo;
  eo.model = model;
  eo.context = 4096;
  eo.progress = false;
  eo.experts = &experts;
  Engine engine(eo);
  return bench(&engine, model, vocab_name, n, rounds, replies, seed);
}

int bench(Engine* engine, const std::string& model, std::string vocab_name, int n, int rounds, int replies,
          uint64_t seed) {
  auto t0 = Clock::now();
  std::unique_ptr<tok::Tokenizer> own;
  const tok::Tokenizer* tk = nullptr;
  if (vocab_name.empty() && engine) {
    tk = &engine->tokenizer();
    vocab_name = "model";
  } else {
    if (vocab_name.empty() || vocab_name == "synthetic") own = synthetic_tokenizer();
    else if (vocab_name == "o200k") own = rank_file_tokenizer(o200k_path());
    else own = rank_file_tokenizer(vocab_name);
    tk = own.get();
  }
  const double tok_ms = ms_since(t0);
  t0 = Clock::now();
  auto vocab = std::make_shared<const TokenVocabulary>(*tk);
  std::printf("vocabulary %s: %u ids (%u ordinary), trie %u nodes, longest token %u bytes; tokenizer %.0f ms, "
              "TokenVocabulary %.0f ms\n",
              vocab_name.empty() ? "synthetic" : vocab_name.c_str(), vocab->size(), vocab->ordinary_count(),
              vocab->node_count(), vocab->max_token_bytes(), tok_ms, ms_since(t0));

  std::printf("\n(a) random logits, %d replies per schema (at most 400 tokens each). ms of grammar work per token\n"
              "    (allows + mask + accept, thread CPU time) and per mask() call (CPU and wall time); walks: mask-cache\n"
              "    misses (a trie walk each) and their total time\n",
              replies);
  std::printf("%-12s %8s %6s %6s %5s |%6s %6s |%6s %6s %6s |%6s %6s %6s |%6s %7s\n", "", "", "", "", "",
              "token", "cpu", "mask", "cpu", "", "mask", "wall", "", "", "");
  std::printf("%-12s %8s %6s %6s %5s |%6s %6s |%6s %6s %6s |%6s %6s %6s |%6s %7s\n", "schema", "compile", "states",
              "tokens", "masks", "mean", "worst", "mean", "p99", "worst", "mean", "p99", "worst", "walks", "walk ms");
  Times all;
  for (const Schema& s : kSchemas) {
    t0 = Clock::now();
    const auto g = grammar_of(s);
    const double compile_ms = ms_since(t0);
    const Times t = random_replies(g, vocab, replies, seed);
    const MaskCacheStats cs = g->mask_cache(vocab)->stats();
    std::printf("%-12s %6.2fms %6u %6zu %5zu |%6.3f %6.2f |%6.3f %6.2f %6.2f |%6.3f %6.2f %6.2f |%6llu %7.1f  %d/%d complete\n",
                s.name, compile_ms, g->stats().states, t.step.size(), t.mask.size(), mean(t.step_cpu),
                pct(t.step_cpu, 1.0), mean(t.mask_cpu), pct(t.mask_cpu, 0.99), pct(t.mask_cpu, 1.0), mean(t.mask),
                pct(t.mask, 0.99), pct(t.mask, 1.0), (unsigned long long)cs.misses, 1e3 * cs.walk_seconds, t.complete,
                t.replies);
    for (auto [to, from] : {std::pair{&all.step, &t.step}, {&all.mask, &t.mask}, {&all.step_cpu, &t.step_cpu},
                            {&all.mask_cpu, &t.mask_cpu}})
      to->insert(to->end(), from->begin(), from->end());
    std::fflush(stdout);
  }
  std::printf("%-12s %8s %6s %6zu %5zu |%6.3f %6.2f |%6.3f %6.2f %6.2f |%6.3f %6.2f %6.2f |\n", "all", "", "",
              all.step.size(), all.mask.size(), mean(all.step_cpu), pct(all.step_cpu, 1.0), mean(all.mask_cpu),
              pct(all.mask_cpu, 0.99), pct(all.mask_cpu, 1.0), mean(all.mask), pct(all.mask, 0.99), pct(all.mask, 1.0));

  if (!engine) return 0;
  // Two grammars: tool-call arguments (mostly free text: most sampled tokens fit a string) and
  // a list of bounded integers (few tokens fit: mask() nearly every step, the worst case).
  const Schema kDecodeSchemas[] = {kSchemas[8],
                                   {"int-list", R"({"type":"object","properties":{"xs":{"type":"array","items":
                                       {"type":"integer","minimum":0,"maximum":1000}},"ok":{"type":"boolean"}},
                                       "required":["xs","ok"]})"}};
  std::vector<std::shared_ptr<const Grammar>> grammars = {nullptr};
  for (const Schema& s : kDecodeSchemas) grammars.push_back(grammar_of(s));
  auto mvocab = std::make_shared<const TokenVocabulary>(engine->tokenizer());
  // Plain text (the chat API is the server's business; any prompt costs the same per step).
  const std::vector<int32_t> prompt =
      engine->encode("What is the weather in Paris? Reply with the tool call arguments as JSON.");
  std::printf("\n(b) decode %s: vocab %lld, prompt %zu tokens, %d rounds x %d tokens per mode (modes interleaved),\n"
              "    temperature 1; cpu: the process's CPU time (all threads; steadier than wall time on a loaded\n"
              "    machine); the grammar's own time per token is wall time\n",
              model.c_str(), (long long)engine->config().vocab, prompt.size(), rounds, n);
  decode_round(*engine, prompt, 4, nullptr, mvocab, seed);  // warm-up: pages, caches, the pool
  std::vector<DecodeResult> acc(grammars.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < grammars.size(); ++k) {
      const size_t mode = (k + size_t(r)) % grammars.size();  // rotate the order per round
      const DecodeResult x = decode_round(*engine, prompt, n, grammars[mode], mvocab, seed + uint64_t(r));
      acc[mode].seconds += x.seconds;
      acc[mode].cpu_seconds += x.cpu_seconds;
      acc[mode].grammar_seconds += x.grammar_seconds;
      acc[mode].tokens += x.tokens;
      acc[mode].masks += x.masks;
      acc[mode].documents += x.documents;
    }
  }
  const double tps_plain = acc[0].tokens / acc[0].seconds;
  std::printf("%-20s %8s %10s %12s %16s %7s %9s %10s %10s\n", "mode", "tok/s", "ms/token", "cpu ms/token",
              "grammar ms/token", "masks", "documents", "tok/s vs", "cpu vs");
  for (size_t k = 0; k < grammars.size(); ++k) {
    const DecodeResult& x = acc[k];
    const double tps = x.tokens / x.seconds;
    const double cpu = 1e3 * x.cpu_seconds / x.tokens, cpu_plain = 1e3 * acc[0].cpu_seconds / acc[0].tokens;
    if (k == 0) {
      std::printf("%-20s %8.2f %10.1f %12.1f %16s %7s %9s %10s %10s\n", "plain", tps, 1e3 / tps, cpu, "-", "-", "-", "-",
                  "-");
    } else {
      const std::string name = std::string("grammar ") + kDecodeSchemas[k - 1].name;
      std::printf("%-20s %8.2f %10.1f %12.1f %16.3f %7d %9d %9.1f%% %9.1f%%   (grammar work %.2f%% of decode time)\n",
                  name.c_str(), tps, 1e3 / tps, cpu, 1e3 * x.grammar_seconds / x.tokens, x.masks, x.documents,
                  100.0 * tps / tps_plain, 100.0 * cpu / cpu_plain, 100.0 * x.grammar_seconds / x.seconds);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste-bench-grammar: %s\n", e.what());
    return 1;
  }
}
