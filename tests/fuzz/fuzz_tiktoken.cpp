// libFuzzer target: untrusted text as a tiktoken rank file (a container's tokenizer.model)
// through BpeRanks::parse, then, when it parses, as the vocabulary of a tokenizer that encodes and
// decodes text. Contract checked: the ranks written back parse to the same vocabulary, every
// byte has a rank, and encode then decode gives the text back.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/tokenizer/bpe_ranks.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  waste::tok::BpeRanks ranks;
  try {
    ranks = waste::tok::BpeRanks::parse(text, "fuzz tokenizer.model");
  } catch (const waste::Error&) {
    return 0;
  }
  for (int b = 0; b < 256; ++b)
    if (ranks.byte_rank(uint8_t(b)) == waste::tok::kNoRank) __builtin_trap();
  try {
    const waste::tok::BpeRanks again = waste::tok::BpeRanks::parse(ranks.to_rank_file(), "written back");
    if (again.size() != ranks.size() || again.rank_end() != ranks.rank_end()) __builtin_trap();
  } catch (const waste::Error&) {
    __builtin_trap();  // what to_rank_file writes, parse must read
  }
  try {
    // The Kimi pattern and its specials placed after the ranks; a sample text with merges,
    // multi-byte characters and digits.
    const uint32_t base = ranks.rank_end();
    const waste::tok::Tokenizer t(std::move(ranks), waste::tok::tokenizer_config_for(waste::tok::TokenizerFamily::KimiLinear, base),
                                  "fuzz tokenizer");
    const std::string sample = "Hello, world! 12345 \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd  the end\n";
    const std::vector<uint32_t> ids = t.encode(sample);
    if (t.decode(ids) != sample) __builtin_trap();
  } catch (const waste::Error&) {
    // ranks the Kimi specials cannot sit beside (a rank past the reserved range, ...)
  }
  return 0;
}
