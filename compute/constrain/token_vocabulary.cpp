#include "compute/constrain/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "shared/tokenizer/tokenizer.h"
#include "shared/util/error.h"

namespace waste::constrain {

namespace {

// Only ordinary tokens: specials and rank gaps stay empty (never allowed).
std::vector<std::string> ordinary_bytes(const tok::Tokenizer& t) {
  std::vector<std::string> out(t.vocab_size());
  for (uint32_t id = 0; id < t.vocab_size(); ++id)
    if (!t.is_special(id) && t.ranks().has_rank(id)) out[id] = std::string(t.ranks().token_bytes(id));
  return out;
}

}  // namespace

TokenVocabulary::TokenVocabulary(const tok::Tokenizer& t) { build(ordinary_bytes(t)); }

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& bytes_by_id) { build(bytes_by_id); }

void TokenVocabulary::build(const std::vector<std::string>& bytes_by_id) {
  // Ids and token lengths must fit the node fields (depth is 16 bits); the tokenizer's own
  // bounds (2^22 ids, 1024 bytes a token) are far inside these.
  require(bytes_by_id.size() < (1u << 30), "token vocabulary: too many ids");
  const uint32_t n = uint32_t(bytes_by_id.size());
  offset_.assign(n, 0);
  length_.assign(n, 0);
  position_.assign(n, UINT32_MAX);
  size_t total = 0;
  for (const std::string& s : bytes_by_id) {
    require(s.size() <= 65535, "token vocabulary: a token longer than 65535 bytes");
    total += s.size();
  }
  require(total < (1ull << 32), "token vocabulary: more than 4 GiB of token bytes");
  arena_.reserve(total);
  for (uint32_t id = 0; id < n; ++id) {
    offset_[id] = uint32_t(arena_.size());
    length_[id] = uint32_t(bytes_by_id[id].size());
    arena_ += bytes_by_id[id];
    if (length_[id] != 0) order_.push_back(id);
    max_len_ = std::max(max_len_, length_[id]);
  }
  std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    const std::string_view x = bytes(a), y = bytes(b);
    return x != y ? x < y : a < b;
  });
  for (uint32_t i = 0; i < order_.size(); ++i) position_[order_[i]] = i;

  // Depth-first nodes from the sorted list: token k shares its first lcp bytes with token k-1,
  // so the nodes deeper than lcp are closed and new ones opened for the rest of its bytes.
  std::vector<uint32_t> open;  // node index at each depth - 1
  std::string_view prev;
  for (uint32_t k = 0; k < order_.size(); ++k) {
    const std::string_view s = bytes(order_[k]);
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (open.size() > lcp) {
      nodes_[open.back()].end = uint32_t(nodes_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      TrieNode node;
      node.depth = uint16_t(d + 1);
      node.byte = uint8_t(s[d]);
      node.sub_begin = k;
      open.push_back(uint32_t(nodes_.size()));
      nodes_.push_back(node);
    }
    TrieNode& last = nodes_[open.back()];
    require(last.own < 255, "token vocabulary: more than 255 ids with the same bytes");
    ++last.own;
    prev = s;
  }
  while (!open.empty()) {
    nodes_[open.back()].end = uint32_t(nodes_.size());
    open.pop_back();
  }
  TrieNode sentinel;
  sentinel.sub_begin = uint32_t(order_.size());
  sentinel.end = uint32_t(nodes_.size() + 1);
  nodes_.push_back(sentinel);
}

}  // namespace waste::constrain
