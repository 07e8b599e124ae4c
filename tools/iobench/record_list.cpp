#include "tools/iobench/record_list.h"

#include <charconv>
#include <system_error>

#include "shared/util/error.h"

namespace waste::iobench {

namespace {

// Blanks between and around the fields; '\r' too, so that a list saved with CRLF line ends reads.
bool is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

// The fields of a line, split at blanks.
std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && !is_blank(line[j])) ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// Text of the file as shown in an error: bounded, so a huge line does not make a huge message.
std::string shown(const std::string& text) {
  constexpr size_t kMaxShown = 80;
  return text.size() <= kMaxShown ? text : text.substr(0, kMaxShown) + "...";
}
std::string in_quotes(const std::string& text) {
  // Appended rather than "'" + ... + "'": GCC 12 warns falsely (-Wrestrict, GCC bug 105329) on
  // a literal prepended to a temporary string.
  std::string q = "'";
  q += shown(text);
  q += '\'';
  return q;
}

}  // namespace

std::vector<ListedRecord> parse_record_list(std::istream& in, const std::string& path, size_t max_records) {
  std::vector<ListedRecord> out;
  std::string line;
  size_t n = 0;  // lines read
  while (std::getline(in, line)) {
    ++n;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const std::vector<std::string> f = fields_of(line);
    if (f.empty()) continue;  // blank, or only a comment
    require(f.size() == 2, where + "expected 'layer expert', got " + in_quotes(line));
    uint32_t value[2] = {0, 0};
    const char* name[2] = {"layer", "expert"};
    for (int k = 0; k < 2; ++k) {
      const std::string& s = f[size_t(k)];
      // from_chars alone would take a leading '-' and stop at the first non-digit ("5x" is 5):
      // digits only, every one of them used.
      bool digits = true;
      for (char ch : s) digits = digits && ch >= '0' && ch <= '9';
      require(digits, where + "expected 'layer expert' (two whole numbers from 0), got " + in_quotes(line) + ": " +
                          name[k] + " " + in_quotes(s) + " is not one");
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value[k]);
      require(ec != std::errc::result_out_of_range,
              where + name[k] + " " + shown(s) + " is out of range (at most " + std::to_string(UINT32_MAX) + ")");
      require(ec == std::errc() && end == s.data() + s.size(), where + name[k] + " " + in_quotes(s) + " is not a number");
    }
    require(out.size() < max_records, path + ": more than " + std::to_string(max_records) + " records");
    out.push_back({n, value[0], value[1]});
  }
  // A read error (not the end of the file) must not pass for a shorter list.
  require(!in.bad(), path + ": read failed after line " + std::to_string(n));
  return out;
}

}  // namespace waste::iobench
