// mask() against allows() over the whole vocabulary, on several states, with the synthetic and
// the o200k vocabularies; special ids and ids past the vocabulary are never allowed.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <vector>

#include "compute/constrain/grammar_matcher.h"
#include "tests/unit/constrain/constrain_fixture.h"

using namespace waste::constrain;
namespace tok = waste::tok;
using ojson = nlohmann::ordered_json;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
  "short":{"type":"string","maxLength":4},"any":{}},"required":["name","n"]})";

// Prefixes that leave the matcher in different kinds of state.
const std::vector<std::string> kPrefixes = {
    "", "{", "{\"", "{\"name\":", "{\"name\":\"ab", "{\"name\":\"ab\\", "{\"name\":\"\xE2\x82", "{\"name\":\"x\",\"n\":1",
    "{\"name\":\"x\",\"n\":-", "{\"name\":\"x\",\"n\":0,\"tags\":[", "{\"name\":\"x\",\"n\":0,\"short\":\"abc",
    "{\"name\":\"x\",\"n\":0,\"any\":[{\"k\":", "{\"name\":\"x\",\"n\":0}",
    // inside a bounded string's multi-byte character / escape (a called rule with a wide FOLLOW)
    "{\"name\":\"x\",\"n\":0,\"short\":\"a\xE2\x82", "{\"name\":\"x\",\"n\":0,\"short\":\"ab\\u00"};

void agree(const std::shared_ptr<const TokenVocabulary>& v, const tok::Tokenizer& t) {
  const auto g = compile_json_schema(ojson::parse(kSchema), "test");
  for (const std::string& p : kPrefixes) {
    CAPTURE(p);
    GrammarMatcher m(g, v);
    REQUIRE(m.accept_bytes(p));
    // allows() before mask(): its own byte walk, not the mask's bits.
    std::vector<char> allowed(v->size() + 16);
    size_t n_allowed = 0;
    for (uint32_t id = 0; id < allowed.size(); ++id) n_allowed += allowed[id] = m.allows(id);
    std::vector<float> logits(allowed.size(), 1.0f);
    m.mask(logits);
    size_t mismatches = 0;
    for (uint32_t id = 0; id < allowed.size(); ++id) {
      const bool masked = std::isinf(logits[id]) && logits[id] < 0;
      if (masked == bool(allowed[id])) {
        if (++mismatches < 5) MESSAGE("id " << id << " '" << std::string(v->bytes(id)) << "' allows=" << int(allowed[id]));
      }
    }
    CHECK(mismatches == 0);
    // A second matcher in the same state (cached entries) gives the same mask.
    GrammarMatcher m2(g, v);
    REQUIRE(m2.accept_bytes(p));
    std::vector<float> logits2(allowed.size(), 1.0f);
    m2.mask(logits2);
    CHECK(logits2 == logits);
    for (uint32_t id = 0; id < t.vocab_size(); ++id)
      if (t.is_special(id)) REQUIRE_FALSE(allowed[id]);
    for (uint32_t id = v->size(); id < allowed.size(); ++id) REQUIRE_FALSE(allowed[id]);
    // Every prefix keeps the document completable: something is allowed until it is complete.
    CHECK((n_allowed > 0 || m.complete()));
  }
}

}  // namespace

TEST_CASE("mask: agrees with allows on every id (synthetic vocabulary)") {
  agree(test::synthetic_vocab(), test::synthetic());
}

TEST_CASE("mask: agrees with allows on every id (o200k)") {
  if (!test::o200k()) return;
  agree(test::o200k_vocab(), *test::o200k());
}

TEST_CASE("mask: specials are never allowed, even where any text is") {
  const tok::Tokenizer& t = test::synthetic();
  const auto v = test::synthetic_vocab();
  REQUIRE(v->size() == t.vocab_size());
  int specials = 0;
  for (uint32_t id = 0; id < t.vocab_size(); ++id) {
    CHECK(v->ordinary(id) == !t.is_special(id));
    specials += t.is_special(id);
  }
  CHECK(specials == 256);
  GrammarMatcher m(compile_json_schema(ojson::parse(R"({"type":"string"})"), "test"), v);
  REQUIRE(m.accept_bytes("\""));
  std::vector<float> logits(t.vocab_size() + 100, 0.0f);
  m.mask(logits);
  for (uint32_t id = 0; id < logits.size(); ++id) {
    if (id >= t.vocab_size() || t.is_special(id)) REQUIRE(std::isinf(logits[id]));
  }
  // Inside a string nearly every ordinary token fits.
  size_t open = 0;
  for (float l : logits) open += !std::isinf(l);
  CHECK(open > 3500);
}

TEST_CASE("mask: accept refuses what allows refuses and leaves the state unchanged") {
  const auto v = test::synthetic_vocab();
  GrammarMatcher m(compile_json_schema(ojson::parse(R"({"type":"integer"})"), "test"), v);
  const uint32_t a = test::synthetic().encode("a")[0];
  const uint32_t seven = test::synthetic().encode("7")[0];
  CHECK_FALSE(m.allows(a));
  CHECK_FALSE(m.accept(a));
  CHECK(m.accept(seven));
  CHECK(m.complete());
  CHECK(m.can_continue());
}
