// Streaming: deltas go out while the model writes (not at the end), arguments grow piece by
// piece, UTF-8 characters split across tokens never split across deltas, and random id
// sequences keep every invariant (run() checks them on each).
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "shared/tokenizer/utf8.h"
#include "tests/unit/reply/reply_test_util.h"

using namespace waste;
using namespace waste::reply;
using namespace waste::reply::test;

namespace {

std::string long_text(size_t words) {
  static const char* kWords[] = {"the", "model", "streams", "tokens", "while", "it", "thinks", "about", "Paris", "42"};
  std::string s;
  for (size_t i = 0; i < words; ++i) s += std::string(i ? " " : "") + kWords[i % 10];
  return s;
}

// Pushes ids and returns the reply as it stands (no finish()).
const Reply& push_all(ReplyParser& p, const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) p.push(id);
  return p.reply();
}

}  // namespace

TEST_CASE("streaming: long texts go out token by token") {
  const tok::Tokenizer& t = k3_tok();
  const std::string text = long_text(400);
  const size_t text_tokens = t.encode(text).size();
  Ids ids(t);
  ids.t(text).m("<|close|>think<|sep|><|open|>response<|sep|>").t(text).m("<|close|>response<|sep|>");
  RunResult r = run(ids, k3_options(), t);
  CHECK(r.reply.reasoning == text);
  CHECK(r.reply.content == text);
  // Every text token produced a delta before finish(); finish() had nothing left.
  CHECK(r.nonempty_before_finish >= 2 * text_tokens);
  CHECK(r.deltas.back().empty());
  // The first token of the reply is out at once.
  CHECK(r.deltas.front().reasoning == t.token_bytes(t.encode(text).front()));

  // Kimi likewise, in reasoning and content.
  const tok::Tokenizer& k2 = k2_tok();
  r = run(Ids(k2).m("<think>").t(text).m("</think>").t(text).m("<|im_end|>"), kimi_options(), k2);
  CHECK(r.reply.reasoning == text);
  CHECK(r.reply.content == text);
  CHECK(r.nonempty_before_finish >= 2 * k2.encode(text).size());
}

TEST_CASE("streaming: K3 arguments grow while the model writes them") {
  const tok::Tokenizer& t = k3_tok();
  ReplyParser p(t, k3_options());
  push_all(p, t.encode_markup(
                  "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"));
  REQUIRE(p.reply().tool_calls.size() == 1);
  CHECK(p.reply().tool_calls[0].arguments.empty());
  push_all(p, t.encode_markup("<|open|>argument key=\"city\" type=\"string\"<|sep|>"));
  CHECK(p.reply().tool_calls[0].arguments == "{\"city\": \"");
  // The value, one token at a time, escaped as it comes.
  const std::string value = "Saint-\"Denis\" " + long_text(30);
  std::string expected = "{\"city\": \"";
  for (uint32_t id : t.encode(value)) {
    ReplyDelta d = p.push(id);
    REQUIRE(d.tool_calls.size() == 1);
    CHECK(d.tool_calls[0].index == 0);
    CHECK(d.tool_calls[0].id.empty());
    expected += d.tool_calls[0].arguments;
  }
  CHECK(p.reply().tool_calls[0].arguments == expected);
  push_all(p, t.encode_markup("<|close|>argument<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>"));
  const std::string before_number = p.reply().tool_calls[0].arguments;
  CHECK(before_number.ends_with("\", \"n\": "));
  // A number is held until its element closes (it must be checked whole).
  for (uint32_t id : t.encode("12345")) CHECK(p.push(id).empty());
  CHECK(p.reply().tool_calls[0].arguments == before_number);
  ReplyDelta d = p.push(t.special_id("<|close|>").value());
  CHECK(d.empty());
  for (uint32_t id : t.encode_markup("argument<|sep|>")) d = p.push(id);
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].arguments == "12345");
  push_all(p, t.encode_markup("<|close|>call<|sep|><|close|>tools<|sep|>"));
  p.finish();
  const auto args = nlohmann::json::parse(p.reply().tool_calls[0].arguments);
  CHECK(args["city"] == value);
  CHECK(args["n"] == 12345);
}

TEST_CASE("streaming: the first delta of a call carries its id and name") {
  const tok::Tokenizer& t = k3_tok();
  ReplyParser p(t, k3_options());
  push_all(p, t.encode_markup("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\""));
  ReplyDelta d = p.push(t.special_id("<|sep|>").value());
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].id == "call_1");
  CHECK(d.tool_calls[0].name == "f");
  CHECK(d.tool_calls[0].arguments.empty());

  // Kimi: the name comes when <|tool_call_argument_begin|> ends it, then the JSON streams.
  const tok::Tokenizer& k = k2_tok();
  ReplyParser q(k, kimi_options());
  push_all(q, k.encode_markup("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"));
  CHECK_FALSE(q.in_tool_calls());
  d = q.push(k.special_id("<|tool_call_argument_begin|>").value());
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].id == "functions.f:0");
  CHECK(d.tool_calls[0].name == "f");
  std::string args;
  for (uint32_t id : k.encode("{\"a\": \"" + long_text(20) + "\"}")) {
    d = q.push(id);
    REQUIRE(d.tool_calls.size() == 1);
    CHECK(d.tool_calls[0].id.empty());
    args += d.tool_calls[0].arguments;
  }
  CHECK(nlohmann::json::accept(args));
}

TEST_CASE("streaming: UTF-8 characters split across tokens stay whole") {
  const tok::Tokenizer& t = k3_tok();
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xbd\xa0\xe5\xa5\xbd";
  // Single-byte tokens (rank b is byte b): every multi-byte character is split.
  std::vector<uint32_t> bytes;
  for (char c : text) bytes.push_back(static_cast<uint8_t>(c));
  std::vector<uint32_t> all = bytes;
  for (uint32_t id : t.encode_markup("<|close|>think<|sep|><|open|>response<|sep|>")) all.push_back(id);
  all.insert(all.end(), bytes.begin(), bytes.end());
  for (uint32_t id : t.encode_markup("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>"
                                     "<|open|>argument key=\"s\" type=\"string\"<|sep|>"))
    all.push_back(id);
  all.insert(all.end(), bytes.begin(), bytes.end());
  RunResult r = run(t, k3_options(), all);  // run() checks every delta is valid UTF-8
  CHECK(r.reply.reasoning == text);
  CHECK(r.reply.content == text);
  CHECK(nlohmann::json::parse(r.reply.tool_calls.at(0).arguments)["s"] == text);
  // The 4-byte character comes out whole with its last byte.
  ReplyParser p(t, k3_options());
  const std::string smile = "\xf0\x9f\x98\x80";
  for (size_t i = 0; i < 3; ++i) CHECK(p.push(static_cast<uint8_t>(smile[i])).empty());
  CHECK(p.push(static_cast<uint8_t>(smile[3])).reasoning == smile);

  // Bytes that never form a character become U+FFFD; so does a character cut by a special.
  ReplyParser q(t, k3_options());
  for (uint8_t b : {uint8_t('a'), uint8_t(0xff), uint8_t(0xe2), uint8_t(0x82)}) q.push(b);
  q.push(t.special_id("[EOS]").value());
  q.push('b');
  q.push(0xe2);
  q.finish();
  CHECK(q.reply().reasoning ==
        "a\xef\xbf\xbd\xef\xbf\xbd"
        "b\xef\xbf\xbd");
  CHECK(tok::utf8_invalid_offset(q.reply().reasoning) == std::string::npos);
}

TEST_CASE("streaming: random id sequences keep every invariant") {
  // Structure-heavy random replies: markup specials, header-like text, JSON-like text, random
  // bytes. run() checks the delta/reply invariant, UTF-8, first-delta ids, no special names in
  // text, no exceptions and independence from the text's split into tokens.
  std::mt19937 rng(20240611);
  // Markup pieces (trusted markup: special names become ids), the ends of a reply (rare, or
  // few replies would get far), and text pieces.
  const std::vector<std::string> k3_markup = {"<|open|>think<|sep|>",
                                              "<|close|>think<|sep|>",
                                              "<|open|>response<|sep|>",
                                              "<|close|>response<|sep|>",
                                              "<|open|>tools<|sep|>",
                                              "<|close|>tools<|sep|>",
                                              "<|open|>call tool=\"f\"<|sep|>",
                                              "<|open|>call tool=\"g\" index=\"2\"<|sep|>",
                                              "<|close|>call<|sep|>",
                                              "<|open|>argument key=\"k\" type=\"string\"<|sep|>",
                                              "<|open|>argument key=\"n\" type=\"number\"<|sep|>",
                                              "<|open|>argument key=\"o\" type=\"object\"<|sep|>",
                                              "<|open|>argument key=\"u\"<|sep|>",
                                              "<|close|>argument<|sep|>",
                                              "<|open|>json<|sep|>",
                                              "<|close|>json<|sep|>",
                                              "<|open|>bogus<|sep|>",
                                              "<|close|>bogus<|sep|>",
                                              "<|open|>",
                                              "<|close|>",
                                              "<|sep|>",
                                              "<|media_pad|>",
                                              "[EOS]",
                                              "[BOS]"};
  const std::vector<std::string> k3_ends = {"<|end_of_msg|>", "<|close|>message<|sep|>", "<|open|>message<|sep|>"};
  const std::vector<std::string> kimi_markup = {"<|tool_calls_section_begin|>",
                                                "<|tool_calls_section_end|>",
                                                "<|tool_call_begin|>",
                                                "<|tool_call_argument_begin|>",
                                                "<|tool_call_end|>",
                                                "<think>",
                                                "</think>",
                                                "[EOS]",
                                                "[BOS]",
                                                "<|media_begin|>"};
  const std::vector<std::string> kimi_ends = {"<|im_end|>", "<|im_user|>"};
  const std::vector<std::string> k3_text = {"think",
                                            "response",
                                            "tools",
                                            "call tool=\"f\"",
                                            "argument key=\"k\"",
                                            "json",
                                            "message",
                                            "x",
                                            " ",
                                            "\n",
                                            "{\"a\": [1",
                                            "\"",
                                            "\\",
                                            "}",
                                            "42",
                                            "tru",
                                            "&quot;",
                                            "caf\xc3\xa9"};
  const std::vector<std::string> kimi_text = {
      "functions.f:0", "functions.g:1", "g", ":", "{\"a\": ", "\"b", "\\", "}", "]", "[", " ", "hello", "1.",
      "nul",           "\xe2\x82\xac"};
  struct Family {
    const tok::Tokenizer* t;
    ParserOptions o;
    const std::vector<std::string>* markup;
    const std::vector<std::string>* ends;
    const std::vector<std::string>* text;
  };
  const std::vector<Family> families = {{&k3_tok(), k3_options(true), &k3_markup, &k3_ends, &k3_text},
                                        {&k3_tok(), k3_options(false), &k3_markup, &k3_ends, &k3_text},
                                        {&k2_tok(), kimi_options(), &kimi_markup, &kimi_ends, &kimi_text},
                                        {&linear_tok(), kimi_options(), &kimi_markup, &kimi_ends, &kimi_text}};
  for (const Family& f : families) {
    // The random replies do reach every channel.
    size_t calls = 0, with_reasoning = 0, with_content = 0, with_args = 0;
    for (int n = 0; n < 150; ++n) {
      std::vector<uint32_t> ids;
      const size_t len = rng() % 120;
      for (size_t i = 0; i < len; ++i) {
        auto append = [&](const std::vector<uint32_t>& v) { ids.insert(ids.end(), v.begin(), v.end()); };
        const unsigned pick = rng() % 100;
        if (pick < 40) {
          append(f.t->encode_markup((*f.markup)[rng() % f.markup->size()]));
        } else if (pick < 41) {
          append(f.t->encode_markup((*f.ends)[rng() % f.ends->size()]));
        } else if (pick < 90) {
          f.t->encode_append((*f.text)[rng() % f.text->size()], ids);
        } else {
          ids.push_back(rng() % 256);  // any byte, valid UTF-8 or not
        }
      }
      RunResult r = run(*f.t, f.o, ids);
      std::set<std::string> call_ids;
      for (const ToolCall& c : r.reply.tool_calls) {
        CHECK_FALSE(c.name.empty());
        CHECK(call_ids.insert(c.id).second);  // ids unique in the reply
        if (c.arguments.size() > 2) ++with_args;
      }
      calls += r.reply.tool_calls.size();
      with_reasoning += !r.reply.reasoning.empty();
      with_content += !r.reply.content.empty();
    }
    INFO("random replies: ", calls, " calls, ", with_args, " with arguments, ", with_reasoning, " with reasoning, ",
         with_content, " with content");
    CHECK(calls > 20);
    CHECK(with_args > 5);
    CHECK(with_content > 20);
    if (f.t->special_id("<think>") || (f.o.format == tok::ChatFormat::K3 && f.o.thinking)) CHECK(with_reasoning > 20);
  }
}

TEST_CASE("streaming: K3 typed arguments are always a JSON object, however malformed the reply") {
  // Without json elements (whose text is the model's, verbatim), every call's arguments are
  // built by the parser: keys quoted, strings escaped, other values checked or quoted, objects
  // closed even when cut.
  std::mt19937 rng(99);
  const tok::Tokenizer& t = k3_tok();
  const std::vector<std::string> markup = {"<|open|>tools<|sep|>",
                                           "<|close|>tools<|sep|>",
                                           "<|open|>call tool=\"f\"<|sep|>",
                                           "<|close|>call<|sep|>",
                                           "<|open|>argument key=\"k\" type=\"string\"<|sep|>",
                                           "<|open|>argument key=\"n\" type=\"number\"<|sep|>",
                                           "<|open|>argument key=\"o\" type=\"object\"<|sep|>",
                                           "<|open|>argument key=\"a&quot;\"<|sep|>",
                                           "<|close|>argument<|sep|>",
                                           "<|open|>x<|sep|>",
                                           "<|close|>x<|sep|>",
                                           "<|open|>",
                                           "<|close|>",
                                           "<|sep|>",
                                           "<|open|>response<|sep|>"};
  const std::vector<std::string> text = {"{",  "}", "[",   "]",    "\"", "\\", ":", ",",    "1",
                                         "2.", "e", "tru", "null", " ",  "\n", "a", "\x01", "caf\xc3\xa9"};
  size_t checked = 0;
  for (int n = 0; n < 300; ++n) {
    std::vector<uint32_t> ids = t.encode_markup("<|close|>think<|sep|>");
    const size_t len = rng() % 80;
    for (size_t i = 0; i < len; ++i) {
      if (rng() % 2) {
        auto v = t.encode_markup(markup[rng() % markup.size()]);
        ids.insert(ids.end(), v.begin(), v.end());
      } else if (rng() % 8) {
        t.encode_append(text[rng() % text.size()], ids);
      } else {
        ids.push_back(rng() % 256);
      }
    }
    RunResult r = run(t, k3_options(), ids);
    for (const ToolCall& c : r.reply.tool_calls) {
      INFO(c.arguments);
      REQUIRE(nlohmann::json::accept(c.arguments));
      CHECK(nlohmann::json::parse(c.arguments).is_object());
      ++checked;
    }
  }
  CHECK(checked > 100);
}
