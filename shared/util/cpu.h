// Run-time CPU feature detection, so one binary built for the x86-64-v2 baseline picks the
// widest SIMD path the machine has. WASTE_SIMD=scalar|avx2|avx512 caps the choice (tests,
// benchmarks, and users whose machine misreports).
#pragma once
#include <string>

namespace waste {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vbmi = false, avx512vnni = false;
  bool neon = false;
};

const CpuFeatures& cpu_features();
// The best level both the CPU and the WASTE_SIMD cap allow.
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);
// One line for logs and benchmarks: the chosen level and the raw feature bits.
std::string cpu_summary();

}  // namespace waste
