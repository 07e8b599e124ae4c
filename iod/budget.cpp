#include "iod/budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "shared/util/error.h"
#include "shared/util/progress.h"

namespace waste::iod {

namespace {
uint64_t read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return UINT64_MAX;
  try {
    return std::stoull(s);
  } catch (...) {
    return UINT64_MAX;
  }
}
}  // namespace

uint64_t usable_ram_bytes() {
  uint64_t ram = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
  // The cgroup of this process only (the planner walks the whole hierarchy).
  ram = std::min(ram, read_limit("/sys/fs/cgroup/memory.max"));
  ram = std::min(ram, read_limit("/sys/fs/cgroup/memory.high"));
  ram = std::min(ram, read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  return ram;
}

CacheBudget plan_cache(const std::string& budget, uint32_t slots_override, const cache::CacheGeometry& g,
                       uint64_t slot_bytes) {
  const uint32_t floor_slots = g.top_k();
  const uint32_t ws = g.working_set_slots();
  CacheBudget b;
  if (slots_override > 0) {
    b.slots = slots_override;
  } else if (budget == "auto") {
    uint64_t cap = usable_ram_bytes() / 8 * 7;
    b.slots = floor_slots;
    for (uint32_t n = 3; n >= 1; --n) {
      if (uint64_t(n) * ws * slot_bytes <= cap) {
        b.slots = n * ws;
        break;
      }
    }
  } else {
    uint64_t bytes = parse_size(budget, "--budget");
    b.slots = uint32_t(std::min<uint64_t>(bytes / slot_bytes, 1u << 24));
  }
  b.slots = std::min<uint32_t>(b.slots, g.key_count());  // more slots than records is waste
  b.bytes = uint64_t(b.slots) * slot_bytes;
  char line[256];
  std::snprintf(line, sizeof line, "%u slots x %.2f MiB = %.2f GiB (%.2f token working sets of %u slots; floor %u slots)",
                b.slots, double(slot_bytes) / (1 << 20), double(b.bytes) / (1ull << 30), double(b.slots) / ws, ws,
                floor_slots);
  b.breakdown = line;
  require(b.slots >= floor_slots, "iod: cache budget under the floor: " + b.breakdown +
                                      "; one MoE layer's experts (top_k) must fit in flight");
  return b;
}

}  // namespace waste::iod
