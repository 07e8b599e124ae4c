// Token bytes -> valid UTF-8 text for deltas. A token may end in the middle of a character (the
// rest comes with the next token) or hold bytes that are no UTF-8 at all (a model can emit any
// byte token); clients need valid UTF-8 in every delta (JSON), so incomplete tails are held and
// bytes that can never form a character become U+FFFD.
#pragma once
#include <string>
#include <string_view>

namespace waste::reply {

inline constexpr std::string_view kReplacementChar = "\xef\xbf\xbd";  // U+FFFD

// Appends `bytes` to `held` and returns the longest prefix made of complete characters (each
// ill-formed byte replaced by U+FFFD; overlongs, surrogates and values above U+10FFFF are
// ill-formed). What stays in `held` is a proper prefix of a well-formed character (<= 3 bytes).
std::string utf8_take_complete(std::string& held, std::string_view bytes);

// The held tail can no longer complete (a special token or the end came): one U+FFFD, or "".
std::string utf8_flush(std::string& held);

}  // namespace waste::reply
