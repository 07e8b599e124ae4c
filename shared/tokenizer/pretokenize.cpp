#define PCRE2_CODE_UNIT_WIDTH 8
#include "shared/tokenizer/pretokenize.h"

#include <pcre2.h>

#include "shared/tokenizer/utf8.h"
#include "shared/util/error.h"

namespace waste::tok {

namespace {

// Unicode White_Space, the meaning of `\s` in the reference (Rust) regex.
constexpr const char* kWs = "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string ws() { return std::string("[") + kWs + "]"; }
std::string not_ws() { return std::string("[^") + kWs + "]"; }

// `[^\s\p{L}\p{N}]`
std::string not_ws_letter_number() { return std::string("[^") + kWs + "\\p{L}\\p{N}]"; }

const char* kContractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";

std::string source_for(Pattern p) {
  const std::string upper = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]";
  const std::string lower = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
  const std::string tail_ws = "|" + ws() + "*[\\r\\n]+|" + ws() + "+(?!" + not_ws() + ")|" + ws() + "+";
  switch (p) {
    case Pattern::Cl100k:
      return std::string(kContractions) + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?" + not_ws_letter_number() +
             "+[\\r\\n]*" + tail_ws;
    case Pattern::O200k:
      return "[^\\r\\n\\p{L}\\p{N}]?" + upper + "*" + lower + "+" + kContractions + "?" +
             "|[^\\r\\n\\p{L}\\p{N}]?" + upper + "+" + lower + "*" + kContractions + "?" +
             "|\\p{N}{1,3}| ?" + not_ws_letter_number() + "+[\\r\\n/]*" + tail_ws;
    case Pattern::Kimi: {
      // Letters excluding Han: the reference's `[X&&[^\p{Han}]]`.
      const std::string upper_nh = "(?:(?!\\p{sc:Han})" + upper + ")";
      const std::string lower_nh = "(?:(?!\\p{sc:Han})" + lower + ")";
      return "\\p{sc:Han}+" "|[^\\r\\n\\p{L}\\p{N}]?" + upper_nh + "*" + lower_nh + "+" + kContractions + "?" +
             "|[^\\r\\n\\p{L}\\p{N}]?" + upper_nh + "+" + lower_nh + "*" + kContractions + "?" +
             "|\\p{N}{1,3}| ?" + not_ws_letter_number() + "+[\\r\\n]*" + tail_ws;
    }
  }
  return {};
}

// Per-thread match state: match data for one pair of offsets and a JIT stack large enough for
// the Kimi pattern's group repeats over a 25,000-letter run (each repeat needs a frame).
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) throw Error("tokenizer: out of memory creating regex match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Pattern parse_pattern_name(std::string_view name, const std::string& what) {
  if (name == "kimi") return Pattern::Kimi;
  if (name == "cl100k" || name == "cl100k_base") return Pattern::Cl100k;
  if (name == "o200k" || name == "o200k_base") return Pattern::O200k;
  throw Error(what + ": unknown pre-tokenisation pattern '" + std::string(name) + "' (expected kimi, cl100k or o200k)");
}

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::Kimi: return "kimi";
    case Pattern::Cl100k: return "cl100k";
    case Pattern::O200k: return "o200k";
  }
  return "?";
}

std::string pcre2_pattern_source(Pattern p) { return source_for(p); }

PreTokenizer::PreTokenizer(Pattern p) : pattern_(p) {
  const std::string src = source_for(p);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(std::string("tokenizer: cannot compile the ") + pattern_name(p) + " pattern at offset " +
                std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
  }
  // Without JIT (unsupported CPU or build) the interpreter gives the same matches, slower.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // pcre2_jit_match skips the interpreter's option checks: the subject is already validated.
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context)
                  : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;  // tiktoken drops unmatched text; these patterns match every character
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(std::string("tokenizer: ") + pattern_name(pattern_) + " pattern failed at byte " +
                  std::to_string(pos) + ": " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // no alternative matches empty; guard against looping anyway
      size_t i = begin;
      utf8_next(text, i);
      pos = i;
      continue;
    }
    out.push_back(text.substr(begin, end - begin));
    pos = end;
  }
}

void kimi_chunks(std::string_view text, std::vector<std::string_view>& out, size_t max_chars, size_t max_run) {
  // Fast path: a text of at most max_run bytes has at most max_run code points.
  if (text.size() <= max_run && text.size() <= max_chars) {
    out.push_back(text);
    return;
  }
  size_t i = 0;
  while (i < text.size()) {
    // One chunk of at most max_chars code points, text[chunk_begin, chunk_end).
    const size_t chunk_begin = i;
    size_t count = 0;
    while (i < text.size() && count < max_chars) {
      utf8_next(text, i);
      ++count;
    }
    const std::string_view chunk = text.substr(chunk_begin, i - chunk_begin);
    // The run rule over this chunk, as _split_whitespaces_or_nonwhitespaces does it.
    size_t j = 0, slice_begin = 0, run = 0;
    bool run_is_space = false;
    bool first = true;
    while (j < chunk.size()) {
      const size_t at = j;
      const bool space = python_isspace(utf8_next(chunk, j));
      if (first) {
        run_is_space = space;
        first = false;
      }
      if (space != run_is_space) {
        run = 1;
        run_is_space = space;
      } else if (++run > max_run) {
        out.push_back(chunk.substr(slice_begin, at - slice_begin));
        slice_begin = at;
        run = 1;
      }
    }
    out.push_back(chunk.substr(slice_begin));
  }
}

}  // namespace waste::tok
