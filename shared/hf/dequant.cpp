#include "shared/hf/dequant.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

namespace {

// 256-entry tables: a release holds ~10^12 weights, so decoding must be a load, not a ldexp.
struct DecodeTables {
  float e4m3[256];
  float e8m0[256];
  DecodeTables();
};

float e4m3_formula(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float mag;
  if (exp == 15 && man == 7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(float(man) / 8.0f, -6);  // subnormal
  } else {
    mag = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  }
  return neg ? -mag : mag;
}

float e8m0_formula(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(e) - 127);
}

DecodeTables::DecodeTables() {
  for (int i = 0; i < 256; ++i) {
    e4m3[i] = e4m3_formula(uint8_t(i));
    e8m0[i] = e8m0_formula(uint8_t(i));
  }
}

const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}

}  // namespace

float e4m3_to_f32(uint8_t v) { return tables().e4m3[v]; }
float e8m0_to_f32(uint8_t e) { return tables().e8m0[e]; }

float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = kMag[nibble & 7];
  return (nibble & 8) ? -m : m;
}

namespace {
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the engine targets little-endian hosts, as the files are
  return v;
}
}  // namespace

std::vector<float> plain_to_f32(const std::string& dtype, const uint8_t* b, size_t n, const std::string& what) {
  std::vector<float> out(n);
  if (dtype == "F32") {
    std::memcpy(out.data(), b, n * 4);
  } else if (dtype == "BF16") {
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_le<uint16_t>(b + 2 * i));
  } else if (dtype == "F16") {
    for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_le<uint16_t>(b + 2 * i));
  } else if (dtype == "F64") {
    for (size_t i = 0; i < n; ++i) out[i] = float(load_le<double>(b + 8 * i));
  } else if (dtype == "F8_E4M3") {
    const float* lut = tables().e4m3;
    for (size_t i = 0; i < n; ++i) out[i] = lut[b[i]];
  } else if (dtype == "I32") {
    for (size_t i = 0; i < n; ++i) out[i] = float(load_le<int32_t>(b + 4 * i));
  } else if (dtype == "I64") {
    for (size_t i = 0; i < n; ++i) out[i] = float(load_le<int64_t>(b + 8 * i));
  } else if (dtype == "U8") {
    for (size_t i = 0; i < n; ++i) out[i] = float(b[i]);
  } else if (dtype == "I8") {
    for (size_t i = 0; i < n; ++i) out[i] = float(int8_t(b[i]));
  } else {
    throw Error(what + ": cannot convert dtype " + dtype + " to f32");
  }
  return out;
}

void dequant_fp8_block(const uint8_t* w, size_t rows, size_t cols, const float* scale, size_t block, float* out) {
  const size_t scale_cols = (cols + block - 1) / block;
  const float* lut = tables().e4m3;
  for (size_t i = 0; i < rows; ++i) {
    const float* srow = scale + (i / block) * scale_cols;
    for (size_t j = 0; j < cols; ++j) out[i * cols + j] = lut[w[i * cols + j]] * srow[j / block];
  }
}

void dequant_mxfp4(const uint8_t* packed, size_t rows, size_t cols, size_t packed_cols, const uint8_t* scale,
                   size_t scale_cols, float* out) {
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* prow = packed + r * packed_cols;
    const uint8_t* srow = scale + r * scale_cols;
    for (size_t k = 0; k < cols; ++k) {
      const uint8_t byte = prow[k / 2];
      const uint8_t code = (k & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xf);  // low nibble first
      out[r * cols + k] = e2m1_to_f32(code) * e8m0_to_f32(srow[k / 32]);
    }
  }
}

void dequant_int4_packed(const int32_t* packed, size_t rows, size_t cols, size_t packed_cols, const float* scale,
                         size_t scale_cols, size_t group, float* out) {
  for (size_t r = 0; r < rows; ++r) {
    const int32_t* prow = packed + r * packed_cols;
    const float* srow = scale + r * scale_cols;
    for (size_t k = 0; k < cols; ++k) {
      const uint32_t word = uint32_t(prow[k / 8]);
      const int q = int((word >> (4 * (k % 8))) & 0xfu) - 8;
      out[r * cols + k] = float(q) * srow[k / group];
    }
  }
}

}  // namespace waste
