// A field of one mapping in /proc/self/smaps, for the platform tests that check what the kernel
// did to a mapping (pages populated, huge pages mapped).
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace waste::test {

// The value (kB) of `field` ("Rss", "ShmemPmdMapped", ...) of the mapping that starts at `p`;
// -1 when there is no such mapping or field.
inline long smaps_kib_of(const void* p, const std::string& field) {
  std::ifstream smaps("/proc/self/smaps");
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    const size_t colon = line.find(':'), space = line.find(' ');
    if (space != std::string::npos && (colon == std::string::npos || colon > space))
      in = line.rfind(start, 0) == 0;  // a mapping's header line: "start-end perms ..."
    else if (in && line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

}  // namespace waste::test
