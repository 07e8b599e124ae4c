// Kimi replies (K2 with <think>, Kimi-Linear without) and their malformed variants.
#include <nlohmann/json.hpp>

#include "tests/unit/reply/reply_test_util.h"

using namespace waste;
using namespace waste::reply;
using namespace waste::reply::test;
using Channel = ReplyParser::Channel;

namespace {

RunResult kimi(const tok::Tokenizer& t, const std::string& markup) { return run(Ids(t).m(markup), kimi_options(), t); }

const char* kTwoCalls =
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>"
    "{\"q\": \"x\"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>";

}  // namespace

TEST_CASE("kimi k2: reasoning, content, two calls") {
  RunResult r = kimi(k2_tok(), std::string("<think>Need weather.</think>Let me check.") + kTwoCalls);
  CHECK(r.reply.reasoning == "Need weather.");
  CHECK(r.reply.content == "Let me check.");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].id == "functions.get_weather:0");
  CHECK(r.reply.tool_calls[0].name == "get_weather");
  CHECK(r.reply.tool_calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(r.reply.tool_calls[1].id == "functions.search:1");
  CHECK(r.reply.tool_calls[1].name == "search");
  CHECK(r.reply.tool_calls[1].arguments == "{\"q\": \"x\"}");
  CHECK(r.channels.front() == Channel::Content);
}

TEST_CASE("kimi-linear: content and calls; <think> is only text there") {
  const tok::Tokenizer& t = linear_tok();
  CHECK_FALSE(t.special_id("<think>").has_value());
  RunResult r = run(Ids(t).t("<think>not reasoning</think> Sure.").m(kTwoCalls), kimi_options(), t, true);
  CHECK(r.reply.reasoning.empty());
  CHECK(r.reply.content == "<think>not reasoning</think> Sure.");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[1].id == "functions.search:1");
  // A plain answer.
  r = kimi(t, "Hello there.<|im_end|>ignored");
  CHECK(r.reply.content == "Hello there.");
  CHECK(r.reply.tool_calls.empty());
}

TEST_CASE("kimi: markup written as text stays text") {
  for (const tok::Tokenizer* t : {&k2_tok(), &linear_tok()}) {
    RunResult r = run(Ids(*t).t("a <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|> "
                                "<|im_end|> <|tool_calls_section_begin|>"),
                      kimi_options(), *t, true);
    CHECK(r.reply.content ==
          "a <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|> <|im_end|> "
          "<|tool_calls_section_begin|>");
    CHECK(r.reply.tool_calls.empty());
  }
}

TEST_CASE("kimi: call names without prefix or index, repeated ids") {
  RunResult r = kimi(k2_tok(),
                     "<|tool_calls_section_begin|>"
                     "<|tool_call_begin|>get_weather:3<|tool_call_argument_begin|>{}<|tool_call_end|>"
                     "<|tool_call_begin|>functions.search<|tool_call_argument_begin|>{}<|tool_call_end|>"
                     "<|tool_call_begin|> lookup <|tool_call_argument_begin|>{}<|tool_call_end|>"
                     "<|tool_call_begin|>get_weather:3<|tool_call_argument_begin|>{}<|tool_call_end|>"
                     "<|tool_calls_section_end|>");
  REQUIRE(r.reply.tool_calls.size() == 4);
  CHECK(r.reply.tool_calls[0].id == "get_weather:3");
  CHECK(r.reply.tool_calls[0].name == "get_weather");
  CHECK(r.reply.tool_calls[1].id == "functions.search:1");
  CHECK(r.reply.tool_calls[1].name == "search");
  CHECK(r.reply.tool_calls[2].id == "lookup:2");
  CHECK(r.reply.tool_calls[2].name == "lookup");
  CHECK(r.reply.tool_calls[3].id == "get_weather:3_3");
}

TEST_CASE("kimi: malformed sections and calls") {
  const tok::Tokenizer& t = k2_tok();
  // A call without a section; a call left open before the next; the section closed mid-call.
  RunResult r = kimi(t,
                     "<|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": 1"
                     "<|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{\"y\": [1"
                     "<|tool_calls_section_end|> after");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].arguments == "{\"x\": 1}");
  CHECK(r.reply.tool_calls[1].arguments == "{\"y\": [1]}");
  CHECK(r.reply.content == " after");
  // Cut by max_tokens in the arguments: closed; cut in the name: dropped.
  r = kimi(t, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"s\": \"ab");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"s\": \"ab\"}");
  r = kimi(t, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_wea");
  CHECK(r.reply.tool_calls.empty());
  // Arguments that are not JSON stay raw when explicitly ended.
  r = kimi(t, "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>not json<|tool_call_end|>");
  CHECK(r.reply.tool_calls.at(0).arguments == "not json");
  // A call ended without arguments, or with empty ones: {}.
  r = kimi(t,
           "<|tool_call_begin|>functions.f:0<|tool_call_end|><|tool_call_begin|>functions.g:1"
           "<|tool_call_argument_begin|><|tool_call_end|><|tool_call_begin|>functions.h:2<|im_end|>");
  REQUIRE(r.reply.tool_calls.size() == 3);
  for (const ToolCall& c : r.reply.tool_calls) CHECK(c.arguments == "{}");
  // An empty name drops the call and its arguments; text between calls is dropped.
  r = kimi(t,
           "<|tool_calls_section_begin|>junk<|tool_call_begin|> <|tool_call_argument_begin|>{\"a\": 1}"
           "<|tool_call_end|>more junk<|tool_call_begin|>functions.ok:0<|tool_call_argument_begin|>{}"
           "<|tool_call_end|><|tool_calls_section_end|>");
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].name == "ok");
  CHECK(r.reply.content.empty());
  // Specials out of place are dropped.
  r = kimi(t,
           "a<|tool_call_argument_begin|>b<|tool_call_end|>c</think>d<|tool_calls_section_end|>e[BOS][EOS]"
           "<|media_begin|><|reserved_token_4101|>f<think>r<think>s<|tool_call_end|>t</think>g");
  CHECK(r.reply.content == "abcdefg");
  CHECK(r.reply.reasoning == "rst");
  CHECK(r.reply.tool_calls.empty());
  // A section inside <think> closes it; a new turn ends the reply.
  r = kimi(t,
           "<think>hmm<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}"
           "<|tool_call_end|><|tool_calls_section_end|>done<|im_user|>user text");
  CHECK(r.reply.reasoning == "hmm");
  CHECK(r.reply.content == "done");
  CHECK(r.reply.tool_calls.size() == 1);
  // An over-long name drops the call.
  r = run(Ids(t)
              .m("<|tool_call_begin|>")
              .t(std::string(kMaxKimiNameBytes + 1, 'n'))
              .m("<|tool_call_argument_begin|>{}<|tool_call_end|>"),
          kimi_options(), t);
  CHECK(r.reply.tool_calls.empty());
}

TEST_CASE("kimi: channel() and in_tool_calls()") {
  const tok::Tokenizer& t = k2_tok();
  ReplyParser p(t, kimi_options());
  auto feed = [&](const char* markup) {
    for (uint32_t id : t.encode_markup(markup)) p.push(id);
  };
  CHECK(p.channel() == Channel::Content);
  feed("<think>");
  CHECK(p.channel() == Channel::Reasoning);
  feed("x</think>y<|tool_calls_section_begin|>");
  CHECK(p.channel() == Channel::Markup);
  CHECK_FALSE(p.in_tool_calls());
  feed("<|tool_call_begin|>functions.f:0");
  CHECK(p.channel() == Channel::ToolCall);
  CHECK_FALSE(p.in_tool_calls());
  feed("<|tool_call_argument_begin|>{");
  CHECK(p.in_tool_calls());
  CHECK(p.channel() == Channel::ToolCall);
  feed("}<|tool_call_end|><|tool_calls_section_end|><|im_end|>");
  CHECK(p.channel() == Channel::Done);
}

TEST_CASE("kimi-linear and k2 pass the same call replies") {
  for (const tok::Tokenizer* t : {&k2_tok(), &linear_tok()}) {
    RunResult r = kimi(*t, std::string("Text ") + kTwoCalls);
    CHECK(r.reply.content == "Text ");
    REQUIRE(r.reply.tool_calls.size() == 2);
    CHECK(nlohmann::json::parse(r.reply.tool_calls[0].arguments)["city"] == "Paris");
  }
}
