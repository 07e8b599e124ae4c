// A temporary directory for a test, removed with its contents when the test ends.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace waste::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/waste-test-XXXXXX";
    path = ::mkdtemp(tmpl.data()) ? std::filesystem::path(tmpl) : std::filesystem::path();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline std::string fixture_dir(const std::string& name) {
  const char* shared = std::getenv("WASTE_SHARED_DIR");
  return std::string(shared ? shared : "../shared") + "/fixtures/" + name;
}

}  // namespace waste::test
