// The synthetic vocabulary for `waste synth`: valid, deterministic, round-trips any UTF-8 text.
#include <random>

#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/utf8.h"
#include "tests/unit/tokenizer/handbook.h"

using namespace waste;
using namespace waste::tok;
using namespace waste::tok::test;

TEST_CASE("synthetic rank file: valid, deterministic, round trip") {
  const std::string file = synthetic_rank_file(1500);
  BpeRanks r = BpeRanks::parse(file, "synthetic");
  CHECK(r.size() == 256 + 1500);
  CHECK(r.rank_end() == 256 + 1500);
  CHECK(synthetic_rank_file(1500) == file);
  // Ranks 0..255 are the bytes; common words became tokens.
  CHECK(r.rank("A") == 'A');
  CHECK(r.rank(" the") != kNoRank);
  CHECK(r.rank("return") != kNoRank);

  Tokenizer t(std::move(r), tokenizer_config_for(TokenizerFamily::KimiK2, 256 + 1500), "synthetic");
  const std::string english = "The model reads a prompt and predicts the next token.";
  auto ids = t.encode(english);
  CHECK(ids.size() < english.size() / 2);  // merges actually compress
  CHECK(t.decode(ids) == english);
  for (const auto& c : reference_cases()) {
    const std::string text = c["text"].get<std::string>();
    CHECK(t.decode(t.encode(text)) == text);
  }
  // Random valid UTF-8 from all planes.
  std::mt19937 rng(7);
  for (int n = 0; n < 50; ++n) {
    std::string s;
    for (int k = 0; k < 40; ++k) {
      uint32_t cp;
      do cp = rng() % 4 == 0 ? rng() % 0x110000 : rng() % 0x800;
      while (cp >= 0xd800 && cp < 0xe000);
      if (cp < 0x80) s += char(cp);
      else if (cp < 0x800) s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 63));
      else if (cp < 0x10000) s += char(0xe0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 63)), s += char(0x80 | (cp & 63));
      else s += char(0xf0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 63)), s += char(0x80 | ((cp >> 6) & 63)), s += char(0x80 | (cp & 63));
    }
    REQUIRE(utf8_invalid_offset(s) == std::string_view::npos);
    CHECK(t.decode(t.encode(s)) == s);
  }
}
