#include "tests/unit/reply/reply_test_util.h"

#include <nlohmann/json.hpp>

#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/utf8.h"

namespace waste::reply::test {

namespace {

const tok::BpeRanks& synthetic() {
  static const tok::BpeRanks r = tok::synthetic_ranks();
  return r;
}
tok::Tokenizer make(tok::TokenizerFamily f) {
  return tok::Tokenizer(synthetic(), tok::tokenizer_config_for(f, synthetic().rank_end()), "reply test");
}

bool valid_utf8(const std::string& s) { return tok::utf8_invalid_offset(s) == std::string::npos; }

// Every special name of the tokenizer, reserved ones by their common prefix.
std::vector<std::string> special_names(const tok::Tokenizer& t) {
  std::vector<std::string> names = {"<|reserved_token_"};
  for (const auto& s : t.config().special_tokens) names.push_back(s.text);
  return names;
}

void check_no_special_names(const tok::Tokenizer& t, const std::string& text) {
  for (const std::string& name : special_names(t)) {
    INFO("special name: ", name);
    CHECK(text.find(name) == std::string::npos);
  }
}

struct Collected {
  Reply reply;
  std::vector<bool> call_seen;
};

void add_delta(Collected& c, const ReplyDelta& d) {
  CHECK(valid_utf8(d.reasoning));
  CHECK(valid_utf8(d.content));
  c.reply.reasoning += d.reasoning;
  c.reply.content += d.content;
  for (const ToolCallDelta& tc : d.tool_calls) {
    CHECK(valid_utf8(tc.arguments));
    if (tc.index >= c.call_seen.size()) {
      // A new call: the next index, with its id and name.
      CHECK(tc.index == c.call_seen.size());
      CHECK_FALSE(tc.id.empty());
      CHECK_FALSE(tc.name.empty());
      c.call_seen.resize(tc.index + 1);
      c.reply.tool_calls.resize(tc.index + 1);
      c.reply.tool_calls[tc.index].id = tc.id;
      c.reply.tool_calls[tc.index].name = tc.name;
    } else {
      CHECK(tc.id.empty());
      CHECK(tc.name.empty());
    }
    c.reply.tool_calls[tc.index].arguments += tc.arguments;
  }
}

void check_same(const Reply& a, const Reply& b) {
  CHECK(a.reasoning == b.reasoning);
  CHECK(a.content == b.content);
  REQUIRE(a.tool_calls.size() == b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    CHECK(a.tool_calls[i].id == b.tool_calls[i].id);
    CHECK(a.tool_calls[i].name == b.tool_calls[i].name);
    CHECK(a.tool_calls[i].arguments == b.tool_calls[i].arguments);
  }
}

void check_same_sizes(const Reply& a, const Reply& b) {
  CHECK(a.reasoning.size() == b.reasoning.size());
  CHECK(a.content.size() == b.content.size());
  REQUIRE(a.tool_calls.size() == b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    CHECK(a.tool_calls[i].arguments.size() == b.tool_calls[i].arguments.size());
}

RunResult run_once(const tok::Tokenizer& t, const ParserOptions& o, const std::vector<uint32_t>& ids) {
  RunResult r;
  ReplyParser p(t, o);
  Collected c;
  for (uint32_t id : ids) {
    r.channels.push_back(p.channel());
    ReplyDelta d;
    REQUIRE_NOTHROW(d = p.push(id));
    if (!d.empty()) ++r.nonempty_before_finish;
    add_delta(c, d);
    r.deltas.push_back(std::move(d));
    // The non-streamed reply is always the deltas so far (sizes here, every byte at the end:
    // comparing whole texts per token would make long replies quadratic).
    check_same_sizes(c.reply, p.reply());
    CHECK(p.in_tool_calls() == !p.reply().tool_calls.empty());
  }
  ReplyDelta d;
  REQUIRE_NOTHROW(d = p.finish());
  add_delta(c, d);
  r.deltas.push_back(std::move(d));
  r.channels.push_back(p.channel());
  CHECK(p.channel() == ReplyParser::Channel::Done);
  check_same(c.reply, p.reply());
  CHECK(p.finish().empty());
  CHECK(p.push(ids.empty() ? 65 : ids.front()).empty());  // nothing after finish
  check_same(c.reply, p.reply());
  r.reply = p.reply();
  return r;
}

}  // namespace

const tok::Tokenizer& k3_tok() {
  static const tok::Tokenizer t = make(tok::TokenizerFamily::K3);
  return t;
}
const tok::Tokenizer& k2_tok() {
  static const tok::Tokenizer t = make(tok::TokenizerFamily::KimiK2);
  return t;
}
const tok::Tokenizer& linear_tok() {
  static const tok::Tokenizer t = make(tok::TokenizerFamily::KimiLinear);
  return t;
}

uint32_t sid(const tok::Tokenizer& t, std::string_view name) {
  auto id = t.special_id(name);
  REQUIRE(id.has_value());
  return *id;
}

Ids& Ids::m(std::string_view markup) {
  auto v = tok_.encode_markup(markup);
  ids_.insert(ids_.end(), v.begin(), v.end());
  return *this;
}
Ids& Ids::t(std::string_view text) {
  tok_.encode_append(text, ids_);
  return *this;
}
Ids& Ids::raw(std::initializer_list<uint32_t> ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  return *this;
}

ParserOptions k3_options(bool thinking) {
  ParserOptions o;
  o.format = tok::ChatFormat::K3;
  o.thinking = thinking;
  return o;
}
ParserOptions kimi_options() {
  ParserOptions o;
  o.format = tok::ChatFormat::Kimi;
  return o;
}

RunResult run(const tok::Tokenizer& t, const ParserOptions& o, const std::vector<uint32_t>& ids,
              bool text_names_specials) {
  RunResult r = run_once(t, o, ids);
  if (!text_names_specials) {
    check_no_special_names(t, r.reply.reasoning);
    check_no_special_names(t, r.reply.content);
  }
  // The same reply with the text as single bytes (rank b is byte b in the synthetic vocabulary):
  // characters split across tokens, headers split everywhere.
  std::vector<uint32_t> bytes;
  for (uint32_t id : ids) {
    if (!t.ranks().has_rank(id)) {
      bytes.push_back(id);
      continue;
    }
    for (char ch : t.ranks().token_bytes(id)) bytes.push_back(t.ranks().byte_rank(static_cast<uint8_t>(ch)));
  }
  if (bytes != ids) {
    RunResult split = run_once(t, o, bytes);
    INFO("single-byte tokens");
    check_same(split.reply, r.reply);
  }
  return r;
}

bool args_equal(const std::string& arguments, const std::string& expected) {
  if (!nlohmann::json::accept(arguments)) return false;
  return nlohmann::json::parse(arguments) == nlohmann::json::parse(expected);
}

}  // namespace waste::reply::test
