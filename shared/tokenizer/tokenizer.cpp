#include "shared/tokenizer/tokenizer.h"

#include "shared/tokenizer/bpe_merge.h"
#include "shared/tokenizer/utf8.h"
#include "shared/util/error.h"

namespace waste::tok {

Tokenizer Tokenizer::load(const std::string& ranks_path, const std::string& tokenizer_config_path) {
  // Ranks first, so a missing model directory is reported by its first file.
  BpeRanks ranks = BpeRanks::load_file(ranks_path);
  return Tokenizer(std::move(ranks), TokenizerConfig::load_file(tokenizer_config_path), tokenizer_config_path);
}

Tokenizer::Tokenizer(BpeRanks ranks, TokenizerConfig config, const std::string& source)
    : ranks_(std::move(ranks)), config_(std::move(config)) {
  pretok_ = std::make_shared<const PreTokenizer>(config_.pattern);
  vocab_size_ = ranks_.rank_end();
  auto add = [&](const std::string& name, uint32_t id) {
    require(!ranks_.has_rank(id), source + ": special token " + name + " has id " + std::to_string(id) +
                                      ", which is already a BPE rank");
    require(special_ids_.emplace(name, id).second, source + ": special token name " + name + " used twice");
    special_names_[id] = name;
    longest_special_ = std::max(longest_special_, name.size());
    vocab_size_ = std::max(vocab_size_, id + 1);
  };
  for (const SpecialToken& s : config_.special_tokens) add(s.text, s.id);
  for (uint32_t id = config_.reserved_begin; id < config_.reserved_end; ++id)
    if (!special_names_.count(id)) add("<|reserved_token_" + std::to_string(id) + "|>", id);
  for (uint32_t id : config_.stop_ids)
    require(is_special(id) || ranks_.has_rank(id), source + ": stop id " + std::to_string(id) + " is not a token");
  if (config_.bos_id)
    require(is_special(*config_.bos_id) || ranks_.has_rank(*config_.bos_id),
            source + ": bos_id " + std::to_string(*config_.bos_id) + " is not a token");
}

void Tokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  size_t bad = utf8_invalid_offset(text);
  if (bad != std::string_view::npos) throw Error("tokenizer: text is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<std::string_view> chunks, pieces;
  // The chunking rule belongs to the Kimi encode() wrapper; tiktoken's own encodings have none.
  if (config_.pattern == Pattern::Kimi)
    kimi_chunks(text, chunks);
  else
    chunks.push_back(text);
  for (std::string_view chunk : chunks) {
    pieces.clear();
    pretok_->split(chunk, pieces);
    for (std::string_view piece : pieces) bpe_encode_piece(ranks_, piece, out);
  }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, out);
  return out;
}

std::vector<uint32_t> Tokenizer::encode_markup(std::string_view markup) const {
  std::vector<uint32_t> out;
  size_t text_begin = 0, i = 0;
  while (i < markup.size()) {
    // Longest special name starting at i (names are short; markup is template text).
    size_t best_len = 0;
    uint32_t best_id = 0;
    const size_t max_len = std::min(longest_special_, markup.size() - i);
    for (size_t len = max_len; len > 0; --len) {
      auto it = special_ids_.find(std::string(markup.substr(i, len)));
      if (it != special_ids_.end()) {
        best_len = len;
        best_id = it->second;
        break;
      }
    }
    if (best_len == 0) {
      ++i;
      continue;
    }
    encode_append(markup.substr(text_begin, i - text_begin), out);
    out.push_back(best_id);
    i += best_len;
    text_begin = i;
  }
  encode_append(markup.substr(text_begin), out);
  return out;
}

std::string Tokenizer::token_bytes(uint32_t id) const {
  if (ranks_.has_rank(id)) return std::string(ranks_.token_bytes(id));
  auto it = special_names_.find(id);
  if (it != special_names_.end()) return it->second;
  throw Error("tokenizer: token id " + std::to_string(id) + " has no token (vocabulary size " +
              std::to_string(vocab_size_) + ")");
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
  std::string s;
  for (uint32_t id : ids) {
    if (ranks_.has_rank(id))
      s += ranks_.token_bytes(id);
    else
      s += token_bytes(id);
  }
  return s;
}

std::optional<uint32_t> Tokenizer::special_id(std::string_view name) const {
  auto it = special_ids_.find(std::string(name));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_stop(uint32_t id) const {
  for (uint32_t s : config_.stop_ids)
    if (s == id) return true;
  return false;
}

std::string DecodeStream::push(uint32_t id) {
  pending_ += tok_.token_bytes(id);
  // Emit everything up to the start of a trailing incomplete UTF-8 sequence.
  size_t n = pending_.size();
  size_t keep_from = n;
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(pending_[n - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: look further back
    size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (need > back) keep_from = n - back;
    break;
  }
  std::string out = pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return out;
}

std::string DecodeStream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace waste::tok
