// Environment variables set for one scope: the test hooks (WASTE_*_TEST_*) of a process the
// test starts while the scope lives. The previous values come back when it ends, on every
// exit path (a failed start that throws included), so a hook never leaks into later tests.
#pragma once
#include <stdlib.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace waste::test {

class ScopedEnv {
 public:
  explicit ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = ::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace waste::test
