// The record list of `waste iobench MODEL --read-records FILE`: "layer expert" a line, container
// layer ids, '#' starts a comment that runs to the end of the line, blank lines are skipped.
// Parsing is apart from the container checks (read_records.cpp) so that it is unit-tested
// without a container.
#pragma once
#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace waste::iobench {

struct ListedRecord {
  size_t line = 0;      // 1-based line of the file, for the errors of the container checks
  uint32_t layer = 0;   // container layer id, as written
  uint32_t expert = 0;  // index in the layer's bank, as written
};

// Strict: a line that is not blank or a comment is exactly two unsigned decimal numbers (digits
// only) that fit in 32 bits, separated by blanks. Anything else (a word, a sign, a third field,
// a number out of range) is an Error naming `path` and the line: a list that is misread would
// time reads the run never made. More than max_records records is an error too. An empty result
// is returned as such (the caller says "no records").
std::vector<ListedRecord> parse_record_list(std::istream& in, const std::string& path, size_t max_records);

}  // namespace waste::iobench
