#include "shared/util/cpu.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace waste {

namespace {

// The kernel's AT_HWCAP / AT_HWCAP2 bits on arm64 (arch/arm64/include/uapi/asm/hwcap.h), spelled
// out so the decoder builds and is tested on x86 too, where <sys/auxv.h> lacks them.
constexpr uint64_t kHwcapAsimd = 1ull << 1;
constexpr uint64_t kHwcapAsimdhp = 1ull << 10;
constexpr uint64_t kHwcapAsimddp = 1ull << 20;
constexpr uint64_t kHwcapSve = 1ull << 22;
constexpr uint64_t kHwcap2I8mm = 1ull << 13;
constexpr uint64_t kHwcap2Bf16 = 1ull << 14;

// The one place that asks the machine. Another OS adds its branch here (macOS on Apple
// silicon: sysctlbyname("hw.optional.arm.FEAT_DotProd") and friends), nothing else changes.
CpuFeatures probe_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.f16c = f.avx2;  // every AVX2 CPU in practice has F16C; kernels needing it check avx2
#elif defined(__aarch64__) && defined(__linux__)
  f = features_from_arm64_hwcaps(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
#elif defined(__aarch64__)
  // Not probed yet on this OS: Advanced SIMD is part of every AArch64 ABI we build for; the
  // optional extensions stay off until this OS's probe is written.
  f.neon = true;
#endif
  return f;
}

// The chain of levels of this build's architecture, lowest first.
#if defined(__x86_64__) || defined(__i386__)
constexpr SimdLevel kChain[] = {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512};
constexpr const char* kChainNames = "scalar, avx2, avx512";
#elif defined(__aarch64__)
constexpr SimdLevel kChain[] = {SimdLevel::Scalar, SimdLevel::Neon};
constexpr const char* kChainNames = "scalar, neon";
#else
constexpr SimdLevel kChain[] = {SimdLevel::Scalar};
constexpr const char* kChainNames = "scalar";
#endif

// The position of `level` in kChain, -1 when it is not a level of this architecture.
int chain_rank(SimdLevel level) {
  for (size_t i = 0; i < std::size(kChain); ++i)
    if (kChain[i] == level) return int(i);
  return -1;
}

}  // namespace

CpuFeatures features_from_arm64_hwcaps(uint64_t hwcap, uint64_t hwcap2) {
  CpuFeatures f;
  f.neon = hwcap & kHwcapAsimd;
  f.asimdhp = hwcap & kHwcapAsimdhp;
  f.asimddp = hwcap & kHwcapAsimddp;
  f.sve = hwcap & kHwcapSve;
  f.i8mm = hwcap2 & kHwcap2I8mm;
  f.bf16 = hwcap2 & kHwcap2Bf16;
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe_cpu_features();
  return features;
}

// What a level needs of the CPU. Avx512 needs VBMI: the RVQ LUT path's byte permutes.
static bool has_level(const CpuFeatures& f, SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::Avx2: return f.avx2 && f.fma;
    case SimdLevel::Avx512: return has_level(f, SimdLevel::Avx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vbmi;
    case SimdLevel::Neon: return f.neon;
  }
  return false;
}

SimdLevel best_simd_level(const CpuFeatures& f) {
  // Only this architecture's chain: a level this build has no code for is never chosen.
  SimdLevel best = SimdLevel::Scalar;
  for (SimdLevel level : kChain)
    if (has_level(f, level)) best = level;
  return best;
}

SimdChoice simd_level_for(const CpuFeatures& f, const char* cap) {
  SimdChoice choice;
  choice.level = best_simd_level(f);
  if (cap == nullptr || *cap == '\0') return choice;
  int cap_rank = -1;
  for (SimdLevel level : kChain)
    if (!std::strcmp(cap, simd_level_name(level))) cap_rank = chain_rank(level);
  if (cap_rank < 0) {
    choice.warning = std::string("WASTE_SIMD='") + cap + "' is not a SIMD level of this CPU's architecture (" +
                     kChainNames + "); ignored, using " + simd_level_name(choice.level);
    return choice;
  }
  // best_simd_level only returns levels of this architecture's chain: its rank is >= 0.
  if (chain_rank(choice.level) > cap_rank) choice.level = kChain[cap_rank];
  return choice;
}

bool simd_level_within(SimdLevel level, SimdLevel top) {
  const int rank = chain_rank(level);
  return rank >= 0 && rank <= chain_rank(top);
}

bool simd_level_allows(SimdLevel level) { return simd_level_within(level, simd_level()); }

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const SimdChoice choice = simd_level_for(cpu_features(), std::getenv("WASTE_SIMD"));
    // stderr, not a logger: this runs inside the first kernel call of any process, and the
    // CLI's stdout is the generated text.
    if (!choice.warning.empty()) std::fprintf(stderr, "waste: warning: %s\n", choice.warning.c_str());
    return choice.level;
  }();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Neon: return "neon";
  }
  return "?";
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string s = std::string("simd=") + simd_level_name(simd_level()) + " (";
  const std::pair<bool, const char*> bits[] = {
      {f.avx2, "avx2"},   {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"}, {f.avx512vbmi, "vbmi"},
      {f.avx512vnni, "vnni"}, {f.neon, "asimd"},   {f.asimddp, "asimddp"},   {f.i8mm, "i8mm"},
      {f.asimdhp, "asimdhp"}, {f.bf16, "bf16"},   {f.sve, "sve"},
  };
  for (const auto& [on, name] : bits)
    if (on) s += std::string(name) + " ";
  if (s.back() == ' ') s.pop_back();
  return s + ")";
}

}  // namespace waste
