// waste-serve against hostile or careless clients, with real processes and raw sockets: slow
// clients cannot hold the workers (a read deadline per request, a bound per client address), an
// abandoned request stops generating, HTTP/1.0 streams without chunks, unknown models are 404,
// error bodies carry no server paths, API keys from a file, and the request bounds.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_engine_instance.h"
#include "tools/serve/api_keys.h"
#include "tools/serve/openai.h"

using namespace waste::test;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A TCP connection from a loopback address of our choice (127.0.0.0/8 is all loopback on Linux:
// each test client can be its own "client address").
int connect_from(const std::string& from, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &src.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) return ::close(fd), -1;
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) return ::close(fd), -1;
  return fd;
}

bool send_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// Everything the server sends until it closes the connection (or timeout_s passes: *closed false).
std::string read_to_close(int fd, double timeout_s, bool* closed = nullptr) {
  std::string out;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return out;
    }
    out.append(buf, size_t(n));
  }
  if (closed) *closed = false;
  return out;
}

// waste-serve started by hand against an instance's compute, with `args`; base() once it listens.
struct Serve {
  Serve(const Instance& inst, std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {{"WASTE_API_KEY", ""}})
      : proc([&] {
          std::vector<std::string> argv = {env_or("WASTE_SERVE", "waste-serve"), "--connect", inst.run_dir(), "--listen", "127.0.0.1:0"};
          argv.insert(argv.end(), args.begin(), args.end());
          return argv;
        }(), env) {
    const std::regex listening("listening on http://127\\.0\\.0\\.1:(\\d+)");
    std::smatch m;
    ok = proc.wait_for([&] { return std::regex_search(proc.out(), m, listening); }, 60);
    if (ok) port = std::stoi(m[1]);
  }
  ~Serve() {
    proc.signal(SIGTERM);
    proc.wait_exit(30);
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port); }
  std::string log() { return proc.out() + proc.err(); }
  ChildProcess proc;
  bool ok = false;
  int port = 0;
};

void check_error(const Http& h, int status, const std::string& param, const std::string& code = "") {
  CHECK_MESSAGE(h.status == status, h.body);
  const json j = json::parse(h.body, nullptr, false);
  REQUIRE_MESSAGE(!j.is_discarded(), h.body);
  CHECK_MESSAGE(j["error"]["param"] == (param.empty() ? json(nullptr) : json(param)), h.body);
  if (!code.empty()) CHECK_MESSAGE(j["error"]["code"] == code, h.body);
}

}  // namespace

TEST_CASE("serve: eight trickling clients are cut at the read deadline; /health is answered meanwhile") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  // Eight workers (httplib's default, the issue's setup): the clients hold every one of them
  // until the deadline.
  Serve serve(inst, {"--threads", "8", "--request-read-timeout", "2"});
  REQUIRE_MESSAGE(serve.ok, serve.log());

  constexpr int kClients = 8;
  std::atomic<int> connected{0};
  std::vector<double> cut_after(kClients, -1);
  std::vector<std::string> replies(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      // Each from its own address: the per-client bound (8) is not what stops them.
      const int fd = connect_from("127.0.0." + std::to_string(10 + i), serve.port);
      if (fd < 0) return;
      const auto t0 = Clock::now();
      ++connected;
      const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess";
      // A byte every half second (the slow client's load itself, not a wait for anything);
      // the server's close ends it, else the test's 20 s bound.
      for (size_t k = 0; since(t0) < 20; k = std::min(k + 1, request.size() - 1)) {
        bool closed = false;
        if (!send_all(fd, request.substr(k, 1))) break;
        replies[size_t(i)] += read_to_close(fd, 0.5, &closed);
        if (closed) break;
      }
      cut_after[size_t(i)] = since(t0);
      ::close(fd);
    });
  // All eight connected (the condition), then /health from another address.
  const auto t = Clock::now();
  while (connected < kClients && since(t) < 30) std::this_thread::yield();
  REQUIRE(connected == kClients);
  const Http health = curl(serve.base() + "/health", tmp.path());
  for (auto& c : clients) c.join();
  CHECK(health.status == 200);
  MESSAGE("/health with 8 trickling clients and 8 workers: " << health.seconds << " s");
  CHECK(health.seconds < 5);  // the deadline is 2 s; before it, 49 s with 8 clients and 8 workers
  for (int i = 0; i < kClients; ++i) {
    CAPTURE(i);
    CHECK(cut_after[size_t(i)] > 1.5);  // not before the deadline
    CHECK(cut_after[size_t(i)] < 6);    // at it (the watchdog looks every 0.1 s)
    CHECK_MESSAGE(replies[size_t(i)].find("408") != std::string::npos, replies[size_t(i)]);
  }
  const Http m = curl(serve.base() + "/metrics", tmp.path());
  CHECK(metric(m.body, "waste_http_request_read_timeouts_total") == kClients);
  CHECK_MESSAGE(serve.proc.wait_for([&] { return serve.log().find("not read within 2000 ms") != std::string::npos; }, 10),
                serve.log());

  // A keep-alive connection: its second request gets a deadline of its own.
  const int fd = connect_from("127.0.0.9", serve.port);
  REQUIRE(fd >= 0);
  REQUIRE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool closed = false;
  std::string first;
  const auto t1 = Clock::now();
  while (first.find("\"status\":\"ok\"") == std::string::npos && since(t1) < 10) first += read_to_close(fd, 0.2, &closed);
  CHECK_MESSAGE(first.find("HTTP/1.1 200") == 0, first);
  CHECK_FALSE(closed);
  REQUIRE(send_all(fd, "GET /hea"));  // and never the rest
  const auto t2 = Clock::now();
  const std::string second = read_to_close(fd, 15, &closed);
  CHECK(closed);
  CHECK(since(t2) < 5 + 2 + 2);  // keep-alive wait (5 s) + the deadline (2 s), and the watchdog's step
  CHECK_MESSAGE(second.find("408") != std::string::npos, second);
  ::close(fd);
}

TEST_CASE("serve: one client address gets at most --max-connections-per-client connections") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {"--max-connections-per-client", "3"});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  // Three connections from 127.0.0.2 hold a partial request each (inside the 10 s deadline).
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(connect_from("127.0.0.2", serve.port));
    REQUIRE(held.back() >= 0);
    REQUIRE(send_all(held.back(), "GET /hea"));
  }
  // Accepted (the server counts them) before the fourth comes: wait for the gauge.
  double open = 0;
  const auto t = Clock::now();
  while ((open = metric(curl(serve.base() + "/metrics", tmp.path()).body, "waste_http_connections")) < 4 && since(t) < 10) {
  }
  CHECK(open == 4);  // the three held and the one asking
  // The fourth from that address is refused at once; another address is served.
  const int fourth = connect_from("127.0.0.2", serve.port);
  REQUIRE(fourth >= 0);
  const auto t0 = Clock::now();
  bool closed = false;
  const std::string refused = read_to_close(fourth, 5, &closed);
  const double refused_after = since(t0);
  ::close(fourth);
  CHECK(closed);
  CHECK(refused_after < 1);
  CHECK_MESSAGE(refused.find("HTTP/1.1 503") == 0, refused);
  CHECK_MESSAGE(refused.find("too_many_connections") != std::string::npos, refused);
  CHECK(curl(serve.base() + "/health", tmp.path()).status == 200);
  CHECK(curl(serve.base() + "/health", tmp.path(), "", "", "127.0.0.3").status == 200);
  const Http m = curl(serve.base() + "/metrics", tmp.path());
  CHECK(metric(m.body, "waste_http_connections_refused_total") == 1);
  // A refused client that sends its request after the refusal came (as http.client does:
  // headers, then the body) can still send it and read the 503: the server reads what it sends
  // before closing. A close with the request arriving later answers it with a reset, and the
  // client's next send fails (EPIPE) before it has read why.
  {
    const int late = connect_from("127.0.0.2", serve.port);
    REQUIRE(late >= 0);
    pollfd in{late, POLLIN, 0};
    REQUIRE(::poll(&in, 1, 5000) == 1);  // the 503 has come
    REQUIRE(send_all(late, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"));
    pollfd reset{late, 0, 0};
    // No reset comes back within 0.5 s (on loopback one takes microseconds: a window, not a sync).
    CHECK(::poll(&reset, 1, 500) == 0);
    CHECK(send_all(late, "{}"));
    const std::string r = read_to_close(late, 5);
    ::close(late);
    CHECK_MESSAGE(r.find("HTTP/1.1 503") == 0, r);
  }
  // Once they close, the address is served again (its count went down with each close).
  for (int fd : held) ::close(fd);
  Http again;
  const auto t2 = Clock::now();
  while ((again = curl(serve.base() + "/health", tmp.path(), "", "", "127.0.0.2")).status != 200 && since(t2) < 10) {
  }
  CHECK(again.status == 200);
}

TEST_CASE("serve: a client that abandons a non-streaming request frees its session at once") {
  // A context long enough for a generation of many seconds.
  Instance inst("--ctx 8192");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  auto sessions = [&] {
    const Http h = curl(serve.base() + "/health", tmp.path());
    const json j = json::parse(h.body, nullptr, false);
    return j.is_discarded() ? -1 : j.value("sessions", -1);
  };
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 8000}}.dump();
  const int fd = connect_from("127.0.0.1", serve.port);
  REQUIRE(fd >= 0);
  REQUIRE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  // Generating (its session is open), then the client goes.
  auto t = Clock::now();
  while (sessions() != 1 && since(t) < 30) {
  }
  REQUIRE(sessions() == 1);
  ::close(fd);
  const auto t0 = Clock::now();
  while (sessions() != 0 && since(t0) < 30) {
  }
  const double released = since(t0);
  CHECK(sessions() == 0);
  MESSAGE("session released " << released << " s after the client closed");
  CHECK(released < 3);
  const Http m = curl(serve.base() + "/metrics", tmp.path());
  CHECK(metric(m.body, "waste_http_abandoned_total") == 1);
  CHECK(metric(m.body, "waste_tokens_generated_total") < 8000);  // cancelled, not run to max_tokens
  CHECK_MESSAGE(serve.proc.wait_for([&] { return serve.log().find("the client went away") != std::string::npos; }, 10),
                serve.log());
  // The next request is served at once.
  const Http next = curl(serve.base() + "/v1/completions", tmp.path(), json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump());
  CHECK(next.status == 200);
  CHECK(next.seconds < 5);
}

TEST_CASE("serve: an HTTP/1.0 client's stream has no chunked encoding and ends with the connection") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  Serve serve(inst, {});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const std::string body =
      json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 5}, {"stream", true}}.dump();
  for (const std::string& version : {std::string("HTTP/1.0"), std::string("HTTP/1.0 keep-alive"), std::string("HTTP/1.1")}) {
    CAPTURE(version);
    const int fd = connect_from("127.0.0.1", serve.port);
    REQUIRE(fd >= 0);
    const bool v10 = version.rfind("HTTP/1.0", 0) == 0;
    std::string req = "POST /v1/chat/completions " + version.substr(0, 8) +
                      "\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    if (version.find("keep-alive") != std::string::npos) req += "Connection: keep-alive\r\n";
    if (!v10) req += "Connection: close\r\n";
    REQUIRE(send_all(fd, req + "\r\n" + body));
    bool closed = false;
    const std::string reply = read_to_close(fd, 30, &closed);
    ::close(fd);
    CHECK(closed);  // the end of the body is the end of the connection
    const size_t split = reply.find("\r\n\r\n");
    REQUIRE_MESSAGE(split != std::string::npos, reply);
    const std::string head = reply.substr(0, split), payload = reply.substr(split + 4);
    CHECK_MESSAGE(head.find(" 200 ") != std::string::npos, head);
    CHECK_MESSAGE(head.find("text/event-stream") != std::string::npos, head);
    if (v10) {
      CHECK_MESSAGE(head.find("Transfer-Encoding") == std::string::npos, head);
      CHECK_MESSAGE(head.find("Content-Length") == std::string::npos, head);
      CHECK_MESSAGE(head.find("Connection: close") != std::string::npos, head);
      CHECK_MESSAGE(payload.rfind("data: {", 0) == 0, payload);  // events, no chunk sizes
      const std::string done = "data: [DONE]\n\n";
      CHECK_MESSAGE(payload.size() >= done.size(), payload);
      CHECK(payload.compare(payload.size() - done.size(), done.size(), done) == 0);
      CHECK(payload.find("\"finish_reason\":\"length\"") != std::string::npos);
    } else {
      CHECK_MESSAGE(head.find("Transfer-Encoding: chunked") != std::string::npos, head);
    }
  }
}

TEST_CASE("serve: a request for another model is a 404 model_not_found; /v1/models/{id}") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {"--model-alias", "my-model"});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const std::string url = serve.base() + "/v1/chat/completions";
  json req = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  CHECK(curl(url, tmp.path(), req.dump()).status == 200);  // no model: the served one
  for (const char* name : {"tiny.waste", "tiny", "my-model"}) {
    CAPTURE(name);
    req["model"] = name;
    const Http h = curl(url, tmp.path(), req.dump());
    CHECK_MESSAGE(h.status == 200, h.body);
    CHECK(json::parse(h.body)["model"] == "tiny.waste");
  }
  for (bool stream : {false, true}) {
    req["model"] = "gpt-4o";
    req["stream"] = stream;
    const Http h = curl(url, tmp.path(), req.dump());
    check_error(h, 404, "model", "model_not_found");
    const json e = json::parse(h.body)["error"];
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["message"] == "The model 'gpt-4o' does not exist");
  }
  check_error(curl(serve.base() + "/v1/completions", tmp.path(), json{{"prompt", "Hi"}, {"model", ""}}.dump()), 404, "model",
              "model_not_found");
  const Http one = curl(serve.base() + "/v1/models/tiny.waste", tmp.path());
  CHECK(one.status == 200);
  CHECK(json::parse(one.body)["id"] == "tiny.waste");
  CHECK(json::parse(one.body)["object"] == "model");
  CHECK(curl(serve.base() + "/v1/models/my-model", tmp.path()).status == 200);
  check_error(curl(serve.base() + "/v1/models/gpt-4o", tmp.path()), 404, "model", "model_not_found");
}

TEST_CASE("serve: error bodies name no server path; the log has the full message") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const json req = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  REQUIRE(curl(serve.base() + "/v1/chat/completions", tmp.path(), req.dump()).status == 200);
  // Compute goes away (the whole instance, so the supervisor does not restart it).
  REQUIRE(run_command(Instance::supervise() + " down --run-dir " + inst.run_dir()).status == 0);
  for (const std::string& path : {std::string("/v1/chat/completions"), std::string("/health"), std::string("/metrics")}) {
    CAPTURE(path);
    const Http h = curl(serve.base() + path, tmp.path(), path == "/v1/chat/completions" ? req.dump() : "");
    check_error(h, 503, "", "compute_unavailable");
    CHECK_MESSAGE(h.body.find(inst.run_dir()) == std::string::npos, h.body);
    CHECK_MESSAGE(h.body.find("compute.sock") == std::string::npos, h.body);
    CHECK_MESSAGE(h.body.find("/tmp") == std::string::npos, h.body);
    const std::string msg = json::parse(h.body)["error"]["message"];
    CHECK_MESSAGE(msg.find("compute is unavailable") == 0, msg);
    std::smatch id;
    REQUIRE_MESSAGE(std::regex_search(msg, id, std::regex("request (req-\\d+)")), msg);
    // The server's log has the whole story under that id.
    const std::string rid = id[1];
    CHECK(serve.proc.wait_for([&] { return serve.log().find("request " + rid + ": 503") != std::string::npos; }, 10));
  }
  CHECK_MESSAGE(serve.proc.wait_for([&] { return serve.log().find(inst.run_dir()) != std::string::npos; }, 10), serve.log());
}

TEST_CASE("serve: client messages scrub server paths but keep endpoints and data: URLs") {
  waste::serve::set_private_paths({"/srv/run/waste", "/srv/run/waste/compute.sock", "relative/run"});
  using waste::serve::ApiError;
  using waste::serve::client_message;
  CHECK(client_message({503, "cannot connect to /srv/run/waste/compute.sock: Connection refused", "server_error", "",
                        "compute_unavailable"}, "req-7") ==
        "compute is unavailable: try again later (request req-7; the server's log has the details)");
  CHECK(client_message({500, "cannot open /srv/models/k.waste/config.json", "server_error", "", ""}, "req-8") ==
        "internal server error (request req-8; the server's log has the details)");
  CHECK(client_message({400, "the image path is not under the server's --image-dir (/srv/images)", "invalid_request_error", "", ""}) ==
        "the image path is not under the server's --image-dir (<path>)");
  CHECK(client_message({400, "cannot open the image file /etc/shadow: Permission denied", "invalid_request_error", "", ""}) ==
        "cannot open the image file <path>: Permission denied");
  CHECK(client_message({400, "session file relative/run/x.ses is damaged", "invalid_request_error", "", ""}) == "session file <path>/x.ses is damaged");
  CHECK(client_message({400, "prompt belongs to /v1/completions; send data:image/png;base64,... or file:///DIR/NAME.png", "invalid_request_error", "", ""}) ==
        "prompt belongs to /v1/completions; send data:image/png;base64,... or file:///DIR/NAME.png");
  CHECK(client_message({400, "no file at /a/b.", "invalid_request_error", "", ""}) == "no file at <path>.");
  waste::serve::set_private_paths({});
}

TEST_CASE("serve: API keys compare in fixed time and come from a key file others cannot read") {
  using waste::serve::matching_key;
  const std::vector<std::string> keys = {"alpha-key", "beta"};
  CHECK(matching_key(keys, "Bearer alpha-key") == 0);
  CHECK(matching_key(keys, "Bearer beta") == 1);
  for (const char* bad : {"Bearer alpha-kez", "Bearer alpha-key2", "Bearer alpha", "Bearer ", "Bearer b", "alpha-key",
                          "bearer beta", "Bearer betabeta"})
    CHECK_MESSAGE(matching_key(keys, bad) == -1, bad);

  TempDir tmp;
  const std::string file = tmp / "keys";
  std::ofstream(file) << "# the team's keys\n\n  k-one  \nk-two\n";
  ::chmod(file.c_str(), 0644);
  const std::string mode_error = "--api-key-file " + file + ": other users may read or write it (mode 0644)";
  CHECK_THROWS_WITH(waste::serve::read_api_key_file(file), doctest::Contains(mode_error.c_str()));
  ::chmod(file.c_str(), 0600);
  CHECK(waste::serve::read_api_key_file(file) == std::vector<std::string>{"k-one", "k-two"});
  CHECK_THROWS_WITH(waste::serve::read_api_key_file(tmp.path()), doctest::Contains("not a regular file"));
  const std::string empty = tmp / "empty";
  std::ofstream(empty) << "# nothing\n";
  ::chmod(empty.c_str(), 0600);
  CHECK_THROWS_WITH(waste::serve::read_api_key_file(empty), doctest::Contains("holds no key"));

  // Through `up --http --api-key-file` (the supervisor passes it to waste-serve).
  const int port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port), base = "http://" + addr;
  {
    ::chmod(file.c_str(), 0604);
    Instance refused("--http " + addr + " --ctx 256 --api-key-file " + file);
    CHECK_FALSE(refused.ok());
    CHECK_MESSAGE(refused.why().find("other users may read or write it") != std::string::npos, refused.why());
  }
  ::chmod(file.c_str(), 0640);
  Instance inst("--http " + addr + " --ctx 256 --api-key-file " + file);
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  CHECK(curl(base + "/metrics", tmp.path()).status == 401);
  CHECK(curl(base + "/metrics", tmp.path(), "", "-H 'Authorization: Bearer k-on'").status == 401);
  CHECK(curl(base + "/metrics", tmp.path(), "", "-H 'Authorization: Bearer k-two'").status == 200);
  CHECK(curl(base + "/v1/models", tmp.path(), "", "-H 'Authorization: Bearer k-one'").status == 200);
  CHECK(curl(base + "/v1/models/tiny", tmp.path()).status == 401);
  CHECK(curl(base + "/health", tmp.path()).status == 200);
}

TEST_CASE("serve: stop sequences, messages, tools, schemas and max_tokens are bounded by options") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {"--max-messages", "3", "--max-stop", "2", "--max-stop-bytes", "8", "--max-tools", "2",
                     "--max-schema-bytes", "400", "--max-tokens", "50"});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const std::string url = serve.base() + "/v1/chat/completions";
  const json base = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  CHECK(curl(url, tmp.path(), base.dump()).status == 200);
  auto with = [&](const char* k, json v) {
    json r = base;
    r[k] = std::move(v);
    return curl(url, tmp.path(), r.dump());
  };
  CHECK(with("stop", json::array({"ab", "cd"})).status == 200);
  check_error(with("stop", json::array({"a", "b", "c"})), 400, "stop");
  CHECK_MESSAGE(with("stop", json::array({"a", "b", "c"})).body.find("--max-stop") != std::string::npos, "");
  CHECK(with("stop", "12345678").status == 200);
  check_error(with("stop", "123456789"), 400, "stop");
  check_error(with("max_tokens", 51), 400, "max_tokens");
  json msgs = json::array();
  for (int i = 0; i < 4; ++i) msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "x"}});
  check_error(with("messages", msgs), 400, "messages");
  msgs.erase(0);
  CHECK(with("messages", msgs).status == 200);
  auto tool = [](const std::string& name, size_t pad) {
    return json{{"type", "function"},
                {"function", {{"name", name}, {"description", std::string(pad, 'd')}, {"parameters", {{"type", "object"}}}}}};
  };
  CHECK(with("tools", json::array({tool("a", 10), tool("b", 10)})).status == 200);
  check_error(with("tools", json::array({tool("a", 10), tool("b", 10), tool("c", 10)})), 400, "tools");
  check_error(with("tools", json::array({tool("a", 10), tool("b", 500)})), 400, "tools[1]");
  check_error(with("response_format", {{"type", "json_schema"},
                                       {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}, {"description", std::string(500, 'd')}}}}}}),
              400, "response_format");
}

// A body is read only when it comes plain with its length (tools/serve/body_framing.h): httplib
// bounds no other body by --max-body. Each refusal is immediate and closes the connection; the
// server answers the next client as before.
TEST_CASE("serve: chunked, compressed, length-less and multipart bodies are refused before they are read") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {"--max-body", "65536"});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const std::string small = json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}.dump();
  // Raw: head, then (maybe) a body far over --max-body; the reply must come without it read.
  auto raw = [&](const std::string& headers, const std::string& body) {
    const int fd = connect_from("127.0.0.1", serve.port);
    REQUIRE(fd >= 0);
    send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body);
    bool closed = false;
    const std::string reply = read_to_close(fd, 20, &closed);
    ::close(fd);
    CHECK_MESSAGE(closed, reply);  // the connection ends after a refusal
    return reply;
  };
  auto status_of = [](const std::string& reply) { return reply.size() > 12 ? std::stoi(reply.substr(9, 3)) : 0; };
  auto error_of = [](const std::string& reply) {
    const size_t split = reply.find("\r\n\r\n");
    const json j = split == std::string::npos ? json() : json::parse(reply.substr(split + 4), nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"] : json();
  };
  std::string big_chunks;
  for (int i = 0; i < 40; ++i) big_chunks += "1000\r\n" + std::string(4096, ' ') + "\r\n";  // 160 KiB of chunks
  std::string reply = raw("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", big_chunks);
  CHECK_MESSAGE(status_of(reply) == 411, reply);
  CHECK(error_of(reply)["param"] == "Content-Length");
  reply = raw("Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n", "0123456789");
  CHECK_MESSAGE(status_of(reply) == 415, reply);
  CHECK(error_of(reply)["param"] == "Content-Encoding");
  reply = raw("Content-Type: application/json\r\n", "");  // no length: no body, no read deadline's 408
  CHECK_MESSAGE(status_of(reply) == 411, reply);
  // Expect: 100-continue gets the refusal instead of the 100, before the body is sent.
  reply = raw("Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n", "");
  CHECK_MESSAGE(status_of(reply) == 415, reply);
  CHECK_MESSAGE(reply.find(" 100 ") == std::string::npos, reply);
  reply = raw("Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 4\r\n", "--b\n");
  CHECK_MESSAGE(status_of(reply) == 415, reply);
  CHECK(error_of(reply)["param"] == "Content-Type");
  // curl -d's form type: a small body is JSON like any other, a large one is told why.
  const Http form_small = curl(serve.base() + "/v1/chat/completions", tmp.path(), "", "--data-binary '" + small + "'");
  CHECK_MESSAGE(form_small.status == 200, form_small.body);
  std::ofstream(tmp.path() + "/form.json") << json{{"messages", {{{"role", "user"}, {"content", std::string(9000, 'a')}}}},
                                                   {"max_tokens", 2}}.dump();
  const Http form_big = curl(serve.base() + "/v1/chat/completions", tmp.path(), "", "--data-binary @" + tmp.path() + "/form.json");
  check_error(form_big, 415, "Content-Type", "unsupported_content_type");
  // A Content-Length over --max-body is still the 413 it was.
  check_error(curl(serve.base() + "/v1/chat/completions", tmp.path(),
                   json{{"messages", {{{"role", "user"}, {"content", std::string(70000, 'a')}}}}}.dump()),
              413, "", "payload_too_large");
  // Another method than POST on a generation endpoint: 405 naming it, not 404.
  const Http get = curl(serve.base() + "/v1/chat/completions", tmp.path());
  check_error(get, 405, "", "method_not_allowed");
  CHECK(get.body.find("GET") != std::string::npos);
  CHECK(curl(serve.base() + "/v1/chat/completions", tmp.path(), small).status == 200);
}

// Fields that were read loosely: each now checked, or refused where it cannot apply.
TEST_CASE("serve: max_tokens twice, stream_options, tool and schema field types, unseeded sampling, reply ids") {
  Instance inst("--ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  Serve serve(inst, {});
  REQUIRE_MESSAGE(serve.ok, serve.log());
  const std::string url = serve.base() + "/v1/chat/completions";
  const json base = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto with = [&](json extra) {
    json r = base;
    r.update(extra);
    return curl(url, tmp.path(), r.dump());
  };
  check_error(with({{"max_completion_tokens", 3}, {"max_tokens", "garbage"}}), 400, "max_tokens");
  check_error(with({{"max_completion_tokens", 3}, {"max_tokens", 100}}), 400, "max_completion_tokens");
  const Http both = with({{"max_completion_tokens", 3}, {"max_tokens", 3}});
  REQUIRE_MESSAGE(both.status == 200, both.body);
  CHECK(json::parse(both.body)["usage"]["completion_tokens"] == 3);

  check_error(with({{"max_tokens", 2}, {"stream_options", {{"include_usage", true}}}}), 400, "stream_options");
  // A chat whose messages fit the context in bytes but whose rendered prompt (here with its
  // tool's definition) does not: a 400 before any header, streamed or not (this tokenizer
  // spends a token per "a" or "b").
  for (bool stream : {false, true}) {
    json tool_b = {{"type", "function"}, {"function", {{"name", "f"}, {"description", std::string(150, 'b')}}}};
    json over = {{"messages", {{{"role", "user"}, {"content", std::string(150, 'a')}}}}, {"tools", {tool_b}},
                 {"max_tokens", 2}, {"stream", stream}};
    check_error(curl(url, tmp.path(), over.dump()), 400, "messages", "context_length_exceeded");
  }
  // Streamed, include_usage false: no chunk carries usage; unsaid: the last one does (an extension).
  for (bool said : {false, true}) {
    json req = {{"max_tokens", 2}, {"stream", true}};
    if (said) req["stream_options"] = {{"include_usage", false}};
    const Http s = with(req);
    REQUIRE_MESSAGE(s.status == 200, s.body);
    CHECK_MESSAGE((s.body.find("\"usage\"") != std::string::npos) == !said, s.body);
  }

  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  json strict_word = tool, object_description = tool;
  strict_word["function"]["strict"] = "yes";
  object_description["function"]["description"] = {{"x", 1}};
  check_error(with({{"max_tokens", 2}, {"tools", {strict_word}}}), 400, "tools[0].function.strict");
  check_error(with({{"max_tokens", 2}, {"tools", {object_description}}}), 400, "tools[0].function.description");
  const json schema = {{"type", "object"}};
  check_error(with({{"max_tokens", 2}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", 5}, {"schema", schema}}}}}}),
              400, "response_format.json_schema.name");
  check_error(with({{"max_tokens", 2},
                    {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", "maybe"}, {"schema", schema}}}}}}),
              400, "response_format.json_schema.strict");

  // Sampling without a seed: calls differ (three replies of 12 tokens of random weights at
  // temperature 1 all alike would be a fixed seed). The same seed still repeats.
  std::set<std::string> replies;
  for (int i = 0; i < 3; ++i) {
    const Http h = with({{"max_tokens", 12}, {"temperature", 1.0}});
    REQUIRE_MESSAGE(h.status == 200, h.body);
    replies.insert(json::parse(h.body)["choices"][0]["message"].dump());
  }
  CHECK(replies.size() > 1);
  const Http s1 = with({{"max_tokens", 12}, {"temperature", 1.0}, {"seed", 5}});
  const Http s2 = with({{"max_tokens", 12}, {"temperature", 1.0}, {"seed", 5}});
  CHECK(json::parse(s1.body)["choices"][0]["message"] == json::parse(s2.body)["choices"][0]["message"]);
  // Reply ids carry a per-process tag: a restarted server does not repeat them.
  const std::regex id_shape("chatcmpl-[0-9a-f]{16}-[0-9]+");
  CHECK_MESSAGE(std::regex_match(json::parse(s1.body)["id"].get<std::string>(), id_shape), s1.body);

  // /v1/completions streamed with logprobs: each chunk has its alternatives, as unstreamed.
  const Http lp = curl(serve.base() + "/v1/completions", tmp.path(),
                       json{{"prompt", "Hi"}, {"max_tokens", 2}, {"stream", true}, {"logprobs", 2}}.dump());
  REQUIRE_MESSAGE(lp.status == 200, lp.body);
  size_t chunks_with_top = 0;
  for (size_t at = lp.body.find("data: {"); at != std::string::npos; at = lp.body.find("data: {", at + 1)) {
    const json c = json::parse(lp.body.substr(at + 6, lp.body.find('\n', at) - at - 6), nullptr, false);
    if (c.is_discarded() || !c.contains("choices") || c["choices"].empty()) continue;
    const json& l = c["choices"][0]["logprobs"];
    if (l.is_object() && l.contains("top_logprobs")) {
      CHECK(l["top_logprobs"].size() == 1);
      CHECK(l["top_logprobs"][0].size() == 2);
      ++chunks_with_top;
    }
  }
  CHECK(chunks_with_top == 2);
}
