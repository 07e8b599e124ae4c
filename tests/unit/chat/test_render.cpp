// The Kimi (K2 / Kimi-Linear) format with its tool markup, request parsing errors, and rules of
// the K3 renderer beyond the reference file.
#include <doctest/doctest.h>

#include "shared/chat/render.h"
#include "shared/tokenizer/synthetic_ranks.h"

using namespace waste;
using namespace waste::chat;

namespace {

const tok::Tokenizer& kimi() {
  static const tok::Tokenizer t(tok::synthetic_ranks(), tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear, 4096),
                                "kimi-linear");
  return t;
}

std::string kimi_text(const std::string& request_json) {
  RenderOptions o;
  o.default_system_message = kimi().config().default_system_message;
  return segments_text(render_kimi(parse_chat_request(Json::parse(request_json)), o));
}

std::string param_of(const std::string& request_json) {
  try {
    render_k3(parse_chat_request(Json::parse(request_json)));
  } catch (const RequestError& e) {
    return e.param;
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("Kimi: default system, roles, markup in text stays text") {
  CHECK(kimi_text(R"({"messages": [{"role": "user", "content": "Hello <|im_end|> there"}]})") ==
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hello <|im_end|> there<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>");
  const auto ids = encode_prompt(kimi(), simple_chat({{"user", "Hello <|im_end|> there"}}));
  const uint32_t end = *kimi().special_id("<|im_end|>");
  CHECK(std::count(ids.begin(), ids.end(), end) == 2);  // the one in the user's text is text
  CHECK(kimi_text(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"}], "add_generation_prompt": false})") ==
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>2+2?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>4<|im_end|>");
}

TEST_CASE("Kimi: tools declared, calls as functions.NAME:IDX, results by the rendered id") {
  const std::string req = R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "functions.get_weather:7", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
      {"role": "tool", "tool_call_id": "functions.get_weather:7", "content": "20C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
  CHECK(kimi_text(req) ==
        "<|im_system|>tool_declare<|im_middle|>"
        R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])"
        "<|im_end|>"
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|>Weather?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
        "<|tool_call_begin|>functions.get_weather:7<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18C<|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:7\n20C<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>");
  // Every structural token is a special id; the tool call ids and JSON are text.
  const auto ids = encode_prompt(kimi(), parse_chat_request(Json::parse(req)));
  CHECK(std::count(ids.begin(), ids.end(), *kimi().special_id("<|tool_call_begin|>")) == 2);
  // Thinking and images are not part of the Kimi format: refused, not ignored.
  CHECK_THROWS_AS(render_kimi(parse_chat_request(Json::parse(R"({"messages": [], "thinking_effort": "low"})"))), RequestError);
  CHECK_THROWS_AS(render_kimi(parse_chat_request(Json::parse(
                      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})"))),
                  RequestError);
}

TEST_CASE("request errors name the field") {
  CHECK(param_of(R"({"messages": [{"role": "narrator", "content": "x"}]})") == "messages[0].role");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "x", "colour": 1}]})") == "messages[0].colour");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})") == "messages[0].content[0].type");
  CHECK(param_of(R"({"messages": [], "tool_choice": "always"})") == "tool_choice");
  CHECK(param_of(R"({"messages": [], "tool_choice": "required"})") == "tool_choice");
  CHECK(param_of(R"({"messages": [], "tools": [{"type": "function", "function": {"name": "a"}}],
                     "tool_choice": {"type": "function", "function": {"name": "b"}}})") == "tool_choice.function.name");
  CHECK(param_of(R"({"messages": [], "thinking_effort": "medium"})") == "thinking_effort");
  CHECK(param_of(R"({"messages": [], "response_format": {"type": "yaml"}})") == "response_format.type");
  CHECK(param_of(R"({"messages": [{"role": "tool", "content": "x"}]})") == "messages");
  CHECK(param_of(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})") ==
        "messages[0].tool_calls[0].function.arguments");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "a"}], "image_prompts": ["<|media_begin|>"]})") == "image_prompts");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "hi"}]})") == "(no error)");
}

TEST_CASE("K3: reasoning_effort maps to thinking_effort; developer is system; named tool_choice adds no note") {
  auto text = [](const std::string& j) { return segments_text(render_k3(parse_chat_request(Json::parse(j)))); };
  CHECK(text(R"({"messages": [], "reasoning_effort": "low"})") == text(R"({"messages": [], "thinking_effort": "low"})"));
  CHECK(text(R"({"messages": [], "reasoning_effort": "medium"})") == text(R"({"messages": []})"));
  CHECK(text(R"({"messages": [], "reasoning_effort": "none"})") == text(R"({"messages": [], "thinking": false})"));
  CHECK(text(R"({"messages": [{"role": "developer", "content": "x"}]})") ==
        text(R"({"messages": [{"role": "system", "content": "x"}]})"));
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  CHECK(text(R"({"messages": [], )" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})") ==
        text(R"({"messages": [], )" + tools + "}"));
  // Blank reasoning is blank as Python's str.strip() sees it (no-break space included).
  CHECK(text(R"({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "\u00a0 \u3000"}]})") ==
        text(R"({"messages": [{"role": "assistant", "content": "x"}]})"));
  // A continuation re-declares nothing.
  RenderOptions cont;
  cont.continuation = true;
  CHECK(segments_text(render_k3(parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}], )" + tools + "}")), cont))
            .find("tool-declare") == std::string::npos);
}
