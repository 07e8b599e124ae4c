// Exact decoders from the storage formats of released checkpoints to f32 (MODELS.md 1.2, A.1).
// Pure functions over bytes already read, so they are testable without files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace waste {

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities, S.1111.111 is NaN.
float e4m3_to_f32(uint8_t v);
// E2M1 (MXFP4 element): sign bit 3, magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}.
float e2m1_to_f32(uint8_t nibble);
// E8M0 scale: 2^(e-127); 255 is NaN in OCP MX.
float e8m0_to_f32(uint8_t e);

// Elementwise conversion of a plain tensor (F32, F16, BF16, F64, F8_E4M3 raw, integer types)
// to f32. `what` names the tensor in errors.
std::vector<float> plain_to_f32(const std::string& dtype, const uint8_t* bytes, size_t n, const std::string& what);

// W[i,j] = e4m3(W[i,j]) * scale_inv[i/block][j/block]; scale is [ceil(rows/block), ceil(cols/block)] f32.
// Despite its name the scale multiplies (DeepSeek weight_dequant).
void dequant_fp8_block(const uint8_t* w, size_t rows, size_t cols, const float* scale, size_t block, float* out);

// MXFP4: packed [rows, cols/2] bytes, low nibble first; scale [rows, ceil(cols/32)] E8M0.
void dequant_mxfp4(const uint8_t* packed, size_t rows, size_t cols, size_t packed_cols, const uint8_t* scale,
                   size_t scale_cols, float* out);

// compressed-tensors pack-quantized INT4: packed [rows, packed_cols] int32, element 8c+i of a row
// is ((packed[r,c] >> 4i) & 15) - 8; W[r,k] = q * scale[r, k/group].
void dequant_int4_packed(const int32_t* packed, size_t rows, size_t cols, size_t packed_cols, const float* scale,
                         size_t scale_cols, size_t group, float* out);

}  // namespace waste
