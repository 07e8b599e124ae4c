// The main of every doctest binary. A part of a test that cannot run here (no io_uring, not
// root, no npm client) calls waste::test::skip_part(why) instead of passing quietly: after the
// run the binary lists what was skipped and exits 77, so meson reports the suite as SKIP (never
// as a pass) unless something failed, which still fails it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/skip.h"

namespace waste::test {

std::vector<std::string>& skipped_parts() {
  static std::vector<std::string> parts;
  return parts;
}

void skip_part(const std::string& why) {
  skipped_parts().push_back(why);
  std::fprintf(stderr, "SKIPPED PART: %s\n", why.c_str());
}

}  // namespace waste::test

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int failed = ctx.run();
  if (failed != 0 || ctx.shouldExit()) return failed;
  const auto& parts = waste::test::skipped_parts();
  if (parts.empty()) return 0;
  std::fprintf(stderr, "SKIP: %zu part(s) of this suite could not run here:\n", parts.size());
  for (const auto& p : parts) std::fprintf(stderr, "  - %s\n", p.c_str());
  return 77;
}
