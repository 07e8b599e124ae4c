// A directory of this process's own (mkdtemp: mode 0700 and a fresh name that nobody else can
// have made first), removed with everything in it when its owner goes: as a member it is
// removed also when the owner's constructor throws, which a cleanup in the owner's destructor
// never is. Private run directories of the CLI, compute's directory of parked session states.
#pragma once
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "shared/util/error.h"

namespace waste {

// $TMPDIR, else `fallback`: where a process's temporary directories go.
inline std::string temp_base(const char* fallback = "/tmp") {
  const char* base = std::getenv("TMPDIR");
  return base && *base ? base : fallback;
}

class PrivateDir {
 public:
  // The directory is base/prefix-XXXXXX (base: temp_base() when empty). `what` names it in
  // the error ("a run directory", ...).
  explicit PrivateDir(const std::string& prefix, const std::string& base = "", const std::string& what = "a run directory") {
    std::string tmpl = (base.empty() ? temp_base() : base) + "/" + prefix + "-XXXXXX";
    require(::mkdtemp(tmpl.data()) != nullptr, "cannot create " + what + " from " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~PrivateDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // never follows a symlink inside
  }
  // Hands the directory to an owner that removes it itself; this object then removes nothing.
  std::string release() { return std::exchange(path_, std::string()); }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace waste
