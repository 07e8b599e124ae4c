// Per-path kernel entry points behind shared/rvq/kernels.h (internal to shared/rvq).
#pragma once
#include <cstddef>
#include <cstdint>

#include "shared/rvq/kernels.h"

namespace waste::rvq_detail {

constexpr int kLutBias = 128;  // tables are stored as q + 128 (unsigned bytes)
// Row tiles the AVX-512 kernel runs together (256 rows share each table load), and so the
// unit in which callers split a matrix's tiles over threads.
constexpr int kLutGroupTiles = 4;

// Stage codebooks transposed to [stage][dim][entry] for building tables 16 entries at a time.
struct BooksT {
  alignas(64) float t[kVqStages][kVqDim][kVqEntries];
};
void transpose_books(const float* books, BooksT& out);

// Tables of one block of `nv` vector positions (x has nv*8 values) quantised into
// q[nv][3][256] with one scale; returns the scale. Float table entries are computed as
// ((c0*x0 + c1*x1) + c2*x2) + ... (multiply then add, no FMA) so every path agrees exactly.
float table_block_scalar(const float* x, int nv, const BooksT& b, uint8_t* q);
void matmul_tiles_scalar(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                         int n, float* y, size_t y_stride, int tile_begin, int tile_end);
#if defined(__x86_64__)
float table_block_avx512(const float* x, int nv, const BooksT& b, uint8_t* q);
void matmul_tiles_avx512(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                         int n, float* y, size_t y_stride, int tile_begin, int tile_end);
void matmul_tiles_avx2(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                       int n, float* y, size_t y_stride, int tile_begin, int tile_end);
#elif defined(__aarch64__)
float table_block_neon(const float* x, int nv, const BooksT& b, uint8_t* q);
void matmul_tiles_neon(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                       int n, float* y, size_t y_stride, int tile_begin, int tile_end);
#endif

}  // namespace waste::rvq_detail
