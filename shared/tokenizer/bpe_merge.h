// Byte-pair encoding of one pre-token by ranks, with tiktoken's semantics: repeatedly merge the
// adjacent pair whose concatenation has the lowest rank (leftmost on ties) until no pair has a
// rank; each remaining part is one token.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "shared/tokenizer/bpe_ranks.h"

namespace waste::tok {

// Appends the ids of `piece` to `out`. Picks the quadratic scan for short pieces and the heap for
// long ones; both give identical ids.
void bpe_encode_piece(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out);

// The two strategies, exposed so a test can check they agree.
void bpe_encode_piece_scan(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out);
void bpe_encode_piece_heap(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out);

// Above this many bytes the heap is used (the scan costs O(n^2) rank lookups).
inline constexpr size_t kBpeScanMaxBytes = 128;

}  // namespace waste::tok
