// Run-time CPU feature detection, so one binary built for the baseline ISA (x86-64-v2, ARMv8.0-A)
// picks the widest SIMD path the machine has. WASTE_SIMD caps the choice (tests, benchmarks,
// and users whose machine misreports): see simd_level_for() for the values.
#pragma once
#include <cstdint>
#include <string>

namespace waste {

// Levels of one architecture form a chain (x86: scalar < avx2 < avx512; aarch64: scalar <
// neon). Neon's number is not "wider than AVX-512": levels of different chains never compare.
enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

struct CpuFeatures {
  // x86-64
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vbmi = false, avx512vnni = false;
  // aarch64 (the names of Linux's /proc/cpuinfo): neon = asimd (Advanced SIMD with FP),
  // asimddp = SDOT/UDOT (ARMv8.2 dotprod), i8mm = SMMLA/USMMLA (ARMv8.6), asimdhp = fp16
  // arithmetic, bf16 = BFDOT/BFMMLA, sve = the scalable vector extension.
  bool neon = false, asimddp = false, i8mm = false, asimdhp = false, bf16 = false, sve = false;
};

const CpuFeatures& cpu_features();
// The best level both the CPU and the WASTE_SIMD cap allow (decided once per process).
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);
// True when `level` is a level of this build's architecture and not above simd_level(): what a
// benchmark or test may run (AVX2 is never "below" NEON; the numbers do not order levels).
bool simd_level_allows(SimdLevel level);
// One line for logs and benchmarks: the chosen level and the raw feature bits.
std::string cpu_summary();

// The seams behind cpu_features() and simd_level(), pure so the tests run them on any machine.

// The best level of this build's architecture these features allow, ignoring any cap (x86
// features count for nothing on aarch64 and the other way round).
SimdLevel best_simd_level(const CpuFeatures& f);

struct SimdChoice {
  SimdLevel level = SimdLevel::Scalar;
  std::string warning;  // non-empty when the cap was not understood (then it is ignored)
};
// The level for a CPU with features `f` under the cap `cap` (WASTE_SIMD; null or "" = none).
// A cap is an upper bound on the level's architecture's chain: the result is the widest level
// the CPU has that is not above the cap. So `avx512` on an AVX2 machine gives avx2, `avx2` on
// an AVX-512 machine avx2, `neon` on an ARM CPU without Advanced SIMD scalar, `scalar` scalar
// everywhere. A value that is not a level of this CPU's architecture (a typo, `neon` on x86,
// `avx2` on ARM) is ignored with a warning naming the accepted values: it cannot be honoured as
// written, and guessing a level for it would test or ship a path nobody asked for.
SimdChoice simd_level_for(const CpuFeatures& f, const char* cap);

// True when `level` and `top` are levels of this build's architecture and level <= top.
bool simd_level_within(SimdLevel level, SimdLevel top);

// Linux aarch64: the features of getauxval(AT_HWCAP) and getauxval(AT_HWCAP2) (the kernel's bit
// values, so this decodes on any architecture).
CpuFeatures features_from_arm64_hwcaps(uint64_t hwcap, uint64_t hwcap2);

}  // namespace waste
