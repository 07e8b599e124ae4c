// The one temporary directory of the tests: a fresh mkdtemp directory (mode 0700, a name no
// other run can hold) under $TMPDIR, else /tmp, removed with everything in it when the object
// goes out of scope. Scope exit covers every path out of a test: a failed REQUIRE throws, and
// the destructor still runs, so no test leaves files behind or reads another run's.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace waste::test {

class TempDir {
 public:
  // prefix: the start of the directory's name, so a leftover (after a crash) says whose it is.
  // parent: where it is made, for a test that needs a particular file system (e.g. tmpfs).
  explicit TempDir(const std::string& prefix = "waste-test", const std::string& parent = "") {
    const char* env = std::getenv("TMPDIR");
    const std::string base = !parent.empty() ? parent : env && *env ? env : "/tmp";
    std::string tmpl = base + "/" + prefix + "-XXXXXX";
    // A test without its directory cannot do anything meaningful: fail it here, loudly,
    // instead of letting it write into "" (the working directory).
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary directory " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;  // a destructor must not throw; what cannot be removed stays
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace waste::test
