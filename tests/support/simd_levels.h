// The SIMD levels this CPU runs, for tests that compare a path against another (in process, or
// child processes under WASTE_SIMD): one list, from the CPU probe (shared/util/cpu.h), so a
// test names no architecture's levels itself and runs unchanged on x86-64 and aarch64.
#pragma once
#include <vector>

#include "shared/util/cpu.h"

namespace waste::test {

// The SIMD levels above scalar this CPU runs, whatever WASTE_SIMD says: a level is runnable when
// capping the CPU at it (cpu.h's simd_level_for, the one definition of which features a level
// needs) gives that level. Levels of another architecture never do (simd_level_for ignores
// them). Empty on a CPU with no SIMD level: only scalar is tested there.
inline std::vector<SimdLevel> simd_levels_of_cpu() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Neon})
    if (simd_level_for(cpu_features(), simd_level_name(level)).level == level) levels.push_back(level);
  return levels;
}

}  // namespace waste::test
