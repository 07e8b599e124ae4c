// VQ3R compute kernels: lookup-table matvec, and the fused routed-expert apply that is the
// ONE entry point compute uses for any expert format (VQ3R, or lossless F32/BF16).
//
// How a VQ3R product works (docs/RVQ.md): for an input x of width n, build per vector
// position g and stage s the table T_s[g][c] = <C_s[c], x_g> (3 x 256 x n/8 values); then
// y[r] = scale[r] * sum_g (T_0[g][i0] + T_1[g][i1] + T_2[g][i2]). Tables are quantised to
// int8 with one f32 scale per block of 8 vector positions (64 inputs), stored biased by +128
// so lookups add as unsigned bytes; sums are exact integers per block, then
//   acc[r] += float(block_sum - 384 * n_vectors_in_block) * block_scale   (multiply, then add)
//   y[r]    = acc[r] * f16_to_f32(scale[r])
// The scalar path is the reference; the AVX-512 (VBMI) and NEON (TBL/TBX) paths compute the
// same integers and the same float operations in the same order, so their output is
// bit-identical. The AVX2 path (no byte permutes) instead decodes each vector to f32 and uses
// FMA with x: it is exact to f32 rounding (no table quantisation) and is checked against
// decoded weights.
//
// Usage per token and layer:
//   ExpertTables t; build_expert_tables(x, hidden, layer_codebooks, t);   // once
//   for each selected expert e: apply_expert(view_e, t, weight_e, act, scratch, y);  // y += ...
// Results depend only on the inputs (not on thread count, call order or batching).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/container/expert_view.h"
#include "shared/util/cpu.h"

namespace waste {

class ThreadPool;

constexpr int kLutBlockVectors = 8;  // vector positions per int8 table scale (64 inputs)

// Lookup tables of one input vector against one matrix kind's three stage codebooks.
struct RvqTables {
  int cols = 0;                       // input width (multiple of 8)
  const float* books = nullptr;       // the codebooks the tables were built from (identity check)
  std::vector<uint8_t> q;             // [G][3][256]: round(T / block_scale) + 128, in 1..255
  std::vector<float> block_scale;     // [ceil(G / 8)]
  std::vector<float> x;               // the input itself (AVX2 decode path)
};

// Builds tables for x[cols] against `books` (kCodebookFloats floats, stage-major [3][256][8]).
// `level` picks the path; the default is simd_level(). Every level builds identical tables.
void build_tables(const float* x, int cols, const float* books, RvqTables& out);
void build_tables_at(SimdLevel level, const float* x, int cols, const float* books, RvqTables& out);
// Tables of n inputs x[i] (each `cols` wide) into *out[i], the blocks of all of them spread
// over the pool (null: this thread). The same bytes as n build_tables calls.
void build_tables_batch(const float* const* x, int cols, const float* books, RvqTables* const* out, int n,
                        ThreadPool* pool);

// y[rows] = W x for a VQ3R matrix W [rows, cols] (codes + f16 row scales) given x's tables.
// With a pool, row tiles are spread over its threads (same result).
void rvq_matvec(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables& t, float* y,
                ThreadPool* pool = nullptr);
// n inputs through the same matrix: y[i*y_stride + r]. Reads each code byte from memory once
// for all n inputs (tables of every input are applied while a block of codes is in L1);
// bit-identical to n calls of rvq_matvec.
void rvq_matmul(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t, int n,
                float* y, size_t y_stride, ThreadPool* pool = nullptr);
// One path explicitly, rows of tiles [tile_begin, tile_end) only (tests and benchmarks).
void rvq_matmul_at(SimdLevel level, const uint8_t* codes, const uint16_t* scales, int rows, int cols,
                   const RvqTables* const* t, int n, float* y, size_t y_stride, int tile_begin, int tile_end);

// Expert activation h = act(gate, up).
struct ExpertActivation {
  enum class Kind { SiLU, SiTU } kind = Kind::SiLU;
  float beta = 4.0f;          // SiTU: b in b*tanh(g/b)*sigmoid(g)
  float beta_linear = 25.0f;  // SiTU: bl in bl*tanh(u/bl)
};
// SiLU: silu(g) * u.  SiTU: [b*tanh(g/b)*sigmoid(g)] * [bl*tanh(u/bl)].
float activate(const ExpertActivation& act, float gate, float up);
// h[i] = activate(act, gate[i], up[i]) for i < n, the same bits (SiLU on elementwise.h's path).
void activate_array(const ExpertActivation& act, const float* gate, const float* up, float* h, int64_t n);

// Per token and layer: the input and the gate/up tables every expert of the layer shares.
struct ExpertTables {
  int hidden = 0;
  const float* codebooks = nullptr;  // the layer's books the tables belong to (nullptr: lossless)
  std::vector<float> x;
  RvqTables gate, up;
};
// layer_codebooks: gate, up, down books (3 x kCodebookFloats), or nullptr for a layer whose
// experts are lossless (only x is kept).
void build_expert_tables(const float* x, int hidden, const float* layer_codebooks, ExpertTables& out);
// The same for n inputs x[i] into *out[i], every table's blocks spread over the pool.
void build_expert_tables_batch(const float* const* x, int n, int hidden, const float* layer_codebooks,
                               ExpertTables* const* out, ThreadPool* pool);

// Reusable buffers of one caller (not shared between threads), so the per-expert path does
// not allocate once they have grown to the largest batch.
struct ExpertScratch {
  std::vector<float> gate, up, h, out;
  std::vector<RvqTables> down;
  std::vector<const RvqTables*> gate_tables, up_tables;  // per token of a batch
  std::vector<const float*> down_inputs;                 // per token: its h
  std::vector<RvqTables*> down_out;                      // per token: &down[i]
};

// An expert applied by one thread alone (the experts handed out at once run side by side,
// compute/model/moe.cpp) takes at most this many rows: that thread's ExpertScratch stays
// bounded, and the memory plan counts one such scratch per compute thread.
constexpr int kThreadExpertRows = 16;

// y[hidden] += weight * down(act(gate x, up x)) for one expert in any format. For VQ3R the
// view's codebooks must be those `t` was built with (else waste::Error).
void apply_expert(const ExpertView& v, const ExpertTables& t, float weight, const ExpertActivation& act,
                  ExpertScratch& scratch, float* y, ThreadPool* pool = nullptr);
// n tokens through one expert: y[i*hidden ...] += weights[i] * expert(x_i). Codes are read once
// for all n; bit-identical to n calls of apply_expert.
void apply_expert_batch(const ExpertView& v, const ExpertTables* const* t, const float* weights, int n,
                        const ExpertActivation& act, ExpertScratch& scratch, float* y, ThreadPool* pool = nullptr);

}  // namespace waste
