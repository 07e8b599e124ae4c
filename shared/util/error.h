// The one exception type of WASTE. Messages name the file, tensor, record or field at fault,
// so a user can act on them without a debugger.
#pragma once
#include <stdexcept>
#include <string>

namespace waste {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error(message) when `ok` is false. Use for checks on data read from disk or a peer.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

}  // namespace waste
