#include <doctest/doctest.h>

#include <cmath>

#include "shared/util/half.h"

using namespace waste;

TEST_CASE("f16 round trip is exact for every finite half") {
  int checked = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = uint16_t(h);
    if (((v >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
    CHECK_EQ(f32_to_f16(f16_to_f32(v)), v);
    ++checked;
  }
  CHECK_EQ(checked, 63488);
}

TEST_CASE("f16 conversion rounds to nearest even and saturates") {
  CHECK_EQ(f16_to_f32(f32_to_f16(1.0f)), 1.0f);
  CHECK_EQ(f32_to_f16(1.0f + 1.0f / 2048), f32_to_f16(1.0f));  // halfway: even mantissa wins
  CHECK_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  CHECK(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
  CHECK_EQ(f16_to_f32(f32_to_f16(-5.960464477539063e-08f)), -5.960464477539063e-08f);  // smallest subnormal
}

TEST_CASE("bf16 conversion") {
  CHECK_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  CHECK_EQ(bf16_to_f32(0x3f80), 1.0f);
  CHECK_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie to even
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}
