#include "shared/util/cpu.h"

#include <cstdlib>
#include <cstring>

namespace waste {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
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
#elif defined(__aarch64__)
    f.neon = true;
#endif
    return f;
  }();
  return features;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const CpuFeatures& f = cpu_features();
    SimdLevel best = SimdLevel::Scalar;
    if (f.neon) best = SimdLevel::Neon;
    if (f.avx2 && f.fma) best = SimdLevel::Avx2;
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vbmi) best = SimdLevel::Avx512;
    if (const char* cap = std::getenv("WASTE_SIMD")) {
      if (!std::strcmp(cap, "scalar")) return SimdLevel::Scalar;
      if (!std::strcmp(cap, "avx2") && best == SimdLevel::Avx512) return SimdLevel::Avx2;
    }
    return best;
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
  s += f.avx2 ? "avx2 " : "";
  s += f.avx512f ? "avx512f " : "";
  s += f.avx512bw ? "avx512bw " : "";
  s += f.avx512vbmi ? "vbmi " : "";
  s += f.avx512vnni ? "vnni " : "";
  s += f.neon ? "neon " : "";
  if (s.back() == ' ') s.pop_back();
  return s + ")";
}

}  // namespace waste
