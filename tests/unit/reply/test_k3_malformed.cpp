// K3 replies that do not follow the format: each degrades to a sane reply, never an exception.
// The rules are the ones documented in shared/reply/reply_parser.h.
#include <nlohmann/json.hpp>

#include "tests/unit/reply/reply_test_util.h"

using namespace waste;
using namespace waste::reply;
using namespace waste::reply::test;

namespace {

// A reply that starts in the think element and goes straight to one call.
const std::string kCallOpen =
    "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>";

RunResult k3(const Ids& ids, bool thinking = true) { return run(ids, k3_options(thinking), k3_tok()); }
RunResult k3(const std::string& markup, bool thinking = true) { return k3(Ids(k3_tok()).m(markup), thinking); }

}  // namespace

TEST_CASE("k3 cut by max_tokens: everything open is closed") {
  // In the reasoning.
  RunResult r = k3("Still thinking about");
  CHECK(r.reply.reasoning == "Still thinking about");
  CHECK(r.reply.content.empty());
  // Mid string argument: the string and the object are closed.
  r = k3(kCallOpen + "<|open|>argument key=\"city\" type=\"string\"<|sep|>Par");
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(r.reply.tool_calls[0].arguments == "{\"city\": \"Par\"}");
  // After a complete argument, in the next header (dropped).
  r = k3(kCallOpen +
         "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
         "<|open|>argument key=\"un");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"city\": \"Paris\"}");
  // Mid number, mid object, mid literal: repaired when that makes JSON, else a string.
  r = k3(kCallOpen + "<|open|>argument key=\"n\" type=\"number\"<|sep|>4");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"n\": 4}");
  r = k3(kCallOpen + "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": [\"v");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"o\": {\"k\": [\"v\"]}}");
  r = k3(kCallOpen + "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>tr");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"b\": true}");
  r = k3(kCallOpen + "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": 1,");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"o\": \"{\\\"k\\\": 1,\"}");
  // Mid raw json element: repaired when possible, else raw.
  r = k3(kCallOpen + "<|open|>json type=\"object\"<|sep|>{\"q\": \"x");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"q\": \"x\"}");
  r = k3(kCallOpen + "<|open|>json type=\"object\"<|sep|>{\"q\": \"x\",");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"q\": \"x\",");
  // In the call header: no call (its name may be cut).
  r = k3("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_wea");
  CHECK(r.reply.tool_calls.empty());
  // Right after the call header: a call without arguments.
  r = k3(kCallOpen);
  CHECK(r.reply.tool_calls.at(0).arguments == "{}");
  for (const ToolCall& c : r.reply.tool_calls) CHECK(nlohmann::json::accept(c.arguments));
}

TEST_CASE("k3 arguments that are not JSON") {
  RunResult r = k3(kCallOpen +
                   "<|open|>argument key=\"n\" type=\"number\"<|sep|>forty-two<|close|>argument<|sep|>"
                   "<|open|>argument key=\"o\" type=\"object\"<|sep|>{broken<|close|>argument<|sep|>"
                   "<|open|>argument key=\"t\" type=\"tuple\"<|sep|> [1, 2] <|close|>argument<|sep|>"
                   "<|open|>argument key=\"u\"<|sep|>plain words<|close|>argument<|sep|>"
                   "<|open|>argument key=\"e\" type=\"null\"<|sep|><|close|>argument<|sep|>"
                   "<|close|>call<|sep|><|close|>tools<|sep|>");
  REQUIRE(r.reply.tool_calls.size() == 1);
  CHECK(args_equal(r.reply.tool_calls[0].arguments,
                   R"({"n": "forty-two", "o": "{broken", "t": [1, 2], "u": "plain words", "e": ""})"));
  // An explicitly closed json element is the arguments verbatim, even when it is not JSON.
  r = k3(kCallOpen + "<|open|>json type=\"object\"<|sep|>{\"q\": oops<|close|>json<|sep|><|close|>call<|sep|>");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"q\": oops");
}

TEST_CASE("k3 closes that match nothing or something further out") {
  // A close for nothing open, and one with a garbled name: ignored.
  RunResult r =
      k3("<|close|>think<|sep|><|open|>response<|sep|>a<|close|>argument<|sep|>b<|close|>not a name"
         "<|sep|>c<|close|>response<|sep|>");
  CHECK(r.reply.content == "abc");
  // Closing the call while an argument is open closes the argument too.
  r = k3(kCallOpen +
         "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>call<|sep|>"
         "<|close|>tools<|sep|><|open|>response<|sep|>done<|close|>response<|sep|>");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"city\": \"Paris\"}");
  CHECK(r.reply.content == "done");
  // Closing think from inside an unknown element inside think.
  r = k3("a<|open|>b<|sep|>b<|close|>think<|sep|><|open|>response<|sep|>c<|close|>response<|sep|>");
  CHECK(r.reply.reasoning == "ab");
  CHECK(r.reply.content == "c");
}

TEST_CASE("k3 unknown elements and headers that do not parse are transparent") {
  RunResult r =
      k3("<|close|>think<|sep|><|open|>response<|sep|>x <|open|>bold style=\"1\"<|sep|>y<|close|>bold<|sep|>"
         " z <|open|>\"weird\"<|sep|>w<|close|>response<|sep|>");
  CHECK(r.reply.content == "x y z w");
  // A think with garbage attributes is still a think.
  r = k3("<|open|>think !!!<|sep|>r<|close|>think<|sep|>", false);
  CHECK(r.reply.reasoning == "r");
}

TEST_CASE("k3 calls with bad headers, arguments without keys, mixed children") {
  RunResult r =
      k3("<|close|>think<|sep|><|open|>tools<|sep|>"
         "<|open|>call index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>x"
         "<|close|>argument<|sep|><|close|>call<|sep|>"
         "<|open|>call tool=\"f\" index=2\"<|sep|><|close|>call<|sep|>"
         "<|open|>call tool=\"\"<|sep|><|close|>call<|sep|>"
         "<|open|>call tool=\"g\"<|sep|><|open|>argument type=\"string\"<|sep|>nokey<|close|>argument<|sep|>"
         "<|open|>argument key=\"k\" type=\"string\"<|sep|>v<|close|>argument<|sep|>"
         "<|open|>json<|sep|>{\"ignored\": 1}<|close|>json<|sep|><|close|>call<|sep|>"
         "<|open|>call tool=\"h\"<|sep|><|open|>json<|sep|>[1]<|close|>json<|sep|>"
         "<|open|>argument key=\"k\" type=\"string\"<|sep|>ignored<|close|>argument<|sep|>"
         "<|open|>json<|sep|>[2]<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].name == "g");
  CHECK(r.reply.tool_calls[0].id == "call_1");
  CHECK(r.reply.tool_calls[0].arguments == "{\"k\": \"v\"}");
  CHECK(r.reply.tool_calls[1].name == "h");
  CHECK(r.reply.tool_calls[1].id == "call_2");
  CHECK(r.reply.tool_calls[1].arguments == "[1]");
  CHECK(r.reply.content.empty());
}

TEST_CASE("k3 elements out of place") {
  // A call without tools, an argument left open before the next, a call left open before the
  // next, arguments outside any call.
  RunResult r =
      k3("<|close|>think<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>lost<|close|>argument<|sep|>"
         "<|open|>call tool=\"a\"<|sep|><|open|>argument key=\"p\" type=\"string\"<|sep|>1"
         "<|open|>argument key=\"q\" type=\"number\"<|sep|>2"
         "<|open|>call tool=\"b\"<|sep|><|open|>json<|sep|>{}<|close|>call<|sep|>");
  REQUIRE(r.reply.tool_calls.size() == 2);
  CHECK(r.reply.tool_calls[0].arguments == "{\"p\": \"1\", \"q\": 2}");
  CHECK(r.reply.tool_calls[1].arguments == "{}");
  CHECK(r.reply.content.empty());

  // <|open|> inside think before it closed: response/tools close the think.
  r = k3("plan<|open|>response<|sep|>answer<|close|>response<|sep|>");
  CHECK(r.reply.reasoning == "plan");
  CHECK(r.reply.content == "answer");
  r = k3("plan<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|close|>call<|sep|>");
  CHECK(r.reply.reasoning == "plan");
  CHECK(r.reply.tool_calls.size() == 1);
  // A reply that skips think: the first <|open|>response closes the (empty) think.
  r = k3("<|open|>response<|sep|>direct<|close|>response<|sep|><|close|>message<|sep|>");
  CHECK(r.reply.reasoning.empty());
  CHECK(r.reply.content == "direct");
  // A second response (and a second think) append.
  r =
      k3("r1<|close|>think<|sep|><|open|>response<|sep|>c1<|close|>response<|sep|><|open|>think<|sep|>r2"
         "<|close|>think<|sep|><|open|>response<|sep|>c2<|close|>response<|sep|>");
  CHECK(r.reply.reasoning == "r1r2");
  CHECK(r.reply.content == "c1c2");
  // Thinking off, yet the model closes a think first: the close is ignored.
  r = k3("<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>", false);
  CHECK(r.reply.content == "ok");
}

TEST_CASE("k3 text outside any element") {
  // Directly in the message: content; whitespace between elements dropped.
  RunResult r = k3(Ids(k3_tok())
                       .m("r<|close|>think<|sep|>")
                       .t("\n\n")
                       .m("<|open|>response<|sep|>c<|close|>response<|sep|>")
                       .t("\n")
                       .t(" ")
                       .m("<|open|>tools<|sep|>")
                       .t("between calls ")
                       .m("<|open|>call tool=\"f\"<|sep|>")
                       .t("in the call")
                       .m("<|close|>call<|sep|>")
                       .t("\n")
                       .m("<|close|>tools<|sep|>")
                       .t("  ")
                       .t("PS: more")
                       .t(" ")
                       .t("words")
                       .m("<|close|>message<|sep|>")
                       .t("after the message"));
  CHECK(r.reply.reasoning == "r");
  CHECK(r.reply.content == "c  PS: more words");
  CHECK(r.reply.tool_calls.at(0).arguments == "{}");
}

TEST_CASE("k3 the end of the message ends the reply") {
  for (const char* end : {"<|close|>message<|sep|>", "<|end_of_msg|>", "<|open|>message role=\"tool\"<|sep|>"}) {
    INFO(end);
    RunResult r = k3(std::string("<|close|>think<|sep|><|open|>response<|sep|>yes") + end +
                     "no<|open|>response<|sep|>no<|open|>call tool=\"f\"<|sep|><|close|>call<|sep|>");
    CHECK(r.reply.content == "yes");
    CHECK(r.reply.tool_calls.empty());
  }
  // Cut inside a call by the end of the message: the call is closed.
  RunResult r = k3(kCallOpen + "<|open|>argument key=\"a\" type=\"string\"<|sep|>v<|end_of_msg|>");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"a\": \"v\"}");
}

TEST_CASE("k3 specials where text is expected are dropped") {
  const tok::Tokenizer& t = k3_tok();
  RunResult r = k3(Ids(t)
                       .t("a")
                       .m("[BOS][EOS][UNK][PAD]<|media_begin|><|media_pad|><|sep|>")
                       .t("b")
                       .raw({sid(t, "<|reserved_token_4104|>"), sid(t, "[EOT]"), sid(t, "<osagent_mode>")})
                       .m("<|close|>think<|sep|><|open|>response<|sep|>c<|media_content|>d<|open|>call"
                          "<|media_end|> tool=\"f\"<|sep|><|open|>argument key=\"k\" type=\"string\"<|sep|>x[EOS]y"
                          "<|close|>argument<|sep|><|close|>call<|sep|>"));
  CHECK(r.reply.reasoning == "ab");
  CHECK(r.reply.content == "cd");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"k\": \"xy\"}");
  // Ids beyond the vocabulary are dropped too.
  r = k3(Ids(t).t("a").raw({t.vocab_size(), t.vocab_size() + 100, 0xffffffffu}).t("b"));
  CHECK(r.reply.reasoning == "ab");
  // <|open|> and <|close|> abandon an unfinished header.
  r = k3("<|close|>thi<|open|>response<|sep|>x<|open|>resp<|close|>response<|sep|>y");
  CHECK(r.reply.content == "xy");
}

TEST_CASE("k3 bounds") {
  // An over-long header stops being markup: its text is text.
  const std::string long_header = "call tool=\"" + std::string(kMaxHeaderBytes, 'x') + "\"";
  RunResult r = k3("<|close|>think<|sep|><|open|>response<|sep|>a<|open|>" + long_header + "<|sep|>b");
  CHECK(r.reply.content == "a" + long_header + "b");
  CHECK(r.reply.tool_calls.empty());
  // Likewise an over-long close name.
  const std::string long_name(kMaxCloseNameBytes + 1, 'n');
  r = k3("a<|close|>" + long_name + "<|sep|>b");
  CHECK(r.reply.reasoning == "a" + long_name + "b");
  // At most kMaxToolCalls calls.
  std::string many = "<|close|>think<|sep|><|open|>tools<|sep|>";
  for (size_t i = 0; i < kMaxToolCalls + 5; ++i) many += "<|open|>call tool=\"f\"<|sep|><|close|>call<|sep|>";
  r = k3(many);
  CHECK(r.reply.tool_calls.size() == kMaxToolCalls);
  CHECK(r.reply.tool_calls.back().id == "call_" + std::to_string(kMaxToolCalls));
  // Nesting deeper than kMaxDepth: the deeper opens are dropped, text still arrives.
  std::string deep = "<|close|>think<|sep|><|open|>response<|sep|>";
  for (size_t i = 0; i < 3 * kMaxDepth; ++i) deep += "<|open|>e<|sep|>t";
  r = k3(deep);
  CHECK(r.reply.content == std::string(3 * kMaxDepth, 't'));
  // A non-string value longer than kMaxHeldValueBytes is streamed as a string.
  const std::string big(kMaxHeldValueBytes + 10, '7');
  r = k3(kCallOpen + "<|open|>argument key=\"n\" type=\"number\"<|sep|>" + big + "<|close|>argument<|sep|>");
  CHECK(r.reply.tool_calls.at(0).arguments == "{\"n\": \"" + big + "\"}");
}
