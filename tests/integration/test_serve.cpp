// waste-serve with real processes, spoken to with curl: SSE streaming equals the non-streamed
// reply, OpenAI-style 4xx errors for bad input, the API key, /v1/models, /health, /metrics.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/child_process.h"
#include "tests/integration/test_engine_instance.h"
#include "tests/skip.h"
#include "tests/integration/synth_model.h"

using namespace waste::test;
using nlohmann::json;

namespace {

struct Http {
  int status = 0;
  std::string body;
};

// POSTs `body` (written to a file so nothing is shell-quoted) and returns status + body.
Http post(const std::string& url, const std::string& body, const std::string& dir, const std::string& extra = "") {
  const std::string file = dir + "/body.json";
  std::ofstream(file, std::ios::binary) << body;
  auto r = run_command("curl -sS -N -o " + dir + "/out.txt -w '%{http_code}' -H 'Content-Type: application/json' " + extra +
                       " --data-binary @" + file + " " + url);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

Http get(const std::string& url, const std::string& dir, const std::string& extra = "") {
  auto r = run_command("curl -sS -o " + dir + "/out.txt -w '%{http_code}' " + extra + " " + url);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

void check_error(const Http& h, int status, const std::string& code_or_param = "") {
  CHECK_MESSAGE(h.status == status, h.body);
  json j = json::parse(h.body, nullptr, false);
  REQUIRE_MESSAGE(!j.is_discarded(), h.body);
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  if (!code_or_param.empty())
    CHECK_MESSAGE((j["error"]["code"] == code_or_param || j["error"]["param"] == code_or_param), h.body);
}

}  // namespace

TEST_CASE("serve: streaming chat parsed from curl equals the plain reply; bad input gets 4xx") {
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Instance inst("--http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const std::string base = "http://" + addr;

  const json req = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 12}};
  const Http plain = post(base + "/v1/chat/completions", req.dump(), tmp.path());
  REQUIRE_MESSAGE(plain.status == 200, plain.body);
  const json pj = json::parse(plain.body);
  CHECK(pj["object"] == "chat.completion");
  CHECK(pj["usage"]["completion_tokens"] == 12);
  CHECK(pj["choices"][0]["finish_reason"] == "length");
  const std::string content = pj["choices"][0]["message"]["content"];

  json sreq = req;
  sreq["stream"] = true;
  const Http streamed = post(base + "/v1/chat/completions", sreq.dump(), tmp.path());
  REQUIRE(streamed.status == 200);
  std::istringstream lines(streamed.body);
  std::string line, text, finish;
  int chunks = 0, data_lines = 0;
  bool done = false;
  json usage;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    REQUIRE_MESSAGE(line.rfind("data: ", 0) == 0, line);
    ++data_lines;
    const std::string payload = line.substr(6);
    if (payload == "[DONE]") {
      done = true;
      continue;
    }
    CHECK_FALSE(done);  // nothing after [DONE]
    json c = json::parse(payload, nullptr, false);
    REQUIRE_MESSAGE(!c.is_discarded(), payload);
    CHECK(c["object"] == "chat.completion.chunk");
    const auto& ch = c["choices"][0];
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>(), ++chunks;
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    if (c.contains("usage")) usage = c["usage"];
  }
  CHECK(done);
  CHECK(chunks >= 2);
  CHECK(text == content);
  CHECK(finish == "length");
  CHECK(usage["completion_tokens"] == 12);

  // /v1/completions, models, health, metrics.
  const Http comp = post(base + "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 5}}.dump(), tmp.path());
  REQUIRE_MESSAGE(comp.status == 200, comp.body);
  CHECK(json::parse(comp.body)["usage"]["completion_tokens"] == 5);
  const Http models = get(base + "/v1/models", tmp.path());
  CHECK(models.status == 200);
  CHECK(json::parse(models.body)["data"][0]["id"] == "tiny.waste");
  CHECK(get(base + "/health", tmp.path()).status == 200);
  const Http metrics = get(base + "/metrics", tmp.path());
  CHECK(metrics.status == 200);
  for (const char* m : {"waste_tokens_generated_total", "waste_tokens_per_second", "waste_expert_hits_total",
                        "waste_expert_misses_total", "waste_expert_read_gigabytes_total", "waste_sessions"})
    CHECK_MESSAGE(metrics.body.find(m) != std::string::npos, m);

  // Bad input: every one a 4xx with an OpenAI error object, and the server still answers after.
  check_error(post(base + "/v1/chat/completions", "{not json", tmp.path()), 400, "invalid_json");
  check_error(post(base + "/v1/chat/completions", "[1,2]", tmp.path()), 400);
  check_error(post(base + "/v1/chat/completions", json{{"max_tokens", 4}}.dump(), tmp.path()), 400, "messages");
  json wrong = req;
  wrong["max_tokens"] = "12";
  check_error(post(base + "/v1/chat/completions", wrong.dump(), tmp.path()), 400, "max_tokens");
  wrong = req;
  wrong["temperature"] = "hot";
  check_error(post(base + "/v1/chat/completions", wrong.dump(), tmp.path()), 400, "temperature");
  wrong = req;
  wrong["messages"] = {{{"role", "user"}, {"content", 42}}};
  check_error(post(base + "/v1/chat/completions", wrong.dump(), tmp.path()), 400);
  wrong = req;
  wrong["stream"] = "yes";
  check_error(post(base + "/v1/chat/completions", wrong.dump(), tmp.path()), 400, "stream");
  check_error(post(base + "/v1/completions", json{{"prompt", 7}}.dump(), tmp.path()), 400, "prompt");
  // Over-long prompt (the context is 256 tokens), plain and streamed.
  std::string lots;
  for (int i = 0; i < 600; ++i) lots += "word ";
  json long_req = {{"messages", {{{"role", "user"}, {"content", lots}}}}, {"max_tokens", 4}};
  check_error(post(base + "/v1/chat/completions", long_req.dump(), tmp.path()), 400, "context_length_exceeded");
  long_req["stream"] = true;
  check_error(post(base + "/v1/chat/completions", long_req.dump(), tmp.path()), 400, "context_length_exceeded");
  // A body over the 1 MiB default of a model without a vision tower (one with a tower takes
  // room for its images: test_vision_api.cpp), plain and chat.
  const std::string huge = "{\"prompt\":\"" + std::string(1200000, 'a') + "\"}";
  const Http h = post(base + "/v1/completions", huge, tmp.path());
  check_error(h, 413, "payload_too_large");
  CHECK_MESSAGE(h.body.find("more than 1048576 bytes") != std::string::npos, h.body);
  json long_chat = {{"messages", {{{"role", "user"}, {"content", std::string(1100000, 'a')}}}}};
  check_error(post(base + "/v1/chat/completions", long_chat.dump(), tmp.path()), 413, "payload_too_large");
  check_error(get(base + "/v1/nothing", tmp.path()), 404);
  CHECK(post(base + "/v1/chat/completions", req.dump(), tmp.path()).status == 200);
}

TEST_CASE("serve: an API key is required on every endpoint but /health (a liveness probe)") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  // waste-serve started by hand (the supervisor would pass WASTE_API_KEY through the same way).
  // --max-body given: it wins over the model's default (1 MiB here).
  ChildProcess serve({env_or("WASTE_SERVE", "waste-serve"), "--connect", inst.run_dir(), "--listen", "127.0.0.1:0",
                      "--api-key", "s3cret", "--max-body", "8388608"},
                     {{"WASTE_API_KEY", ""}});
  REQUIRE(serve.started());
  const std::regex listening("listening on (http://127\\.0\\.0\\.1:\\d+)");
  std::smatch m;
  REQUIRE_MESSAGE(serve.wait_for([&] { return std::regex_search(serve.out(), m, listening) ||
                                              std::regex_search(serve.err(), m, listening); }, 60),
                  (serve.out() + serve.err()));
  const std::string base = m[1];
  const json req = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}};
  const std::string right = "-H 'Authorization: Bearer s3cret'", wrong = "-H 'Authorization: Bearer nope'";

  for (const std::string& auth : {std::string(), wrong, std::string("-H 'Authorization: s3cret'")}) {
    CAPTURE(auth);
    check_error(post(base + "/v1/chat/completions", req.dump(), tmp.path(), auth), 401, "invalid_api_key");
    check_error(post(base + "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump(), tmp.path(), auth), 401,
                "invalid_api_key");
    check_error(get(base + "/v1/models", tmp.path(), auth), 401, "invalid_api_key");
    check_error(get(base + "/metrics", tmp.path(), auth), 401, "invalid_api_key");
  }
  const Http ok = post(base + "/v1/chat/completions", req.dump(), tmp.path(), right);
  REQUIRE_MESSAGE(ok.status == 200, ok.body);
  CHECK(json::parse(ok.body)["usage"]["completion_tokens"] == 3);
  CHECK(get(base + "/v1/models", tmp.path(), right).status == 200);
  CHECK(get(base + "/metrics", tmp.path(), right).status == 200);
  // Under the larger body bound: a prompt's text over its 1 MiB bound is the prompt's 400; a body
  // of more than 1 Mi JSON values is refused while it parses (413), one nested too deep is a 400;
  // past the bound, 413.
  check_error(post(base + "/v1/completions", "{\"prompt\":\"" + std::string(1200000, 'a') + "\"}", tmp.path(), right), 400,
              "prompt");
  std::string many = "{\"prompt\":[";
  for (int i = 0; i < (1 << 20); ++i) many += "0,";
  many += "0]}";
  const Http m_r = post(base + "/v1/completions", many, tmp.path(), right);
  check_error(m_r, 413, "payload_too_large");
  CHECK_MESSAGE(m_r.body.find("more than 1048576 JSON values") != std::string::npos, m_r.body);
  const std::string deep = "{\"prompt\":" + std::string(129, '[') + "\"Hi\"" + std::string(129, ']') + "}";
  const Http d_r = post(base + "/v1/completions", deep, tmp.path(), right);
  check_error(d_r, 400, "invalid_json");
  CHECK_MESSAGE(d_r.body.find("deeper than 128 levels") != std::string::npos, d_r.body);
  const std::string ok_deep = "{\"prompt\":\"Hi\",\"max_tokens\":2,\"user\":" + std::string(127, '[') + std::string(127, ']') + "}";
  check_error(post(base + "/v1/completions", ok_deep, tmp.path(), right), 400, "user");  // parsed: the field's own error
  check_error(post(base + "/v1/completions", "{\"prompt\":\"" + std::string(9u << 20, 'a') + "\"}", tmp.path(), right), 413,
              "payload_too_large");
  // /health answers without the key (documented: for liveness probes; it tells only "ok", the
  // model name and the session count).
  const Http health = get(base + "/health", tmp.path());
  CHECK(health.status == 200);
  CHECK(json::parse(health.body)["status"] == "ok");

  serve.signal(SIGTERM);
  CHECK(serve.wait_exit(30) == 0);
}

TEST_CASE("serve: a storm of SIGTERM and SIGINT, up to and through its exit, ends it with status 0") {
  // The signals stop the listener on a thread of their own; from the moment the server begins
  // to go they are ignored. Signals that came during the exit once called into the destroyed
  // server, which only the sanitizer build reports (CI's did, on a lone late signal); this
  // sends them until the process is gone. The rules themselves are unit-tested
  // (tests/unit/serve/test_stop_on_signal.cpp).
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  ChildProcess serve({env_or("WASTE_SERVE", "waste-serve"), "--connect", inst.run_dir(), "--listen", "127.0.0.1:0"});
  REQUIRE(serve.started());
  REQUIRE_MESSAGE(serve.wait_for([&] { return (serve.out() + serve.err()).find("listening on") != std::string::npos; }, 60),
                  (serve.out() + serve.err()));
  const pid_t pid = serve.pid();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int sent = 0;
  for (bool exited = false; !exited && std::chrono::steady_clock::now() < deadline; ++sent) {
    ::kill(pid, sent % 2 ? SIGINT : SIGTERM);
    serve.wait_for([] { return false; }, 0.001);  // reads its output (a full pipe would block it)
    // Exited yet? WNOWAIT leaves the zombie for wait_exit to reap; si_pid stays 0 while it runs.
    siginfo_t info{};
    exited = ::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
  }
  CAPTURE(sent);
  CHECK(serve.wait_exit(30) == 0);
  const std::string said = serve.out() + serve.err();
  CHECK_MESSAGE(said.find("serve: stopped") != std::string::npos, said);
}

TEST_CASE("serve: U+0000 in message content is text, not the end of the prompt") {
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Instance inst("--http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const std::string url = "http://" + addr + "/v1/chat/completions";
  auto prompt_tokens = [&](const std::string& content) {
    const json req = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 1}};
    const Http h = post(url, req.dump(), tmp.path());  // dump() writes the NUL as \u0000
    REQUIRE_MESSAGE(h.status == 200, h.body);
    return json::parse(h.body)["usage"]["prompt_tokens"].get<int64_t>();
  };
  const int64_t before = prompt_tokens("Hello");
  const int64_t with_tail = prompt_tokens(std::string("Hello\0 and the rest of the message", 34));
  CHECK(with_tail > before + 3);  // the text after the NUL reached the prompt
  CHECK(prompt_tokens(std::string("\0Hello", 6)) > before);  // a leading NUL is text too, not "empty prompt"
}

TEST_CASE("serve: a second server cannot take a port one already serves") {
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Instance inst("--http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const char* serve = std::getenv("WASTE_SERVE");
  REQUIRE(serve != nullptr);
  // Against the same compute: the only difference is the port being taken. `timeout` is the
  // deadline a server that did bind would hit (it would serve until killed).
  auto r = run_command("timeout 30 " + std::string(serve) + " --connect " + inst.run_dir() + " --listen " + addr);
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find("cannot bind " + addr) != std::string::npos, r.output);
  TempDir tmp;
  CHECK(get("http://" + addr + "/health", tmp.path()).status == 200);  // the first still serves
}

TEST_CASE("serve: waste up --http :PORT serves on loopback and comes up") {
  const int port = free_port();
  Instance inst("--http :" + std::to_string(port) + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  CHECK(get("http://127.0.0.1:" + std::to_string(port) + "/health", tmp.path()).status == 200);
}

TEST_CASE("supervisor killed with -9: its children go with it, and a new up starts its own") {
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Instance inst("--http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  std::ifstream f(inst.run_dir() + "/supervise.json");
  const json st = json::parse(f);
  const int supervisor = st["supervisor_pid"].get<int>();
  const int iod = inst.pid_of("iod"), compute = inst.pid_of("compute"), serve = inst.pid_of("serve");
  REQUIRE(iod > 0);
  REQUIRE(compute > 0);
  REQUIRE(serve > 0);
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  auto alive = [](int pid) { return ::kill(pid, 0) == 0; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((alive(iod) || alive(compute) || alive(serve)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling, bounded by the deadline
  CHECK_FALSE(alive(iod));
  CHECK_FALSE(alive(compute));
  CHECK_FALSE(alive(serve));
  // A new up in that directory starts (and answers with) processes of its own.
  auto up = run_command(Instance::supervise() + " up " + inst.model() + " --run-dir " + inst.run_dir() +
                        " --budget 512M --http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(up.status == 0, up.output);
  CHECK(inst.pid_of("iod") > 0);
  CHECK(inst.pid_of("iod") != iod);
  TempDir tmp;
  CHECK(get("http://" + addr + "/health", tmp.path()).status == 200);
}

TEST_CASE("a run directory another user made, or a symlink, is refused by up, iod and compute") {
  TempDir tmp;
  const std::string model = tmp / "m.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  // A symlink where the run directory should be (to a directory of ours, even).
  const std::string target = tmp / "target", link = tmp / "link";
  std::filesystem::create_directories(target);
  std::filesystem::create_symlink(target, link);
  auto up = run_command(Instance::supervise() + " up " + model + " --run-dir " + link + " --budget 512M");
  CHECK(up.status == 1);
  CHECK_MESSAGE(up.output.find("is not a directory (a symlink") != std::string::npos, up.output);
  const char* iod = std::getenv("WASTE_IOD");
  REQUIRE(iod != nullptr);
  auto r = run_command("timeout 60 " + std::string(iod) + " --model " + model + " --run-dir " + link);
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("is not a directory (a symlink") != std::string::npos, r.output);
  CHECK(std::filesystem::is_empty(target));  // nothing was written through the link
  // A directory another user owns (made here with chown, which needs root).
  if (::geteuid() != 0) {
    waste::test::skip_part("not root: cannot make a directory of another user");
    return;
  }
  const std::string other = tmp / "other";
  std::filesystem::create_directories(other);
  REQUIRE(::chown(other.c_str(), 12345, 12345) == 0);
  up = run_command(Instance::supervise() + " up " + model + " --run-dir " + other + " --budget 512M");
  CHECK(up.status == 1);
  CHECK_MESSAGE(up.output.find("belongs to uid 12345") != std::string::npos, up.output);
  const char* compute = std::getenv("WASTE_COMPUTE");
  REQUIRE(compute != nullptr);
  r = run_command("timeout 60 " + std::string(compute) + " --model " + model + " --run-dir " + other + " --no-iod");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("belongs to uid 12345") != std::string::npos, r.output);
  CHECK(std::filesystem::is_empty(other));
}

TEST_CASE("serve: the listen backlog takes a burst of clients (256, not the library's 5)") {
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Instance inst("--http " + addr + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  auto ss = run_command("ss -ltnH 'sport = :" + std::to_string(port) + "'");
  if (ss.status != 0) {
    waste::test::skip_part("no ss (iproute2) to read the backlog: " + ss.output);
    return;
  }
  // ss prints a listening socket's backlog as its Send-Q: LISTEN 0 256 127.0.0.1:PORT ...
  std::istringstream in(ss.output);
  std::string state, recv_q, send_q;
  in >> state >> recv_q >> send_q;
  CHECK_MESSAGE(state == "LISTEN", ss.output);
  CHECK_MESSAGE(send_q == "256", ss.output);
}

TEST_CASE("waste up says why a child did not come up; serve warns when it listens beyond loopback without a key") {
  TempDir tmp;
  const std::string model = tmp / "m.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  auto up = run_command(Instance::supervise() + " up " + model + " --run-dir " + (tmp / "run") + " --budget 1K");
  CHECK(up.status == 1);
  CHECK_MESSAGE(up.output.find("under the floor") != std::string::npos, up.output);  // the reason, not "see iod.log"

  const int port = free_port();
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const char* serve = std::getenv("WASTE_SERVE");
  REQUIRE(serve != nullptr);
  ChildProcess open_serve({serve, "--connect", inst.run_dir(), "--listen", "0.0.0.0:" + std::to_string(port)},
                          {{"WASTE_API_KEY", ""}});
  REQUIRE(open_serve.wait_for([&] { return open_serve.out().find("listening on") != std::string::npos; }, 60));
  CHECK_MESSAGE(open_serve.out().find("without an API key") != std::string::npos, open_serve.out());
}
