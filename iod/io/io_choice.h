// Which read engine iod uses (waste-iod --io, waste iobench --io): the io_uring engine where this
// build has it, else the pread pool (read_engine.h). Whether it has it is decided when the build
// is set up: meson's `uring` feature option (meson_options.txt; auto: where liburing is found),
// written into the generated iod/uring_config.h (iod/meson.build). A build without it refuses
// `--io uring` by name instead of reading with pread behind the user's back.
#pragma once
#include <string>

#include "iod/uring_config.h"

namespace waste::iod {

// Whether this build has the io_uring engine (iod/io/uring_engine.cpp is compiled only then).
inline constexpr bool kHaveUring = WASTE_HAVE_IO_URING;

// --io without a value: io_uring where built (it still falls back to the pread pool at run time
// when the kernel refuses a ring or the buffer registration), else the pread pool.
inline constexpr const char* kDefaultIo = kHaveUring ? "uring" : "pread";

// "" when `io` names a read path of this build, else why not (for "--io: <why>").
inline std::string io_choice_problem(const std::string& io) {
  if (io == "pread") return "";
  if (io != "uring") return "must be uring or pread, not '" + io + "'";
  if (!kHaveUring)
    return "uring: built without io_uring (meson -During=disabled, or liburing was not found when the build was "
           "set up); use --io pread";
  return "";
}

}  // namespace waste::iod
