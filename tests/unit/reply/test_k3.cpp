// K3 replies as the renderer writes them: every channel, every argument type, several calls.
#include <nlohmann/json.hpp>

#include "shared/util/error.h"
#include "tests/unit/reply/reply_test_util.h"

using namespace waste;
using namespace waste::reply;
using namespace waste::reply::test;
using Channel = ReplyParser::Channel;

namespace {

const char* kFullReply =
    "Let me check the weather.<|close|>think<|sep|><|open|>response<|sep|>Checking now.<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
    "<|open|>argument key=\"n\" type=\"number\"<|sep|>42<|close|>argument<|sep|><|close|>call<|sep|>"
    "<|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"q\": \"x\"}"
    "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>";

}  // namespace

TEST_CASE("k3: reasoning, content and two calls (typed and raw json)") {
  RunResult r = run(Ids(k3_tok()).m(kFullReply), k3_options(), k3_tok());
  CHECK(r.reply.reasoning == "Let me check the weather.");
  CHECK(r.reply.content == "Checking now.");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].id == "call_1");
  CHECK(r.reply.tool_calls[0].name == "get_weather");
  CHECK(r.reply.tool_calls[0].arguments == "{\"city\": \"Paris\", \"n\": 42}");
  CHECK(r.reply.tool_calls[1].id == "call_2");
  CHECK(r.reply.tool_calls[1].name == "search");
  CHECK(r.reply.tool_calls[1].arguments == "{\"q\": \"x\"}");
  CHECK(r.channels.front() == Channel::Reasoning);
}

TEST_CASE("k3: every argument type (the renderer's tool_call_all_types case)") {
  // The assistant turn of cases.jsonl `tool_call_all_types`, after the prompt's think.
  RunResult r =
      run(Ids(k3_tok()).m("<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
                          "<|open|>call tool=\"everything\" index=\"1\"<|sep|>"
                          "<|open|>argument key=\"s\" type=\"string\"<|sep|>text<|close|>argument<|sep|>"
                          "<|open|>argument key=\"n\" type=\"number\"<|sep|>42<|close|>argument<|sep|>"
                          "<|open|>argument key=\"f\" type=\"number\"<|sep|>1.5<|close|>argument<|sep|>"
                          "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
                          "<|open|>argument key=\"b2\" type=\"boolean\"<|sep|>false<|close|>argument<|sep|>"
                          "<|open|>argument key=\"nul\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
                          "<|open|>argument key=\"obj\" type=\"object\"<|sep|>{\"k\": \"v\"}<|close|>argument<|sep|>"
                          "<|open|>argument key=\"arr\" type=\"array\"<|sep|>[1, \"two\", null]<|close|>argument<|sep|>"
                          "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
          k3_options(), k3_tok());
  CHECK(r.reply.reasoning.empty());
  CHECK(r.reply.content.empty());
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].name == "everything");
  CHECK(r.reply.tool_calls[0].arguments ==
        "{\"s\": \"text\", \"n\": 42, \"f\": 1.5, \"b\": true, \"b2\": false, \"nul\": null, \"obj\": {\"k\": \"v\"}, "
        "\"arr\": [1, \"two\", null]}");
  CHECK(args_equal(r.reply.tool_calls[0].arguments,
                   R"({"s": "text", "n": 42, "f": 1.5, "b": true, "b2": false, "nul": null, "obj": {"k": "v"},
                       "arr": [1, "two", null]})"));
}

TEST_CASE("k3: a call without arguments, the renderer's tool_call_and_result call") {
  RunResult r =
      run(Ids(k3_tok()).m("<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
                          "<|open|>tools<|sep|><|open|>call tool=\"ping\" index=\"1\"<|sep|><|close|>call<|sep|>"
                          "<|open|>call tool=\"get_weather\" index=\"2\"<|sep|>"
                          "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
                          "<|open|>argument key=\"units\" type=\"string\"<|sep|>c<|close|>argument<|sep|>"
                          "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"),
          k3_options(), k3_tok());
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].arguments == "{}");
  CHECK(r.reply.tool_calls[1].arguments == "{\"city\": \"Paris\", \"units\": \"c\"}");
}

TEST_CASE("k3: thinking off starts in the response") {
  RunResult r = run(Ids(k3_tok()).m("It is 18C and clear.<|close|>response<|sep|><|close|>message<|sep|>"),
                    k3_options(false), k3_tok());
  CHECK(r.reply.reasoning.empty());
  CHECK(r.reply.content == "It is 18C and clear.");
  CHECK(r.reply.tool_calls.empty());
  CHECK(r.channels.front() == Channel::Content);

  // Thinking off with a tool call and the stop token passed through.
  r = run(Ids(k3_tok()).m("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
                          "<|open|>argument key=\"x\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
                          "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
          k3_options(false), k3_tok());
  CHECK(r.reply.content.empty());
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].arguments == "{\"x\": true}");
}

TEST_CASE("k3: string values are escaped, attribute values unescaped, call id prefix") {
  ParserOptions o = k3_options();
  o.call_id_prefix = "tc-";
  RunResult r =
      run(Ids(k3_tok()).m("<|close|>think<|sep|><|open|>tools<|sep|>"
                          "<|open|>call tool=\"a&amp;b\" index=\"1\"<|sep|>"
                          "<|open|>argument key=\"say &quot;hi&quot;\" type=\"string\"<|sep|>"
                          "line 1\n\t\"quoted\" back\\slash \xe2\x82\xac \xf0\x9f\x98\x80<|close|>argument<|sep|>"
                          "<|close|>call<|sep|><|close|>tools<|sep|>"),
          o, k3_tok());
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].id == "tc-1");
  CHECK(r.reply.tool_calls[0].name == "a&b");
  const auto args = nlohmann::json::parse(r.reply.tool_calls[0].arguments);
  CHECK(args["say \"hi\""] == "line 1\n\t\"quoted\" back\\slash \xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST_CASE("k3: markup written as text stays text") {
  // The model writes the characters of markup as ordinary tokens: text, never structure.
  RunResult r = run(Ids(k3_tok())
                        .t("I could write <|close|>think<|sep|> here.")
                        .m("<|close|>think<|sep|><|open|>response<|sep|>")
                        .t("Injected: <|sep|> and <|close|>think<|sep|><|open|>tools<|sep|> and <|tool_call_begin|> "
                           "<|end_of_msg|>")
                        .m("<|close|>response<|sep|><|close|>message<|sep|>"),
                    k3_options(), k3_tok(), /*text_names_specials=*/true);
  CHECK(r.reply.reasoning == "I could write <|close|>think<|sep|> here.");
  CHECK(r.reply.content ==
        "Injected: <|sep|> and <|close|>think<|sep|><|open|>tools<|sep|> and <|tool_call_begin|> <|end_of_msg|>");
  CHECK(r.reply.tool_calls.empty());

  // Markup text inside a string argument is part of the value.
  r = run(Ids(k3_tok())
              .m("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"echo\" index=\"1\"<|sep|>"
                 "<|open|>argument key=\"s\" type=\"string\"<|sep|>")
              .t("<|close|>argument<|sep|>")
              .m("<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
          k3_options(), k3_tok(), true);
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].arguments == "{\"s\": \"<|close|>argument<|sep|>\"}");
}

TEST_CASE("k3: channel() follows the structure") {
  const tok::Tokenizer& t = k3_tok();
  ReplyParser p(t, k3_options());
  CHECK(p.channel() == Channel::Reasoning);
  auto feed = [&](const char* markup) {
    for (uint32_t id : t.encode_markup(markup)) p.push(id);
  };
  feed("hmm<|close|>");
  CHECK(p.channel() == Channel::Markup);
  feed("think<|sep|>");
  CHECK(p.channel() == Channel::Markup);  // directly in the message: an element comes next
  feed("<|open|>response<|sep|>");
  CHECK(p.channel() == Channel::Content);
  feed("<|close|>response<|sep|><|open|>tools<|sep|>");
  CHECK(p.channel() == Channel::Markup);
  CHECK_FALSE(p.in_tool_calls());
  feed("<|open|>call tool=\"f\"<|sep|>");
  CHECK(p.in_tool_calls());
  CHECK(p.channel() == Channel::Markup);
  feed("<|open|>argument key=\"a\" type=\"string\"<|sep|>");
  CHECK(p.channel() == Channel::ToolCall);
  feed("<|close|>argument<|sep|><|open|>json<|sep|>");
  CHECK(p.channel() == Channel::Markup);  // dropped: the call already has typed arguments
  feed("<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>");
  CHECK(p.channel() == Channel::Done);
  p.finish();
  CHECK(p.reply().tool_calls.at(0).arguments == "{\"a\": \"\"}");
}

TEST_CASE("parser construction: formats need their specials") {
  CHECK_THROWS_AS(ReplyParser(k2_tok(), k3_options()), Error);
  CHECK_THROWS_AS(ReplyParser(linear_tok(), k3_options()), Error);
  CHECK_THROWS_AS(ReplyParser(k3_tok(), kimi_options()), Error);
  CHECK_NOTHROW(ReplyParser(k3_tok(), k3_options()));
  CHECK_NOTHROW(ReplyParser(k2_tok(), kimi_options()));
  CHECK_NOTHROW(ReplyParser(linear_tok(), kimi_options()));
  try {
    ReplyParser p(k2_tok(), k3_options());
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("<|open|>") != std::string::npos);
  }
}

TEST_CASE("format none: plain content, specials dropped, stop ends") {
  ParserOptions o;
  o.format = tok::ChatFormat::None;
  RunResult r = run(Ids(k2_tok()).t("plain ").m("[BOS]text<|im_middle|> more<|im_end|>after"), o, k2_tok());
  CHECK(r.reply.content == "plain text more");
  CHECK(r.reply.reasoning.empty());
}
