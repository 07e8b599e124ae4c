// The int8-activation path of Q8G/Q4G (matvec_int8.h): the mode switch, the activation
// quantizer every path shares, and the portable scalar implementation of the same algorithm.
#include "shared/kernels/matvec_int8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "shared/kernels/matvec_paths.h"
#include "shared/util/error.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

ActivationMode read_activation_mode() {
  const char* v = std::getenv("WASTE_TRUNK_ACT");
  if (!v || !*v || std::strcmp(v, "int8") == 0) return ActivationMode::Int8;
  if (std::strcmp(v, "f32") == 0) return ActivationMode::F32;
  throw Error(std::string("WASTE_TRUNK_ACT: expected int8 or f32, got '") + v + "'");
}

constexpr int kLanes = 16;  // lane accumulators of the definition (one zmm, two ymm)

}  // namespace

ActivationMode activation_mode() {
  static const ActivationMode mode = read_activation_mode();
  return mode;
}

const char* activation_mode_name(ActivationMode mode) { return mode == ActivationMode::Int8 ? "int8" : "f32"; }

bool int8_simd_handles(const MatrixView& w) {
  if (w.group == 0 || w.group % 32 != 0) return false;
  const uint32_t s = w.group / 32;  // units per group: a power of two (the paths shift by it)
  return (s & (s - 1)) == 0;
}

void quantize_units_scalar(const float* xt, int64_t units, int64_t unit, int8_t* q, float* unit_scale,
                           int32_t* unit_sum) {
  // One scale per unit, not per weight group: a wide weight group (--trunk-group 128) would
  // otherwise put an outlier channel's scale on 127 other inputs (measured: 3-31% error on
  // activations with 1% outliers x20, against 1-2% per 32).
  for (int64_t k = 0; k < units; ++k) {
    const float* xk = xt + k * unit;
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < unit; ++i) {
      finite = finite && std::isfinite(xk[i]);
      amax = std::max(amax, std::fabs(xk[i]));
    }
    int8_t* qk = q + k * unit;
    if (!finite || amax == 0) {
      unit_scale[k] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      unit_sum[k] = 0;
      std::memset(qk, 0, size_t(unit));
      continue;
    }
    unit_scale[k] = amax / 127.0f;
    // inf when amax < 127 / FLT_MAX (3.7e-37): then 0 * inf is NaN, which the clamp's operand
    // order makes -127, and every other value +-127; the error stays within amax, and the
    // SIMD paths reproduce it (a std::clamp here would pass NaN on to the int8 conversion).
    const float inv = 127.0f / amax;
    int32_t sum = 0;
    for (int64_t i = 0; i < unit; ++i) {
      const float v = std::nearbyint(xk[i] * inv);  // round half to even (default mode)
      qk[i] = int8_t(std::min(127.0f, std::max(-127.0f, v)));
      sum += qk[i];
    }
    unit_sum[k] = sum;
  }
}

namespace {

// Below this many tokens the hand-off to the pool costs more than quantizing them here.
constexpr int64_t kPooledQuantizeTokens = 8;

// EvenOdd: blocks of up to 4 units (128 columns), evens then odds (unit is 32 here).
void to_even_odd(const int8_t* natural, int64_t cols, int8_t* qt) {
  for (int64_t b = 0; b < cols; b += 128) {
    const int64_t m = std::min<int64_t>(128, cols - b) / 2;  // evens (and odds) in the block
    for (int64_t j = 0; j < m; ++j) {
      qt[b + j] = natural[b + 2 * j];
      qt[b + m + j] = natural[b + 2 * j + 1];
    }
  }
}

}  // namespace

void quantize_activations(const float* x, int64_t n, int64_t cols, int64_t group, Int8Layout layout,
                          Int8Activations& out, QuantizeUnitsFn units_fn, ThreadPool* pool) {
  out.n = n;
  out.cols = cols;
  out.group = group;
  out.unit = group % 32 == 0 ? 32 : group;
  out.units = cols / out.unit;
  out.padded_units = (out.units + kLanes - 1) / kLanes * kLanes;
  // Every byte of q and every unit's scale and sum is written below; only the padding units
  // are zeroed here.
  out.q.resize(size_t(n * cols));
  out.unit_scale.resize(size_t(n * out.padded_units));
  out.unit_sum.resize(size_t(n * out.padded_units));
  auto tokens = [&out, x, layout, units_fn](int64_t t0, int64_t t1) {
    // A natural-order scratch per thread for the EvenOdd layout (reused call to call).
    thread_local std::vector<int8_t> natural;
    if (layout == Int8Layout::EvenOdd) natural.resize(size_t(out.cols));
    for (int64_t t = t0; t < t1; ++t) {
      float* us = out.unit_scale.data() + t * out.padded_units;
      int32_t* usum = out.unit_sum.data() + t * out.padded_units;
      int8_t* qt = out.q.data() + t * out.cols;
      units_fn(x + t * out.cols, out.units, out.unit, layout == Int8Layout::Natural ? qt : natural.data(), us, usum);
      std::fill(us + out.units, us + out.padded_units, 0.0f);
      std::fill(usum + out.units, usum + out.padded_units, 0);
      if (layout == Int8Layout::EvenOdd) to_even_odd(natural.data(), out.cols, qt);
    }
  };
  if (pool && pool->size() > 1 && n >= kPooledQuantizeTokens)
    pool->parallel_for(size_t(n), 1, [&](size_t b, size_t e) { tokens(int64_t(b), int64_t(e)); });
  else
    tokens(0, n);
}

const Int8Activations& quantize_for(const MatrixView& w, const float* x, int64_t n, Int8Layout layout,
                                    QuantizeUnitsFn units_fn, ThreadPool* pool) {
  thread_local Int8Activations act;
  quantize_activations(x, n, w.cols, w.group, layout, act, units_fn, pool);
  return act;
}

float int8_lane_tree(const float* a) {
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

// Each row's weights are widened to int8 (Q4G: nibble - 8) once, then dotted with every
// token, unit by unit, in the order of the definition.
void matmul_int8_scalar(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const Int8Activations& act = quantize_for(w, x, n, Int8Layout::Natural, quantize_units_scalar, pool);
  const int64_t groups = w.cols / w.group;
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    std::vector<int8_t> row(static_cast<size_t>(w.cols));
    std::vector<float> wscale(static_cast<size_t>(groups));
    for (int64_t r = row_begin; r < row_end; ++r) {
      if (w.format == TensorFormat::Q8G) {
        std::memcpy(row.data(), static_cast<const int8_t*>(w.data) + r * w.cols, size_t(w.cols));
      } else {
        const auto* p = static_cast<const uint8_t*>(w.data) + r * w.cols / 2;
        for (int64_t c = 0; c < w.cols; c += 2) {
          row[size_t(c)] = int8_t(int(p[c / 2] & 0xf) - 8);
          row[size_t(c + 1)] = int8_t(int(p[c / 2] >> 4) - 8);
        }
      }
      for (int64_t g = 0; g < groups; ++g) wscale[size_t(g)] = f16_to_f32(w.scales[r * groups + g]);
      for (int64_t t = 0; t < n; ++t) {
        const int8_t* q = act.q.data() + t * w.cols;
        const float* xs = act.unit_scale.data() + t * act.padded_units;
        float a[kLanes] = {};
        for (int64_t k = 0; k < act.units; ++k) {
          int32_t s = 0;
          for (int64_t c = k * act.unit; c < (k + 1) * act.unit; ++c) s += int32_t(row[size_t(c)]) * q[c];
          const int64_t g = k * act.unit / w.group;
          a[k % kLanes] = std::fma(float(s), wscale[size_t(g)] * xs[k], a[k % kLanes]);
        }
        y[t * w.rows + r] = int8_lane_tree(a);
      }
    }
  });
}

}  // namespace waste
