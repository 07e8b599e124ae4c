// The chat path end to end with real processes: `waste prompt` over the K3 reference cases, the
// server's own rendering of the same requests (prompt token counts over HTTP), a tool-call reply
// (forced by compute's test hook: the model's weights are random) reaching clients well-formed,
// streamed and not, reasoning apart from content, no special id in content, and refusals of what
// the server does not support.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/child_process.h"
#include "tests/integration/scoped_env.h"
#include "tests/integration/test_engine_instance.h"
#include "tests/skip.h"
#include "tests/integration/synth_model.h"

using namespace waste::test;
using json = nlohmann::ordered_json;

namespace {

struct Http {
  int status = 0;
  std::string body;
};

Http post(const std::string& url, const std::string& body, const std::string& dir) {
  const std::string file = dir + "/body.json";
  std::ofstream(file, std::ios::binary) << body;
  auto r = run_command("curl -sS -N -o " + dir + "/out.txt -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @" +
                       file + " " + url);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

std::vector<json> k3_cases() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  std::ifstream in(std::string(dir ? dir : "") + "/chat/k3/cases.jsonl");
  if (!dir || !in.good()) {
    MESSAGE("SKIP: ../shared/chat/k3/cases.jsonl not found");
    std::exit(77);
  }
  std::vector<json> cases;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) cases.push_back(json::parse(line));
  return cases;
}

json prompt_json(const std::string& args, const json& request, const std::string& dir) {
  const std::string file = dir + "/request.json";
  std::ofstream(file, std::ios::binary) << request.dump();
  auto r = run_command(waste_bin() + " prompt " + args + " --request " + file + " --json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  return json::parse(r.output);
}

// The chunks of an SSE body (without [DONE]); `done` tells whether [DONE] came last.
std::vector<json> sse_chunks(const std::string& body, bool* done) {
  std::vector<json> out;
  std::istringstream lines(body);
  std::string line;
  *done = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    REQUIRE_MESSAGE(line.rfind("data: ", 0) == 0, line);
    if (line == "data: [DONE]") {
      *done = true;
      continue;
    }
    out.push_back(json::parse(line.substr(6)));
  }
  return out;
}

// The K3 reply the test hook forces: reasoning, content, then two calls (typed arguments and a
// raw json element), then the end of the message.
const char* kToolReply =
    "Need the weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris \"FR\"<|close|>argument<|sep|>"
    "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
    "<|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"q\": \"rain\"}<|close|>json<|sep|>"
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

json weather_request() {
  return json::parse(R"({"model": "tiny", "max_tokens": 200, "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
              {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]})");
}

void check_tool_calls(const json& calls) {
  REQUIRE(calls.size() == 2);
  CHECK(calls[0]["type"] == "function");
  CHECK(calls[0]["function"]["name"] == "get_weather");
  CHECK(json::parse(calls[0]["function"]["arguments"].get<std::string>()) == json::parse(R"({"city": "Paris \"FR\"", "days": 3})"));
  CHECK(calls[1]["function"]["name"] == "search");
  CHECK(json::parse(calls[1]["function"]["arguments"].get<std::string>()) == json::parse(R"({"q": "rain"})"));
  CHECK(calls[0]["id"].is_string());
  CHECK(calls[0]["id"] != calls[1]["id"]);
}

}  // namespace

TEST_CASE("waste prompt renders every K3 reference case exactly; with a model it adds the ids") {
  TempDir tmp;
  synth_model(tmp / "k3.waste", "--preset tiny-k3");
  for (const json& c : k3_cases()) {
    CAPTURE(c["name"].get<std::string>());
    const json out = prompt_json("--format k3", c["request"], tmp.path());
    CHECK(out["segments"] == c["segments"]);
    const json with_ids = prompt_json(tmp.path() + "/k3.waste", c["request"], tmp.path());
    CHECK(with_ids["segments"] == c["segments"]);
    CHECK(with_ids["ids"].size() >= c["segments"].size());
  }
  // Unknown fields are refused, naming the field.
  std::ofstream(tmp.path() + "/bad.json") << R"({"messages": [], "colour": "red"})";
  auto bad = run_command(waste_bin() + " prompt --format k3 --request " + tmp.path() + "/bad.json --json");
  CHECK(bad.status != 0);
  CHECK_MESSAGE(bad.output.find("colour") != std::string::npos, bad.output);
}

TEST_CASE("the server renders the K3 cases with the same code: prompt tokens over HTTP equal waste prompt's ids") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  int checked = 0;
  for (const json& c : k3_cases()) {
    const json& r = c["request"];
    // Over HTTP images come as content parts whose media prompts compute makes (a request cannot
    // give image_prompts itself), and the generation prompt is always added.
    if (r.contains("image_prompts") || r.contains("add_generation_prompt")) continue;
    CAPTURE(c["name"].get<std::string>());
    json body = r;
    body["max_tokens"] = 1;
    const Http h = post(base + "/v1/chat/completions", body.dump(), tmp.path());
    REQUIRE_MESSAGE(h.status == 200, h.body);
    const json ids = prompt_json(inst.model(), r, tmp.path())["ids"];
    CHECK(json::parse(h.body)["usage"]["prompt_tokens"] == ids.size());
    ++checked;
  }
  CHECK(checked >= 20);
  // Tools change the prompt: more prompt tokens with them than without.
  json no_tools = weather_request();
  no_tools.erase("tools");
  no_tools["max_tokens"] = 1;
  json tools = weather_request();
  tools["max_tokens"] = 1;
  const auto a = json::parse(post(base + "/v1/chat/completions", no_tools.dump(), tmp.path()).body);
  const auto b = json::parse(post(base + "/v1/chat/completions", tools.dump(), tmp.path()).body);
  CHECK(b["usage"]["prompt_tokens"].get<int>() > a["usage"]["prompt_tokens"].get<int>() + 20);

  // What the server does not support is refused with 400 naming the field.
  for (const auto& [field_binding, value] : std::vector<std::pair<std::string, json>>{
           {"logit_bias", json::object({{"1", 2}})}, {"store", true}, {"n", 2}, {"modalities", json::array({"audio"})}}) {
    const std::string& field = field_binding;  // clang 14 cannot capture a structured binding in a lambda
    json req = no_tools;
    req[field] = value;
    const Http h = post(base + "/v1/chat/completions", req.dump(), tmp.path());
    CHECK_MESSAGE(h.status == 400, (field + ": " + h.body));
    CHECK(json::parse(h.body)["error"]["param"] == field);
  }
  json img = no_tools;
  img["messages"][0]["content"] = json::parse(R"([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])");
  CHECK(post(base + "/v1/chat/completions", img.dump(), tmp.path()).status == 400);
}

TEST_CASE("a K3 tool-call reply reaches the client as OpenAI tool_calls, streamed and not") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  ScopedEnv hook({{"WASTE_COMPUTE_TEST_REPLY", kToolReply}});
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;

  const Http plain = post(base + "/v1/chat/completions", weather_request().dump(), tmp.path());
  REQUIRE_MESSAGE(plain.status == 200, plain.body);
  const json pj = json::parse(plain.body);
  const json& msg = pj["choices"][0]["message"];
  CHECK(pj["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(msg["reasoning_content"] == "Need the weather.");
  CHECK(msg["content"] == "Checking.");
  check_tool_calls(msg["tool_calls"]);

  json sreq = weather_request();
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const Http streamed = post(base + "/v1/chat/completions", sreq.dump(), tmp.path());
  REQUIRE(streamed.status == 200);
  bool done = false;
  const auto chunks = sse_chunks(streamed.body, &done);
  CHECK(done);
  std::string reasoning, content, finish;
  json calls = json::array();
  bool usage_chunk = false;
  int call_chunks = 0;
  for (const json& c : chunks) {
    if (c["choices"].empty()) {
      usage_chunk = c["usage"]["completion_tokens"].get<int>() > 0;
      continue;
    }
    const json& ch = c["choices"][0];
    const json& d = ch["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) {
        ++call_chunks;
        const size_t i = t["index"];
        if (t.contains("id")) {
          CHECK(i == calls.size());  // a call's first chunk names it
          calls.push_back({{"id", t["id"]}, {"type", t["type"]}, {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
        }
        REQUIRE(i < calls.size());
        calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
      }
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
  }
  CHECK(reasoning == msg["reasoning_content"]);
  CHECK(content == msg["content"]);
  check_tool_calls(calls);
  // The same calls as the non-streamed reply (each request names its calls with its own ids).
  json a = calls, b = msg["tool_calls"];
  for (auto* l : {&a, &b})
    for (auto& c : *l) c.erase("id");
  CHECK(nlohmann::json::parse(a.dump()) == nlohmann::json::parse(b.dump()));
  CHECK(call_chunks > 2);  // arguments arrive in pieces, not at the end
  CHECK(finish == "tool_calls");
  CHECK(usage_chunk);

  // tool_choice none: calls the model writes anyway are not returned.
  json none = weather_request();
  none["tool_choice"] = "none";
  const json nj = json::parse(post(base + "/v1/chat/completions", none.dump(), tmp.path()).body);
  CHECK(nj["choices"][0]["finish_reason"] == "stop");
  CHECK_FALSE(nj["choices"][0]["message"].contains("tool_calls"));
  CHECK(nj["choices"][0]["message"]["content"] == "Checking.");
  // Refusals compute or the grammar would make come back as 400 naming the field, streamed too.
  json pat = weather_request();
  pat["stream"] = true;
  pat["response_format"] = json::parse(R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}})");
  const Http ph = post(base + "/v1/chat/completions", pat.dump(), tmp.path());
  CHECK_MESSAGE(ph.status == 400, ph.body);
  CHECK_MESSAGE(ph.body.find("pattern") != std::string::npos, ph.body);
  json minp = weather_request();
  minp["min_p"] = 1;
  CHECK(post(base + "/v1/chat/completions", minp.dump(), tmp.path()).status == 400);
  json deep = weather_request();
  std::string nested = std::string(300, '[') + std::string(300, ']');
  deep["messages"].push_back(json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}]})"));
  deep["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{\"a\": " + nested + "}";
  deep["messages"].push_back(json::parse(R"({"role": "user", "content": "again"})"));
  const Http dh = post(base + "/v1/chat/completions", deep.dump(), tmp.path());
  CHECK_MESSAGE(dh.status == 400, dh.body);
  // Compute is still serving after all of that.
  CHECK(post(base + "/v1/chat/completions", weather_request().dump(), tmp.path()).status == 200);

  // The official openai npm client parses both replies (SKIPped inside when npm cannot install it).
  const std::string script = env_or("WASTE_SOURCE_DIR", ".") + "/tests/integration/openai_client.mjs";
  auto node = run_command("node " + script + " " + base + " " + tmp.path() + " 2>&1");
  if (node.status == 77) {
    waste::test::skip_part("openai npm client not available: " + node.output);
  } else {
    CHECK_MESSAGE(node.status == 0, node.output);
    CHECK_MESSAGE(node.output.find("both replies parsed") != std::string::npos, node.output);
  }
}

TEST_CASE("special ids never reach content: reserved and structural tokens in a forced reply") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  ScopedEnv hook({{"WASTE_COMPUTE_TEST_REPLY",
                   "<|close|>think<|sep|><|open|>response<|sep|>A[UNK]B<|media_pad|>C<|close|>response<|sep|>"
                   "<|close|>message<|sep|><|end_of_msg|>"}});
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 1024", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  json req = json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100})");
  const Http h = post(base + "/v1/chat/completions", req.dump(), tmp.path());
  REQUIRE_MESSAGE(h.status == 200, h.body);
  const json j = json::parse(h.body);
  CHECK(j["choices"][0]["message"]["content"] == "ABC");
  CHECK(j["choices"][0]["finish_reason"] == "stop");
}

namespace {

// An independent check of the schema subset the tests use (not the grammar's code).
bool validates(const json& v, const json& s, const json& root) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    const std::string name = ref.substr(ref.rfind('/') + 1);
    return validates(v, root["$defs"][name], root);
  }
  if (s.contains("enum")) {
    bool any = false;
    for (const json& e : s["enum"]) any = any || e == v;
    return any;
  }
  if (s.contains("anyOf")) {
    for (const json& alt : s["anyOf"])
      if (validates(v, alt, root)) return true;
    return false;
  }
  const std::string t = s.value("type", "");
  if (t == "object") {
    if (!v.is_object()) return false;
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s["properties"].contains(it.key())) return false;
      if (!validates(it.value(), s["properties"][it.key()], root)) return false;
    }
    return true;
  }
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const json& x : v)
      if (!validates(x, s["items"], root)) return false;
    return true;
  }
  if (t == "string") return v.is_string() && (!s.contains("maxLength") || v.get<std::string>().size() <= s["maxLength"].get<size_t>() * 4);
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

}  // namespace

TEST_CASE("json_schema replies on random weights always parse and validate (200 replies, 10 schemas)") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 4096", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]})",
      R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}})",
      R"({"type": "object", "properties": {"inner": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}, "required": ["inner"]})",
      R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3}}, "required": ["tags"]})",
      R"({"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "n": {"enum": [1, 2.5, null]}}, "required": ["colour", "n"]})",
      R"({"type": "array", "items": {"type": "integer"}, "maxItems": 4})",
      R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "integer"}]}}, "required": ["v"]})",
      R"({"$defs": {"p": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}, "type": "object", "properties": {"first": {"$ref": "#/$defs/p"}, "second": {"$ref": "#/$defs/p"}}, "required": ["first", "second"]})",
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})",
      R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 12}, "list": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}, "required": ["s"]})",
  };
  // A reply the token budget cuts (finish_reason "length", as OpenAI's) cannot be whole JSON: a
  // grammar constrains each token, not how many a string takes. Random weights write long
  // strings now and then (one of 200 under qemu's NEON numerics on 2026-12-05), so cut replies
  // are counted apart, must be rare and exactly at the budget; every finished reply validates.
  int valid = 0, total = 0, cut = 0;
  for (size_t k = 0; k < schemas.size(); ++k) {
    const json schema = json::parse(schemas[k]);
    for (int i = 0; i < 20; ++i) {
      json req = {{"messages", {{{"role", "user"}, {"content", "Give me JSON."}}}},
                  {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}},
                  // Thinking off: random weights rarely close a think channel (the constraint leaves
                  // reasoning free), and the JSON is what this test is about.
                  {"thinking", false},
                  {"temperature", 1.0}, {"seed", 1000 * k + i}, {"max_tokens", 3000}};
      const Http h = post(base + "/v1/chat/completions", req.dump(), tmp.path());
      REQUIRE_MESSAGE(h.status == 200, h.body);
      const json r = json::parse(h.body);
      ++total;
      const std::string content = r["choices"][0]["message"]["content"];
      if (r["choices"][0]["finish_reason"] == "length") {
        CHECK(r["usage"]["completion_tokens"] == 3000);
        ++cut;
        continue;
      }
      const json v = json::parse(content, nullptr, false);
      const bool ok = !v.is_discarded() && validates(v, schema, schema);
      CHECK_MESSAGE(ok, "schema " << k << " seed " << i << ": " << content << " finish " << r["choices"][0]["finish_reason"]);
      valid += ok;
    }
  }
  MESSAGE(valid << " of " << total << " constrained replies parse and validate; " << cut << " cut at max_tokens");
  CHECK(valid == total - cut);
  CHECK(cut <= 2);
}
// The C API's chat structure, end to end (tools/examples/hello.c in its chat mode): the forced
// K3 tool-call reply arrives as reasoning, content and two tool calls, finish_reason tool_calls,
// and the streamed pieces add up to the final reply. Then `waste chat` and `waste run --chat`
// through the same instance: the answer and a JSON line of tool calls on stdout, the reasoning on
// stderr between [reasoning] fences (stdout is not a terminal here); --no-thinking makes the
// prompt open the response channel, so the same forced ids are all content.
TEST_CASE("libwaste, waste chat and waste run --chat show a K3 reply's reasoning, content and tool calls") {
  ScopedEnv hook({{"WASTE_COMPUTE_TEST_REPLY", kToolReply}});
  Instance inst("--ctx 2048", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const std::string err = tmp.path() + "/err.txt";
  auto stderr_text = [&] {
    std::ifstream f(err);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  // (Grouped: run_command appends 2>&1, which must not override the inner redirect.)
  auto run_out = [&](const std::string& cmd) { return run_command("{ " + cmd + " 2>" + err + "; }"); };

  const std::string hello = env_or("WASTE_HELLO", "waste-hello");
  const auto h = run_out(hello + " " + inst.run_dir() + " 'Weather in Paris?' 200 chat");
  REQUIRE_MESSAGE(h.status == 0, (h.output + stderr_text()));
  CHECK(h.output.find("\nreasoning=Need the weather.\ncontent=Checking.\n") != std::string::npos);
  CHECK(h.output.find(" get_weather {\"city\": \"Paris \\\"FR\\\"\", \"days\": 3}\n") != std::string::npos);
  CHECK(h.output.find("tool_call 1 ") != std::string::npos);
  CHECK(h.output.find(" search {\"q\": \"rain\"}\n") != std::string::npos);
  CHECK(h.output.find("streamed=same\n") != std::string::npos);
  CHECK(h.output.find("stop=stop_token finish=tool_calls") != std::string::npos);

  const std::vector<std::string> commands = {
      waste_bin() + " chat 'Weather in Paris?' -n 200 --connect " + inst.run_dir(),
      waste_bin() + " run " + inst.model() + " 'Weather in Paris?' --chat -n 200 --connect " + inst.run_dir()};
  for (const std::string& cmd : commands) {
    CAPTURE(cmd);
    const auto r = run_out(cmd);
    REQUIRE_MESSAGE(r.status == 0, (r.output + stderr_text()));
    // stdout: the answer, then the tool calls as one JSON line.
    const size_t nl = r.output.find('\n');
    REQUIRE(nl != std::string::npos);
    CHECK(r.output.substr(0, nl) == "Checking.");
    const size_t end = r.output.find('\n', nl + 1);
    const json line = json::parse(r.output.substr(nl + 1, end - nl - 1), nullptr, false);
    REQUIRE_MESSAGE(line.is_object(), r.output);
    check_tool_calls(line["tool_calls"]);
    CHECK(stderr_text().find("[reasoning]\nNeed the weather.\n[/reasoning]\n") != std::string::npos);

    const auto off = run_out(cmd + " --no-thinking");
    REQUIRE_MESSAGE(off.status == 0, (off.output + stderr_text()));
    CHECK(off.output.rfind("Need the weather.Checking.\n{\"tool_calls\":", 0) == 0);
    CHECK(stderr_text().find("[reasoning]") == std::string::npos);
  }
  // --no-thinking is a chat option.
  CHECK(run_out(waste_bin() + " run " + inst.model() + " x --no-thinking --connect " + inst.run_dir()).status == 1);
  CHECK(stderr_text().find("--no-thinking needs --chat") != std::string::npos);
}

TEST_CASE("tool_choice required / a named function constrain random weights to a well-formed call") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 4096", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const json tools = weather_request()["tools"];
  for (int i = 0; i < 10; ++i) {
    json req = weather_request();
    req["thinking"] = false;  // random weights rarely close a think channel
    req["temperature"] = 1.0;
    req["seed"] = 7 + i;
    req["max_tokens"] = 3000;
    const bool named = i % 2 == 1;
    req["tool_choice"] = named ? json::parse(R"({"type": "function", "function": {"name": "search"}})") : json("required");
    const Http h = post(base + "/v1/chat/completions", req.dump(), tmp.path());
    REQUIRE_MESSAGE(h.status == 200, h.body);
    const json r = json::parse(h.body);
    CAPTURE(h.body);
    CHECK(r["choices"][0]["finish_reason"] == "tool_calls");
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    REQUIRE(calls.size() == 1);
    const std::string name = calls[0]["function"]["name"];
    if (named) CHECK(name == "search");
    else CHECK((name == "search" || name == "get_weather"));
    const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>(), nullptr, false);
    REQUIRE(args.is_object());
    if (name == "get_weather") {
      CHECK(args.contains("city"));
      CHECK(args["city"].is_string());
      if (args.contains("days")) CHECK(args["days"].is_number_integer());
    } else {
      if (args.contains("q")) CHECK(args["q"].is_string());
    }
  }
}
