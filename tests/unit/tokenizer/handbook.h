// Test access to /work/shared/tokenizers (WASTE_SHARED_DIR): the rank files are loaded once per
// test binary (o200k is 3.6 MB) and the reference cases parsed once.
#pragma once
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shared/tokenizer/tokenizer.h"

namespace waste::tok::test {

inline std::string tokenizers_dir() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/tokenizers";
}

inline const BpeRanks& o200k_ranks() {
  static const BpeRanks r = BpeRanks::load_file(tokenizers_dir() + "/o200k_base.tiktoken");
  return r;
}
inline const BpeRanks& cl100k_ranks() {
  static const BpeRanks r = BpeRanks::load_file(tokenizers_dir() + "/cl100k_base.tiktoken");
  return r;
}

// A tokenizer over a copy of `ranks` with the given pattern and no specials or chat format.
inline Tokenizer plain_tokenizer(const BpeRanks& ranks, Pattern p) {
  TokenizerConfig c;
  c.pattern = p;
  return Tokenizer(ranks, c, "test");
}

inline const std::vector<nlohmann::json>& reference_cases() {
  static const std::vector<nlohmann::json> cases = [] {
    std::vector<nlohmann::json> out;
    std::ifstream in(tokenizers_dir() + "/cases.jsonl");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
  }();
  return cases;
}

}  // namespace waste::tok::test
