// The dispatched kernels on fixed pseudo-random inputs of odd shapes, on whatever SIMD level
// WASTE_SIMD and the CPU give this process: integration-simd runs it once per level and
// compares the outputs byte for byte (or within the documented bound). Usage:
// waste-test-simd-probe OUT_DIR. Prints the level it ran ("simd=<name>", so the caller knows the
// cap took effect) and writes one file of little-endian f32 outputs per kernel family:
//   int8.f32   matvec of Q8G and Q4G matrices (int8 activations, the default trunk path)
//   exact.f32  matvec of F32 and BF16 matrices on data whose every product and partial sum is
//              exact in f32 (any summation order gives the same bits)
//   float.f32  matvec of F32 and BF16 matrices on Gaussian data (lane order rounds differently)
//   rvq.f32    VQ3R matvec: build_tables + rvq_matvec
// The inputs depend on nothing but the fixed seeds, so every run sees the same ones.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/kernels/matvec.h"
#include "shared/rvq/kernels.h"
#include "shared/util/cpu.h"
#include "shared/util/half.h"
#include "tests/unit/kernels/kernel_test_util.h"

using namespace waste;

namespace {

// Rows and columns: 1 row, rows one short of and one past a 64-row tile, a row count no path's
// unroll divides, and a head-like width; columns multiples of 64 (the Q4G/Q8G group of 32 and
// the RVQ vector of 8 both divide them), 2304 as in the real models' hidden size.
constexpr int kShapes[][2] = {{1, 64}, {63, 96}, {65, 256}, {201, 160}, {513, 2304}};

std::vector<float> gaussian(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Integers in [-4, 4]: with exact_matrix's weights every product and partial sum is exact.
std::vector<float> small_integers(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

void append_matvec(std::vector<float>& out, const MatrixView& w, const std::vector<float>& x) {
  std::vector<float> y(size_t(w.rows));
  matvec(w, x.data(), y.data());
  out.insert(out.end(), y.begin(), y.end());
}

void write(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937 rng(20261205);
  std::vector<float> int8, exact, floats, rvq;
  for (const auto& [rows, cols] : kShapes) {
    for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G}) {
      const test::StoredMatrix m = test::random_matrix(f, rows, cols, 32, rng);
      append_matvec(int8, m.view, gaussian(size_t(cols), rng, 1.0f));
    }
    for (TensorFormat f : {TensorFormat::F32, TensorFormat::BF16}) {
      const test::StoredMatrix e = test::exact_matrix(f, rows, cols, 0, rng);
      append_matvec(exact, e.view, small_integers(size_t(cols), rng));
      const test::StoredMatrix g = test::random_matrix(f, rows, cols, 0, rng);
      append_matvec(floats, g.view, gaussian(size_t(cols), rng, 1.0f));
    }
    // A random VQ3R matrix (random codes and books, f16 row scales) and an input's tables.
    std::vector<uint8_t> codes(vq3r_code_bytes(rows, cols));
    for (auto& c : codes) c = uint8_t(rng());
    std::vector<uint16_t> scales(static_cast<size_t>(rows));
    std::uniform_real_distribution<float> u(0.01f, 0.05f);
    for (auto& s : scales) s = f32_to_f16(u(rng));
    const std::vector<float> books = gaussian(kCodebookFloats, rng, 0.5f);
    const std::vector<float> x = gaussian(size_t(cols), rng, 1.0f);
    RvqTables t;
    build_tables(x.data(), cols, books.data(), t);
    std::vector<float> y(static_cast<size_t>(rows));
    rvq_matvec(codes.data(), scales.data(), rows, cols, t, y.data());
    rvq.insert(rvq.end(), y.begin(), y.end());
  }
  write(dir + "/int8.f32", int8);
  write(dir + "/exact.f32", exact);
  write(dir + "/float.f32", floats);
  write(dir + "/rvq.f32", rvq);
  std::printf("simd=%s\n", simd_level_name(simd_level()));
  return 0;
}
