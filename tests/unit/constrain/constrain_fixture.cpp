#include "tests/unit/constrain/constrain_fixture.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/tokenizer_config.h"

namespace waste::constrain::test {

bool& shared_missing() {
  static bool missing = false;
  return missing;
}

const tok::Tokenizer* o200k() {
  static const std::unique_ptr<tok::Tokenizer> t = []() -> std::unique_ptr<tok::Tokenizer> {
    const char* dir = std::getenv("WASTE_SHARED_DIR");
    if (!dir) return nullptr;
    const std::string path = std::string(dir) + "/tokenizers/o200k_base.tiktoken";
    if (!std::filesystem::exists(path)) return nullptr;
    tok::BpeRanks ranks = tok::BpeRanks::load_file(path);
    const uint32_t n = ranks.rank_end();
    return std::make_unique<tok::Tokenizer>(std::move(ranks), tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear, n),
                                            "o200k");
  }();
  if (!t) {
    shared_missing() = true;
    MESSAGE("no o200k_base.tiktoken under WASTE_SHARED_DIR: skipped");
  }
  return t.get();
}

std::shared_ptr<const TokenVocabulary> o200k_vocab() {
  static const std::shared_ptr<const TokenVocabulary> v =
      o200k() ? std::make_shared<const TokenVocabulary>(*o200k()) : nullptr;
  if (!v) shared_missing() = true;
  return v;
}

const tok::Tokenizer& synthetic() {
  static const tok::Tokenizer t(tok::synthetic_ranks(),
                                tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear, 256 + tok::kSyntheticDefaultMerges),
                                "synthetic");
  return t;
}

std::shared_ptr<const TokenVocabulary> synthetic_vocab() {
  static const std::shared_ptr<const TokenVocabulary> v = std::make_shared<const TokenVocabulary>(synthetic());
  return v;
}

namespace {

using ojson = nlohmann::ordered_json;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_type(const ojson& d, const std::string& t) {
  if (t == "null") return d.is_null();
  if (t == "boolean") return d.is_boolean();
  if (t == "string") return d.is_string();
  if (t == "number") return d.is_number();
  if (t == "integer")
    return d.is_number_integer() || (d.is_number_float() && std::floor(d.get<double>()) == d.get<double>());
  if (t == "object") return d.is_object();
  if (t == "array") return d.is_array();
  return false;
}

std::string check(const ojson& d, const ojson& s, const ojson& root, const std::string& at) {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return check(d, root.at(ojson::json_pointer(ref.substr(1))), root, at);
  }
  if (s.contains("anyOf")) {
    for (const ojson& a : s["anyOf"])
      if (check(d, a, root, at).empty()) return "";
    return at + ": matches no anyOf branch";
  }
  if (s.contains("const") && d != s["const"]) return at + ": not the const";
  if (s.contains("enum")) {
    bool in = false;
    for (const ojson& e : s["enum"]) in = in || e == d;
    if (!in) return at + ": not in the enum";
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) ok = is_type(d, s["type"]);
    else
      for (const ojson& t : s["type"]) ok = ok || is_type(d, t);
    if (!ok) return at + ": not of type " + s["type"].dump();
  }
  if (d.is_number()) {
    const double x = d.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": not below exclusiveMaximum";
  }
  if (d.is_string()) {
    const size_t n = code_points(d.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return at + ": shorter than minLength";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return at + ": longer than maxLength";
  }
  if (d.is_array()) {
    if (s.contains("minItems") && d.size() < s["minItems"].get<size_t>()) return at + ": fewer than minItems";
    if (s.contains("maxItems") && d.size() > s["maxItems"].get<size_t>()) return at + ": more than maxItems";
    if (s.contains("items"))
      for (size_t i = 0; i < d.size(); ++i) {
        std::string e = check(d[i], s["items"], root, at + "/" + std::to_string(i));
        if (!e.empty()) return e;
      }
  }
  if (d.is_object()) {
    if (s.contains("required"))
      for (const ojson& r : s["required"])
        if (!d.contains(r.get<std::string>())) return at + ": missing required " + r.dump();
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
    for (const auto& [k, v] : d.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        std::string e = check(v, s["properties"][k], root, at + "/" + k);
        if (!e.empty()) return e;
      } else if (closed) {
        return at + ": additional property " + k;
      }
    }
  }
  return "";
}

// A cheap deterministic stream of uniform floats for the logits (200k per step).
struct FastRng {
  uint64_t s;
  float next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return float(s >> 40) * (1.0f / float(1 << 24));
  }
};

int sample(const std::vector<float>& logits, float temperature, std::mt19937_64& rng) {
  float top = -INFINITY;
  for (float l : logits) top = std::max(top, l);
  double total = 0;
  std::vector<double> w(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) total += w[i] = std::isinf(logits[i]) ? 0.0 : std::exp((logits[i] - top) / temperature);
  double r = std::uniform_real_distribution<double>(0, total)(rng);
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0 && r < w[i]) return int(i);
    r -= w[i];
  }
  for (size_t i = w.size(); i-- > 0;)
    if (w[i] > 0) return int(i);
  return -1;
}

}  // namespace

std::string validate(const nlohmann::ordered_json& doc, const nlohmann::ordered_json& schema) {
  return check(doc, schema, schema, "");
}

Generated generate(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocabulary>& v,
                   std::mt19937_64& rng, float temperature, int max_tokens) {
  GrammarMatcher m(g, v);
  const uint32_t end_id = v->size();  // stands for the end-of-reply token, outside the vocabulary
  std::vector<float> logits(size_t(end_id) + 1);
  // Which tokens close something: the bias that ends replies.
  std::vector<uint8_t> closer(end_id, 0);
  for (uint32_t id = 0; id < end_id; ++id)
    for (char c : v->bytes(id)) closer[id] |= c == '"' || c == '}' || c == ']';
  FastRng fr{rng() | 1};
  Generated out;
  for (int step = 0; step < max_tokens; ++step) {
    const float bias = 0.1f * float(step);
    for (uint32_t id = 0; id < end_id; ++id) logits[id] = 4.0f * fr.next() + (closer[id] ? bias : 0.0f);
    logits[end_id] = m.complete() ? 4.0f * fr.next() + bias : -INFINITY;
    int id = sample(logits, temperature, rng);
    if (id != int(end_id) && !m.allows(uint32_t(id))) {
      m.mask(logits);
      ++out.masks;
      logits[end_id] = m.complete() ? 4.0f * fr.next() + bias : -INFINITY;
      id = sample(logits, temperature, rng);
    }
    if (id < 0 || id == int(end_id)) break;
    REQUIRE(m.accept(uint32_t(id)));
    out.text += v->bytes(uint32_t(id));
    ++out.tokens;
    if (!m.can_continue()) break;
  }
  out.complete = m.complete();
  return out;
}

}  // namespace waste::constrain::test
