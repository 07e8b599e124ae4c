#include "shared/reply/utf8_text.h"

#include <cstdint>

namespace waste::reply {

namespace {

// Length of the sequence a lead byte starts (0: not a lead byte), and the allowed range of the
// second byte, which is where overlongs, surrogates and values above U+10FFFF are excluded.
struct Lead {
  int length;
  uint8_t second_lo, second_hi;
};
Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xc2) return {0, 0, 0};  // continuation byte or overlong 2-byte lead
  if (b < 0xe0) return {2, 0x80, 0xbf};
  if (b == 0xe0) return {3, 0xa0, 0xbf};
  if (b == 0xed) return {3, 0x80, 0x9f};
  if (b < 0xf0) return {3, 0x80, 0xbf};
  if (b == 0xf0) return {4, 0x90, 0xbf};
  if (b < 0xf4) return {4, 0x80, 0xbf};
  if (b == 0xf4) return {4, 0x80, 0x8f};
  return {0, 0, 0};
}

}  // namespace

std::string utf8_take_complete(std::string& held, std::string_view bytes) {
  std::string s = std::move(held);
  held.clear();
  s += bytes;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    const Lead lead = lead_of(b0);
    if (lead.length == 1) {
      out += s[i++];
      continue;
    }
    if (lead.length == 0) {
      out += kReplacementChar;
      ++i;
      continue;
    }
    // Check the continuation bytes that are there; a valid prefix cut by the end is held.
    size_t k = 1;
    bool bad = false;
    for (; k < static_cast<size_t>(lead.length) && i + k < s.size(); ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      const bool ok = k == 1 ? (b >= lead.second_lo && b <= lead.second_hi) : (b & 0xc0) == 0x80;
      if (!ok) {
        bad = true;
        break;
      }
    }
    if (bad) {
      // The bytes before the offending one are one ill-formed sequence; resync at the offender.
      out += kReplacementChar;
      i += k;
      continue;
    }
    if (k < static_cast<size_t>(lead.length)) {
      held = s.substr(i);
      break;
    }
    out.append(s, i, k);
    i += k;
  }
  return out;
}

std::string utf8_flush(std::string& held) {
  if (held.empty()) return {};
  held.clear();
  return std::string(kReplacementChar);
}

}  // namespace waste::reply
