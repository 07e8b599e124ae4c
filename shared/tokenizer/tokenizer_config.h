// tokenizer_config.json: WASTE's own small description of a tokenizer, stored beside the rank
// file (tokenizer.model) in a model container. Schema in docs/TOKENIZER.md. It is NOT the
// Hugging Face file of the same name; the "waste_tokenizer" version key tells them apart.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/tokenizer/pretokenize.h"

namespace waste::tok {

inline constexpr int kTokenizerConfigVersion = 1;
inline constexpr uint32_t kKimiBaseTokens = 163'584;   // ids 0..163583 are BPE ranks
inline constexpr uint32_t kKimiReservedCount = 256;    // special ids 163584..163839

enum class ChatFormat { None, Kimi, K3 };
ChatFormat parse_chat_format_name(std::string_view name, const std::string& what);
const char* chat_format_name(ChatFormat f);

struct SpecialToken {
  std::string text;
  uint32_t id = 0;
};

struct TokenizerConfig {
  Pattern pattern = Pattern::Kimi;
  // Named special tokens. Ids in [reserved_begin, reserved_end) without a name are
  // `<|reserved_token_{id}|>`.
  std::vector<SpecialToken> special_tokens;
  uint32_t reserved_begin = 0, reserved_end = 0;
  ChatFormat chat_format = ChatFormat::None;
  // Inserted as the first message when a chat does not start with a system message (Kimi);
  // empty: none.
  std::string default_system_message;
  std::vector<uint32_t> stop_ids;
  std::optional<uint32_t> bos_id;
  bool add_bos = false;  // prepend bos_id when encoding a chat

  static TokenizerConfig parse(std::string_view json_text, const std::string& source);
  static TokenizerConfig load_file(const std::string& path);
  std::string to_json() const;
  void save(const std::string& path) const;
};

// The tokenizer families WASTE runs. K2 and Kimi-Linear share specials and chat format but stop
// differently (K2's eos is [EOS], chat turns end with <|im_end|>; Kimi-Linear's eos is <|im_end|>).
enum class TokenizerFamily { KimiK2, KimiLinear, K3 };
// "kimi" / "k2" / "kimi-k2", "kimi-linear" / "kimi_linear", "k3" / "kimi-k3".
TokenizerFamily parse_tokenizer_family(std::string_view name, const std::string& what);

// The config of a family. Special ids sit at n_base_tokens + (release id - 163584), so a
// synthetic vocabulary with few base tokens keeps the release layout after its ranks.
TokenizerConfig tokenizer_config_for(TokenizerFamily family, uint32_t n_base_tokens = kKimiBaseTokens);
void write_tokenizer_config(const std::string& path, TokenizerFamily family, uint32_t n_base_tokens = kKimiBaseTokens);

}  // namespace waste::tok
