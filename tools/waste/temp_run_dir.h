// A run directory of this process's own under $TMPDIR (mkdtemp: mode 0700 and a fresh name that
// nobody else can have made first), removed with everything in it when its owner goes: as a
// member it is removed also when the owner's constructor throws, which a cleanup in the
// owner's destructor never is.
#pragma once
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "shared/util/error.h"

namespace waste::cli {

class TempRunDir {
 public:
  // prefix: e.g. "waste-run" (the directory is $TMPDIR/prefix-XXXXXX, /tmp without TMPDIR).
  explicit TempRunDir(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    require(::mkdtemp(tmpl.data()) != nullptr,
            "cannot create a run directory from " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempRunDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  // Hands the directory to an owner that removes it itself; this object then removes nothing.
  std::string release() { return std::exchange(path_, std::string()); }
  TempRunDir(const TempRunDir&) = delete;
  TempRunDir& operator=(const TempRunDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace waste::cli
