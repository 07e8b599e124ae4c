#include "compute/constrain/json_ranges.h"

#include <algorithm>
#include <string>

namespace waste::constrain::json {

namespace {

ExprPtr digits(size_t n) { return e_repeat(e_range('0', '9'), uint32_t(n), uint32_t(n)); }

// Digit strings of s's length that are >= s / <= s (leading zeros allowed: these are suffixes).
ExprPtr at_least(const std::string& s) {
  if (s.empty()) return e_empty();
  std::vector<ExprPtr> alts = {e_seq({e_byte(uint8_t(s[0])), at_least(s.substr(1))})};
  if (s[0] < '9') alts.push_back(e_seq({e_range(uint8_t(s[0] + 1), '9'), digits(s.size() - 1)}));
  return e_alt(std::move(alts));
}

ExprPtr at_most(const std::string& s) {
  if (s.empty()) return e_empty();
  std::vector<ExprPtr> alts = {e_seq({e_byte(uint8_t(s[0])), at_most(s.substr(1))})};
  if (s[0] > '0') alts.push_back(e_seq({e_range('0', uint8_t(s[0] - 1)), digits(s.size() - 1)}));
  return e_alt(std::move(alts));
}

// x <= y, both of the same length.
ExprPtr same_length(const std::string& x, const std::string& y) {
  if (x.empty()) return e_empty();
  if (x[0] == y[0]) return e_seq({e_byte(uint8_t(x[0])), same_length(x.substr(1), y.substr(1))});
  std::vector<ExprPtr> alts = {e_seq({e_byte(uint8_t(x[0])), at_least(x.substr(1))}),
                               e_seq({e_byte(uint8_t(y[0])), at_most(y.substr(1))})};
  if (x[0] + 1 <= y[0] - 1) alts.push_back(e_seq({e_range(uint8_t(x[0] + 1), uint8_t(y[0] - 1)), digits(x.size() - 1)}));
  return e_alt(std::move(alts));
}

int64_t pow10(size_t n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// 0 <= a <= x <= b, written without leading zeros: one same-length range per digit count.
ExprPtr non_negative(int64_t a, int64_t b) {
  if (a > b) return e_nothing();
  const size_t la = std::to_string(a).size(), lb = std::to_string(b).size();
  std::vector<ExprPtr> alts;
  for (size_t len = la; len <= lb; ++len) {
    const int64_t lo = len == la ? a : pow10(len - 1);
    const int64_t hi = len == lb ? b : pow10(len) - 1;
    alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return e_alt(std::move(alts));
}

ExprPtr any_fraction() { return e_opt(e_seq({e_byte('.'), e_repeat(e_range('0', '9'), 1, kUnbounded)})); }
ExprPtr zero_fraction() { return e_opt(e_seq({e_byte('.'), e_repeat(e_byte('0'), 1, kUnbounded)})); }

// |x| = I.F with lo <= I + 0.F <= hi for integers 0 <= lo <= hi (hi missing: unbounded).
ExprPtr magnitude(int64_t lo, std::optional<int64_t> hi) {
  if (!hi) return e_seq({non_negative(lo, kMaxAbsInteger), any_fraction()});
  if (lo > *hi) return e_nothing();
  return e_alt({e_seq({non_negative(lo, *hi - 1), any_fraction()}), e_seq({non_negative(*hi, *hi), zero_fraction()})});
}

}  // namespace

ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t a = std::max(lo.value_or(-kMaxAbsInteger), -kMaxAbsInteger);
  const int64_t b = std::min(hi.value_or(kMaxAbsInteger), kMaxAbsInteger);
  if (a > b) return e_nothing();
  std::vector<ExprPtr> alts;
  if (b >= 0) alts.push_back(non_negative(std::max<int64_t>(a, 0), b));
  if (a < 0) alts.push_back(e_seq({e_byte('-'), non_negative(std::max<int64_t>(1, b < 0 ? -b : 1), -a)}));
  return e_alt(std::move(alts));
}

ExprPtr number_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo) lo = std::max(*lo, -kMaxAbsInteger);
  if (hi) hi = std::min(*hi, kMaxAbsInteger);
  if (lo && hi && *lo > *hi) return e_nothing();
  std::vector<ExprPtr> alts;
  // x >= 0 without a sign: lo' = max(lo, 0) <= I.F <= hi.
  if (!hi || *hi >= 0) alts.push_back(magnitude(std::max<int64_t>(lo.value_or(0), 0), hi));
  // x <= 0 with a sign: x = -(I.F) with -hi' <= I.F <= -lo (hi' = min(hi, 0)).
  if (!lo || *lo < 0) {
    const int64_t from = hi && *hi < 0 ? -*hi : 0;
    alts.push_back(e_seq({e_byte('-'), magnitude(from, lo ? std::optional<int64_t>(-*lo) : std::nullopt)}));
  }
  return e_alt(std::move(alts));
}

}  // namespace waste::constrain::json
