// Test tokenizers (synthetic vocabulary, release special layout after it) and a runner that
// feeds a reply one id at a time and checks the streaming invariants on every run.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/reply/reply_parser.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste::reply::test {

const tok::Tokenizer& k3_tok();
const tok::Tokenizer& k2_tok();
const tok::Tokenizer& linear_tok();

uint32_t sid(const tok::Tokenizer& t, std::string_view name);

// A reply as ids: m() appends trusted markup (every special name becomes its id, the rest is
// encoded as text), t() appends ordinary text (special names in it stay text), raw() ids.
class Ids {
 public:
  explicit Ids(const tok::Tokenizer& t) : tok_(t) {}
  Ids& m(std::string_view markup);
  Ids& t(std::string_view text);
  Ids& raw(std::initializer_list<uint32_t> ids);
  const std::vector<uint32_t>& ids() const { return ids_; }

 private:
  const tok::Tokenizer& tok_;
  std::vector<uint32_t> ids_;
};

struct RunResult {
  Reply reply;
  std::vector<ReplyDelta> deltas;              // one per push, then finish()'s
  std::vector<ReplyParser::Channel> channels;  // channel() before each push, then after finish
  size_t nonempty_before_finish = 0;
};

ParserOptions k3_options(bool thinking = true);
ParserOptions kimi_options();

// Feeds `ids` one at a time, then finish(), checking on the way: deltas are valid UTF-8,
// the deltas so far always concatenate to reply(), a call's id and name come only in its first
// delta, nothing throws, no special name appears in reasoning/content (unless the test wrote
// such text itself: text_names_specials), and the same reply comes out when every ordinary
// token is split into single-byte tokens (the split of the text into tokens never matters).
RunResult run(const tok::Tokenizer& t, const ParserOptions& o, const std::vector<uint32_t>& ids,
              bool text_names_specials = false);
inline RunResult run(const Ids& ids, const ParserOptions& o, const tok::Tokenizer& t,
                     bool text_names_specials = false) {
  return run(t, o, ids.ids(), text_names_specials);
}

// True if `arguments` parses as a JSON object equal to `expected` (JSON text).
bool args_equal(const std::string& arguments, const std::string& expected);

}  // namespace waste::reply::test
