// waste-bench-kernels: throughput of the VQ3R kernels on routed-expert shapes, with codes
// streaming from memory (a few hundred MB of distinct experts, far beyond cache).
//   waste-bench-kernels [MB of experts per shape, default 256]
//   waste-bench-kernels --prefill [MB]: one MoE layer of a 128-row prefill chunk over MB of
//     Kimi-Linear experts, an expert's row tiles split over the threads against whole experts
//     side by side (as moe.cpp runs a chunk), alternated round by round.
//   waste-bench-kernels --pages [MB]: apply_expert on codes in /dev/shm (4 KiB pages, as iod's
//     cache on a default mount) against codes in anonymous memory on transparent huge pages (as
//     `--resident`), alternated round by round, best and median of the rounds (issue 17).
// Figures are weights per second of CPU time (CLOCK_THREAD/PROCESS_CPUTIME: this machine is
// shared, so wall time would mostly measure the neighbours) and, for all cores, also per
// wall second. apply_expert counts the per-token gate/up table build and the per-expert
// down table build. The default SIMD path is the machine's (cap with WASTE_SIMD=avx2|scalar, on aarch64 WASTE_SIMD=scalar).
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "shared/container/expert_view.h"
#include "shared/container/format.h"
#include "shared/platform/memory.h"
#include "shared/rvq/kernels.h"
#include "shared/util/cpu.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

double clock_s(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double wall_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    p[i] = uint8_t(s >> 24);
  }
}

// A set of distinct VQ3R experts of one shape, back to back in one buffer.
struct ExpertBank {
  int H, I, count;
  size_t matrix_bytes_gu, matrix_bytes_d, expert_bytes;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<float> books;
  const uint8_t* codes_at = nullptr;  // where view() reads the codes (default: `codes`)
  ExpertView view(int e) const {
    ExpertView v;
    v.format = TensorFormat::VQ3R;
    v.hidden = H;
    v.intermediate = I;
    const uint8_t* base = (codes_at ? codes_at : codes.data()) + size_t(e) * expert_bytes;
    v.gate = base;
    v.up = base + matrix_bytes_gu;
    v.down = base + 2 * matrix_bytes_gu;
    const uint16_t* s = scales.data() + size_t(e) * (2 * I + H);
    v.gate_scales = s;
    v.up_scales = s + I;
    v.down_scales = s + 2 * I;
    v.codebooks = books.data();
    return v;
  }
};

ExpertBank make_bank(int H, int I, size_t mb) {
  ExpertBank b{H, I, 0, vq3r_code_bytes(I, H), vq3r_code_bytes(H, I), 0, {}, {}, {}};
  b.expert_bytes = 2 * b.matrix_bytes_gu + b.matrix_bytes_d;
  b.count = std::max<int>(2, int(mb * 1000000 / b.expert_bytes));
  b.codes.resize(b.expert_bytes * size_t(b.count));
  fill_random(b.codes.data(), b.codes.size(), uint64_t(H) * 31 + uint64_t(I));
  b.scales.resize(size_t(b.count) * (2 * I + H));
  for (size_t i = 0; i < b.scales.size(); ++i) b.scales[i] = f32_to_f16(0.01f + 0.00001f * float(i % 1000));
  b.books.resize(3 * kCodebookFloats);
  std::vector<uint8_t> r(b.books.size());
  fill_random(r.data(), r.size(), 7);
  for (size_t i = 0; i < r.size(); ++i) b.books[i] = (float(r[i]) - 127.5f) / 256.0f;
  return b;
}

std::vector<float> input(int n, uint64_t seed) {
  std::vector<uint8_t> r(static_cast<size_t>(n));
  fill_random(r.data(), r.size(), seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[size_t(i)] = (float(r[size_t(i)]) - 127.5f) / 64.0f;
  return x;
}

// Runs body(rep) until at least `min_cpu` seconds of this thread's CPU time have passed.
double per_call_cpu(double min_cpu, int min_reps, const std::function<void(int)>& body) {
  double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  int reps = 0;
  while (reps < min_reps || clock_s(CLOCK_THREAD_CPUTIME_ID) - t0 < min_cpu) body(reps++);
  return (clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) / reps;
}

// A copy of `bytes` in one of the two kinds of memory an expert can sit in when it is computed.
class PageMapping {
 public:
  enum Kind { DevShm, HugeAnon };
  PageMapping(Kind kind, const uint8_t* src, size_t bytes) : bytes_(bytes) {
    if (kind == DevShm) {
      // As iod's segment: a POSIX shared-memory object, MAP_SHARED (4 KiB pages unless /dev/shm
      // is mounted with huge=).
      const std::string name = "/waste-bench-pages-" + std::to_string(getpid());
      const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd < 0) { std::perror("shm_open"); std::exit(1); }
      shm_unlink(name.c_str());
      if (ftruncate(fd, off_t(bytes)) != 0) { std::perror("ftruncate"); std::exit(1); }
      p_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    } else {
      // As `--resident` and the trunk: anonymous, 2 MiB aligned, advised for huge pages.
      const size_t huge = size_t(2) << 20;
      bytes_ = (bytes + huge - 1) / huge * huge + huge;
      p_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p_ != MAP_FAILED) {
        offset_ = (huge - reinterpret_cast<uintptr_t>(p_) % huge) % huge;
        waste::platform::advise_huge_pages(static_cast<uint8_t*>(p_) + offset_, bytes);  // as alloc_large
      }
    }
    if (p_ == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
    std::copy(src, src + bytes, data());
  }
  ~PageMapping() { munmap(p_, bytes_); }
  PageMapping(const PageMapping&) = delete;
  PageMapping& operator=(const PageMapping&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p_) + offset_; }

 private:
  void* p_ = MAP_FAILED;
  size_t bytes_ = 0, offset_ = 0;
};

// apply_expert over the bank's experts in order (8 per "token", the gate/up tables built once
// per 8), codes in /dev/shm vs huge pages, alternated round by round: the ratio of the two is
// what decode through iod loses to --resident in the expert phase. One core (CPU time) and the
// whole pool (wall time, as decode runs: an expert's rows split over the threads).
int pages_main(size_t mb) {
  ThreadPool& pool = ThreadPool::global();
  std::printf("# waste-bench-kernels --pages: %s, %zu MB of experts\n", cpu_summary().c_str(), mb);
  const ExpertActivation act;
  struct Shape { const char* name; int H, I; };
  for (const Shape sh : {Shape{"kimi-linear", 2304, 1024}, Shape{"k3", 3584, 3072}}) {
    ExpertBank bank = make_bank(sh.H, sh.I, mb);
    PageMapping shm(PageMapping::DevShm, bank.codes.data(), bank.codes.size());
    PageMapping huge(PageMapping::HugeAnon, bank.codes.data(), bank.codes.size());
    std::vector<float> x = input(sh.H, 1), out(size_t(sh.H), 0.0f);
    ExpertTables et;
    ExpertScratch scratch;
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      constexpr int kRounds = 9;
      const clockid_t clock = p ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
      std::vector<double> us[2];
      for (int round = 0; round < kRounds; ++round)
        for (int kind = 0; kind < 2; ++kind) {
          bank.codes_at = kind == 0 ? shm.data() : huge.data();
          const double t0 = clock_s(clock);
          for (int e = 0; e < bank.count; ++e) {
            if (e % 8 == 0) build_expert_tables(x.data(), sh.H, bank.books.data(), et);
            apply_expert(bank.view(e), et, 0.125f, act, scratch, out.data(), p);
          }
          us[kind].push_back((clock_s(clock) - t0) / bank.count * 1e6);
        }
      for (auto& v : us) std::sort(v.begin(), v.end());
      std::printf("%-12s %3d experts of %5.2f MB, %s: us per expert best (median): /dev/shm %.0f (%.0f), huge pages "
                  "%.0f (%.0f); huge / shm best %.3f, median %.3f\n",
                  sh.name, bank.count, double(bank.expert_bytes) / 1e6,
                  p ? (std::to_string(p->size()) + " threads, wall").c_str() : "1 core, CPU", us[0][0],
                  us[0][kRounds / 2], us[1][0], us[1][kRounds / 2], us[1][0] / us[0][0],
                  us[1][kRounds / 2] / us[0][kRounds / 2]);
    }
  }
  return 0;
}

// One routed-expert step of a prefill chunk on the Kimi-Linear shape, as moe_forward runs it
// resident: `chunk` tokens each route to 8 distinct experts of the bank (pseudo-random, a new
// routing each round), the pairs grouped by expert, each token's gate/up tables built when its
// first expert needs them (RvqExpertBatch), each expert applied to all of its tokens. Two ways
// to spread it over the pool, alternated round by round:
//   tiles:   experts one after another, each expert's row tiles split over the threads (the
//            engine before 2026-12-06, and still for an expert ready alone): every thread reads
//            every table of the expert's tokens, and meets the others at three barriers an expert;
//   experts: every token's tables built first (blocks over the pool), then whole experts
//            handed to the threads (the engine now): each table and code read by one.
// Printed: ms per chunk token (wall), best and median of the rounds.
int prefill_main(size_t mb, int chunk) {
  ThreadPool& pool = ThreadPool::global();
  const int H = 2304, I = 1024, top_k = 8;
  ExpertBank bank = make_bank(H, I, mb);
  const int E = bank.count;
  if (E < top_k) { std::fprintf(stderr, "waste-bench-kernels --prefill: %zu MB holds fewer than 8 experts\n", mb); return 2; }
  std::printf("# waste-bench-kernels --prefill: %s, %u threads, %d experts (%.0f MB), chunk %d, top %d\n",
              cpu_summary().c_str(), pool.size(), E, double(bank.codes.size()) / 1e6, chunk, top_k);
  const ExpertActivation act;
  std::vector<std::vector<float>> xs;
  for (int t = 0; t < chunk; ++t) xs.push_back(input(H, 100 + uint64_t(t)));
  std::vector<ExpertTables> tables(static_cast<size_t>(chunk));
  std::vector<float> contrib(size_t(chunk) * top_k * H);
  ExpertScratch scratch;
  constexpr int kRounds = 7;
  std::vector<double> ms[2];
  uint64_t seed = 12345;
  for (int round = 0; round < kRounds; ++round) {
    // Routing: per token 8 distinct experts; grouped by expert, tokens ascending.
    std::vector<std::vector<int>> tokens_of(static_cast<size_t>(E));
    for (int t = 0; t < chunk; ++t) {
      std::vector<int> mine;
      while (int(mine.size()) < top_k) {
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        const int e = int(seed % uint64_t(E));
        if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
      }
      for (int e : mine) tokens_of[size_t(e)].push_back(t);
    }
    std::vector<int> used;
    std::vector<size_t> first(static_cast<size_t>(E));
    size_t pairs = 0;
    for (int e = 0; e < E; ++e) {
      first[size_t(e)] = pairs;
      pairs += tokens_of[size_t(e)].size();
      if (!tokens_of[size_t(e)].empty()) used.push_back(e);
    }
    for (int way = 0; way < 2; ++way) {
      const int w = (round % 2 == 0) ? way : 1 - way;  // alternate which runs first
      const double t0 = wall_s();
      if (w == 0) {
        std::vector<bool> built(static_cast<size_t>(chunk), false);
        for (int e : used) {
          std::vector<const float*> in;
          std::vector<ExpertTables*> out;
          std::vector<const ExpertTables*> sel;
          for (int t : tokens_of[size_t(e)]) {
            if (!built[size_t(t)]) { in.push_back(xs[size_t(t)].data()); out.push_back(&tables[size_t(t)]); built[size_t(t)] = true; }
            sel.push_back(&tables[size_t(t)]);
          }
          build_expert_tables_batch(in.data(), int(in.size()), H, bank.books.data(), out.data(), &pool);
          std::vector<float> wts(sel.size(), 0.125f);
          float* dst = &contrib[first[size_t(e)] * H];
          std::fill(dst, dst + sel.size() * H, 0.0f);
          apply_expert_batch(bank.view(e), sel.data(), wts.data(), int(sel.size()), act, scratch, dst, &pool);
        }
      } else {
        std::vector<const float*> in;
        std::vector<ExpertTables*> out;
        for (int t = 0; t < chunk; ++t) { in.push_back(xs[size_t(t)].data()); out.push_back(&tables[size_t(t)]); }
        build_expert_tables_batch(in.data(), chunk, H, bank.books.data(), out.data(), &pool);
        pool.parallel_for(used.size(), 1, [&](size_t b, size_t en) {
          thread_local ExpertScratch mine;  // one per pool thread
          for (size_t k = b; k < en; ++k) {
            const int e = used[k];
            std::vector<const ExpertTables*> sel;
            for (int t : tokens_of[size_t(e)]) sel.push_back(&tables[size_t(t)]);
            std::vector<float> wts(sel.size(), 0.125f);
            float* dst = &contrib[first[size_t(e)] * H];
            std::fill(dst, dst + sel.size() * H, 0.0f);
            apply_expert_batch(bank.view(e), sel.data(), wts.data(), int(sel.size()), act, mine, dst, nullptr);
          }
        });
      }
      ms[w].push_back((wall_s() - t0) / chunk * 1e3);
    }
  }
  for (auto& v : ms) std::sort(v.begin(), v.end());
  std::printf("ms per chunk token, best (median): tiles %.3f (%.3f), experts %.3f (%.3f); experts / tiles median %.3f\n",
              ms[0][0], ms[0][kRounds / 2], ms[1][0], ms[1][kRounds / 2], ms[1][kRounds / 2] / ms[0][kRounds / 2]);
  return 0;
}

}  // namespace

// The MB argument: a whole number in [1, 65536]; anything else ends the run naming it.
size_t mb_argument(const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 65536) {
    std::fprintf(stderr, "waste-bench-kernels: MB of experts must be a whole number in 1..65536, not '%s'\n"
                 "usage: waste-bench-kernels [MB] | --pages [MB] | --prefill [MB]\n", text);
    std::exit(2);
  }
  return size_t(v);
}

int main(int argc, char** argv) {
  const bool pages = argc > 1 && (std::string(argv[1]) == "--pages" || std::string(argv[1]) == "--prefill");
  const int first = pages ? 2 : 1;
  if (argc > first + 1) {
    std::fprintf(stderr, "waste-bench-kernels: unexpected argument '%s'\nusage: waste-bench-kernels [MB] | --pages [MB] | --prefill [MB]\n",
                 argv[first + 1]);
    return 2;
  }
  if (pages && std::string(argv[1]) == "--prefill") return prefill_main(argc > 2 ? mb_argument(argv[2]) : 680, 128);
  if (pages) return pages_main(argc > 2 ? mb_argument(argv[2]) : 512);
  const size_t mb = argc > 1 ? mb_argument(argv[1]) : 256;
  ThreadPool& pool = ThreadPool::global();
  std::printf("# waste-bench-kernels: %s, %u threads, %zu MB of experts per shape\n", cpu_summary().c_str(), pool.size(), mb);
  struct Shape { const char* name; int H, I; };
  const Shape shapes[] = {{"kimi-linear", 2304, 1024}, {"k3", 3584, 3072}};
  const ExpertActivation act;  // SiLU; SiTU costs the same per element and is O(I) anyway
  for (const Shape& sh : shapes) {
    ExpertBank bank = make_bank(sh.H, sh.I, mb);
    std::printf("\n## %s: hidden %d -> inter %d, %d distinct experts (%.0f MB of codes)\n", sh.name, sh.H, sh.I,
                bank.count, double(bank.codes.size()) / 1e6);
    std::vector<float> x = input(sh.H, 1);
    // 1. The gate matvec alone, tables prebuilt, per path.
    std::printf("%-34s %10s %10s\n", "kernel (1 core)", "Gw/cpu-s", "vs scalar");
    const double wm = double(sh.H) * sh.I;
    double scalar_rate = 0;
    // The levels with an RVQ kernel of their own (a level without one would run, and be
    // reported as, the scalar kernel under another name); this CPU's and the cap's decide.
    const SimdLevel levels[] = {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Neon};
    std::vector<float> y(size_t(std::max(sh.H, sh.I)));
    for (SimdLevel lv : levels) {
      if (!simd_level_allows(lv)) continue;
      RvqTables t;
      build_tables_at(lv, x.data(), sh.H, bank.books.data(), t);
      const RvqTables* tp = &t;
      const int tiles = (sh.I + 63) / 64;
      double s = per_call_cpu(lv == SimdLevel::Scalar ? 0.5 : 1.0, 3, [&](int rep) {
        ExpertView v = bank.view(rep % bank.count);
        rvq_matmul_at(lv, v.gate, v.gate_scales, sh.I, sh.H, &tp, 1, y.data(), size_t(sh.I), 0, tiles);
      });
      double rate = wm / s / 1e9;
      if (lv == SimdLevel::Scalar) scalar_rate = rate;
      std::printf("matvec %-27s %10.2f %10.1fx\n", simd_level_name(lv), rate, rate / scalar_rate);
    }
    // 2. Table builds (per token per layer: gate + up; per expert: down).
    {
      ExpertTables et;
      double s = per_call_cpu(0.3, 3, [&](int) { build_expert_tables(x.data(), sh.H, bank.books.data(), et); });
      RvqTables dt;
      std::vector<float> h = input(sh.I, 2);
      double sd = per_call_cpu(0.3, 3, [&](int) { build_tables(h.data(), sh.I, bank.books.data() + 2 * kCodebookFloats, dt); });
      std::printf("table build gate+up (per token)     %8.1f us\n", s * 1e6);
      std::printf("table build down (per expert)       %8.1f us\n", sd * 1e6);
    }
    // 3. apply_expert on the default path: one token's tables, then experts streamed.
    const double we = 3.0 * wm;
    std::printf("%-34s %10s %10s\n", ("apply_expert (" + std::string(simd_level_name(simd_level())) + ")").c_str(), "Gw/cpu-s", "Gw/wall-s");
    {
      ExpertScratch scratch;
      std::vector<float> out(size_t(sh.H), 0.0f);
      const int per_token = 8;  // experts per token; the gate/up table build is counted once per 8
      double w0 = wall_s();
      double s = per_call_cpu(1.5, 8, [&](int rep) {
        static ExpertTables et;
        if (rep % per_token == 0) build_expert_tables(x.data(), sh.H, bank.books.data(), et);
        apply_expert(bank.view(rep % bank.count), et, 0.125f, act, scratch, out.data());
      });
      (void)w0;
      std::printf("%-34s %10.2f\n", "1 core, T=1 (8 experts/token)", we / s / 1e9);
    }
    {
      // All cores: experts of a token spread over the pool, each worker with its own scratch.
      const unsigned nt = pool.size();
      std::vector<ExpertScratch> scratch(nt);
      std::vector<std::vector<float>> outs(nt, std::vector<float>(size_t(sh.H), 0.0f));
      const int n_exp = 8 * int(nt) * 4;
      ExpertTables et;
      build_expert_tables(x.data(), sh.H, bank.books.data(), et);
      std::atomic<unsigned> slot{0};
      double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = wall_s();
      int done = 0;
      while (wall_s() - w0 < 2.0 || done < 2 * n_exp) {
        pool.parallel_for(size_t(n_exp), 1, [&](size_t b, size_t e) {
          unsigned me = slot.fetch_add(1) % nt;  // one scratch per concurrently running chunk
          for (size_t k = b; k < e; ++k)
            apply_expert(bank.view(int((size_t(done) + k) % size_t(bank.count))), et, 0.125f, act, scratch[me],
                         outs[me].data());
          slot.fetch_sub(1);
        });
        done += n_exp;
      }
      double c = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0, w = wall_s() - w0;
      std::printf("%-34s %10.2f %10.2f\n", (std::to_string(nt) + " threads, T=1").c_str(), we * done / c / 1e9,
                  we * done / w / 1e9);
    }
    // 4. Several tokens through one expert (prefill chunk / batched sessions).
    std::printf("%-34s %10s %10s\n", "apply_expert_batch (1 core)", "Gtw/cpu-s", "vs T x 1");
    double base = 0;
    for (int T : {1, 2, 4, 8, 16, 32}) {
      std::vector<ExpertTables> ets(static_cast<size_t>(T));
      std::vector<const ExpertTables*> p(static_cast<size_t>(T));
      for (int i = 0; i < T; ++i) {
        std::vector<float> xi = input(sh.H, 10 + uint64_t(i));
        build_expert_tables(xi.data(), sh.H, bank.books.data(), ets[size_t(i)]);
        p[size_t(i)] = &ets[size_t(i)];
      }
      std::vector<float> w(static_cast<size_t>(T), 0.1f), out(size_t(T) * sh.H, 0.0f);
      ExpertScratch scratch;
      double s = per_call_cpu(1.0, 3, [&](int rep) {
        apply_expert_batch(bank.view(rep % bank.count), p.data(), w.data(), T, act, scratch, out.data());
      });
      double rate = we * T / s / 1e9;  // token-weights per second
      if (T == 1) base = rate;
      std::printf("T=%-32d %10.2f %10.2fx\n", T, rate, rate / base);
    }
  }
  return 0;
}
