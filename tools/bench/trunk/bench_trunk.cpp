// waste-bench-trunk: throughput of the trunk matvec/matmul kernels (shared/kernels) for each
// format and SIMD path, single-thread and on the whole global pool, next to a plain
// memory-read bandwidth measured in the same run. Matrices are rotated through copies whose
// total exceeds the caches, so every call streams its weights from memory. Then attention per
// token at Kimi-Linear width (compute/model/attention_kernels.h): the KDA decode step of 32
// heads x 128 and MLA's scores + softmax + latent sums of 32 heads over a [T, 512 + 64] cache,
// each on the scalar path alone, the best path alone and the best path on the pool.
//
// Q8G/Q4G matvecs run both activation modes (shared/kernels/matvec_int8.h: int8, the default,
// and f32) and print the int8 result's error against f32 activations.
//
// Usage: waste-bench-trunk [--footprint-mb N] [--seconds S] [--shape ROWSxCOLS]... [--format F]...
//                          [--group G]... [--no-scalar] [--no-attention] [--attention-only]
// --group: the Q8G/Q4G scale groups to run (32, the default, and e.g. 128 = --trunk-group 128),
// each matrix in every group given, one after the other, so their ratio comes from one run.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/model/attention_kernels.h"
#include "compute/model/ops.h"
#include "shared/container/format.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_int8.h"
#include "shared/kernels/matvec_int8_tokens.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/vector_ops.h"
#include "shared/model/trunk_storage.h"
#include "shared/util/cpu.h"
#include "shared/util/half.h"
#include "shared/util/large_alloc.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

struct Options {
  uint64_t footprint_bytes = uint64_t(1024) << 20;  // well past any L3 a VM is likely to see
  double seconds = 0.4;                             // minimum timed span per measurement
  std::vector<std::pair<int64_t, int64_t>> shapes;
  bool attention_only = false, no_attention = false, no_scalar = false;
  std::vector<TensorFormat> formats;
  std::vector<uint32_t> groups;  // Q8G/Q4G scale groups (default {kTrunkGroup})
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--footprint-mb") {
      o.footprint_bytes = uint64_t(std::max(16L, std::atol(next().c_str()))) << 20;
    } else if (a == "--seconds") {
      o.seconds = std::max(0.01, std::atof(next().c_str()));
    } else if (a == "--shape") {
      std::string s = next();
      long r = 0, c = 0;
      if (std::sscanf(s.c_str(), "%ldx%ld", &r, &c) != 2 || r <= 0 || c <= 0 || c % 128 != 0) {
        std::fprintf(stderr, "--shape wants ROWSxCOLS with COLS a multiple of 128, got %s\n", s.c_str());
        std::exit(2);
      }
      o.shapes.push_back({r, c});
    } else if (a == "--group") {
      const std::string g = next();
      const long v = std::atol(g.c_str());
      // The groups the trunk takes (shared/model/trunk_storage.h) and the shapes above divide.
      if (v < 32 || v > 128 || (v & (v - 1)) != 0 || std::to_string(v) != g) {
        std::fprintf(stderr, "--group wants 32, 64 or 128, got %s\n", g.c_str());
        std::exit(2);
      }
      o.groups.push_back(uint32_t(v));
    } else if (a == "--attention-only") {
      o.attention_only = true;
    } else if (a == "--no-attention") {
      o.no_attention = true;
    } else if (a == "--no-scalar") {
      o.no_scalar = true;
    } else if (a == "--format") {
      const std::string name = next();
      bool found = false;
      for (TensorFormat f : {TensorFormat::F32, TensorFormat::BF16, TensorFormat::F16, TensorFormat::Q8G, TensorFormat::Q4G})
        if (name == format_name(f)) {
          o.formats.push_back(f);
          found = true;
        }
      if (!found) {
        std::fprintf(stderr, "--format wants f32, bf16, f16, q8g or q4g, got %s\n", name.c_str());
        std::exit(2);
      }
    } else {
      std::fprintf(stderr,
                   "usage: waste-bench-trunk [--footprint-mb N] [--seconds S] [--shape RxC]... [--format F]... "
                   "[--group G]... [--no-scalar] [--no-attention] [--attention-only]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  if (o.shapes.empty()) o.shapes = {{7168, 7168}, {2304, 9216}};
  if (o.groups.empty()) o.groups = {kTrunkGroup};
  if (o.formats.empty())
    o.formats = {TensorFormat::F32, TensorFormat::BF16, TensorFormat::F16, TensorFormat::Q8G, TensorFormat::Q4G};
  return o;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call: the median and the best of as many calls as fit in `seconds` (at least 3).
// Also the least process CPU time of a call: a call of tens of ms on a loaded machine is
// always preempted somewhere, so its best wall time still counts time given to others, while
// CPU time (divided by the threads working) does not; memory stalls count as CPU time.
struct Timing {
  double median, best, best_cpu;
};
double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
Timing time_calls(double seconds, const std::function<void(int)>& call) {
  call(0);  // warm-up (page faults, pool start)
  std::vector<double> t, cpu;
  const double start = now();
  for (int i = 1; t.size() < 3 || now() - start < seconds; ++i) {
    const double t0 = now(), c0 = process_cpu();
    call(i);
    cpu.push_back(process_cpu() - c0);
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), *std::min_element(cpu.begin(), cpu.end())};
}

// Benchmark memory as the runtime holds the trunk: on transparent huge pages
// (shared/util/large_alloc.h), so TLB misses cost what they cost there.
template <class T>
class LargeBuffer {
 public:
  explicit LargeBuffer(size_t n) : n_(n), p_(static_cast<T*>(alloc_large(std::max<size_t>(1, n) * sizeof(T))), std::free) {
    if (!p_) {
      std::fprintf(stderr, "out of memory (%zu bytes)\n", n * sizeof(T));
      std::exit(1);
    }
  }
  LargeBuffer copy() const {
    LargeBuffer b(n_);
    std::memcpy(b.data(), data(), n_ * sizeof(T));
    return b;
  }
  T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  T& operator[](size_t i) const { return p_.get()[i]; }

 private:
  size_t n_;
  std::unique_ptr<T, void (*)(void*)> p_;
};

uint64_t xorshift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Plain read bandwidth: the sum of squares of a large f32 buffer (vector_ops, AVX2 where
// available, so the loop itself is not the bottleneck). Each call reads the next 8 MiB piece
// of the buffer (calls as short as a matvec's, so the best call is as unlikely to be
// preempted on a shared machine), cycling through the whole footprint.
struct MemoryBandwidth {
  double gb = 0;  // per call
  Timing one, all;
};

MemoryBandwidth measure_memory(const Options& o, ThreadPool& pool) {
  LargeBuffer<float> buf(o.footprint_bytes / 4);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = float(i & 1023) * (1.0f / 1024);
  const size_t piece = std::min(buf.size(), size_t(8) << 18);
  const size_t pieces = buf.size() / piece;
  volatile float sink = 0;
  MemoryBandwidth m;
  m.gb = double(piece * 4) / 1e9;
  m.one = time_calls(o.seconds, [&](int i) {
    sink = sink + sum_squares(buf.data() + size_t(i) % pieces * piece, int64_t(piece));
  });
  const size_t parts = pool.size();
  m.all = time_calls(o.seconds, [&](int i) {
    const float* base = buf.data() + size_t(i) % pieces * piece;
    std::vector<float> partial(parts);
    pool.parallel_for(parts, 1, [&](size_t b, size_t e) {
      for (size_t k = b; k < e; ++k) partial[k] = sum_squares(base + piece * k / parts, int64_t(piece / parts));
    });
    for (float x : partial) sink = sink + x;
  });
  return m;
}

// Enough copies of one random matrix that cycling through them defeats the caches.
struct MatrixCopies {
  std::vector<LargeBuffer<uint8_t>> bytes;
  std::vector<MatrixView> views;
  uint64_t matrix_bytes = 0;
};

MatrixCopies make_copies(TensorFormat f, int64_t rows, int64_t cols, uint32_t group, uint64_t footprint) {
  const TensorBytes layout = trunk_tensor_bytes(f, uint64_t(rows), uint64_t(cols), group);
  MatrixCopies m;
  m.matrix_bytes = layout.total;
  LargeBuffer<uint8_t> first(layout.total);
  uint64_t s = 0x1234567887654321ull;
  const uint64_t n = uint64_t(rows * cols);
  // Finite, normal values in every format (random bits could be NaN or subnormal).
  auto uniform = [&] { return float(int64_t(xorshift(s) >> 40) - (1 << 23)) / float(1 << 23); };
  switch (f) {
    case TensorFormat::F32:
      for (uint64_t i = 0; i < n; ++i) reinterpret_cast<float*>(first.data())[i] = uniform();
      break;
    case TensorFormat::BF16:
      for (uint64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(first.data())[i] = f32_to_bf16(uniform());
      break;
    case TensorFormat::F16:
      for (uint64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(first.data())[i] = f32_to_f16(uniform());
      break;
    default: {
      for (uint64_t i = 0; i < layout.scales_offset; ++i) first[i] = uint8_t(xorshift(s));
      auto* scales = reinterpret_cast<uint16_t*>(first.data() + layout.scales_offset);
      for (uint64_t i = 0; i < uint64_t(rows) * (uint64_t(cols) / group); ++i) scales[i] = f32_to_f16(0.01f * (1.5f + uniform()));
    }
  }
  const size_t copies = size_t(std::max<uint64_t>(2, (footprint + layout.total - 1) / layout.total));
  for (size_t k = 0; k + 1 < copies; ++k) m.bytes.push_back(first.copy());
  m.bytes.push_back(std::move(first));
  for (auto& b : m.bytes) {
    MatrixView v;
    v.format = f;
    v.rows = rows;
    v.cols = cols;
    v.group = layout.scales_offset ? group : 0;
    v.data = b.data();
    v.scales = layout.scales_offset ? reinterpret_cast<const uint16_t*>(b.data() + layout.scales_offset) : nullptr;
    m.views.push_back(v);
  }
  return m;
}

// Error of the int8-activation result against f32 activations on the same weights, for
// Gaussian activations with 1% outlier channels (x20) as hidden states have: rms over rows
// relative to rms y, and the worst row relative to its sum |w x|.
void print_int8_error(TensorFormat f, const MatrixView& w, ThreadPool& pool) {
  std::vector<float> x(size_t(w.cols)), y8(size_t(w.rows)), y32(size_t(w.rows)), row(size_t(w.cols));
  uint64_t s = 11;
  for (auto& v : x) {
    // Box-Muller from two uniforms in (0, 1].
    const double u1 = (double(xorshift(s) >> 11) + 1) / 9007199254740992.0, u2 = double(xorshift(s) >> 11) / 9007199254740992.0;
    v = float(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    if (xorshift(s) % 100 == 0) v *= 20;
  }
  matvec_path(best_kernel_path(), ActivationMode::Int8, w, x.data(), y8.data(), &pool);
  matvec_path(best_kernel_path(), ActivationMode::F32, w, x.data(), y32.data(), &pool);
  double err2 = 0, ref2 = 0, worst = 0;
  const int64_t sampled = std::min<int64_t>(w.rows, 4096);  // |w x| sums on a sample of rows
  for (int64_t r = 0; r < w.rows; ++r) {
    const double e = double(y8[size_t(r)]) - y32[size_t(r)];
    err2 += e * e;
    ref2 += double(y32[size_t(r)]) * y32[size_t(r)];
    if (r % (w.rows / sampled) == 0) {
      dequantize_row(w, r, row.data());
      double a = 0;
      for (int64_t c = 0; c < w.cols; ++c) a += std::fabs(double(row[size_t(c)]) * x[size_t(c)]);
      worst = std::max(worst, std::fabs(e) / (a + 1e-30));
    }
  }
  std::printf("%-6s int8 vs f32 activations: rms error %.3f%% of rms y, worst row %.3f%% of its sum|w x|\n",
              format_name(f), 100 * std::sqrt(err2 / ref2), 100 * worst);
}

// The three ways attention is timed: the scalar reference alone (the code before
// vectorising), the best SIMD path alone, and the best path with heads on the pool.
struct AttentionPath {
  const char* name;
  SimdLevel level;
  ThreadPool* pool;
};

// Heads [0, H) through body(h0, h1), on the pool when given (heads are independent).
void over_heads(ThreadPool* pool, int H, int group, const std::function<void(int, int)>& body) {
  const int groups = (H + group - 1) / group;
  auto run = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) body(int(i) * group, std::min(H, int(i + 1) * group));
  };
  if (pool && pool->size() > 1)
    pool->parallel_for(size_t(groups), 1, run);
  else
    run(0, size_t(groups));
}

void bench_attention(const Options& o, ThreadPool& pool) {
  const SimdLevel best = simd_level();
  std::vector<AttentionPath> paths = {{"scalar", SimdLevel::Scalar, nullptr}};
  if (best != SimdLevel::Scalar) paths.push_back({simd_level_name(best), best, nullptr});
  paths.push_back({simd_level_name(best), best, &pool});
  uint64_t seed = 3;
  auto uniform = [&] { return float(int64_t(xorshift(seed) >> 40) - (1 << 23)) / float(1 << 23); };

  // KDA: 32 heads x 128, the states of several layers rotated so each token's state comes
  // from memory as in a real forward pass (2 MiB per layer).
  {
    const int H = 32, K = 128;
    const size_t state = size_t(H) * K * K;
    const int layers = int(std::max<uint64_t>(2, o.footprint_bytes / 4 / (state * 4) / 4));
    std::vector<float> S(state * size_t(layers)), q(size_t(H) * K), k(q.size()), v(q.size()), alpha(q.size()), out(q.size());
    for (auto& x : S) x = 0.1f * uniform();
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = uniform() / float(K);
      k[i] = uniform() / std::sqrt(float(K));
      v[i] = uniform();
      alpha[i] = 0.9f + 0.1f * std::fabs(uniform());
    }
    std::printf("== attention: KDA decode step, %d heads x %d (state %.0f MiB per layer, %d layers rotated)\n", H, K,
                double(state * 4) / (1 << 20), layers);
    std::printf("%-8s %7s %10s %10s %12s %9s\n", "path", "threads", "us(med)", "us(best)", "state GB/s", "speedup");
    double base = 0;
    for (const AttentionPath& p : paths) {
      Timing t = time_calls(o.seconds, [&](int i) {
        float* Sl = S.data() + size_t(i % layers) * state;
        over_heads(p.pool, H, 1, [&](int h0, int h1) {
          for (int h = h0; h < h1; ++h) {
            const size_t at = size_t(h) * K;
            kda_step(p.level, K, &q[at], &k[at], &v[at], &alpha[at], 0.5f, Sl + size_t(h) * K * K, &out[at]);
          }
        });
      });
      if (base == 0) base = t.best;
      // Each step reads and writes the state once from memory (both passes of a column block
      // run while it is in L1).
      std::printf("%-8s %7u %10.1f %10.1f %12.2f %8.2fx\n", p.name, p.pool ? p.pool->size() : 1u, t.median * 1e6,
                  t.best * 1e6, 2.0 * double(state * 4) / 1e9 / t.best, base / t.best);
    }
    std::printf("\n");
  }

  // MLA absorbed decode: 32 heads, cache rows of 512 latent + 64 rope; per head a score per
  // cached token, softmax, and the probability-weighted latent sum (as mla.cpp does it).
  {
    const int H = 32, r = 512, width = 576, group = 16;
    std::printf("== attention: MLA decode over the cache, %d heads, rows of %d (latent %d)\n", H, width, r);
    std::printf("%6s %-8s %7s %10s %10s %12s %9s\n", "ctx", "path", "threads", "us(med)", "us(best)", "cache GB/s",
                "speedup");
    for (int64_t T : {64, 512, 4096}) {
      std::vector<float> rows(size_t(T) * width), qabs(size_t(H) * width), lat(size_t(H) * r);
      for (auto& x : rows) x = uniform();
      for (auto& x : qabs) x = 0.05f * uniform();
      double base = 0;
      for (const AttentionPath& p : paths) {
        Timing t = time_calls(o.seconds, [&](int) {
          over_heads(p.pool, H, p.pool ? std::min(group, H / int(p.pool->size())) : group, [&](int h0, int h1) {
            const int G = h1 - h0;
            std::vector<float> prob(size_t(G) * T);
            mla_scores(p.level, G, &qabs[size_t(h0) * width], width, rows.data(), T, width, 0.07f, prob.data(), T);
            for (int g = 0; g < G; ++g) softmax(&prob[size_t(g) * T], int(T));
            std::fill(&lat[size_t(h0) * r], &lat[size_t(h1) * r], 0.0f);
            mla_weighted_sum(p.level, G, prob.data(), T, rows.data(), T, width, r, &lat[size_t(h0) * r], r);
          });
        });
        if (base == 0) base = t.best;
        std::printf("%6ld %-8s %7u %10.1f %10.1f %12.2f %8.2fx\n", long(T), p.name, p.pool ? p.pool->size() : 1u,
                    t.median * 1e6, t.best * 1e6, 2.0 * double(rows.size() * 4) / 1e9 / t.best, base / t.best);
      }
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ThreadPool& pool = ThreadPool::global();
  std::printf("waste-bench-trunk: %s, %u threads, footprint %.0f MiB per measurement\n", cpu_summary().c_str(), pool.size(),
              double(o.footprint_bytes) / (1 << 20));
  const MemoryBandwidth mem = measure_memory(o, pool);
  const double mem_one = mem.gb / mem.one.best, mem_all = mem.gb / mem.all.best;
  std::printf("memory read (8 MiB per call from a %.0f MiB buffer), GB/s best (median) [cpu]: 1 thread %.1f (%.1f) [%.1f], %u threads %.1f (%.1f) [%.1f]\n",
              double(o.footprint_bytes) / (1 << 20), mem_one, mem.gb / mem.one.median, mem.gb / mem.one.best_cpu, pool.size(),
              mem_all, mem.gb / mem.all.median, mem.gb * pool.size() / mem.all.best_cpu);
  std::printf("(a shared machine: medians include time lost to other processes; ratios use best vs best)\n\n");
  if (!o.no_attention) bench_attention(o, pool);
  if (o.attention_only) return 0;

  std::vector<KernelPath> paths;
  for (KernelPath p : available_kernel_paths())  // matvec_paths.h's one list (x86 and aarch64)
    if (!(o.no_scalar && p == KernelPath::Scalar)) paths.push_back(p);
  const KernelPath best = best_kernel_path();
  const std::vector<TensorFormat>& formats = o.formats;
  auto modes_of = [](TensorFormat f) {
    if (f == TensorFormat::Q8G || f == TensorFormat::Q4G) return std::vector<ActivationMode>{ActivationMode::F32, ActivationMode::Int8};
    return std::vector<ActivationMode>{ActivationMode::F32};
  };
  // Each format in each --group (float formats have none): "q4g-128", "bf16".
  struct Variant {
    TensorFormat f;
    uint32_t group;
    std::string label;
  };
  std::vector<Variant> variants;
  for (TensorFormat f : formats) {
    if (f != TensorFormat::Q8G && f != TensorFormat::Q4G) {
      variants.push_back({f, kTrunkGroup, format_name(f)});
      continue;
    }
    for (uint32_t g : o.groups) variants.push_back({f, g, std::string(format_name(f)) + "-" + std::to_string(g)});
  }

  // What the kernels can do when memory is not the limit: one small matrix kept in L2.
  {
    const int64_t rows = 64, cols = 2048;
    std::printf("== kernel rate with the matrix in L2 (%ldx%ld, 1 thread), Gweights/s best\n", long(rows), long(cols));
    std::printf("%-8s %-4s", "format", "act");
    for (KernelPath p : paths) std::printf(" %12s", kernel_path_name(p));  // "neon-dotprod": 12
    std::printf("\n");
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    uint64_t s = 5;
    for (auto& v : x) v = float(int64_t(xorshift(s) >> 40) - (1 << 23)) / float(1 << 23);
    for (const Variant& var : variants) {
      const TensorFormat f = var.f;
      MatrixCopies m = make_copies(f, rows, cols, var.group, 0);
      for (ActivationMode mode : modes_of(f)) {
        std::printf("%-8s %-4s", var.label.c_str(), activation_mode_name(mode));
        for (KernelPath p : paths) {
          Timing t = time_calls(o.seconds / 4, [&](int) { matvec_path(p, mode, m.views[0], x.data(), y.data(), nullptr); });
          std::printf(" %12.2f", double(rows * cols) / 1e9 / t.best);
        }
        std::printf("\n");
      }
    }
    std::printf("\n");
  }

  for (auto [rows, cols] : o.shapes) {
    std::printf("== matvec %ldx%ld (GB/s of weights+scales streamed; ratio to memory read at the same thread count)\n",
                long(rows), long(cols));
    std::printf("%-8s %-4s %-12s %7s %8s %9s %9s %9s %7s %9s\n", "format", "act", "path", "threads", "MB", "ms(med)", "GB/s med",
                "GB/s best", "vs mem", "GB/s cpu");
    for (const Variant& var : variants) {
      const TensorFormat f = var.f;
      MatrixCopies m = make_copies(f, rows, cols, var.group, o.footprint_bytes);
      std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
      uint64_t s = 99;
      for (auto& v : x) v = float(int64_t(xorshift(s) >> 40) - (1 << 23)) / float(1 << 23);
      const double gb = double(m.matrix_bytes) / 1e9;
      for (ActivationMode mode : modes_of(f))
        for (KernelPath p : paths) {
          for (bool all : {false, true}) {
            // The scalar references are slow: one short look is enough.
            const double secs = p == KernelPath::Scalar ? 0.0 : o.seconds;
            Timing t = time_calls(secs, [&](int i) {
              matvec_path(p, mode, m.views[size_t(i) % m.views.size()], x.data(), y.data(), all ? &pool : nullptr);
            });
            const unsigned threads = all ? pool.size() : 1u;
            std::printf("%-8s %-4s %-12s %7u %8.1f %9.3f %9.2f %9.2f %6.0f%% %9.2f\n", var.label.c_str(), activation_mode_name(mode),
                        kernel_path_name(p), threads, double(m.matrix_bytes) / 1e6, t.median * 1e3, gb / t.median,
                        gb / t.best, 100.0 * gb / t.best / (all ? mem_all : mem_one), gb * threads / t.best_cpu);
          }
        }
      if (modes_of(f).size() > 1) print_int8_error(f, m.views[0], pool);
    }
    std::printf("\n== matmul %ldx%ld on the %s path (tokens/s; W read once per call)\n", long(rows), long(cols),
                kernel_path_name(best));
    // kernel: "path" = what matmul_path runs; "rows" = the AVX-512 row-lane int8 kernel where
    // the path runs the token-lane one (matvec_int8_tokens.h).
    std::printf("%-8s %-4s %4s %7s %-7s %9s %12s %12s %10s\n", "format", "act", "n", "threads", "kernel", "ms(med)",
                "tok/s med", "tok/s best", "W GB/s best");
    for (const Variant& var : variants) {
      const TensorFormat f = var.f;
      MatrixCopies m = make_copies(f, rows, cols, var.group, o.footprint_bytes);
      for (int64_t n : {1, 8, 16, 32, 128}) {
        std::vector<float> x(size_t(n * cols)), y(size_t(n * rows));
        uint64_t s = 7;
        for (auto& v : x) v = float(int64_t(xorshift(s) >> 40) - (1 << 23)) / float(1 << 23);
        for (ActivationMode mode : modes_of(f))
          for (bool all : {false, true}) {
            ThreadPool* p = all ? &pool : nullptr;
            auto row = [&](const char* kernel, const Timing& t) {
              std::printf("%-8s %-4s %4ld %7u %-7s %9.3f %12.1f %12.1f %10.2f\n", var.label.c_str(), activation_mode_name(mode),
                          long(n), all ? pool.size() : 1u, kernel, t.median * 1e3, double(n) / t.median,
                          double(n) / t.best, double(m.matrix_bytes) / 1e9 / t.best);
            };
            row("path", time_calls(o.seconds, [&](int i) {
              matmul_path(best, mode, m.views[size_t(i) % m.views.size()], x.data(), n, y.data(), p);
            }));
#if defined(__x86_64__)
            // Where the AVX-512 path takes the token-lane kernel, the row-lane one beside it (same run).
            if (best == KernelPath::Avx512 && mode == ActivationMode::Int8 && cpu_features().avx512vnni &&
                int8_tokens_handles(m.views[0], n))
              row("rows", time_calls(o.seconds, [&](int i) {
                matmul_int8_avx512(m.views[size_t(i) % m.views.size()], x.data(), n, y.data(), p);
              }));
#endif
          }
      }
    }
    std::printf("\n");
  }
  return 0;
}
