// Numbers within bounds as grammar expressions: the decimal digit strings of a range, built
// digit by digit (e.g. [7, 23] = [7-9] | 1[0-9] | 2[0-3]), so "minimum"/"maximum" are enforced
// by the grammar rather than checked after the fact.
#pragma once
#include <cstdint>
#include <optional>

#include "compute/constrain/expr.h"

namespace waste::constrain::json {

// |x| < 10^18 (json_syntax.h's kMaxIntegerDigits): every integer fits an int64.
inline constexpr int64_t kMaxAbsInteger = 999'999'999'999'999'999;

// Integers lo <= x <= hi (a missing side: the digit bound). Nothing if the range is empty.
ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Numbers lo <= x <= hi for integer bounds, written without exponent when bounded: the
// integer part picks the range, any fraction fits below an integer part < hi.
ExprPtr number_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace waste::constrain::json
