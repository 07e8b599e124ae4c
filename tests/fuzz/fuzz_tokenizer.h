// A small real tokenizer for the targets that need one (chat prompts, reply parsing): the
// synthetic byte-level BPE vocabulary (shared/tokenizer/synthetic_ranks.h) with a family's
// special tokens and chat format, built once per process. Nothing read from disk, so the
// targets run anywhere.
#pragma once
#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste::fuzz {

// 256 single bytes + 256 merges: enough for real merges, small enough to build in milliseconds.
inline constexpr size_t kFuzzMerges = 256;

inline const tok::Tokenizer& fuzz_tokenizer(tok::TokenizerFamily family) {
  auto make = [](tok::TokenizerFamily f) {
    tok::BpeRanks ranks = tok::synthetic_ranks(kFuzzMerges);
    const uint32_t base = ranks.rank_end();
    return tok::Tokenizer(std::move(ranks), tok::tokenizer_config_for(f, base), "fuzz tokenizer");
  };
  static const tok::Tokenizer k2 = make(tok::TokenizerFamily::KimiK2);
  static const tok::Tokenizer linear = make(tok::TokenizerFamily::KimiLinear);
  static const tok::Tokenizer k3 = make(tok::TokenizerFamily::K3);
  switch (family) {
    case tok::TokenizerFamily::KimiK2: return k2;
    case tok::TokenizerFamily::KimiLinear: return linear;
    case tok::TokenizerFamily::K3: break;
  }
  return k3;
}

}  // namespace waste::fuzz
