#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "shared/hf/dequant.h"

using namespace waste;

TEST_CASE("e4m3 decodes known codes") {
  CHECK(e4m3_to_f32(0x38) == 1.0f);       // exponent 7 = bias, mantissa 0
  CHECK(e4m3_to_f32(0xb8) == -1.0f);
  CHECK(e4m3_to_f32(0x7e) == 448.0f);     // largest finite: 1.75 * 2^8
  CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(e4m3_to_f32(0x3c) == 1.5f);
  CHECK(std::isnan(e4m3_to_f32(0x7f)));
  CHECK(std::isnan(e4m3_to_f32(0xff)));
  CHECK(e4m3_to_f32(0x00) == 0.0f);
}

TEST_CASE("e2m1 and e8m0") {
  const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    CHECK(e2m1_to_f32(uint8_t(i)) == want[i]);
    CHECK(e2m1_to_f32(uint8_t(i | 8)) == -want[i]);
  }
  CHECK(e8m0_to_f32(127) == 1.0f);
  CHECK(e8m0_to_f32(130) == 8.0f);
  CHECK(e8m0_to_f32(120) == std::ldexp(1.0f, -7));
}

TEST_CASE("fp8 block dequant picks the tile of each element, partial edge tiles included") {
  const size_t rows = 200, cols = 300, B = 128;  // tiles [2, 3], last row and column tiles partial
  std::vector<uint8_t> w(rows * cols, 0x38);     // every code is 1.0
  w[130 * cols + 5] = 0x3c;                      // 1.5
  const float scale[6] = {1, 2, 3, 4, 5, 6};     // scale[ti][tj] = 1 + 3 ti + tj
  std::vector<float> out(rows * cols);
  dequant_fp8_block(w.data(), rows, cols, scale, B, out.data());
  CHECK(out[0] == 1.0f);
  CHECK(out[127 * cols + 127] == 1.0f);
  CHECK(out[127 * cols + 128] == 2.0f);
  CHECK(out[0 * cols + 299] == 3.0f);
  CHECK(out[130 * cols + 5] == 1.5f * 4.0f);
  CHECK(out[199 * cols + 299] == 6.0f);
  CHECK(out[128 * cols + 256] == 6.0f);
}

TEST_CASE("mxfp4 unpacks low nibble first with one E8M0 scale per 32 inputs") {
  const size_t rows = 2, cols = 64;
  std::vector<uint8_t> packed(rows * cols / 2, 0);
  packed[0] = 0x2f;  // element 0 = 0xf (-6), element 1 = 0x2 (1)
  packed[16] = 0x07; // element 32 = 6, element 33 = 0
  packed[32 + 31] = 0x90;  // row 1, element 62 = 0, element 63 = 0x9 (-0.5)
  const uint8_t scale[4] = {127, 126, 128, 129};  // row 0: 1, 0.5; row 1: 2, 4
  std::vector<float> out(rows * cols);
  dequant_mxfp4(packed.data(), rows, cols, cols / 2, scale, 2, out.data());
  CHECK(out[0] == -6.0f);
  CHECK(out[1] == 1.0f);
  CHECK(out[32] == 3.0f);
  CHECK(out[33] == 0.0f);
  CHECK(out[64 + 63] == -2.0f);
}

TEST_CASE("int4 pack-quantized unpacks 8 nibbles per int32 minus 8, times the group scale") {
  const size_t rows = 1, cols = 64, group = 32;
  std::vector<int32_t> packed(8, int32_t(0x88888888u));  // all zeros after the -8 offset
  packed[0] = int32_t(0x8888880Fu);                      // element 0 = 15-8 = 7, element 1 = 0-8 = -8
  packed[4] = int32_t(0x9888888Au);                      // element 32 = 2, element 39 = 1
  const float scale[2] = {0.5f, 0.25f};
  std::vector<float> out(cols);
  dequant_int4_packed(packed.data(), rows, cols, 8, scale, 2, group, out.data());
  CHECK(out[0] == 3.5f);
  CHECK(out[1] == -4.0f);
  CHECK(out[2] == 0.0f);
  CHECK(out[32] == 0.5f);
  CHECK(out[39] == 0.25f);
}
