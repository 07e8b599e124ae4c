// Skipping a part of a test that cannot run here, visibly (tests/test_main.cpp): the suite then
// exits 77 (meson: SKIP) unless something failed. Return from the test case after calling it.
#pragma once
#include <string>
#include <vector>

namespace waste::test {

void skip_part(const std::string& why);
std::vector<std::string>& skipped_parts();

}  // namespace waste::test
