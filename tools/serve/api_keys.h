// waste-serve's API keys: where they come from (--api-key, --api-key-file, WASTE_API_KEY) and
// how a request's Authorization header is checked against them.
#pragma once
#include <string>
#include <vector>

namespace waste::serve {

// The index of the key `authorization` ("Bearer KEY") carries, -1 when none. Every key is
// compared, each in time that depends on the key's length only (no exit at the first differing
// byte, none at the first matching key), so the time tells nothing of how much of a key was right.
int matching_key(const std::vector<std::string>& keys, const std::string& authorization);

// The keys of an --api-key-file: one a line, blank lines and lines starting with '#' skipped,
// spaces around a key dropped. Throws Error naming the file when it is not a regular file, when
// others may read or write it (mode & 0o006: the keys are secrets), or when it holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace waste::serve
