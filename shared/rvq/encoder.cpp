// VQ3R training (k-means++ then Lloyd per stage, then joint least-squares refinement) and
// encoding (greedy or beam search, per-stage re-assignment, least-squares row scale).
#include "shared/rvq/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "shared/container/format.h"
#include "shared/rvq/book_search.h"
#include "shared/util/error.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

namespace waste {

using rvq_detail::PreparedBooks;
using rvq_detail::StageBook;

namespace {

constexpr int D = kVqDim;
constexpr int K = kVqEntries;
constexpr int S = kVqStages;

ThreadPool& pool_of(const RvqOptions& opt) { return opt.pool ? *opt.pool : ThreadPool::global(); }

// Beam and greedy assignment of one unit-RMS vector; returns the three indices.
struct VectorCoder {
  const PreparedBooks& pb;
  const RvqOptions& opt;
  rvq_detail::ScoresFn scores = rvq_detail::scores_fn();
  rvq_detail::NearestFn nearest = rvq_detail::nearest_fn();

  void greedy(const float* x, uint8_t idx[S]) const {
    float r[D];
    std::memcpy(r, x, sizeof r);
    for (int s = 0; s < S; ++s) {
      int j = nearest(r, pb.stage[s], nullptr);
      idx[s] = uint8_t(j);
      for (int d = 0; d < D; ++d) r[d] -= pb.stage[s].rows[j][d];
    }
  }

  // Keeps the `width` lowest-error partial codes after each stage; errors are tracked as
  // |residual|^2 exactly (score + |r|^2), ties resolved by candidate order.
  void beam(const float* x, uint8_t idx[S]) const {
    const int width = std::clamp(opt.beam_width, 1, 64);
    struct Cand { float err; int parent; int entry; };
    float res[64][D], nres[64][D];
    uint8_t path[64][S], npath[64][S];
    float err[64];
    int n = 1;
    std::memcpy(res[0], x, sizeof(float) * D);
    err[0] = 0;
    for (int d = 0; d < D; ++d) err[0] += x[d] * x[d];
    alignas(64) float sc[K];
    Cand best[64];
    for (int s = 0; s < S; ++s) {
      const int keep = s + 1 == S ? 1 : width;
      int nb = 0;
      for (int b = 0; b < n; ++b) {
        scores(res[b], pb.stage[s], sc);
        for (int j = 0; j < K; ++j) {
          float e = err[b] + sc[j];
          if (nb == keep && !(e < best[nb - 1].err)) continue;
          int p = nb == keep ? keep - 1 : nb++;
          while (p > 0 && e < best[p - 1].err) { best[p] = best[p - 1]; --p; }
          best[p] = {e, b, j};
        }
      }
      for (int i = 0; i < nb; ++i) {
        const Cand& c = best[i];
        const float* e = pb.stage[s].rows[c.entry];
        float en = 0;
        for (int d = 0; d < D; ++d) { nres[i][d] = res[c.parent][d] - e[d]; en += nres[i][d] * nres[i][d]; }
        std::memcpy(npath[i], path[c.parent], S);
        npath[i][s] = uint8_t(c.entry);
        err[i] = en;
      }
      n = nb;
      std::memcpy(res, nres, sizeof(float) * D * n);
      std::memcpy(path, npath, size_t(S) * n);
    }
    std::memcpy(idx, path[0], S);
  }

  // Re-assigns each stage given the other two (never increases the error).
  void refine(const float* x, uint8_t idx[S], int passes) const {
    for (int p = 0; p < passes; ++p)
      for (int s = 0; s < S; ++s) {
        float t[D];
        for (int d = 0; d < D; ++d) {
          float v = x[d];
          for (int o = 0; o < S; ++o)
            if (o != s) v -= pb.stage[o].rows[idx[o]][d];
          t[d] = v;
        }
        idx[s] = uint8_t(nearest(t, pb.stage[s], nullptr));
      }
  }

  void code(const float* x, uint8_t idx[S]) const {
    if (opt.effort == RvqEffort::Beam) {
      beam(x, idx);
      refine(x, idx, opt.refine_passes);
    } else {
      greedy(x, idx);
    }
  }
};

float row_rms(const float* w, int cols) {
  double s = 0;
  for (int c = 0; c < cols; ++c) s += double(w[c]) * w[c];
  return float(std::sqrt(s / cols));
}

// Unit-RMS training vectors, drawn deterministically from the sample rows.
std::vector<float> training_vectors(const float* rows, size_t n_rows, int cols, const RvqOptions& opt) {
  const size_t per_row = size_t(cols / D);
  const size_t total = n_rows * per_row;
  const size_t n = std::min(total, std::max<size_t>(opt.max_train_vectors, K));
  std::vector<size_t> pick(n);
  if (n == total) {
    for (size_t i = 0; i < n; ++i) pick[i] = i;
  } else {
    // Stride sampling with a seeded offset: deterministic and spread over every row.
    std::mt19937_64 rng(opt.seed);
    double step = double(total) / double(n);
    double start = std::uniform_real_distribution<double>(0, step)(rng);
    for (size_t i = 0; i < n; ++i) pick[i] = std::min(total - 1, size_t(start + step * double(i)));
  }
  std::vector<float> inv(n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    float rms = row_rms(rows + r * size_t(cols), cols);
    inv[r] = rms > 0 ? 1.0f / rms : 0.0f;
  }
  std::vector<float> v(n * D);
  for (size_t i = 0; i < n; ++i) {
    size_t r = pick[i] / per_row, g = pick[i] % per_row;
    for (int d = 0; d < D; ++d) v[i * D + d] = rows[r * size_t(cols) + g * D + d] * inv[r];
  }
  return v;
}

// k-means++ seeding on (a subsample of) the data, then Lloyd iterations on all of it.
void kmeans_stage(const std::vector<float>& data, size_t n, const RvqOptions& opt, uint64_t seed, float* centers) {
  ThreadPool& pool = pool_of(opt);
  std::mt19937_64 rng(seed);
  const size_t n_init = std::min<size_t>(n, 32768);
  const size_t init_step = n / n_init;
  std::vector<double> dmin(n_init, 1e300);
  auto at = [&](size_t i) { return &data[i * init_step * D]; };
  size_t first = std::uniform_int_distribution<size_t>(0, n_init - 1)(rng);
  std::memcpy(centers, at(first), sizeof(float) * D);
  for (int k = 1; k < K; ++k) {
    const float* c = centers + (k - 1) * D;
    double total = 0;
    for (size_t i = 0; i < n_init; ++i) {
      const float* x = at(i);
      double e = 0;
      for (int d = 0; d < D; ++d) { double t = double(x[d]) - c[d]; e += t * t; }
      dmin[i] = std::min(dmin[i], e);
      total += dmin[i];
    }
    size_t chosen = n_init - 1;
    if (total > 0) {
      double u = std::uniform_real_distribution<double>(0, total)(rng), acc = 0;
      for (size_t i = 0; i < n_init; ++i) {
        acc += dmin[i];
        if (acc >= u) { chosen = i; break; }
      }
    } else {
      chosen = size_t(k) % n_init;
    }
    std::memcpy(centers + k * D, at(chosen), sizeof(float) * D);
  }
  auto nearest = rvq_detail::nearest_fn();
  std::vector<int> assign(n);
  std::vector<float> dist(n);
  auto sb = std::make_unique<StageBook>();
  for (int it = 0; it < opt.kmeans_iters; ++it) {
    rvq_detail::prepare_stage(centers, *sb);
    pool.parallel_for(n, 4096, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const float* x = &data[i * D];
        float s;
        assign[i] = nearest(x, *sb, &s);
        float xn = 0;
        for (int d = 0; d < D; ++d) xn += x[d] * x[d];
        dist[i] = s + xn;
      }
    });
    std::vector<double> sum(size_t(K) * D, 0.0);
    std::vector<size_t> count(K, 0);
    for (size_t i = 0; i < n; ++i) {
      ++count[assign[i]];
      for (int d = 0; d < D; ++d) sum[size_t(assign[i]) * D + d] += data[i * D + d];
    }
    // Empty clusters take the worst-coded vectors (deterministic: largest distance first).
    std::vector<size_t> order;
    for (int k = 0; k < K; ++k) {
      if (count[k]) {
        for (int d = 0; d < D; ++d) centers[k * D + d] = float(sum[size_t(k) * D + d] / double(count[k]));
        continue;
      }
      if (order.empty()) {
        order.resize(n);
        for (size_t i = 0; i < n; ++i) order[i] = i;
        std::partial_sort(order.begin(), order.begin() + std::min<size_t>(n, K), order.end(),
                          [&](size_t a, size_t b) { return dist[a] > dist[b] || (dist[a] == dist[b] && a < b); });
      }
      size_t take = order[size_t(k) % std::min<size_t>(n, K)];
      std::memcpy(centers + k * D, &data[take * D], sizeof(float) * D);
    }
  }
}

}  // namespace

std::vector<float> train_codebooks(const float* rows_sample, size_t n_rows, int cols, const RvqOptions& opt) {
  require(cols > 0 && cols % D == 0, "train_codebooks: cols must be a positive multiple of 8, got " + std::to_string(cols));
  require(n_rows > 0, "train_codebooks: no rows to train on");
  std::vector<float> data = training_vectors(rows_sample, n_rows, cols, opt);
  const size_t n = data.size() / D;
  std::vector<float> books(kCodebookFloats, 0.0f);
  std::vector<float> residual = data;
  ThreadPool& pool = pool_of(opt);
  // Stage by stage: k-means on what the earlier stages left over.
  for (int s = 0; s < S; ++s) {
    float* c = books.data() + size_t(s) * K * D;
    kmeans_stage(residual, n, opt, opt.seed + 7919u * uint64_t(s + 1), c);
    auto sb = std::make_unique<StageBook>();
    rvq_detail::prepare_stage(c, *sb);
    auto nearest = rvq_detail::nearest_fn();
    pool.parallel_for(n, 4096, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        int j = nearest(&residual[i * D], *sb, nullptr);
        for (int d = 0; d < D; ++d) residual[i * D + d] -= c[j * D + d];
      }
    });
  }
  // Joint refinement: code every vector with all three stages, then for each stage set each
  // entry to the mean of (x - the other two stages' entries) over its vectors, which is the
  // least-squares optimum of that stage given the assignment.
  std::vector<uint8_t> idx(n * S);
  for (int round = 0; round < opt.train_refine_passes; ++round) {
    auto pb = std::make_unique<PreparedBooks>();
    rvq_detail::prepare_books(books.data(), *pb);
    VectorCoder coder{*pb, opt};
    pool.parallel_for(n, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) coder.code(&data[i * D], &idx[i * S]);
    });
    for (int s = 0; s < S; ++s) {
      std::vector<double> sum(size_t(K) * D, 0.0);
      std::vector<size_t> count(K, 0);
      float* c = books.data() + size_t(s) * K * D;
      for (size_t i = 0; i < n; ++i) {
        int j = idx[i * S + s];
        ++count[j];
        for (int d = 0; d < D; ++d) {
          float v = data[i * D + d];
          for (int o = 0; o < S; ++o)
            if (o != s) v -= books[(size_t(o) * K + idx[i * S + o]) * D + d];
          sum[size_t(j) * D + d] += v;
        }
      }
      for (int j = 0; j < K; ++j)
        if (count[j])
          for (int d = 0; d < D; ++d) c[j * D + d] = float(sum[size_t(j) * D + d] / double(count[j]));
    }
  }
  return books;
}

EncodeStats encode_matrix(const float* W, int rows, int cols, const float* books, const RvqOptions& opt,
                          uint8_t* codes, uint16_t* scales) {
  require(cols > 0 && cols % D == 0, "encode_matrix: cols must be a positive multiple of 8, got " + std::to_string(cols));
  require(rows > 0, "encode_matrix: rows must be positive");
  std::memset(codes, 0, vq3r_code_bytes(rows, cols));
  auto pb = std::make_unique<PreparedBooks>();
  rvq_detail::prepare_books(books, *pb);
  VectorCoder coder{*pb, opt};
  const int G = cols / D;
  std::vector<double> row_err(static_cast<size_t>(rows)), row_sq(static_cast<size_t>(rows));
  pool_of(opt).parallel_for(size_t(rows), 8, [&](size_t rb, size_t re) {
    std::vector<float> x(static_cast<size_t>(cols)), q(static_cast<size_t>(cols));
    for (size_t r = rb; r < re; ++r) {
      const float* w = W + r * size_t(cols);
      float rms = row_rms(w, cols);
      double sq = 0;
      for (int c = 0; c < cols; ++c) sq += double(w[c]) * w[c];
      row_sq[r] = sq;
      // The row scale is f16: a row whose RMS is past its range cannot be encoded (finite
      // weights of 3e38 used to turn into NaN errors and a NaN relative error downstream).
      require(std::isfinite(sq), "encode_matrix: row " + std::to_string(r) + " has a non-finite value");
      require(std::sqrt(sq / cols) <= 65504.0,
              "encode_matrix: row " + std::to_string(r) + " has an RMS of " + std::to_string(std::sqrt(sq / cols)) +
                  ", past VQ3R's f16 row scale (at most 65504): store these experts as --experts bf16 or f32");
      if (!(rms > 0) || !std::isfinite(rms)) {
        require(std::isfinite(rms), "encode_matrix: row " + std::to_string(r) + " has a non-finite value");
        scales[r] = 0;
        row_err[r] = sq;
        continue;
      }
      const float inv = 1.0f / rms;
      for (int c = 0; c < cols; ++c) x[size_t(c)] = w[c] * inv;
      for (int g = 0; g < G; ++g) {
        uint8_t idx[S];
        coder.code(&x[size_t(g) * D], idx);
        for (int s = 0; s < S; ++s) {
          codes[vq3r_code_index(int(r), g, s, cols)] = idx[s];
          for (int d = 0; d < D; ++d) q[size_t(g) * D + d] = (s ? q[size_t(g) * D + d] : 0.0f) + pb->stage[s].rows[idx[s]][d];
        }
      }
      float scale = rms;
      if (opt.optimize_scale) {
        // Least-squares scale for the coded direction: <w, q> / <q, q>.
        double wq = 0, qq = 0;
        for (int c = 0; c < cols; ++c) { wq += double(w[c]) * q[size_t(c)]; qq += double(q[size_t(c)]) * q[size_t(c)]; }
        if (qq > 0 && wq > 0) scale = float(wq / qq);
      }
      scales[r] = f32_to_f16(scale);
      const float s16 = f16_to_f32(scales[r]);
      double e = 0;
      for (int c = 0; c < cols; ++c) { double t = double(w[c]) - double(s16) * q[size_t(c)]; e += t * t; }
      row_err[r] = e;
    }
  });
  EncodeStats st;
  for (int r = 0; r < rows; ++r) { st.sum_sq_error += row_err[size_t(r)]; st.sum_sq += row_sq[size_t(r)]; }
  return st;
}

void decode_row(const uint8_t* codes, const uint16_t* scales, int row, int cols, const float* books, float* out) {
  const float s = f16_to_f32(scales[row]);
  for (int g = 0; g < cols / D; ++g)
    for (int d = 0; d < D; ++d) {
      float v = 0;
      for (int st = 0; st < S; ++st) v += books[(size_t(st) * K + codes[vq3r_code_index(row, g, st, cols)]) * D + d];
      out[g * D + d] = s * v;
    }
}

void decode_matrix(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const float* books, float* W) {
  for (int r = 0; r < rows; ++r) decode_row(codes, scales, r, cols, books, W + size_t(r) * cols);
}

}  // namespace waste
