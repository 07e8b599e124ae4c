// Pre-tokenisation details beyond the reference cases: the Kimi chunking rule, long runs,
// invalid UTF-8, and Han handling (Script, not Script_Extensions).
#include "shared/tokenizer/pretokenize.h"
#include "shared/tokenizer/utf8.h"
#include "shared/util/error.h"
#include "tests/unit/tokenizer/handbook.h"

using namespace waste;
using namespace waste::tok;
using namespace waste::tok::test;

namespace {
std::vector<std::string> split(Pattern p, std::string_view text) {
  PreTokenizer pre(p);
  std::vector<std::string_view> pieces;
  pre.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}
}  // namespace

TEST_CASE("Han runs use the Script property; letters exclude Han") {
  // U+3002 (Script=Common, Script_Extensions includes Han) is not part of a Han run.
  CHECK(split(Pattern::Kimi, "\xe4\xb8\xad\xe3\x80\x82") == std::vector<std::string>{"\xe4\xb8\xad", "\xe3\x80\x82"});
  // U+3005 (Lm, Script=Han) joins the Han run.
  CHECK(split(Pattern::Kimi, "abc\xe4\xba\xba\xe3\x80\x85") == std::vector<std::string>{"abc", "\xe4\xba\xba\xe3\x80\x85"});
  // o200k has no Han rule: Han is a letter like any other.
  CHECK(split(Pattern::O200k, "abc\xe4\xba\xba") == std::vector<std::string>{"abc\xe4\xba\xba"});
}

TEST_CASE("whitespace follows Unicode White_Space, not PCRE2's \\s") {
  // U+180E is not White_Space (PCRE2 UCP \s would include it): it is punctuation-like here.
  // As whitespace, `\s+(?!\S)` would split the pair; as punctuation it stays one piece.
  auto p = split(Pattern::Cl100k, "\xe1\xa0\x8e\xe1\xa0\x8e" "ab");
  CHECK(p == std::vector<std::string>{"\xe1\xa0\x8e\xe1\xa0\x8e", "ab"});
  // U+3000 is White_Space.
  CHECK(split(Pattern::Cl100k, "a\xe3\x80\x80" "b") == std::vector<std::string>{"a", "\xe3\x80\x80" "b"});
}

TEST_CASE("Kimi chunking: 25,000-char runs and 400,000-char chunks") {
  std::vector<std::string_view> out;
  kimi_chunks("short text", out);
  CHECK(out.size() == 1);
  // Small limits exercise the same code: runs of at most 3, chunks of at most 8 code points.
  out.clear();
  kimi_chunks("aaaaaaa  b", out, 100, 3);
  CHECK(std::vector<std::string>(out.begin(), out.end()) == std::vector<std::string>{"aaa", "aaa", "a  b"});
  out.clear();
  kimi_chunks("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", out, 2, 100);  // 5 code points, chunks of 2
  CHECK(out.size() == 3);
  CHECK(out[2] == "\xc3\xa9");
  // Python isspace: U+00A0 is whitespace, U+200B is not.
  CHECK(python_isspace(0xa0));
  CHECK(python_isspace(0x1c));
  CHECK_FALSE(python_isspace(0x200b));
  // A real 60,000-letter run through the Kimi tokenizer: cut at 25,000, encodes and round-trips.
  Tokenizer t = plain_tokenizer(o200k_ranks(), Pattern::Kimi);
  std::string long_run(60000, 'x');
  auto ids = t.encode(long_run);
  CHECK(t.decode(ids) == long_run);
  out.clear();
  kimi_chunks(long_run, out);
  CHECK(out.size() == 3);
  CHECK(out[0].size() == 25000);
}

TEST_CASE("invalid UTF-8 is an error with the byte offset") {
  CHECK(utf8_invalid_offset("abc") == std::string_view::npos);
  CHECK(utf8_invalid_offset("ab\xc3") == 2);
  CHECK(utf8_invalid_offset("ab\xc0\x80") == 2);          // overlong
  CHECK(utf8_invalid_offset("abcdefghij\xed\xa0\x80") == 10);  // surrogate
  CHECK(utf8_invalid_offset("\xf4\x90\x80\x80") == 0);    // above U+10FFFF
  CHECK(utf8_invalid_offset("\xf0\x9f\x98\x80") == std::string_view::npos);
  Tokenizer t = plain_tokenizer(o200k_ranks(), Pattern::O200k);
  try {
    t.encode("hello \xff world");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("not valid UTF-8 at byte 6") != std::string::npos);
  }
}

TEST_CASE("pattern names") {
  CHECK(parse_pattern_name("kimi", "x") == Pattern::Kimi);
  CHECK(parse_pattern_name("o200k_base", "x") == Pattern::O200k);
  CHECK_THROWS_AS(parse_pattern_name("gpt2", "x"), Error);
}
