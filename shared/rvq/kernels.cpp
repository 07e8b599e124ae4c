// Dispatch of the VQ3R kernels, table building, and the fused expert apply.
#include "shared/rvq/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "shared/kernels/activation.h"
#include "shared/kernels/elementwise.h"
#include "shared/kernels/matvec.h"
#include "shared/rvq/kernel_paths.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

using namespace rvq_detail;

namespace {

// The path of a level: the x86 LUT path needs VBMI byte permutes (simd_level() reports Avx512
// only with VBMI), AVX2 decodes instead; on aarch64 Neon is the TBL/TBX LUT path. A level of
// the other architecture's chain (a test asking for it) runs the scalar reference.
SimdLevel kernel_level(SimdLevel level) {
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512 || level == SimdLevel::Avx2) return level;
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) return level;
#endif
  return SimdLevel::Scalar;
}

// Tables are built per token and per expert's down product; keep the transposed books of the
// last few codebooks so repeated builds do not re-transpose (thread-local: no locks). A hit
// needs the same pointer AND the same contents: a freed codebook buffer's address may be
// reused for other books. The compare reads 24 KiB, far less than building one table.
const BooksT& transposed(const float* books) {
  struct Entry {
    const float* key = nullptr;
    std::unique_ptr<float[]> copy;  // the books as they were when transposed
    std::unique_ptr<BooksT> t;
  };
  constexpr size_t kBookBytes = kCodebookFloats * sizeof(float);
  thread_local Entry cache[4];
  thread_local int next = 0;
  for (auto& e : cache)
    if (e.key == books && e.t && std::memcmp(e.copy.get(), books, kBookBytes) == 0) return *e.t;
  Entry& e = cache[next];
  next = (next + 1) % 4;
  if (!e.t) {
    e.t = std::make_unique<BooksT>();
    e.copy = std::make_unique<float[]>(kCodebookFloats);
  }
  transpose_books(books, *e.t);
  std::memcpy(e.copy.get(), books, kBookBytes);
  e.key = books;
  return *e.t;
}

}  // namespace

namespace {

// Sizes out for `cols` inputs against `books` at `level` (the caller's thread: no allocation
// in the workers); returns the number of blocks to fill, 0 for the AVX2 path (no tables).
int prepare_tables(SimdLevel level, const float* x, int cols, const float* books, RvqTables& out) {
  require(cols > 0 && cols % kVqDim == 0, "build_tables: input width must be a positive multiple of 8, got " +
                                              std::to_string(cols));
  require(books != nullptr, "build_tables: no codebooks");
  const int G = cols / kVqDim;
  const int blocks = (G + kLutBlockVectors - 1) / kLutBlockVectors;
  out.cols = cols;
  out.books = books;
  out.x.assign(x, x + cols);
  out.block_scale.resize(size_t(blocks));
  if (level == SimdLevel::Avx2) {  // the decode path reads x and the books only
    out.q.clear();
    std::fill(out.block_scale.begin(), out.block_scale.end(), 0.0f);
    return 0;
  }
  out.q.resize(size_t(G) * kVqStages * kVqEntries);
  return blocks;
}

// Block b of out's tables (every block is independent: its own scale, its own bytes).
void table_block_at(SimdLevel level, const BooksT& bt, int b, RvqTables& out) {
  const int G = out.cols / kVqDim;
  const int g0 = b * kLutBlockVectors, nv = std::min(G - g0, kLutBlockVectors);
  const float* x = out.x.data() + size_t(g0) * kVqDim;
  uint8_t* q = out.q.data() + size_t(g0) * kVqStages * kVqEntries;
  float& scale = out.block_scale[size_t(b)];
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) {
    scale = table_block_avx512(x, nv, bt, q);
    return;
  }
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) {
    scale = table_block_neon(x, nv, bt, q);
    return;
  }
#endif
  scale = table_block_scalar(x, nv, bt, q);
}

// Groups of 4 row tiles per chunk of a pool's parallel_for over a matrix. Several tokens:
// one contiguous range per thread, as the kernel reads each token's tables once per call
// (lut_avx512.cpp) and a prefill's tables come from memory, so smaller chunks would read
// them again. One token (a decode): its tables sit in L2, and the pool's small chunks
// balance a thread slowed by other work.
size_t tile_groups_per_chunk(size_t groups, int tokens, const ThreadPool& pool) {
  return tokens > 1 ? (groups + pool.size() - 1) / pool.size() : 1;
}

}  // namespace

void build_tables_at(SimdLevel level, const float* x, int cols, const float* books, RvqTables& out) {
  level = kernel_level(level);
  const int blocks = prepare_tables(level, x, cols, books, out);
  if (blocks == 0) return;
  const BooksT& bt = transposed(books);
  for (int b = 0; b < blocks; ++b) table_block_at(level, bt, b, out);
}

void build_tables_batch(const float* const* x, int cols, const float* books, RvqTables* const* out, int n,
                        ThreadPool* pool) {
  const SimdLevel level = kernel_level(simd_level());
  int blocks = 0;
  for (int i = 0; i < n; ++i) blocks = prepare_tables(level, x[i], cols, books, *out[i]);
  if (n <= 0 || blocks == 0) return;
  // Transposed once here: the workers share it (transposed() is per thread, and the caller
  // does not call it again before parallel_for returns).
  const BooksT& bt = transposed(books);
  const size_t items = size_t(n) * size_t(blocks);
  auto run = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) table_block_at(level, bt, int(k % size_t(blocks)), *out[k / size_t(blocks)]);
  };
  // A block is ~2 us of work (8 positions x 3 x 256 entries x 8 inputs); 4 of them outweigh
  // handing a chunk to the other thread.
  constexpr size_t kMinBlocksPerChunk = 4;
  if (!pool || pool->size() < 2 || items < 2 * kMinBlocksPerChunk) return run(0, items);
  pool->parallel_for(items, kMinBlocksPerChunk, run);
}

void build_tables(const float* x, int cols, const float* books, RvqTables& out) {
  build_tables_at(simd_level(), x, cols, books, out);
}

void rvq_matmul_at(SimdLevel level, const uint8_t* codes, const uint16_t* scales, int rows, int cols,
                   const RvqTables* const* t, int n, float* y, size_t y_stride, int tile_begin, int tile_end) {
  level = kernel_level(level);
  for (int i = 0; i < n; ++i) {
    require(t[i]->cols == cols, "rvq_matmul: tables for width " + std::to_string(t[i]->cols) + ", matrix has " +
                                    std::to_string(cols) + " columns");
    require(level == SimdLevel::Avx2 || !t[i]->q.empty(), "rvq_matmul: tables were built for the AVX2 path");
  }
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) return matmul_tiles_avx512(codes, scales, rows, cols, t, n, y, y_stride, tile_begin, tile_end);
  if (level == SimdLevel::Avx2) return matmul_tiles_avx2(codes, scales, rows, cols, t, n, y, y_stride, tile_begin, tile_end);
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) return matmul_tiles_neon(codes, scales, rows, cols, t, n, y, y_stride, tile_begin, tile_end);
#endif
  matmul_tiles_scalar(codes, scales, rows, cols, t, n, y, y_stride, tile_begin, tile_end);
}

void rvq_matmul(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t, int n,
                float* y, size_t y_stride, ThreadPool* pool) {
  const int tiles = (rows + kVqTileRows - 1) / kVqTileRows;
  const SimdLevel level = simd_level();
  if (!pool || pool->size() == 1) return rvq_matmul_at(level, codes, scales, rows, cols, t, n, y, y_stride, 0, tiles);
  // Groups of kLutGroupTiles tiles (the AVX-512 kernel's unit); each row's result does not
  // depend on the split.
  const size_t groups = size_t(tiles + kLutGroupTiles - 1) / kLutGroupTiles;
  pool->parallel_for(groups, tile_groups_per_chunk(groups, n, *pool), [&](size_t b, size_t e) {
    rvq_matmul_at(level, codes, scales, rows, cols, t, n, y, y_stride, int(b) * kLutGroupTiles,
                  std::min(tiles, int(e) * kLutGroupTiles));
  });
}

void rvq_matvec(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables& t, float* y,
                ThreadPool* pool) {
  const RvqTables* p = &t;
  rvq_matmul(codes, scales, rows, cols, &p, 1, y, size_t(rows), pool);
}

float activate(const ExpertActivation& act, float g, float u) {
  if (act.kind == ExpertActivation::Kind::SiLU) return gated_silu(g, u);
  return gated_situ(g, u, act.beta, act.beta_linear);
}

void activate_array(const ExpertActivation& act, const float* gate, const float* up, float* h, int64_t n) {
  if (act.kind == ExpertActivation::Kind::SiLU) {
    elementwise().gated_silu(gate, up, h, n);  // gated_silu's bits on every path
    return;
  }
  for (int64_t i = 0; i < n; ++i) h[i] = gated_situ(gate[i], up[i], act.beta, act.beta_linear);
}

void build_expert_tables(const float* x, int hidden, const float* layer_codebooks, ExpertTables& out) {
  ExpertTables* o = &out;
  build_expert_tables_batch(&x, 1, hidden, layer_codebooks, &o, nullptr);
}

void build_expert_tables_batch(const float* const* x, int n, int hidden, const float* layer_codebooks,
                               ExpertTables* const* out, ThreadPool* pool) {
  thread_local std::vector<RvqTables*> gate, up;
  gate.resize(size_t(std::max(n, 0)));
  up.resize(size_t(std::max(n, 0)));
  for (int i = 0; i < n; ++i) {
    ExpertTables& t = *out[i];
    t.hidden = hidden;
    t.codebooks = layer_codebooks;
    t.x.assign(x[i], x[i] + hidden);
    gate[size_t(i)] = &t.gate;
    up[size_t(i)] = &t.up;
  }
  if (!layer_codebooks) return;
  build_tables_batch(x, hidden, layer_codebooks, gate.data(), n, pool);
  build_tables_batch(x, hidden, layer_codebooks + kCodebookFloats, up.data(), n, pool);
}

namespace {

void check_view(const ExpertView& v, const ExpertTables& t) {
  require(v.hidden > 0 && v.intermediate > 0, "apply_expert: empty expert view");
  require(t.hidden == v.hidden, "apply_expert: tables for hidden " + std::to_string(t.hidden) + ", expert has " +
                                    std::to_string(v.hidden));
  switch (v.format) {
    case TensorFormat::VQ3R:
      require(v.codebooks && v.codebooks == t.codebooks,
              "apply_expert: the expert's layer codebooks are not those the tables were built from");
      require(v.hidden % kVqDim == 0 && v.intermediate % kVqDim == 0, "apply_expert: VQ3R widths must be multiples of 8");
      return;
    case TensorFormat::F32:
    case TensorFormat::BF16: return;
    default: throw Error(std::string("apply_expert: unsupported expert format ") + format_name(v.format));
  }
}

MatrixView lossless(const ExpertView& v, const uint8_t* data, int rows, int cols) {
  MatrixView m;
  m.format = v.format;
  m.rows = rows;
  m.cols = cols;
  m.data = data;
  return m;
}

}  // namespace

void apply_expert_batch(const ExpertView& v, const ExpertTables* const* t, const float* weights, int n,
                        const ExpertActivation& act, ExpertScratch& s, float* y, ThreadPool* pool) {
  if (n <= 0) return;
  for (int i = 0; i < n; ++i) check_view(v, *t[i]);
  const int H = v.hidden, I = v.intermediate;
  s.gate.resize(size_t(n) * I);
  s.up.resize(size_t(n) * I);
  s.h.resize(size_t(n) * I);
  s.out.resize(size_t(n) * H);
  if (v.format == TensorFormat::VQ3R) {
    const size_t nn = static_cast<size_t>(n);
    auto& tg = s.gate_tables;
    auto& tu = s.up_tables;
    tg.resize(nn);
    tu.resize(nn);
    for (int i = 0; i < n; ++i) { tg[size_t(i)] = &t[i]->gate; tu[size_t(i)] = &t[i]->up; }
    const SimdLevel level = simd_level();
    // Work is split in groups of kLutGroupTiles row tiles (the AVX-512 kernel's unit; no row's
    // result depends on the split). Gate, up and the activation of the same inner rows are one
    // item, and the down product and its weighted sum into y another: two hand-offs to the pool
    // instead of three matmuls, and the activation and the sum no longer run on this thread
    // alone.
    auto groups_of = [](int tiles) { return (tiles + kLutGroupTiles - 1) / kLutGroupTiles; };
    auto each_range = [&](int groups, const std::function<void(int, int)>& item) {
      if (!pool || pool->size() < 2 || groups < 2) return item(0, groups);
      pool->parallel_for(size_t(groups), tile_groups_per_chunk(size_t(groups), n, *pool),
                         [&](size_t b, size_t e) { item(int(b), int(e)); });
    };
    const int tiles_i = (I + kVqTileRows - 1) / kVqTileRows, tiles_h = (H + kVqTileRows - 1) / kVqTileRows;
    each_range(groups_of(tiles_i), [&](int k0, int k1) {
      const int t0 = k0 * kLutGroupTiles, t1 = std::min(tiles_i, k1 * kLutGroupTiles);
      rvq_matmul_at(level, v.gate, v.gate_scales, I, H, tg.data(), n, s.gate.data(), size_t(I), t0, t1);
      rvq_matmul_at(level, v.up, v.up_scales, I, H, tu.data(), n, s.up.data(), size_t(I), t0, t1);
      const int r0 = t0 * kVqTileRows, r1 = std::min(I, t1 * kVqTileRows);
      for (int i = 0; i < n; ++i) {
        const size_t at = size_t(i) * I + size_t(r0);
        activate_array(act, &s.gate[at], &s.up[at], &s.h[at], r1 - r0);
      }
    });
    if (s.down.size() < nn) s.down.resize(nn);
    s.down_inputs.resize(nn);
    std::vector<RvqTables*>& down_out = s.down_out;
    down_out.resize(nn);
    for (int i = 0; i < n; ++i) {
      s.down_inputs[size_t(i)] = s.h.data() + size_t(i) * I;
      down_out[size_t(i)] = &s.down[size_t(i)];
    }
    build_tables_batch(s.down_inputs.data(), I, v.codebooks + 2 * kCodebookFloats, down_out.data(), n, pool);
    each_range(groups_of(tiles_h), [&](int k0, int k1) {
      const int t0 = k0 * kLutGroupTiles, t1 = std::min(tiles_h, k1 * kLutGroupTiles);
      rvq_matmul_at(level, v.down, v.down_scales, H, I, down_out.data(), n, s.out.data(), size_t(H), t0, t1);
      const int r0 = t0 * kVqTileRows, r1 = std::min(H, t1 * kVqTileRows);
      for (int i = 0; i < n; ++i)
        for (int r = r0; r < r1; ++r) y[size_t(i) * H + size_t(r)] += weights[i] * s.out[size_t(i) * H + size_t(r)];
    });
    return;
  }
  const MatrixView g = lossless(v, v.gate, I, H), u = lossless(v, v.up, I, H), d = lossless(v, v.down, H, I);
  for (int i = 0; i < n; ++i) {
    matvec(g, t[i]->x.data(), s.gate.data() + size_t(i) * I);
    matvec(u, t[i]->x.data(), s.up.data() + size_t(i) * I);
  }
  activate_array(act, s.gate.data(), s.up.data(), s.h.data(), int64_t(n) * I);
  for (int i = 0; i < n; ++i) matvec(d, s.h.data() + size_t(i) * I, s.out.data() + size_t(i) * H);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < H; ++r) y[size_t(i) * H + r] += weights[i] * s.out[size_t(i) * H + r];
}

void apply_expert(const ExpertView& v, const ExpertTables& t, float weight, const ExpertActivation& act,
                  ExpertScratch& scratch, float* y, ThreadPool* pool) {
  const ExpertTables* p = &t;
  apply_expert_batch(v, &p, &weight, 1, act, scratch, y, pool);
}

}  // namespace waste
