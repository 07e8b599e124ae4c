// Every case of /work/shared/tokenizers/cases.jsonl: ids from tiktoken itself for cl100k_base,
// o200k_base and the Kimi pattern over the o200k ranks, and the Kimi pattern's pieces.
#include "tests/unit/tokenizer/handbook.h"

using namespace waste::tok;
using namespace waste::tok::test;

namespace {

void check_encoding(const Tokenizer& t, const char* key) {
  const auto& cases = reference_cases();
  REQUIRE(cases.size() >= 30);
  size_t matched = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c[key].get<std::vector<uint32_t>>();
    const auto got = t.encode(text);
    CAPTURE(text);
    CHECK(got == want);
    CHECK(t.decode(got) == text);
    matched += got == want;
  }
  MESSAGE(std::string(key) << ": " << matched << "/" << cases.size() << " cases identical");
}

}  // namespace

TEST_CASE("cl100k_base ids match tiktoken") {
  check_encoding(plain_tokenizer(cl100k_ranks(), Pattern::Cl100k), "cl100k_base");
}

TEST_CASE("o200k_base ids match tiktoken") {
  check_encoding(plain_tokenizer(o200k_ranks(), Pattern::O200k), "o200k_base");
}

TEST_CASE("Kimi pattern over o200k ranks matches") {
  check_encoding(plain_tokenizer(o200k_ranks(), Pattern::Kimi), "o200k_ranks+kimi_pattern");
}

TEST_CASE("Kimi pre-tokens match the reference regex") {
  PreTokenizer pre(Pattern::Kimi);
  for (const auto& c : reference_cases()) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["kimi_pretokens"].get<std::vector<std::string>>();
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    std::vector<std::string> got(pieces.begin(), pieces.end());
    CAPTURE(text);
    CHECK(got == want);
  }
}

TEST_CASE("rank files load with the expected sizes") {
  CHECK(cl100k_ranks().size() == 100256);
  CHECK(o200k_ranks().size() == 199998);
  // Spot values from the cases: "Hello" is 13225 in o200k, 9906 in cl100k.
  CHECK(o200k_ranks().rank("Hello") == 13225);
  CHECK(cl100k_ranks().rank("Hello") == 9906);
  CHECK(o200k_ranks().token_bytes(13225) == "Hello");
}
