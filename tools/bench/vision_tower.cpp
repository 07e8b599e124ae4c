// Throughput of the Kimi K3 vision tower + projector at the release's width (1024 hidden,
// 27 blocks, 12 heads x 128, MLP 4096, projector 4096 -> 4096 -> 7168) on random f32 weights,
// on 1 and 2 threads, with the matrices in f32 and in q8g (the converter's default for the
// tower: int8, an f16 scale per 32 inputs, 28 for the 588-wide patch embedding). One block's
// weights serve every block (the work is the same; it saves 1.5 GB).
// Usage: waste-bench-vision [h_patches w_patches [blocks]] (default 32 32 27).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compute/model/mm_projector.h"
#include "compute/model/vision_tower.h"
#include "shared/container/format.h"
#include "shared/kernels/quantize.h"
#include "shared/util/random.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

std::vector<float> random_values(size_t n, float scale, uint64_t stream) {
  Rng rng(7, stream);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.normal()) * scale;
  return v;
}

MatrixView view(const std::vector<float>& v, int64_t rows, int64_t cols) {
  MatrixView m;
  m.format = TensorFormat::F32;
  m.rows = rows;
  m.cols = cols;
  m.data = v.data();
  return m;
}

// The matrix in q8g, kept alive in `store`.
MatrixView q8g(const std::vector<float>& v, int64_t rows, int64_t cols, std::vector<std::vector<uint8_t>>& store) {
  const uint32_t group = cols % 32 == 0 ? 32 : 28;
  store.push_back(quantize_matrix(TensorFormat::Q8G, v.data(), uint64_t(rows), uint64_t(cols), group));
  MatrixView m;
  m.format = TensorFormat::Q8G;
  m.rows = rows;
  m.cols = cols;
  m.group = group;
  m.data = store.back().data();
  m.scales = reinterpret_cast<const uint16_t*>(
      store.back().data() + trunk_tensor_bytes(TensorFormat::Q8G, uint64_t(rows), uint64_t(cols), group).scales_offset);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int h = argc > 2 ? std::atoi(argv[1]) : 32, w = argc > 2 ? std::atoi(argv[2]) : 32;
  VisionConfig c;
  c.hidden = 1024;
  c.heads = 12;
  c.qkv_hidden = 1536;
  c.head_dim = 128;
  c.intermediate = 4096;
  c.n_layers = argc > 3 ? std::atoi(argv[3]) : 27;
  c.pos_emb_height = c.pos_emb_width = 64;
  c.patch_size = 14;
  c.text_hidden = 7168;
  if (h <= 0 || w <= 0 || h % 2 || w % 2 || c.n_layers <= 0) {
    std::fprintf(stderr, "usage: waste-bench-vision [h_patches w_patches (even) [blocks]]\n");
    return 2;
  }
  const int64_t D = c.hidden, Q = c.qkv_hidden, I = c.intermediate, M = c.merged_width(), T = c.text_hidden;
  const std::vector<float> pe = random_values(size_t(D * c.patch_values()), 0.04f, 1);
  const std::vector<float> pos = random_values(size_t(64 * 64 * D), 1.0f, 2);
  const std::vector<float> ones(size_t(std::max<int64_t>(D, T)), 1.0f);
  const std::vector<float> wqkv = random_values(size_t(3 * Q * D), 0.03f, 3);
  const std::vector<float> wo = random_values(size_t(D * Q), 0.025f, 4);
  const std::vector<float> fc0 = random_values(size_t(I * D), 0.03f, 5);
  const std::vector<float> fc1 = random_values(size_t(D * I), 0.015f, 6);
  const std::vector<float> p0 = random_values(size_t(M * M), 0.015f, 7);
  const std::vector<float> p2 = random_values(size_t(T * M), 0.015f, 8);
  VisionWeights vw;
  vw.patch_embed = view(pe, D, c.patch_values());
  vw.pos_emb = {pos.data(), pos.size()};
  VisionBlockWeights b;
  b.norm0 = b.norm1 = {ones.data(), size_t(D)};
  b.wqkv = view(wqkv, 3 * Q, D);
  b.wo = view(wo, D, Q);
  b.fc0 = view(fc0, I, D);
  b.fc1 = view(fc1, D, I);
  vw.blocks.assign(size_t(c.n_layers), b);
  vw.final_norm = {ones.data(), size_t(D)};
  vw.proj0 = view(p0, M, M);
  vw.proj2 = view(p2, T, M);
  vw.post_norm = {ones.data(), size_t(T)};
  const int64_t L = int64_t(h) * w;
  const std::vector<float> pixels = random_values(size_t(L * c.patch_values()), 0.5f, 9);

  std::printf("vision tower: %d x %d = %lld patches, %d blocks, hidden %lld, %d x %d heads, MLP %lld, "
              "projector %lld -> %lld -> %lld\n",
              h, w, (long long)L, c.n_layers, (long long)D, c.heads, c.head_dim, (long long)I, (long long)M,
              (long long)M, (long long)T);
  std::vector<std::vector<uint8_t>> store;
  store.reserve(8);  // views point into it
  VisionWeights vq = vw;
  vq.patch_embed = q8g(pe, D, c.patch_values(), store);
  VisionBlockWeights bq = b;
  bq.wqkv = q8g(wqkv, 3 * Q, D, store);
  bq.wo = q8g(wo, D, Q, store);
  bq.fc0 = q8g(fc0, I, D, store);
  bq.fc1 = q8g(fc1, D, I, store);
  vq.blocks.assign(size_t(c.n_layers), bq);
  vq.proj0 = q8g(p0, M, M, store);
  vq.proj2 = q8g(p2, T, M, store);
  for (const char* format : {"q8g", "f32"})
  for (unsigned threads : {1u, 2u}) {
    const VisionWeights& vw_run = std::string(format) == "q8g" ? vq : vw;
    ThreadPool pool(threads);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float> tower = vision_tower(c, vw_run, pixels.data(), h, w, &pool);
    const auto t1 = std::chrono::steady_clock::now();
    const std::vector<float> emb = mm_projector(c, vw_run, tower.data(), h, w, &pool);
    const auto t2 = std::chrono::steady_clock::now();
    const double st = std::chrono::duration<double>(t1 - t0).count();
    const double sp = std::chrono::duration<double>(t2 - t1).count();
    std::printf("%s, threads %u: tower %.3f s, projector %.3f s, total %.3f s: %.1f patches/s, %.1f patches/s per core"
                " (check %.4f)\n",
                format, threads, st, sp, st + sp, double(L) / (st + sp), double(L) / (st + sp) / threads,
                double(emb[0]));
  }
  return 0;
}
