// Pre-tokenisation: the regex that cuts text into pieces before BPE. Three patterns, each
// reproducing its reference regex exactly (cases in /work/shared/tokenizers/cases.jsonl):
// Kimi (tokenization_kimi.py pat_str), cl100k_base and o200k_base (tiktoken).
//
// Implementation: PCRE2 (UTF + UCP, JIT). The reference patterns use Rust regex features that
// PCRE2 10.42 spells differently, rewritten without changing what they match:
//  - `\s` / `\S` become explicit classes of the Unicode White_Space property (Rust's `\s`);
//    PCRE2's UCP `\s` also matches U+180E, which is not White_Space since Unicode 6.3.
//  - `[X&&[^\p{Han}]]` (class intersection) becomes `(?:(?!\p{sc:Han})[X])`.
//  - `\p{Han}` becomes `\p{sc:Han}`: PCRE2 >= 10.40 reads a bare script name as
//    Script_Extensions, which would pull CJK punctuation such as U+3002 into Han runs; the
//    reference engines use the Script property (checked: "。" is its own piece in the cases).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace waste::tok {

enum class Pattern { Kimi, Cl100k, O200k };

// "kimi", "cl100k", "o200k" (also "cl100k_base", "o200k_base"); throws Error naming `what`.
Pattern parse_pattern_name(std::string_view name, const std::string& what);
const char* pattern_name(Pattern p);
// The PCRE2 source actually compiled for `p` (documented in docs/TOKENIZER.md).
std::string pcre2_pattern_source(Pattern p);

class PreTokenizer {
 public:
  explicit PreTokenizer(Pattern p);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  Pattern pattern() const { return pattern_; }

  // Appends the pieces of `text` (which must be valid UTF-8: the caller checks it once) to
  // `out`, in order. Thread-safe: match state is per thread.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  Pattern pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so users need not include pcre2.h
  bool jit_ = false;      // JIT compiled (else the interpreter gives the same matches, slower)
};

// The Kimi encode() wrapper (tokenization_kimi.py, after tiktoken issue 195): cut the text into
// chunks of at most 400,000 code points, then cut each so that no chunk holds a run of more than
// 25,000 consecutive whitespace (Python str.isspace) or non-whitespace code points. Pieces never
// cross a chunk boundary. Appends the chunks to `out`; `text` must be valid UTF-8.
inline constexpr size_t kKimiMaxEncodeChars = 400'000;
inline constexpr size_t kKimiMaxRunChars = 25'000;
void kimi_chunks(std::string_view text, std::vector<std::string_view>& out,
                 size_t max_chars = kKimiMaxEncodeChars, size_t max_run = kKimiMaxRunChars);

}  // namespace waste::tok
