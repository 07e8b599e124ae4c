#include "shared/tokenizer/synthetic_ranks.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "shared/tokenizer/pretokenize.h"
#include "shared/util/error.h"

namespace waste::tok {

namespace {

struct Word {
  std::vector<uint32_t> ids;
  uint64_t count;
};

uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

}  // namespace

BpeRanks synthetic_ranks(size_t n_merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  std::unordered_map<std::string, uint32_t> id_of;
  for (uint32_t b = 0; b < 256; ++b) id_of[tokens[b]] = b;

  // Distinct pre-tokens with their counts (ordered map: deterministic order).
  std::map<std::string, uint64_t> counts;
  {
    PreTokenizer pretok(Pattern::Kimi);
    std::vector<std::string_view> pieces;
    pretok.split(synthetic_corpus(), pieces);
    for (std::string_view p : pieces) ++counts[std::string(p)];
  }
  // The text alone supplies about a thousand merges. Two deterministic additions, each seen once,
  // bring that to a few thousand without changing what the frequent merges are: every number of
  // one to three digits (the pattern cuts digit runs into such pieces, and real vocabularies hold
  // them all), and the lower / Capitalised / UPPER forms of every ASCII word, with and without a
  // leading space.
  std::map<std::string, uint64_t> extra;
  for (int n = 0; n < 1000; ++n) ++extra[std::to_string(n)];
  for (const auto& [text, count] : counts) {
    std::string_view word = text;
    if (!word.empty() && word.front() == ' ') word.remove_prefix(1);
    if (word.size() < 2 || !std::all_of(word.begin(), word.end(), [](char c) { return std::isalpha(uint8_t(c)); }))
      continue;
    std::string lower(word), upper(word), capital;
    for (char& c : lower) c = char(std::tolower(uint8_t(c)));
    for (char& c : upper) c = char(std::toupper(uint8_t(c)));
    capital = lower;
    capital[0] = char(std::toupper(uint8_t(capital[0])));
    for (const std::string& form : {lower, upper, capital}) {
      ++extra[form];
      ++extra[" " + form];
    }
  }
  for (const auto& [text, count] : extra) counts.emplace(text, count);  // keeps real counts
  std::vector<Word> words;
  for (const auto& [text, count] : counts) {
    if (text.size() < 2) continue;  // nothing to merge
    Word w{{}, count};
    for (char c : text) w.ids.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  size_t added = 0;
  std::unordered_map<uint64_t, uint64_t> pair_counts;
  while (added < n_merges) {
    pair_counts.clear();
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.ids.size(); ++i) pair_counts[pair_key(w.ids[i], w.ids[i + 1])] += w.count;
    if (pair_counts.empty())
      throw Error("synthetic tokenizer: the built-in text yields only " + std::to_string(added) + " merges, " +
                  std::to_string(n_merges) + " requested");
    uint64_t best_key = 0, best_count = 0;
    for (const auto& [key, count] : pair_counts)
      if (count > best_count || (count == best_count && key < best_key)) best_key = key, best_count = count;
    const uint32_t a = uint32_t(best_key >> 32), b = uint32_t(best_key);
    const std::string joined = tokens[a] + tokens[b];
    // The same bytes can arise from two different pairs; reuse the token rather than add a twin.
    uint32_t id;
    auto it = id_of.find(joined);
    if (it != id_of.end()) {
      id = it->second;
    } else {
      id = static_cast<uint32_t>(tokens.size());
      tokens.push_back(joined);
      id_of.emplace(joined, id);
      ++added;
    }
    for (Word& w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.ids.size(); ++i) {
        if (i + 1 < w.ids.size() && w.ids[i] == a && w.ids[i + 1] == b) {
          w.ids[out++] = id;
          ++i;
        } else {
          w.ids[out++] = w.ids[i];
        }
      }
      w.ids.resize(out);
    }
    std::erase_if(words, [](const Word& w) { return w.ids.size() < 2; });
  }
  return BpeRanks::from_tokens(tokens, "synthetic tokenizer");
}

std::string synthetic_rank_file(size_t n_merges) { return synthetic_ranks(n_merges).to_rank_file(); }

}  // namespace waste::tok
