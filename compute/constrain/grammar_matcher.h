// Grammar-constrained sampling: the state of one request's reply against its grammar, and the
// token mask for the next step.
//
//   auto vocab = std::make_shared<const TokenVocabulary>(tokenizer);   // once per tokenizer
//   auto g = compile_json_schema(schema, "response_format.json_schema.schema");
//   GrammarMatcher m(g, vocab);
//   each step: id = sample(logits); if (!m.allows(id)) { m.mask(logits); id = sample(logits); }
//              m.accept(id); if (m.complete()) the end-of-reply token may be sampled too;
//              if (!m.can_continue()) the reply is over.
//
// Special ids and ids outside the vocabulary are never allowed: the caller decides about the
// end-of-reply token from complete(). Any token allowed keeps the reply completable (a matcher
// never gets stuck), so a reply that ends at complete() always parses and validates.
// allows/mask/accept throw waste::Error only if the grammar has more than kMaxStacks
// alternatives open at once (a pathological schema); the request should then fail.
// Thread safety: one matcher per request; grammars and vocabularies are shared freely.
// Docs: docs/CONSTRAIN.md.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/constrain/grammar.h"
#include "compute/constrain/json_schema.h"
#include "compute/constrain/stack_set.h"
#include "compute/constrain/token_vocabulary.h"

namespace waste::constrain {

struct TokenSetEntry;
class MaskCache;

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> v);

  // Cheap check of one token (walks its bytes; no mask).
  bool allows(uint32_t id) const;
  // Sets every disallowed id (specials and ids >= vocabulary size included) to -INFINITY.
  void mask(std::span<float> logits);
  // Advances by one token; false (state unchanged) if it is not allowed.
  bool accept(uint32_t id);
  // The bytes so far are one whole valid document.
  bool complete() const { return state_.popped; }
  // Some further byte is allowed.
  bool can_continue() const { return !state_.stacks.empty(); }

  // Byte level, for tests and tools: whether these bytes may come next / advance by them.
  bool allows_bytes(std::string_view bytes) const;
  bool accept_bytes(std::string_view bytes);
  // The allowed ids as a bitset over vocabulary ids (what mask() applies).
  const std::vector<uint64_t>& allowed_bits();

  const Grammar& grammar() const { return *g_; }
  const TokenVocabulary& vocabulary() const { return *v_; }
  std::shared_ptr<MaskCache> cache() const { return cache_; }

 private:
  bool run(const StackSet& from, std::string_view bytes, StackSet* out) const;
  void compute_bits(std::vector<uint64_t>& bits);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocabulary> v_;
  std::shared_ptr<MaskCache> cache_;
  StackSet state_;
  // Masks of recently seen states (JSON revisits states: each element of an array, ...).
  struct Recent {
    std::string key;
    std::shared_ptr<const std::vector<uint64_t>> bits;
  };
  std::vector<Recent> recent_;  // most recent last, at most kRecentMasks
  std::shared_ptr<const std::vector<uint64_t>> current_;  // bits of state_, if computed
};

}  // namespace waste::constrain
