// libFuzzer target: an untrusted stream of generated token ids through the reply parser, as
// compute parses a model's reply by token id (a model may emit any id in any order). The first
// byte chooses the tokenizer family (bits 1-2), the chat format (its own, or none when bits 3-4
// are set) and whether a K3 reply starts inside think (bit 0); then
// each two bytes are one id of a real tokenizer's vocabulary (specials included).
// Contract checked (shared/reply/reply_parser.h): push() and finish() never throw, and the
// deltas concatenated field by field equal reply() after finish().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/reply/reply_parser.h"
#include "tests/fuzz/fuzz_tokenizer.h"

namespace {

struct Concatenated {
  std::string reasoning, content;
  std::vector<waste::reply::ToolCall> calls;
  void add(const waste::reply::ReplyDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const auto& c : d.tool_calls) {
      if (c.index > calls.size()) __builtin_trap();  // calls are numbered in order
      if (c.index == calls.size()) calls.emplace_back();
      calls[c.index].id += c.id;
      calls[c.index].name += c.name;
      calls[c.index].arguments += c.arguments;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using waste::tok::TokenizerFamily;
  const TokenizerFamily families[3] = {TokenizerFamily::KimiK2, TokenizerFamily::KimiLinear, TokenizerFamily::K3};
  const TokenizerFamily family = families[(data[0] >> 1) % 3];
  const waste::tok::Tokenizer& t = waste::fuzz::fuzz_tokenizer(family);
  waste::reply::ParserOptions o;
  // Bits 3-4 both set: no chat format (plain text); else the family's own.
  o.format = ((data[0] >> 3) & 3) == 3 ? waste::tok::ChatFormat::None : t.config().chat_format;
  o.thinking = data[0] & 1;
  waste::reply::ReplyParser p(t, o);
  Concatenated all;
  for (size_t i = 1; i + 1 < size; i += 2) {
    const uint32_t id = (uint32_t(data[i]) | uint32_t(data[i + 1]) << 8) % t.vocab_size();
    all.add(p.push(id));
  }
  all.add(p.finish());
  const waste::reply::Reply& r = p.reply();
  if (all.reasoning != r.reasoning || all.content != r.content || all.calls.size() != r.tool_calls.size()) __builtin_trap();
  for (size_t i = 0; i < r.tool_calls.size(); ++i)
    if (all.calls[i].id != r.tool_calls[i].id || all.calls[i].name != r.tool_calls[i].name ||
        all.calls[i].arguments != r.tool_calls[i].arguments)
      __builtin_trap();
  return 0;
}
