// `waste synth` for integration tests: a synthetic container at a path of the test's own, the
// step most of them begin with, failing the test (with synth's output) when it cannot be made.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "tests/integration/process.h"

namespace waste::test {

// args: the preset and any other synth options (e.g. "--preset tiny-k2 --seed 7"). Returns out.
inline std::string synth_model(const std::string& out, const std::string& args) {
  auto r = run_command(waste_bin() + " synth --no-progress --out " + out + " " + args);
  INFO(r.output);
  REQUIRE_EQ(r.status, 0);
  return out;
}

}  // namespace waste::test
