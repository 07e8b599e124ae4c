// Shared pieces of the unit-constrain tests: the vocabularies (o200k from WASTE_SHARED_DIR,
// the synthetic one), the skip rule, an independent JSON-schema validator and a random-logit
// generator that drives GrammarMatcher the way the engine will.
#pragma once
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compute/constrain/grammar_matcher.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste::constrain::test {

// Set when a test could not find /work/shared: the binary then exits 77 (meson: SKIP) instead
// of passing, unless something failed (skip_listener.cpp).
bool& shared_missing();

// o200k_base with the Kimi-Linear special layout after its ranks (specials and reserved ids),
// or nullptr (and shared_missing()) when WASTE_SHARED_DIR/tokenizers is not there.
const tok::Tokenizer* o200k();
std::shared_ptr<const TokenVocabulary> o200k_vocab();
// The synthetic vocabulary of `waste synth` (4096 base tokens + Kimi-Linear specials).
const tok::Tokenizer& synthetic();
std::shared_ptr<const TokenVocabulary> synthetic_vocab();

// Validates `doc` against `schema` (the keywords the tests use; independent of the grammar
// code). Returns "" when valid, else what is wrong and where.
std::string validate(const nlohmann::ordered_json& doc, const nlohmann::ordered_json& schema);

struct Generated {
  std::string text;
  int tokens = 0;
  bool complete = false;
  int masks = 0;
};

// Random logits (seeded), softmax sampling at `temperature`: sample; if not allowed, mask and
// sample again; an end-of-reply id competes once complete(). A bias towards tokens that contain
// '"', '}' or ']' grows with the step so replies end well inside max_tokens.
Generated generate(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocabulary>& v,
                   std::mt19937_64& rng, float temperature, int max_tokens);

}  // namespace waste::constrain::test
