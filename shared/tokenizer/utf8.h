// UTF-8 helpers for the tokenizer: strict validation (user text is checked once, then the regex
// engine skips its own check) and code point decoding for the Kimi chunking rule.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace waste::tok {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates and values above U+10FFFF are ill-formed), or npos when all of `s` is valid.
size_t utf8_invalid_offset(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i past it.
inline uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k]) & 0x3f); };
  uint32_t cp;
  if (b0 < 0xe0) {
    cp = (uint32_t(b0 & 0x1f) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xf0) {
    cp = (uint32_t(b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = (uint32_t(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

// Python's str.isspace(): ASCII 0x09-0x0D and 0x1C-0x20, plus the non-ASCII characters of
// bidirectional class WS/B/S or category Zs. The Kimi encode() wrapper splits on this.
bool python_isspace(uint32_t cp);

}  // namespace waste::tok
