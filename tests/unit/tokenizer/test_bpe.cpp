// Rank file parsing (including the errors a bad file gives) and the two BPE merge strategies.
#include <random>

#include "shared/tokenizer/bpe_merge.h"
#include "shared/util/error.h"
#include "tests/unit/tokenizer/handbook.h"

using namespace waste;
using namespace waste::tok;
using namespace waste::tok::test;

namespace {

// A valid rank-file text: all 256 bytes, then "ab" (256) and "abc" (257).
std::string small_rank_file() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += base64_encode(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  s += base64_encode("ab") + " 256\n" + base64_encode("abc") + " 257\n";
  return s;
}

std::string error_of(const std::string& text) {
  try {
    BpeRanks::parse(text, "bad.tiktoken");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("base64 round trip and strictness") {
  std::string out;
  for (std::string s : {"", "a", "ab", "abc", "abcd", "\xff\x00\x10"}) {
    REQUIRE(base64_decode(base64_encode(s), out));
    CHECK(out == s);
  }
  CHECK(base64_encode("Hello") == "SGVsbG8=");
  CHECK_FALSE(base64_decode("SGVsbG8", out));    // length not a multiple of 4
  CHECK_FALSE(base64_decode("SG=sbG8=", out));   // padding in the middle
  CHECK_FALSE(base64_decode("SGVs*G8=", out));   // bad character
}

TEST_CASE("small rank file parses; merges follow ranks") {
  BpeRanks r = BpeRanks::parse(small_rank_file(), "small");
  CHECK(r.size() == 258);
  CHECK(r.rank("abc") == 257);
  CHECK(r.rank("bc") == kNoRank);
  std::vector<uint32_t> ids;
  bpe_encode_piece(r, "abcab", ids);
  CHECK(ids == std::vector<uint32_t>{257, 256});
  ids.clear();
  bpe_encode_piece(r, "xabcx", ids);
  CHECK(ids == std::vector<uint32_t>{'x', 257, 'x'});
  // Serialising gives back the same file.
  CHECK(r.to_rank_file() == small_rank_file());
}

TEST_CASE("bad rank files give errors naming file and line") {
  const std::string good = small_rank_file();
  CHECK(contains(error_of(good + "QUJD\n"), "bad.tiktoken:259: expected `base64 rank`"));
  CHECK(contains(error_of(good + "QU*D 300\n"), "bad.tiktoken:259: bad base64"));
  CHECK(contains(error_of(good + "QUJDRA== x1\n"), "bad.tiktoken:259: bad rank"));
  CHECK(contains(error_of(good + "QUJDRA== -1\n"), "bad.tiktoken:259: bad rank"));
  CHECK(contains(error_of(good + "QUJDRA== 99999999999\n"), "bad.tiktoken:259: rank 99999999999 too large"));
  CHECK(contains(error_of(good + "QUJDRA== 257\n"), "bad.tiktoken: rank 257 appears twice"));
  CHECK(contains(error_of(good + base64_encode("ab") + " 300\n"), "same bytes as rank 256"));
  CHECK(contains(error_of(good + std::string(3000, 'A') + " 300\n"), "bad.tiktoken:259: line of 3004 chars"));
  CHECK(contains(error_of(" 300\n"), "bad.tiktoken:1: empty token"));
  CHECK(contains(error_of(""), "bad.tiktoken: no tokens"));
  // Drop the line of byte 0x41 ('A', line 66): byte-level BPE needs every byte.
  std::string missing;
  for (int b = 0; b < 256; ++b)
    if (b != 0x41) missing += base64_encode(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  CHECK(contains(error_of(missing), "byte 0x41 has no token"));
  CHECK_THROWS_AS(BpeRanks::load_file("/nonexistent/x.tiktoken"), Error);
}

TEST_CASE("scan and heap merges give identical ids") {
  const BpeRanks& r = o200k_ranks();
  std::mt19937 rng(1234);
  const std::string alphabet = "aaaabbbcdeeeeeeffghiiijklmnnoopqrrsstttuuvwxyz  __--..";
  for (int t = 0; t < 300; ++t) {
    std::string s;
    size_t n = 1 + rng() % 300;
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    std::vector<uint32_t> a, b;
    bpe_encode_piece_scan(r, s, a);
    bpe_encode_piece_heap(r, s, b);
    CAPTURE(s);
    REQUIRE(a == b);
    std::string back;
    for (uint32_t id : a) back += r.token_bytes(id);
    CHECK(back == s);
  }
}
