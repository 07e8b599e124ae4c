// Where the unit tests find ../shared/fixtures: WASTE_SHARED_DIR (set by meson's test_env).
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

namespace waste {

// The directory of fixture `name` (kimi-linear, kimi-k3, deepseek-v3, ...).
inline std::string fixture_dir(const std::string& name) {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/fixtures/" + name;
}

}  // namespace waste
