// The message of the exception a call throws, "" when it throws none: the tests check that bad
// input is refused with a message naming what was wrong.
#pragma once
#include <exception>
#include <functional>
#include <string>

namespace waste::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace waste::test
