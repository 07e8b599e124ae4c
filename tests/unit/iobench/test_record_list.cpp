// The --read-records list parser: "layer expert" a line, '#' comments and blank lines allowed,
// everything else an error naming the file and the line. A value out of range used to be
// narrowed ("4294967297 5" read as layer 1) and a line not starting with a number was skipped as
// if it were blank.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "shared/util/error.h"
#include "tools/iobench/record_list.h"

using namespace waste;
using namespace waste::iobench;

namespace {

std::vector<ListedRecord> parse(const std::string& text, size_t max_records = 100) {
  std::istringstream in(text);
  return parse_record_list(in, "reads.txt", max_records);
}

std::string error_of(const std::string& text, size_t max_records = 100) {
  try {
    parse(text, max_records);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("record list: records, comments, blank lines and CRLF line ends") {
  const auto r = parse("# layer expert\n1 0\n\n   \n3 7  # again below\n\t1\t2\r\n4294967295 4294967295\n# end");
  REQUIRE_EQ(r.size(), 4u);
  CHECK_EQ(r[0].line, 2u);
  CHECK_EQ(r[0].layer, 1u);
  CHECK_EQ(r[0].expert, 0u);
  CHECK_EQ(r[1].line, 5u);
  CHECK_EQ(r[1].layer, 3u);
  CHECK_EQ(r[1].expert, 7u);
  CHECK_EQ(r[2].line, 6u);
  CHECK_EQ(r[2].layer, 1u);
  CHECK_EQ(r[2].expert, 2u);
  CHECK_EQ(r[3].line, 7u);
  CHECK_EQ(r[3].layer, 4294967295u);
  CHECK_EQ(r[3].expert, 4294967295u);
  CHECK(parse("").empty());
  CHECK(parse("# nothing\n\n").empty());
}

TEST_CASE("record list: a value out of range is an error naming the file and line, never narrowed") {
  CHECK_EQ(error_of("1 0\n4294967297 5\n"), "reads.txt:2: layer 4294967297 is out of range (at most 4294967295)");
  CHECK_EQ(error_of("1 4294967296\n"), "reads.txt:1: expert 4294967296 is out of range (at most 4294967295)");
  CHECK_EQ(error_of("\n\n99999999999999999999999999 0\n"),
           "reads.txt:3: layer 99999999999999999999999999 is out of range (at most 4294967295)");
}

TEST_CASE("record list: a malformed line is an error naming the file and line, never skipped") {
  CHECK_EQ(error_of("1 0\nx y\n"),
           "reads.txt:2: expected 'layer expert' (two whole numbers from 0), got 'x y': layer 'x' is not one");
  CHECK_EQ(error_of("1 -1\n"),
           "reads.txt:1: expected 'layer expert' (two whole numbers from 0), got '1 -1': expert '-1' is not one");
  CHECK_EQ(error_of("+1 2\n"),
           "reads.txt:1: expected 'layer expert' (two whole numbers from 0), got '+1 2': layer '+1' is not one");
  CHECK_EQ(error_of("5x 2\n"),
           "reads.txt:1: expected 'layer expert' (two whole numbers from 0), got '5x 2': layer '5x' is not one");
  CHECK_EQ(error_of("1 2.0\n"),
           "reads.txt:1: expected 'layer expert' (two whole numbers from 0), got '1 2.0': expert '2.0' is not one");
  CHECK_EQ(error_of("# c\n1 2 3\n"), "reads.txt:2: expected 'layer expert', got '1 2 3'");
  CHECK_EQ(error_of("7\n"), "reads.txt:1: expected 'layer expert', got '7'");
  CHECK_EQ(error_of("1,2\n"), "reads.txt:1: expected 'layer expert', got '1,2'");
  // A long line is quoted cut short.
  const std::string e = error_of(std::string(200, 'z') + " 1\n");
  CHECK(e.find("reads.txt:1: expected 'layer expert'") == 0);
  CHECK(e.find(std::string(80, 'z') + "...'") != std::string::npos);
  CHECK(e.find(std::string(81, 'z')) == std::string::npos);
  const std::string big = error_of(std::string(200, '9') + " 1\n");
  CHECK_EQ(big, "reads.txt:1: layer " + std::string(80, '9') + "... is out of range (at most 4294967295)");
}

TEST_CASE("record list: more records than the bound is an error") {
  CHECK_EQ(parse("1 0\n1 1\n", 2).size(), 2u);
  CHECK_EQ(error_of("1 0\n1 1\n1 2\n", 2), "reads.txt: more than 2 records");
}
