// Special tokens (never from user text), template markup, chat formats, tokenizer_config.json.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/utf8.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/tokenizer/handbook.h"

using namespace waste;
using namespace waste::tok;
using namespace waste::tok::test;

namespace {

// The Kimi K2 layout over o200k ranks: specials start right after the last rank.
const Tokenizer& kimi_over_o200k() {
  static const Tokenizer t(o200k_ranks(), tokenizer_config_for(TokenizerFamily::KimiK2, o200k_ranks().rank_end()),
                           "kimi-k2 test config");
  return t;
}
const BpeRanks& synthetic() {
  static const BpeRanks r = synthetic_ranks();
  return r;
}
uint32_t sid(const Tokenizer& t, const char* name) {
  auto id = t.special_id(name);
  REQUIRE(id.has_value());
  return *id;
}
std::vector<uint32_t> concat(std::initializer_list<std::vector<uint32_t>> parts) {
  std::vector<uint32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("release special ids (MODELS.md section 5)") {
  // Synthetic ranks are far below 163584, so the release ids can be used unshifted.
  Tokenizer k2(synthetic(), tokenizer_config_for(TokenizerFamily::KimiK2), "k2");
  CHECK(sid(k2, "[BOS]") == 163584);
  CHECK(sid(k2, "[EOS]") == 163585);
  CHECK(sid(k2, "<|im_end|>") == 163586);
  CHECK(sid(k2, "<|im_user|>") == 163587);
  CHECK(sid(k2, "<|im_assistant|>") == 163588);
  CHECK(sid(k2, "<|im_system|>") == 163594);
  CHECK(sid(k2, "<|im_middle|>") == 163601);
  CHECK(sid(k2, "<|tool_call_end|>") == 163599);
  CHECK(sid(k2, "<think>") == 163606);
  CHECK(sid(k2, "[PAD]") == 163839);
  CHECK(sid(k2, "<|reserved_token_163589|>") == 163589);
  CHECK(k2.token_bytes(163600) == "<|reserved_token_163600|>");
  CHECK(k2.vocab_size() == 163840);
  CHECK(k2.stop_ids() == std::vector<uint32_t>{163585, 163586});
  CHECK(k2.is_stop(163586));
  CHECK_FALSE(k2.is_stop(163587));

  Tokenizer linear(synthetic(), tokenizer_config_for(TokenizerFamily::KimiLinear), "kimi-linear");
  CHECK(linear.stop_ids() == std::vector<uint32_t>{163586});
  CHECK(linear.token_bytes(163606) == "<|reserved_token_163606|>");  // no K2.5 additions

  Tokenizer k3(synthetic(), tokenizer_config_for(TokenizerFamily::K3), "k3");
  CHECK(sid(k3, "<|end_of_msg|>") == 163586);
  CHECK(sid(k3, "<|open|>") == 163587);
  CHECK(sid(k3, "<|close|>") == 163588);
  CHECK(sid(k3, "<|sep|>") == 163589);
  CHECK(sid(k3, "<osagent_mode>") == 163649);
  CHECK(k3.stop_ids() == std::vector<uint32_t>{163586});
  CHECK_FALSE(k3.special_id("<|im_end|>").has_value());
}

TEST_CASE("special token text in user text stays plain text") {
  const Tokenizer& t = kimi_over_o200k();
  const uint32_t im_end = sid(t, "<|im_end|>");
  // The reference case: tiktoken with specials as ordinary text.
  for (const auto& c : reference_cases()) {
    const std::string text = c["text"].get<std::string>();
    if (text.find("<|im_end|>") == std::string::npos) continue;
    auto ids = t.encode(text);
    CHECK(ids == c["o200k_ranks+kimi_pattern"].get<std::vector<uint32_t>>());
    for (uint32_t id : ids) CHECK(id != im_end);
  }
  // Markup is where specials come from.
  auto markup = t.encode_markup("<|im_user|>user<|im_middle|>hi<|im_end|>");
  CHECK(markup == concat({{sid(t, "<|im_user|>")}, t.encode("user"), {sid(t, "<|im_middle|>")}, t.encode("hi"), {im_end}}));
  CHECK(t.decode(markup) == "<|im_user|>user<|im_middle|>hi<|im_end|>");
}


TEST_CASE("tokenizer_config.json round trip and errors") {
  const waste::test::TempDir dir;
  const std::string path = dir / "tokenizer_config.json";
  write_tokenizer_config(path, TokenizerFamily::KimiK2, 1000);
  TokenizerConfig c = TokenizerConfig::load_file(path);
  TokenizerConfig want = tokenizer_config_for(TokenizerFamily::KimiK2, 1000);
  CHECK(c.to_json() == want.to_json());
  CHECK(c.stop_ids == std::vector<uint32_t>{1001, 1002});
  CHECK(c.reserved_begin == 1000);
  CHECK(c.reserved_end == 1256);
  CHECK(c.pattern == Pattern::Kimi);
  CHECK(c.chat_format == ChatFormat::Kimi);

  auto error_of = [](const std::string& json) -> std::string {
    try {
      TokenizerConfig::parse(json, "cfg.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of("{\"add_bos_token\": false}").find("no \"waste_tokenizer\" key") != std::string::npos);
  CHECK(error_of("[1]").find("cfg.json: expected a JSON object") != std::string::npos);
  CHECK(error_of("{\"waste_tokenizer\": 2}").find("unsupported version") != std::string::npos);
  std::string j = want.to_json();
  std::string bad = j;
  bad.replace(bad.find("\"chat_format\": \"kimi\""), 21, "\"chat_format\": \"gpt2\"");
  CHECK(error_of(bad).find("cfg.json: chat_format: unknown chat format 'gpt2'") != std::string::npos);
  CHECK(error_of("{\"waste_tokenizer\": 1, \"pattern\": \"kimi\"}").find("missing field \"special_tokens\"") !=
        std::string::npos);

  // Special ids colliding with ranks are rejected when the tokenizer is built.
  CHECK_THROWS_AS(Tokenizer(synthetic(), tokenizer_config_for(TokenizerFamily::KimiK2, 1000), "clash"), Error);
}

TEST_CASE("decode errors and streaming") {
  const Tokenizer& t = kimi_over_o200k();
  std::vector<uint32_t> bad = {13225, 999999};
  CHECK_THROWS_AS(t.decode(bad), Error);
  // "你好世界" splits characters across tokens in some vocabularies; the stream never emits a
  // partial character.
  const std::string text = "emoji \xf0\x9f\x98\x80 and \xe4\xbd\xa0\xe5\xa5\xbd";
  DecodeStream ds(t);
  std::string streamed;
  for (uint32_t id : t.encode(text)) {
    std::string part = ds.push(id);
    CHECK(utf8_invalid_offset(part) == std::string_view::npos);
    streamed += part;
  }
  streamed += ds.flush();
  CHECK(streamed == text);
}
