// The tokenizer of a model: tiktoken-style byte-level BPE (bpe_ranks.h, bpe_merge.h) after a
// pre-tokenisation regex (pretokenize.h), plus special tokens and the chat template.
//
// Special tokens are never produced from user text: encode() treats "<|im_end|>" as ordinary
// text. Only encode_markup() (trusted template text) produces special ids; chat prompts are
// rendered by shared/chat/render.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shared/tokenizer/bpe_ranks.h"
#include "shared/tokenizer/pretokenize.h"
#include "shared/tokenizer/tokenizer_config.h"

namespace waste::tok {

class Tokenizer {
 public:
  // Reads the rank file (a container's tokenizer.model) and WASTE's tokenizer_config.json.
  static Tokenizer load(const std::string& ranks_path, const std::string& tokenizer_config_path);
  // Checks that special ids do not collide with ranks and that stop/bos ids exist; errors
  // name `source`.
  Tokenizer(BpeRanks ranks, TokenizerConfig config, const std::string& source);

  // Plain text -> ids. Throws Error if `text` is not valid UTF-8 (naming the byte offset).
  std::vector<uint32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const;
  // Trusted template markup: every special token name in `markup` becomes its id (longest name
  // wins), the text between is encoded as plain text. Never pass user text here.
  std::vector<uint32_t> encode_markup(std::string_view markup) const;

  // Byte concatenation; specials decode to their name. Throws Error for an id with no token.
  std::string decode(std::span<const uint32_t> ids) const;
  // The bytes of one token (may be part of a UTF-8 character).
  std::string token_bytes(uint32_t id) const;

  std::optional<uint32_t> special_id(std::string_view name) const;
  bool is_special(uint32_t id) const { return special_names_.count(id) != 0; }
  bool is_stop(uint32_t id) const;
  const std::vector<uint32_t>& stop_ids() const { return config_.stop_ids; }
  // One past the largest id (BPE rank or special).
  uint32_t vocab_size() const { return vocab_size_; }

  const BpeRanks& ranks() const { return ranks_; }
  const TokenizerConfig& config() const { return config_; }

 private:
  BpeRanks ranks_;
  TokenizerConfig config_;
  std::shared_ptr<const PreTokenizer> pretok_;
  std::unordered_map<uint32_t, std::string> special_names_;  // id -> name (named and reserved)
  std::unordered_map<std::string, uint32_t> special_ids_;    // name -> id
  size_t longest_special_ = 0;
  uint32_t vocab_size_ = 0;
};

// Incremental detokenisation for streaming output: returns only complete UTF-8 characters,
// holding back the bytes of a character split across tokens until it completes.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& t) : tok_(t) {}
  std::string push(uint32_t id);
  // Whatever is held back (an incomplete character at the end of generation).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace waste::tok
