// libFuzzer target: untrusted text as WASTE's tokenizer_config.json through
// TokenizerConfig::parse, then, when it parses, as the config of a tokenizer over a small real
// vocabulary (the Tokenizer constructor's checks: special ids against ranks, stop and bos ids).
// Contract checked: a config that parses writes back (to_json) to text that parses to the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  waste::tok::TokenizerConfig c;
  try {
    c = waste::tok::TokenizerConfig::parse(text, "fuzz tokenizer_config.json");
  } catch (const waste::Error&) {
    return 0;
  }
  const std::string json = c.to_json();
  try {
    if (waste::tok::TokenizerConfig::parse(json, "written back").to_json() != json) __builtin_trap();
  } catch (const waste::Error&) {
    __builtin_trap();  // what to_json writes, parse must read
  }
  try {
    static const waste::tok::BpeRanks ranks = waste::tok::synthetic_ranks(waste::fuzz::kFuzzMerges);
    const waste::tok::Tokenizer t(ranks, c, "fuzz tokenizer");
    const std::string markup = "<|im_user|>user<|im_middle|>hi<|im_end|>";
    (void)t.decode(t.encode_markup(markup));
  } catch (const waste::Error&) {
  }
  return 0;
}
