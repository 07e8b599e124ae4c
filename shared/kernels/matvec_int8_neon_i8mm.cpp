// NEON i8mm (ARMv8.6 SMMLA) int8-activation Q8G/Q4G matmul (matvec_int8.h), for several
// tokens (prefill): SMMLA multiplies a 2x8 byte matrix by the transpose of another into a
// 2x2 int32 block, C[i][j] += sum_k A[i][k] B[j][k]. With A = 8 columns of two weight rows
// and B = the same 8 columns of two tokens, four SMMLAs per 32-column unit give the unit's
// four whole sums (rows r, r+1 x tokens t, t+1) with no reduction, where SDOT gives 4
// partial sums of one row x one token. Built with -march=armv8.2-a+dotprod+i8mm (meson:
// shared_neon_i8mm_sources), chosen when cpu_features().i8mm (and asimddp). One token
// (decode) takes the SDOT path: SMMLA would waste half its products on a duplicate token.
//
// The activations of each token pair are interleaved once per call, per 8 columns of the
// path's layout (EvenOdd for Q4G): [token 2p: 8 bytes][token 2p+1: 8 bytes], so each B is one
// load. An odd last token is paired with itself (its duplicate column is not used).
#include <vector>

#include "shared/kernels/matvec_int8_neon.h"
#include "shared/kernels/matvec_int8_neon_sdot.h"

namespace waste {
namespace {

using kernel_detail::NeonInt8Ops;
using kernel_detail::Sdot;

inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {  // [a 0-7 | b 0-7]
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {  // [a 8-15 | b 8-15]
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// 4 SMMLA results of units 0..3 ([r0t0 r0t1 r1t0 r1t1] each) -> e[k] = element k of units
// 0..3: a 4x4 transpose (TRN1/TRN2 of 32-bit, then ZIP1/ZIP2 of 64-bit lanes).
inline void transpose4(const int32x4_t* c, int32x4_t* e) {
  const int32x4_t a0 = vtrn1q_s32(c[0], c[1]), a1 = vtrn2q_s32(c[0], c[1]);
  const int32x4_t b0 = vtrn1q_s32(c[2], c[3]), b1 = vtrn2q_s32(c[2], c[3]);
  auto z1 = [](int32x4_t x, int32x4_t y) {
    return vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(x), vreinterpretq_s64_s32(y)));
  };
  auto z2 = [](int32x4_t x, int32x4_t y) {
    return vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(x), vreinterpretq_s64_s32(y)));
  };
  e[0] = z1(a0, b0);
  e[1] = z1(a1, b1);
  e[2] = z2(a0, b0);
  e[3] = z2(a1, b1);
}

struct I8mmOps : NeonInt8Ops<Sdot> {
  static constexpr int kTokenTile = 4;  // two token pairs per pass over a row pair
  static constexpr int kRowTile = 2;
  const int8_t* pairs;  // [ceil(n/2)][cols / 8][2][8]

  I8mmOps(const MatrixView& w_, const Int8Activations& a) : NeonInt8Ops<Sdot>(w_, a) {
    // Built on the calling thread before the row split (the threads only read it); reused
    // from call to call like quantize_for's buffers.
    thread_local std::vector<int8_t> buf;
    const int64_t n_pairs = (a.n + 1) / 2;
    buf.resize(size_t(n_pairs * 2 * cols));
    for (int64_t p = 0; p < n_pairs; ++p) {
      const int8_t* ta = q + 2 * p * cols;
      const int8_t* tb = 2 * p + 1 < a.n ? ta + cols : ta;
      int8_t* dst = buf.data() + p * 2 * cols;
      for (int64_t c = 0; c < cols; c += 8) {
        std::memcpy(dst + 2 * c, ta + c, 8);
        std::memcpy(dst + 2 * c + 8, tb + c, 8);
      }
    }
    pairs = buf.data();
  }

  // Unit sums of rows wrow, wrow + row_bytes x tokens t0 .. t0+T for units [u0, u0 + 16).
  // Per unit: the 4 pairs (A, B) of 8 columns, A from the rows' weights, B from the pair
  // buffer at layout positions x: pair p's bytes for x .. x+7 start at p*2*cols + 2x.
  template <bool Q4, int R, int T>
  void sums_rows(const uint8_t* wrow, int64_t row_bytes, int64_t t0, int64_t u0, I (*out)[T]) const {
    static_assert(R == 2, "SMMLA takes two rows");
    constexpr int P = (T + 1) / 2;  // token pairs in the tile
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t b = u0 + 4 * j, m = std::clamp<int64_t>(units - b, 0, 4);
      int32x4_t c[P][4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        if (i >= m) {
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p) c[p][i] = vdupq_n_s32(0);
          continue;
        }
        const int64_t u = b + i;
        int8x16_t a[4];
        int64_t x[4];  // layout positions of the 4 column groups of 8, in A's order
        if constexpr (Q4) {
          // Low nibbles are the even columns (16 of them at E), high the odd ones (at E + 16m).
          const int8x16_t w0 = vld1q_s8(reinterpret_cast<const int8_t*>(wrow + u * 16));
          const int8x16_t w1 = vld1q_s8(reinterpret_cast<const int8_t*>(wrow + row_bytes + u * 16));
          const int8x16_t z0 = zip_lo(w0, w1), z1 = zip_hi(w0, w1);
          const uint8x16_t nib = vdupq_n_u8(0x0f);
          a[0] = vreinterpretq_s8_u8(vandq_u8(vreinterpretq_u8_s8(z0), nib));
          a[1] = vreinterpretq_s8_u8(vandq_u8(vreinterpretq_u8_s8(z1), nib));
          a[2] = vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(z0), 4));
          a[3] = vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(z1), 4));
          const int64_t e = b * 32 + 16 * i, o = e + 16 * m;
          x[0] = e, x[1] = e + 8, x[2] = o, x[3] = o + 8;
        } else {
          const int8_t* r0 = reinterpret_cast<const int8_t*>(wrow) + u * 32;
          const int8_t* r1 = r0 + row_bytes;
          const int8x16_t w00 = vld1q_s8(r0), w01 = vld1q_s8(r0 + 16);
          const int8x16_t w10 = vld1q_s8(r1), w11 = vld1q_s8(r1 + 16);
          a[0] = zip_lo(w00, w10), a[1] = zip_hi(w00, w10), a[2] = zip_lo(w01, w11), a[3] = zip_hi(w01, w11);
          x[0] = u * 32, x[1] = u * 32 + 8, x[2] = u * 32 + 16, x[3] = u * 32 + 24;
        }
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {
          const int8_t* pb = pairs + (t0 / 2 + p) * 2 * cols;
          int32x4_t acc = vdupq_n_s32(0);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) acc = vmmlaq_s32(acc, a[k], vld1q_s8(pb + 2 * x[k]));
          c[p][i] = acc;
        }
      }
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        int32x4_t e[4];  // (row 0, token 2p), (row 0, 2p+1), (row 1, 2p), (row 1, 2p+1)
        transpose4(c[p], e);
        out[0][2 * p].v[j] = e[0];
        out[1][2 * p].v[j] = e[2];
        if (2 * p + 1 < T) {
          out[0][2 * p + 1].v[j] = e[1];
          out[1][2 * p + 1].v[j] = e[3];
        }
      }
    }
  }

  template <int R, int T>
  void q4g_sums_rows(const uint8_t* wrow, int64_t row_bytes, int64_t t0, int64_t u0, I (*out)[T]) const {
    sums_rows<true, R, T>(wrow, row_bytes, t0, u0, out);
  }
  template <int R, int T>
  void q8g_sums_rows(const int8_t* wrow, int64_t row_bytes, int64_t t0, int64_t u0, I (*out)[T]) const {
    sums_rows<false, R, T>(reinterpret_cast<const uint8_t*>(wrow), row_bytes, t0, u0, out);
  }
};

}  // namespace

void matmul_int8_neon_i8mm(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  if (n == 1) return matmul_int8_neon_dotprod(w, x, n, y, pool);
  kernel_detail::matmul_int8<I8mmOps>(w, x, n, y, pool);
}

}  // namespace waste
