// Dispatch of the trunk matvec/matmul to a path (scalar, AVX2, AVX-512, NEON and its int8
// variants) and the row split over a thread pool.
#include <algorithm>
#include <string>

#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_int8_tokens.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/cpu.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

// Below this many weights (times tokens) a thread hand-off costs more than it saves.
constexpr int64_t kParallelMinWeights = 256 * 1024;
// Rows are handed out in multiples of the SIMD row tile, and chunks small enough to balance.
constexpr int64_t kRowTile = 4;
constexpr int64_t kChunkMinWeights = 64 * 1024;

}  // namespace

const char* kernel_path_name(KernelPath path) {
  switch (path) {
    case KernelPath::Scalar: return "scalar";
    case KernelPath::Avx2: return "avx2";
    case KernelPath::Avx512: return "avx512";
    case KernelPath::Neon: return "neon";
    case KernelPath::NeonDotprod: return "neon-dotprod";
    case KernelPath::NeonI8mm: return "neon-i8mm";
  }
  return "?";
}

bool kernel_path_available(KernelPath path) {
  [[maybe_unused]] const CpuFeatures& f = cpu_features();  // read by the x86 paths only
  switch (path) {
    case KernelPath::Scalar: return true;
#if defined(__x86_64__)
    case KernelPath::Avx2: return f.avx2 && f.fma && f.f16c;
    case KernelPath::Avx512: return f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl;
#elif defined(__aarch64__)
    case KernelPath::Neon: return f.neon;
    case KernelPath::NeonDotprod: return f.neon && f.asimddp;
    // SMMLA is ARMv8.6, which has SDOT too; asking for both keeps the one-token fallback
    // (SDOT) honest on a CPU (or a qemu model) that reports i8mm alone.
    case KernelPath::NeonI8mm: return f.neon && f.asimddp && f.i8mm;
#endif
    default: return false;
  }
  return false;
}

std::vector<KernelPath> available_kernel_paths() {
  std::vector<KernelPath> paths;
  for (KernelPath p : kAllKernelPaths)
    if (kernel_path_available(p)) paths.push_back(p);
  return paths;
}

KernelPath best_kernel_path() {
  switch (simd_level()) {
    case SimdLevel::Avx512: return KernelPath::Avx512;
    case SimdLevel::Avx2: return KernelPath::Avx2;
    case SimdLevel::Neon:
      // WASTE_SIMD has one aarch64 level (neon); the int8 variants follow the CPU's features.
      if (kernel_path_available(KernelPath::NeonI8mm)) return KernelPath::NeonI8mm;
      if (kernel_path_available(KernelPath::NeonDotprod)) return KernelPath::NeonDotprod;
      return KernelPath::Neon;
    default: return KernelPath::Scalar;
  }
}

bool simd_handles(const MatrixView& w) {
  if (w.format == TensorFormat::Q8G || w.format == TensorFormat::Q4G) return w.group % 32 == 0;
  return true;
}

void check_matrix(const MatrixView& w, const char* who) {
  const std::string at = std::string(who) + ": ";
  require(w.rows >= 0 && w.cols > 0, at + "bad shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
  require(w.data != nullptr || w.rows == 0, at + "no data");
  switch (w.format) {
    case TensorFormat::F32:
    case TensorFormat::BF16:
    case TensorFormat::F16: return;
    case TensorFormat::Q8G:
    case TensorFormat::Q4G:
      require(w.group > 0 && w.cols % w.group == 0,
              at + "cols " + std::to_string(w.cols) + " not divisible by group " + std::to_string(w.group));
      require(w.format == TensorFormat::Q8G || w.group % 2 == 0, at + "q4g needs an even group");
      require(w.scales != nullptr || w.rows == 0, at + "no scales");
      return;
    case TensorFormat::VQ3R: break;
  }
  throw Error(at + "format " + std::to_string(int(w.format)) + " is not a trunk format");
}

void for_row_ranges(ThreadPool* pool, int64_t rows, int64_t weights_per_row,
                    const std::function<void(int64_t, int64_t)>& fn) {
  if (rows <= 0) return;
  if (!pool || pool->size() <= 1) {
    fn(0, rows);
    return;
  }
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  const int64_t tile_weights = std::max<int64_t>(1, weights_per_row * kRowTile);
  const size_t grain = size_t(std::max<int64_t>(1, kChunkMinWeights / tile_weights));
  pool->parallel_for(size_t(tiles), grain, [&](size_t b, size_t e) {
    fn(int64_t(b) * kRowTile, std::min(rows, int64_t(e) * kRowTile));
  });
}

// The int8-activation path on `path` or the widest int8 kernel below it: AVX-512 needs VNNI
// (else AVX2 does it, with the same result), and unusual groups run the scalar kernel.
// (`path` is unused where only the scalar kernel exists.)
void matmul_int8_path([[maybe_unused]] KernelPath path, const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  if (!int8_simd_handles(w)) path = KernelPath::Scalar;
#if defined(__x86_64__)
  if (path == KernelPath::Avx512 && cpu_features().avx512vnni) {
    if (int8_tokens_handles(w, n)) return matmul_int8_avx512_tokens(w, x, n, y, pool);
    return matmul_int8_avx512(w, x, n, y, pool);
  }
  if (path == KernelPath::Avx512 || path == KernelPath::Avx2) return matmul_int8_avx2(w, x, n, y, pool);
#elif defined(__aarch64__)
  if (path == KernelPath::NeonI8mm) return matmul_int8_neon_i8mm(w, x, n, y, pool);
  if (path == KernelPath::NeonDotprod) return matmul_int8_neon_dotprod(w, x, n, y, pool);
  if (path == KernelPath::Neon) return matmul_int8_neon(w, x, n, y, pool);
#endif
  matmul_int8_scalar(w, x, n, y, pool);
}

void matmul_path(KernelPath path, const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  matmul_path(path, activation_mode(), w, x, n, y, pool);
}

void matmul_path(KernelPath path, ActivationMode mode, const MatrixView& w, const float* x, int64_t n, float* y,
                 ThreadPool* pool) {
  check_matrix(w, "matmul");
  require(n >= 0, "matmul: negative token count");
  if (n == 0 || w.rows == 0) return;
  require(kernel_path_available(path), std::string("matmul: path ") + kernel_path_name(path) + " not available on this CPU");
  if (mode == ActivationMode::Int8 && (w.format == TensorFormat::Q8G || w.format == TensorFormat::Q4G))
    return matmul_int8_path(path, w, x, n, y, pool);
  if (!simd_handles(w)) path = KernelPath::Scalar;
  switch (path) {
#if defined(__x86_64__)
    case KernelPath::Avx512: return matmul_avx512(w, x, n, y, pool);
    case KernelPath::Avx2: return matmul_avx2(w, x, n, y, pool);
#elif defined(__aarch64__)
    // One float kernel for the three aarch64 paths: they differ only in the int8 kernel.
    case KernelPath::Neon:
    case KernelPath::NeonDotprod:
    case KernelPath::NeonI8mm: return matmul_neon(w, x, n, y, pool);
#endif
    default: return matmul_scalar(w, x, n, y, pool);
  }
}

void matvec_path(KernelPath path, const MatrixView& w, const float* x, float* y, ThreadPool* pool) {
  matmul_path(path, w, x, 1, y, pool);
}

void matvec_path(KernelPath path, ActivationMode mode, const MatrixView& w, const float* x, float* y, ThreadPool* pool) {
  matmul_path(path, mode, w, x, 1, y, pool);
}

void matvec(const MatrixView& w, const float* x, float* y) { matmul(w, x, 1, y); }

void matmul(const MatrixView& w, const float* x, int64_t n, float* y) {
  const bool big = w.rows * w.cols * std::max<int64_t>(n, 1) > kParallelMinWeights;
  matmul_path(best_kernel_path(), w, x, n, y, big ? &ThreadPool::global() : nullptr);
}

void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool) {
  matmul_path(best_kernel_path(), w, x, 1, y, &pool);
}

void matmul(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
  matmul_path(best_kernel_path(), w, x, n, y, &pool);
}

}  // namespace waste
