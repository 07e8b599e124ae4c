// The CPU probe's pure seams: the WASTE_SIMD cap (simd_level_for) and the arm64 hwcap decoder.
// They run on any machine; the cap tests use the chain of the architecture they are built for.
#include <doctest/doctest.h>

#include "shared/util/cpu.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

using namespace waste;

namespace {

CpuFeatures x86_avx2() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures x86_avx512() {
  CpuFeatures f = x86_avx2();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512vbmi = f.avx512vnni = true;
  return f;
}

CpuFeatures arm_neon() {
  CpuFeatures f;
  f.neon = true;
  return f;
}

// A CPU with every level of this build's architecture, and that level.
#if defined(__x86_64__)
CpuFeatures widest_cpu() { return x86_avx512(); }
constexpr SimdLevel kWidest = SimdLevel::Avx512;
#elif defined(__aarch64__)
CpuFeatures widest_cpu() { return arm_neon(); }
constexpr SimdLevel kWidest = SimdLevel::Neon;
#else
CpuFeatures widest_cpu() { return CpuFeatures{}; }
constexpr SimdLevel kWidest = SimdLevel::Scalar;
#endif

}  // namespace

TEST_CASE("best_simd_level: the widest level of this architecture the features allow") {
  CHECK(best_simd_level(CpuFeatures{}) == SimdLevel::Scalar);
#if defined(__x86_64__)
  CHECK(best_simd_level(x86_avx2()) == SimdLevel::Avx2);
  CHECK(best_simd_level(x86_avx512()) == SimdLevel::Avx512);
  CpuFeatures no_vbmi = x86_avx512();
  no_vbmi.avx512vbmi = false;  // the RVQ LUT path needs VBMI byte permutes
  CHECK(best_simd_level(no_vbmi) == SimdLevel::Avx2);
  CpuFeatures no_fma = x86_avx2();
  no_fma.fma = false;
  CHECK(best_simd_level(no_fma) == SimdLevel::Scalar);
  CHECK(best_simd_level(arm_neon()) == SimdLevel::Scalar);  // no NEON code in an x86 build
#elif defined(__aarch64__)
  CHECK(best_simd_level(arm_neon()) == SimdLevel::Neon);
  CHECK(best_simd_level(x86_avx512()) == SimdLevel::Scalar);  // no AVX code in an ARM build
#endif
}

TEST_CASE("simd_level_for: no cap, or an empty one, is the best level") {
  for (const char* cap : {static_cast<const char*>(nullptr), ""}) {
    const SimdChoice c = simd_level_for(widest_cpu(), cap);
    CHECK(c.level == kWidest);
    CHECK(c.warning.empty());
  }
}

TEST_CASE("simd_level_for: scalar caps every CPU") {
  for (const CpuFeatures& f : {CpuFeatures{}, x86_avx2(), x86_avx512(), arm_neon()}) {
    const SimdChoice c = simd_level_for(f, "scalar");
    CHECK(c.level == SimdLevel::Scalar);
    CHECK(c.warning.empty());
  }
}

#if defined(__x86_64__)
TEST_CASE("simd_level_for (x86): a cap is an upper bound on scalar < avx2 < avx512") {
  CHECK(simd_level_for(x86_avx512(), "avx2").level == SimdLevel::Avx2);
  CHECK(simd_level_for(x86_avx512(), "avx512").level == SimdLevel::Avx512);
  // A level the CPU lacks caps at what it has: never a request for missing instructions.
  CHECK(simd_level_for(x86_avx2(), "avx512").level == SimdLevel::Avx2);
  CHECK(simd_level_for(CpuFeatures{}, "avx2").level == SimdLevel::Scalar);
  CHECK(simd_level_for(x86_avx2(), "avx512").warning.empty());
}

TEST_CASE("simd_level_for (x86): neon and unknown values are ignored with a warning") {
  for (const char* cap : {"neon", "avx", "AVX2", "avx2 ", "sse4"}) {
    CAPTURE(cap);
    const SimdChoice c = simd_level_for(x86_avx512(), cap);
    CHECK(c.level == SimdLevel::Avx512);
    CHECK(c.warning.find(std::string("'") + cap + "'") != std::string::npos);
    CHECK(c.warning.find("scalar, avx2, avx512") != std::string::npos);
  }
}
#endif

#if defined(__aarch64__)
TEST_CASE("simd_level_for (aarch64): a cap is an upper bound on scalar < neon") {
  CHECK(simd_level_for(arm_neon(), "neon").level == SimdLevel::Neon);
  CHECK(simd_level_for(CpuFeatures{}, "neon").level == SimdLevel::Scalar);
  CHECK(simd_level_for(CpuFeatures{}, "neon").warning.empty());
}

TEST_CASE("simd_level_for (aarch64): x86 levels and unknown values are ignored with a warning") {
  for (const char* cap : {"avx2", "avx512", "NEON", "sve", "asimd"}) {
    CAPTURE(cap);
    const SimdChoice c = simd_level_for(arm_neon(), cap);
    CHECK(c.level == SimdLevel::Neon);
    CHECK(c.warning.find(std::string("'") + cap + "'") != std::string::npos);
    CHECK(c.warning.find("scalar, neon") != std::string::npos);
  }
}

TEST_CASE("cpu_features (aarch64): Advanced SIMD is there, and on Linux the probe is getauxval's") {
  // Every AArch64 CPU we run on (and qemu's cortex-a53 and max) has Advanced SIMD.
  const CpuFeatures& f = cpu_features();
  CHECK(f.neon);
  CHECK(best_simd_level(f) == SimdLevel::Neon);
#if defined(__linux__)
  const CpuFeatures a = features_from_arm64_hwcaps(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
  CHECK(f.asimddp == a.asimddp);
  CHECK(f.i8mm == a.i8mm);
  CHECK(f.asimdhp == a.asimdhp);
  CHECK(f.bf16 == a.bf16);
  CHECK(f.sve == a.sve);
#endif
  MESSAGE(cpu_summary());
}
#endif

TEST_CASE("simd_level_within: levels of one architecture's chain, never across") {
  CHECK(simd_level_within(SimdLevel::Scalar, SimdLevel::Scalar));
#if defined(__x86_64__)
  CHECK(simd_level_within(SimdLevel::Scalar, SimdLevel::Avx512));
  CHECK(simd_level_within(SimdLevel::Avx2, SimdLevel::Avx512));
  CHECK(simd_level_within(SimdLevel::Avx512, SimdLevel::Avx512));
  CHECK_FALSE(simd_level_within(SimdLevel::Avx512, SimdLevel::Avx2));
  CHECK_FALSE(simd_level_within(SimdLevel::Avx2, SimdLevel::Scalar));
  CHECK_FALSE(simd_level_within(SimdLevel::Neon, SimdLevel::Avx512));
  CHECK_FALSE(simd_level_within(SimdLevel::Scalar, SimdLevel::Neon));
#elif defined(__aarch64__)
  CHECK(simd_level_within(SimdLevel::Scalar, SimdLevel::Neon));
  CHECK(simd_level_within(SimdLevel::Neon, SimdLevel::Neon));
  CHECK_FALSE(simd_level_within(SimdLevel::Neon, SimdLevel::Scalar));
  // Avx2's number (1) is below Neon's (3), and still not a level this CPU runs.
  CHECK_FALSE(simd_level_within(SimdLevel::Avx2, SimdLevel::Neon));
  CHECK_FALSE(simd_level_within(SimdLevel::Avx512, SimdLevel::Neon));
#endif
}

TEST_CASE("features_from_arm64_hwcaps: each bit to its feature and nothing else") {
  const CpuFeatures none = features_from_arm64_hwcaps(0, 0);
  CHECK_FALSE((none.neon || none.asimddp || none.i8mm || none.asimdhp || none.bf16 || none.sve));

  // The bits of Linux's arch/arm64/include/uapi/asm/hwcap.h.
  CHECK(features_from_arm64_hwcaps(1u << 1, 0).neon);      // HWCAP_ASIMD
  CHECK(features_from_arm64_hwcaps(1u << 10, 0).asimdhp);  // HWCAP_ASIMDHP
  CHECK(features_from_arm64_hwcaps(1u << 20, 0).asimddp);  // HWCAP_ASIMDDP
  CHECK(features_from_arm64_hwcaps(1u << 22, 0).sve);      // HWCAP_SVE
  CHECK(features_from_arm64_hwcaps(0, 1u << 13).i8mm);     // HWCAP2_I8MM
  CHECK(features_from_arm64_hwcaps(0, 1u << 14).bf16);     // HWCAP2_BF16
  // The same bit in the other word means something else (HWCAP_ASIMDDP is not HWCAP2_*).
  CHECK_FALSE(features_from_arm64_hwcaps(0, 1u << 20).asimddp);
  CHECK_FALSE(features_from_arm64_hwcaps(1u << 13, 0).i8mm);

  // A Cortex-A53 (ARMv8.0: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid) has only neon.
  const CpuFeatures a53 = features_from_arm64_hwcaps(0x8ff, 0);
  CHECK(a53.neon);
  CHECK_FALSE((a53.asimddp || a53.i8mm || a53.asimdhp || a53.bf16 || a53.sve));
#if defined(__aarch64__)
  CHECK(best_simd_level(a53) == SimdLevel::Neon);
#endif
  // No x86 feature ever comes from a hwcap.
  const CpuFeatures all = features_from_arm64_hwcaps(~0ull, ~0ull);
  CHECK_FALSE((all.avx2 || all.fma || all.avx512f));
  CHECK((all.neon && all.asimddp && all.i8mm && all.asimdhp && all.bf16 && all.sve));
}
