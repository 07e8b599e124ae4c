#include "tools/serve/api_keys.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::serve {

namespace {

// True when a == key, in time that depends on key.size() only: a's bytes are read at positions
// below key.size() (position i % a.size(), so a shorter a is no shortcut), every byte of the key
// is compared, and the differences are or-ed together. The compiler cannot stop early on a
// volatile accumulator.
bool equal_fixed_time(const std::string& a, const std::string& key) {
  volatile unsigned char diff = a.size() == key.size() ? 0 : 1;
  if (a.empty()) return false;  // the header's length is the client's own; no key is empty
  for (size_t i = 0; i < key.size(); ++i) diff = diff | (unsigned char)(a[i % a.size()] ^ key[i]);
  return diff == 0;
}

}  // namespace

int matching_key(const std::vector<std::string>& keys, const std::string& authorization) {
  static const std::string kScheme = "Bearer ";
  if (authorization.compare(0, kScheme.size(), kScheme) != 0) return -1;
  const std::string given = authorization.substr(kScheme.size());
  int found = -1;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool eq = equal_fixed_time(given, keys[i]);
    found = eq ? int(i) : found;  // no branch that leaves the loop
  }
  return found;
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  const std::string where = "--api-key-file " + path;
  std::string text;
  try {
    // File opens without blocking and refuses what is not a regular file (a FIFO cannot hang us).
    File f(path, O_RDONLY);
    struct stat st {};
    require(::fstat(f.fd(), &st) == 0 && S_ISREG(st.st_mode), "not a regular file");
    if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
      throw Error(std::string("other users may read or write it (mode ") + mode +
                  "): the keys are secrets, chmod o-rw it (e.g. 0600 or 0640)");
    }
    require(f.size() <= (1u << 20), "more than 1 MiB: not a key file");
    text.resize(size_t(f.size()));
    f.pread_exact(text.data(), text.size(), 0);
  } catch (const Error& e) {
    // File's own messages start with the path: named once, after the option.
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
    throw Error(where + ": " + why);
  }
  std::vector<std::string> keys;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b, e - b + 1);
    if (line.find_first_of(" \t") != std::string::npos)
      throw Error(where + ": a key holds a space (one key a line; comments start the line with #)");
    keys.push_back(line);
  }
  if (keys.empty()) throw Error(where + ": holds no key (one key a line; # starts a comment)");
  return keys;
}

}  // namespace waste::serve
