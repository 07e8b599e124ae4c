// The bytes of every ordinary token of a tokenizer, as a byte trie in depth-first order, built
// once per tokenizer and shared (immutable, thread-safe) by every constrained request.
//
// Special tokens (and gaps between ranks) are not ordinary: a grammar never allows them; the
// caller decides about end-of-reply tokens itself (GrammarMatcher::complete()).
//
// The trie is a flat array walked front to back: node i's subtree is [i, end), so a walk that
// finds a prefix dead skips the whole subtree with one jump. Tokens are numbered in trie order
// (lexicographic order of their bytes), so the tokens of a subtree are one contiguous range.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste::tok {
class Tokenizer;
}

namespace waste::constrain {

struct TrieNode {
  uint32_t end = 0;        // one past the last node of this node's subtree
  uint32_t sub_begin = 0;  // trie-order index of the first token in the subtree (this node's own come first)
  uint16_t depth = 0;      // 1 for a first byte
  uint8_t byte = 0;
  uint8_t own = 0;         // tokens whose bytes end here (0 or 1; more only for duplicate byte strings)
};

class TokenVocabulary {
 public:
  explicit TokenVocabulary(const tok::Tokenizer& t);
  // Test and bench vocabularies: bytes_by_id[id] empty = not an ordinary token.
  explicit TokenVocabulary(const std::vector<std::string>& bytes_by_id);

  // Ids are [0, size()): the tokenizer's vocabulary (ordinary and special ids).
  uint32_t size() const { return uint32_t(offset_.size()); }
  bool ordinary(uint32_t id) const { return id < size() && length_[id] != 0; }
  std::string_view bytes(uint32_t id) const {
    return id < size() ? std::string_view(arena_.data() + offset_[id], length_[id]) : std::string_view();
  }
  uint32_t ordinary_count() const { return uint32_t(order_.size()); }
  uint32_t max_token_bytes() const { return max_len_; }

  // The trie: nodes()[i] for i < node_count(), plus a sentinel nodes()[node_count()] whose
  // sub_begin is ordinary_count().
  const std::vector<TrieNode>& nodes() const { return nodes_; }
  uint32_t node_count() const { return uint32_t(nodes_.size() - 1); }
  // Token ids in trie order, and each ordinary id's place in it.
  const std::vector<uint32_t>& order() const { return order_; }
  uint32_t position(uint32_t id) const { return position_[id]; }

 private:
  void build(const std::vector<std::string>& bytes_by_id);

  std::string arena_;
  std::vector<uint32_t> offset_, length_;
  std::vector<uint32_t> order_, position_;
  std::vector<TrieNode> nodes_;
  uint32_t max_len_ = 0;
};

}  // namespace waste::constrain
