#include "tools/synth/synth_tokenizer.h"

#include <unordered_set>
#include <vector>

#include "shared/tokenizer/bpe_ranks.h"
#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/error.h"

namespace waste {

SynthTokenizer synth_tokenizer(const ModelConfig& c) {
  require(c.vocab >= 512 + 256, "a synthetic model needs a vocabulary of at least 768 ids for its tokenizer");
  const uint32_t n_base = uint32_t(c.vocab) - tok::kKimiReservedCount;
  // Learned merges first (real subwords), as many as the built-in text gives and fit.
  const size_t merges = std::min<size_t>(tok::kSyntheticDefaultMerges, n_base - 256);
  tok::BpeRanks learned = tok::synthetic_ranks(merges);
  std::vector<std::string> tokens;
  std::unordered_set<std::string> seen;
  for (uint32_t r = 0; r < learned.rank_end(); ++r) {
    tokens.emplace_back(learned.token_bytes(r));
    seen.insert(tokens.back());
  }
  // Fill the rest with concatenations of two learned tokens, so every id a random model may
  // sample decodes to readable word-salad rather than failing.
  const size_t n_learned = tokens.size();
  for (size_t i = 0; tokens.size() < n_base; ++i) {
    require(i < 64 * size_t(n_base), "synthetic tokenizer: could not fill the vocabulary");
    // First halves run through a permutation of the learned tokens per cycle of M = n_learned - 256
    // (7919 is prime, coprime to M); the second half shifts by one each cycle, so cycle k adds
    // M new pairs and any vocabulary up to M^2 fills.
    const size_t m = n_learned - 256;
    std::string t = tokens[256 + (i * 7919) % m] + tokens[256 + (i * 104729 + i / m) % m];
    if (t.size() <= tok::kMaxTokenBytes && seen.insert(t).second) tokens.push_back(std::move(t));
  }
  SynthTokenizer out;
  out.ranks_text = tok::BpeRanks::from_tokens(tokens, "synthetic tokenizer").to_rank_file();
  tok::TokenizerFamily family = c.arch == Arch::KimiK3       ? tok::TokenizerFamily::K3
                                : c.arch == Arch::KimiLinear ? tok::TokenizerFamily::KimiLinear
                                                             : tok::TokenizerFamily::KimiK2;
  out.config_json = tok::tokenizer_config_for(family, n_base).to_json();
  return out;
}

}  // namespace waste
