// A small, valid byte-level BPE vocabulary for synthetic models (`waste synth`), so `waste run`
// on a synthetic model tokenises and detokenises real text. Ranks 0..255 are the single bytes
// (rank b = byte b); the rest are merges learned greedily (most frequent adjacent pair, ties to
// the smallest id pair) from a fixed built-in English/code text pre-tokenised with the Kimi
// pattern. Deterministic: the same n_merges always gives the same file.
#pragma once
#include <cstddef>
#include <string>

#include "shared/tokenizer/bpe_ranks.h"

namespace waste::tok {

// 256 bytes + 3840 merges = 4096 base tokens; the built-in text supplies about 4,280 merges.
inline constexpr size_t kSyntheticDefaultMerges = 3840;

// Throws Error if the built-in text cannot supply n_merges distinct merges.
BpeRanks synthetic_ranks(size_t n_merges = kSyntheticDefaultMerges);
// The same vocabulary as rank-file text (`base64 rank` lines), ready to write as tokenizer.model.
std::string synthetic_rank_file(size_t n_merges = kSyntheticDefaultMerges);

// The built-in training text (synthetic_corpus.cpp).
const char* synthetic_corpus();

}  // namespace waste::tok
