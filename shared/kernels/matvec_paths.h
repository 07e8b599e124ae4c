// Internal to shared/kernels (and its tests and benchmark): the per-path entry points behind
// matvec()/matmul(), so each SIMD path can be compared to the scalar reference regardless of
// WASTE_SIMD, and run on a chosen thread pool.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_int8.h"

namespace waste {

class ThreadPool;

// The aarch64 paths share the NEON float kernels (matvec_neon.cpp) and differ in the int8
// kernel (matvec_int8.h): Neon widens with SMULL/SADALP (ARMv8.0), NeonDotprod uses SDOT
// (asimddp, ARMv8.2), NeonI8mm uses SMMLA (i8mm, ARMv8.6) for several tokens and SDOT for one.
enum class KernelPath { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3, NeonDotprod = 4, NeonI8mm = 5 };
// Every path of every architecture, the one list the tests and benchmarks iterate over.
inline constexpr KernelPath kAllKernelPaths[] = {KernelPath::Scalar, KernelPath::Avx2,        KernelPath::Avx512,
                                                 KernelPath::Neon,   KernelPath::NeonDotprod, KernelPath::NeonI8mm};
const char* kernel_path_name(KernelPath path);
// True when this CPU can run the path (ignores the WASTE_SIMD cap).
bool kernel_path_available(KernelPath path);
// The paths of kAllKernelPaths this CPU can run, scalar first.
std::vector<KernelPath> available_kernel_paths();
// The path matvec()/matmul() use: simd_level() mapped to a KernelPath (on aarch64 the
// Neon level takes the widest int8 variant the CPU has).
KernelPath best_kernel_path();
// True when the SIMD paths handle this matrix (Q8G/Q4G need group % 32 == 0); the others
// fall back to the scalar path.
bool simd_handles(const MatrixView& w);

// Throws waste::Error unless w is a well-formed trunk matrix view.
void check_matrix(const MatrixView& w, const char* who);

// Runs fn(row_begin, row_end) over [0, rows) on `pool` in blocks of whole row tiles, or on
// the calling thread when pool is null. Each row is handled by exactly one call.
void for_row_ranges(ThreadPool* pool, int64_t rows, int64_t weights_per_row,
                    const std::function<void(int64_t, int64_t)>& fn);

// y[t*rows + r] = (W x_t)[r] for t < n, on one path; pool may be null (calling thread only).
// Every path computes each row's sum in an order fixed by the path and the column count
// alone, so results do not depend on the pool size, the row split, or n. Q8G/Q4G use the
// activation mode given, or activation_mode() (matvec_int8.h) when none is; in int8 mode
// every path gives the same bits.
void matmul_path(KernelPath path, const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matvec_path(KernelPath path, const MatrixView& w, const float* x, float* y, ThreadPool* pool);
void matmul_path(KernelPath path, ActivationMode mode, const MatrixView& w, const float* x, int64_t n, float* y,
                 ThreadPool* pool);
void matvec_path(KernelPath path, ActivationMode mode, const MatrixView& w, const float* x, float* y, ThreadPool* pool);

// The per-path implementations (validated input; simd paths need simd_handles(w)).
void matmul_scalar(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_avx2(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_neon(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// dequantize_row's Q4G rows with group % 32 == 0 on AVX-512 (the scalar case's bits).
void dequantize_row_q4g_avx512(const uint8_t* q, const uint16_t* scales, int64_t cols, int64_t group, float* out);

}  // namespace waste
