// waste-serve: an OpenAI-compatible HTTP front end of a running waste-compute. Each HTTP request
// opens its own connection and session (freed when the request ends), so concurrent requests
// are batched by compute like any other clients.
#include <httplib.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "compute/constrain/json_schema.h"
#include "shared/chat/render.h"
#include "shared/container/format.h"
#include "shared/util/error.h"
#include "shared/ipc/rpc_call.h"
#include "shared/stats/engine_stats.h"
#include "shared/stats/json.h"
#include "shared/stats/prometheus.h"
#include "shared/stats/serve_stats.h"
#include "tools/libwaste/engine_client.h"
#include "tools/serve/api_keys.h"
#include "tools/serve/body_framing.h"
#include "tools/serve/connection_guard.h"
#include "tools/serve/images.h"
#include "tools/serve/openai.h"
#include "tools/serve/stop_on_signal.h"

namespace {

using nlohmann::json;
using waste::serve::ApiError;

struct Config {
  std::string address;     // Engine RPC address
  std::vector<std::string> api_keys;  // empty: no authentication
  std::string model_name;  // reported by /v1/models and in replies
  std::vector<std::string> model_names;  // what a request's "model" may say: the name, the container's stem, aliases
  waste::serve::Limits limits;
  waste::serve::ImageDir image_dir;  // --image-dir: where local image files may come from (off: none)
  bool vision = false;     // the model has a vision tower (compute's info at start, for /v1/models)
  int64_t compute_timeout_ms = waste::client::kDefaultTimeoutMs;  // --compute-timeout
};

// httplib's header states the form limit the library was built with (Debian builds the .so
// from the same header): body_framing's refusal follows it.
static_assert(waste::serve::kFormBodyLimit == CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH,
              "httplib's form body limit changed: update kFormBodyLimit (body_framing.h)");

std::atomic<uint64_t> g_request_id{1};
// Reply ids are this tag and a counter: unique across restarts of the server, not only within one.
const std::string& process_tag() {
  static const std::string tag = [] {
    std::random_device rd;
    char buf[24];
    std::snprintf(buf, sizeof buf, "%08x%08x-", rd(), rd());
    return std::string(buf);
  }();
  return tag;
}
// Images this server sent in requests that finished, their prompt positions and the seconds
// compute's tower took on them (compute's own statistics do not count images).
std::atomic<uint64_t> g_images{0}, g_image_tokens{0};
std::atomic<double> g_image_seconds{0};
// Non-streaming requests whose client went away mid-generation (cancelled, not run to the end).
std::atomic<uint64_t> g_abandoned{0};

void count_images(const waste::serve::ParsedRequest& p, const waste::client::Result& r) {
  if (p.images.empty()) return;
  g_images += p.images.size();
  g_image_tokens += r.image_tokens;
  g_image_seconds.fetch_add(r.image_seconds);
}

// A chat's images made ready before any header goes out (so a streamed request gets its 400 as
// well): a model without a tower refuses them, each reference becomes the file's bytes, and
// detail "low" sets the request's patch budget (never above compute's own default).
void prepare_images(waste::serve::ParsedRequest& p, const waste::client::Info& info, const waste::serve::ImageDir& dir) {
  if (p.images.empty()) return;
  if (!info.vision)
    throw waste::chat::RequestError(p.images[0].field, "this model has no vision tower: it takes no images");
  waste::serve::load_images(p, dir);
  if (p.stream) waste::serve::check_images_decode(p);
  if (p.low_detail) p.request.image_patches = std::min(waste::serve::kLowDetailPatches, info.image_patches);
}

// Generated text may hold bytes that are not UTF-8 (a random model, a token cut mid-character):
// they become U+FFFD rather than an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

// The id of the HTTP request this thread serves (the pre-routing handler sets it; the response
// carries it as X-Request-Id and in 5xx error messages, the log line of an error names it).
thread_local std::string t_request_id;
std::atomic<uint64_t> g_http_request{1};

// Every error a client gets goes through here (plain replies and stream error events): the full
// message is logged with the request id; the body is error_body's, which scrubs server paths.
json error_json(const ApiError& e) {
  if (e.status >= 500)
    spdlog::warn("serve: request {}: {} {}", t_request_id, e.status, e.message);
  else
    spdlog::debug("serve: request {}: {} {}", t_request_id, e.status, e.message);
  return waste::serve::error_body(e, t_request_id);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

// An error as an HTTP error: the one map from an error's kind (shared/util/error.h, carried
// across Engine RPC by shared/ipc/rpc_error.h) to OpenAI's statuses and codes.
ApiError classify(const std::exception& ex) {
  const std::string what = ex.what();
  const auto* e = dynamic_cast<const waste::Error*>(&ex);
  if (!e) return {500, what, "server_error", "", ""};
  switch (e->kind()) {
    case waste::ErrorKind::InvalidRequest: {
      // The client's own message, without the call's context; a field's without its
      // "invalid request (PARAM): " heading (the param says it).
      std::string m = e->message();
      const std::string heading = "invalid request (" + e->param() + "): ";
      if (!e->param().empty() && m.rfind(heading, 0) == 0) m = m.substr(heading.size());
      return {400, m, "invalid_request_error", e->param(), ""};
    }
    case waste::ErrorKind::ContextLength:
      return {400, e->message(), "invalid_request_error", "messages", "context_length_exceeded"};
    case waste::ErrorKind::Overloaded: return {429, e->message(), "rate_limit_error", "", "overloaded"};
    case waste::ErrorKind::Unavailable:
      return {503, what, "server_error", "", e->param() == "iod" ? "iod_unavailable" : "compute_unavailable"};
    case waste::ErrorKind::Internal: break;
  }
  return {500, what, "server_error", "", ""};
}

// Whether `name` (a request's "model", /v1/models/{id}) is the model this server serves.
bool serves(const Config& cfg, const std::string& name) {
  return std::find(cfg.model_names.begin(), cfg.model_names.end(), name) != cfg.model_names.end();
}

ApiError model_not_found(const std::string& name) {
  return {404, "The model '" + name + "' does not exist", "invalid_request_error", "model", "model_not_found"};
}

// The caller's prompt-cache scope when its key is good (keys off: "", shared by every caller);
// nullopt (401 sent) when not. A key's scope is a hash of it, so compute never holds the key and
// one key's prompt prefix never serves another key.
std::optional<std::string> authorized(const Config& cfg, const httplib::Request& req, httplib::Response& res) {
  if (cfg.api_keys.empty()) return std::string();
  // The key is compared in fixed time (api_keys.h), against every key, with no early exit.
  const int k = waste::serve::matching_key(cfg.api_keys, req.get_header_value("Authorization"));
  if (k >= 0) {
    const std::string& key = cfg.api_keys[size_t(k)];
    char scope[32];
    std::snprintf(scope, sizeof scope, "key:%016llx", (unsigned long long)waste::checksum64(key.data(), key.size()));
    return std::string(scope);
  }
  send_error(res, {401, "missing or wrong API key (Authorization: Bearer ...)", "invalid_request_error", "", "invalid_api_key"});
  return std::nullopt;
}


// A schema the grammar cannot enforce is the client's field at fault.
void compile_or_refuse(const waste::chat::Json& schema, const std::string& where) {
  try {
    waste::constrain::compile_json_schema(schema, where);
  } catch (const waste::chat::RequestError&) {
    throw;
  } catch (const waste::Error& e) {
    throw waste::chat::RequestError(where, e.what());
  }
}

// The reply of one request as its tokens arrive: content, reasoning and tool calls (already
// parsed by token id in compute), the OpenAI delta of each token, and logprobs.
struct ReplyBuilder {
  explicit ReplyBuilder(bool parallel) : parallel_tool_calls(parallel) {}
  bool parallel_tool_calls;
  std::string content, reasoning;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;
  json logprobs = json::array();

  static std::string text(std::string_view s) { return std::string(s); }
  static json token_logprob(const std::string& token, float lp) {
    std::vector<int> bytes(token.begin(), token.end());
    for (int& b : bytes) b &= 0xff;
    return json{{"token", token}, {"logprob", lp}, {"bytes", bytes}};
  }

  // Adds a token; returns its delta (empty when it adds nothing a client sees).
  json add(const waste::client::TokenEvent& ev, bool want_logprobs) {
    json delta = json::object();
    if (!ev.reasoning.empty()) {
      reasoning += ev.reasoning;
      delta["reasoning_content"] = text(ev.reasoning);
    }
    if (!ev.text.empty()) {
      content += ev.text;
      delta["content"] = text(ev.text);
    }
    json tcs = json::array();
    for (const auto& d : ev.tool_calls) {
      if (!parallel_tool_calls && d.index > 0) continue;  // parallel_tool_calls: false keeps the first
      if (d.index >= calls.size()) calls.resize(d.index + 1);
      Call& c = calls[d.index];
      json t = {{"index", d.index}};
      if (!d.id.empty() || !d.name.empty()) {
        c.id += d.id;
        c.name += d.name;
        t["id"] = d.id;
        t["type"] = "function";
        t["function"] = {{"name", d.name}, {"arguments", d.arguments}};
      } else {
        t["function"] = {{"arguments", d.arguments}};
      }
      c.arguments += d.arguments;
      tcs.push_back(std::move(t));
    }
    if (!tcs.empty()) delta["tool_calls"] = std::move(tcs);
    last_ = nullptr;
    if (want_logprobs && ev.has_logprob) {
      json e = token_logprob(ev.token, ev.logprob);
      json top = json::array();
      for (const auto& t : ev.top) top.push_back(token_logprob(t.bytes, t.logprob));
      e["top_logprobs"] = std::move(top);
      logprobs.push_back(e);
      last_ = e;
    }
    return delta;
  }
  const json& last_logprob() const { return last_; }

  json message() const {
    json m = {{"role", "assistant"}};
    m["content"] = content.empty() && !calls.empty() ? json(nullptr) : json(content);
    if (!reasoning.empty()) m["reasoning_content"] = reasoning;
    if (!calls.empty()) {
      json tcs = json::array();
      for (const Call& c : calls)
        tcs.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      m["tool_calls"] = std::move(tcs);
    }
    return m;
  }
  json logprobs_json() const { return logprobs.empty() ? json(nullptr) : json{{"content", logprobs}}; }
  json completion_logprobs_json() const { return logprobs.empty() ? json(nullptr) : completion_logprobs(logprobs); }
  // The legacy API's logprobs of chat-style entries ({token, logprob, top_logprobs: [...]}):
  // parallel arrays, each token's alternatives as a {token: logprob} object. A whole reply's,
  // or one streamed token's.
  static json completion_logprobs(const json& entries) {
    json tokens = json::array(), lps = json::array(), top = json::array();
    for (const auto& e : entries) {
      tokens.push_back(e["token"]);
      lps.push_back(e["logprob"]);
      json t = json::object();
      for (const auto& x : e["top_logprobs"]) t[x["token"].get<std::string>()] = x["logprob"];
      top.push_back(t);
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top}};
  }

 private:
  json last_;
};

void handle_generate(const Config& cfg, const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::optional<std::string> scope = authorized(cfg, req, res);
  if (!scope) return;
  ApiError err;
  auto parsed = waste::serve::parse_request(req.body, chat, cfg.limits, &err);
  if (!parsed) return send_error(res, err);
  // A request for another model must not be answered by this one (OpenAI's 404).
  if (parsed->model && !serves(cfg, *parsed->model)) return send_error(res, model_not_found(*parsed->model));
  parsed->request.cache_scope = *scope;
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + process_tag() + std::to_string(g_request_id++);
  const int64_t created = int64_t(std::time(nullptr));

  // Connect and open the session before answering, so refusals get a proper status.
  std::shared_ptr<waste::client::Client> client;
  std::shared_ptr<waste::client::Session> session;
  try {
    client = std::make_shared<waste::client::Client>(cfg.address, cfg.compute_timeout_ms);
    session = std::shared_ptr<waste::client::Session>(client->open_session(0).release());
    // What compute would refuse about the chat is refused here too, before any header goes out,
    // so a streamed request gets its 400 as well: the prompt renders in the model's chat format
    // and every schema compiles into a grammar.
    const auto info = client->info();
    std::vector<waste::chat::Segment> rendered;  // the chat's prompt (no default system message)
    if (chat) {
      try {
        prepare_images(*parsed, info, cfg.image_dir);
        const waste::tok::ChatFormat format = waste::tok::parse_chat_format_name(info.chat_format, "compute's chat format");
        if (format == waste::tok::ChatFormat::None) return send_error(res, {400, "this model has no chat format: use /v1/completions", "invalid_request_error", "messages", ""});
        rendered = waste::chat::render_prompt(format, parsed->request.chat);
        const auto& c = parsed->request.chat;
        if (c.response_format.type == waste::chat::ResponseFormat::Type::JsonSchema)
          compile_or_refuse(c.response_format.schema, "response_format.json_schema.schema");
        if (c.tool_choice.mode == waste::chat::ToolChoice::Mode::Required || c.tool_choice.mode == waste::chat::ToolChoice::Mode::Named)
          for (const auto& t : c.tools)
            if (t["function"].contains("parameters") && !t["function"]["parameters"].is_null())
              compile_or_refuse(t["function"]["parameters"], "tools[" + t["function"]["name"].get<std::string>() + "].function.parameters");
      } catch (const waste::chat::RequestError& e) {
        return send_error(res, {400, e.what(), "invalid_request_error", e.param, ""});
      }
    }
    // Over-long prompts are refused up front, before a streamed reply's headers (compute checks
    // the exact count again). A chat counts its rendered prompt: its text segments' tokens and
    // at least one per markup segment (a lower bound: images and the default system message
    // add more), so nothing that fits is refused here. A token has at least one byte, so the
    // tokenizer runs only when the bytes could reach the context.
    const uint32_t max_ctx = info.default_context;
    std::string text = parsed->prompt_text;
    size_t markup = 0;
    if (chat) {
      text.clear();
      for (const auto& seg : rendered) {
        if (seg.markup) ++markup;
        else text += seg.text;
      }
    }
    if (text.size() + markup >= max_ctx) {
      const size_t n = session->tokenize(text).size() + markup;
      if (n >= max_ctx)
        return send_error(res, {400,
                                "the prompt has " + std::string(chat ? "at least " : "") + std::to_string(n) +
                                    " tokens, the context is " + std::to_string(max_ctx),
                                "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"});
    }
  } catch (const std::exception& e) {
    return send_error(res, classify(e));
  }

  auto head = [model = cfg.model_name, id, created, chat](json choice) {
    return json{{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({std::move(choice)})}};
  };

  if (!parsed->stream) {
    ReplyBuilder reply(parsed->parallel_tool_calls);
    try {
      bool gone = false;
      auto r = session->generate_events(parsed->request, [&](const waste::client::TokenEvent& ev) {
        // A client that closed its connection reads no reply: stop generating for it (its
        // session and this thread are freed now, not after max_tokens).
        if (waste::serve::client_gone()) {
          gone = true;
          return false;
        }
        reply.add(ev, parsed->request.logprobs);
        return true;
      });
      count_images(*parsed, r);
      if (gone) {
        ++g_abandoned;
        spdlog::info("serve: request {}: the client went away after {} tokens: generation cancelled", t_request_id, r.tokens);
        return send_error(res, {499, "the client closed the connection", "invalid_request_error", "", "client_closed"});
      }
      json choice = chat ? json{{"index", 0},
                                {"message", reply.message()},
                                {"logprobs", reply.logprobs_json()},
                                {"finish_reason", waste::serve::finish_reason(r)}}
                         : json{{"index", 0},
                                {"text", reply.content},
                                {"logprobs", reply.completion_logprobs_json()},
                                {"finish_reason", waste::serve::finish_reason(r)}};
      json body = head(std::move(choice));
      body["object"] = chat ? "chat.completion" : "text_completion";
      body["usage"] = waste::serve::usage_json(r);
      res.set_content(dump(body), "application/json");
    } catch (const std::exception& e) {
      send_error(res, classify(e));
    }
    return;
  }

  // Streaming: Server-Sent Events, one chunk per token that adds something, then [DONE]. The
  // generation runs inside the content provider, on this request's thread (its own RPC event loop).
  auto p = std::make_shared<waste::serve::ParsedRequest>(std::move(*parsed));
  res.set_header("Cache-Control", "no-cache");
  // HTTP/1.0 has no chunked encoding: the events go out without a length and the end of the
  // body is the end of the connection (httplib's provider without length; this server shuts
  // the connection's sending side after [DONE], so even a 1.0 client that asked for keep-alive
  // sees the end).
  const bool http10 = req.version == "HTTP/1.0";
  auto provider = [client, session, p, head, chat, http10](size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    bool open = true;
    if (chat) open = write(sse(head({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}})));
    ReplyBuilder reply(p->parallel_tool_calls);
    try {
      auto r = session->generate_events(p->request, [&](const waste::client::TokenEvent& ev) {
        if (!open) return false;
        json delta = reply.add(ev, p->request.logprobs);
        json lp = reply.last_logprob();
        if (delta.empty() && lp.is_null()) return true;
        json choice;
        if (chat) {
          choice = {{"index", 0}, {"delta", delta}, {"logprobs", lp.is_null() ? json(nullptr) : json{{"content", json::array({lp})}}},
                    {"finish_reason", nullptr}};
        } else {
          choice = {{"index", 0}, {"text", delta.value("content", std::string())}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
          if (!lp.is_null()) choice["logprobs"] = ReplyBuilder::completion_logprobs(json::array({lp}));
        }
        open = write(sse(head(std::move(choice))));
        return open;  // the HTTP client went away: stop generating
      });
      count_images(*p, r);
      if (open) {
        json last = chat ? json{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", waste::serve::finish_reason(r)}}
                         : json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", waste::serve::finish_reason(r)}};
        json chunk = head(std::move(last));
        // An extension when the client did not ask either way: the last chunk carries the usage.
        if (!p->usage_said) chunk["usage"] = waste::serve::usage_json(r);
        write(sse(chunk));
        // OpenAI's include_usage: one more chunk, with no choices, carrying the usage.
        if (p->include_usage) {
          json u = head(json::object());
          u["choices"] = json::array();
          u["usage"] = waste::serve::usage_json(r);
          write(sse(u));
        }
      }
    } catch (const std::exception& e) {
      // Headers are out: the error travels as an event, as OpenAI's servers do.
      if (open) write(sse(error_json(classify(e))));
    }
    if (open) write("data: [DONE]\n\n");
    sink.done();
    if (http10 && waste::serve::connection_fd() >= 0) ::shutdown(waste::serve::connection_fd(), SHUT_WR);
    return true;
  };
  if (http10) {
    res.set_header("Connection", "close");
    res.set_content_provider("text/event-stream", provider);
  } else {
    res.set_chunked_content_provider("text/event-stream", provider);
  }
}

std::string metrics(const Config& cfg) {
  waste::client::Client c(cfg.address, cfg.compute_timeout_ms);
  const json s = c.stats();
  namespace stats = waste::stats;
  const auto engine = stats::from_json<stats::EngineStats>(s["engine"]);
  const auto pc = stats::from_json<stats::PromptCacheStats>(s["engine"]["prompt_cache"]);
  std::string o;
  // Compute's statistics as their lists define them (shared/stats/engine_stats.h) ...
  stats::write_metrics(o, engine);
  stats::write_metrics(o, pc);
  stats::write_metric(o, "waste_prompt_cache_hit_rate", stats::Kind::Gauge, "Prompt-cache hits / lookups.",
                      pc.lookups > 0 ? double(pc.hits) / double(pc.lookups) : 0.0);
  // ... and what only this waste-serve counts (shared/stats/serve_stats.h).
  const waste::serve::GuardCounts g = waste::serve::guard_counts();
  stats::ServeStats own;
  own.images = g_images.load();
  own.image_tokens = g_image_tokens.load();
  own.image_seconds = g_image_seconds.load();
  own.http_connections = g.open;
  own.http_refused = g.refused;
  own.http_read_timeouts = g.timed_out;
  own.http_abandoned = g_abandoned.load();
  stats::write_metrics(o, own);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string connect = waste::client::default_run_dir(), listen = "127.0.0.1:8080";
  // Given or not: the default depends on the model (compute's info, below).
  size_t max_body = 0;
  std::string image_dir;
  // Workers run connections (queued beyond them); each may hold one request body. More than
  // httplib's default (8): slow or many clients must not take every worker.
  int threads = 32;
  double request_read_timeout = 10;
  size_t max_per_client = 8;
  std::vector<std::string> api_key_files, aliases;
  CLI::App app{"waste-serve: OpenAI-compatible HTTP server in front of waste-compute"};
  app.add_option("--connect", connect, "compute's run directory or socket (default: the default run dir)");
  app.add_option("--listen", listen, "HOST:PORT to bind (127.0.0.1:8080; :PORT is loopback; port 0 picks one)");
  app.add_option("--api-key", cfg.api_keys,
                 "require Authorization: Bearer KEY; repeat for several keys, each with a prompt cache of its own "
                 "(default: WASTE_API_KEY if set, several separated by commas)");
  CLI::Option* max_body_opt = app.add_option(
      "--max-body", max_body,
      "largest request body in bytes (default: " + std::to_string(waste::serve::kDefaultMaxBodyVision) +
          " with a vision tower, room for a request's " + std::to_string(waste::kMaxImageBytesPerRequest >> 20) +
          " MiB of images as base64 data: URLs; else " + std::to_string(waste::serve::kDefaultMaxBody) +
          "; each HTTP thread may hold one body)");
  app.add_option("--api-key-file", api_key_files,
                 "read API keys from FILE: one a line, # starts a comment; a regular file others may not read "
                 "or write (mode 0600 or 0640); repeatable, adds to --api-key");
  app.add_option("--max-prompt-bytes", cfg.limits.max_prompt_bytes, "largest text of a prompt in bytes (1 MiB)");
  app.add_option("--max-tokens", cfg.limits.max_tokens_cap, "largest max_tokens a request may ask (65536)")
      ->check(CLI::Range(1u, 1u << 24));
  app.add_option("--max-messages", cfg.limits.max_messages, "most messages in a chat request (2048)")
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  app.add_option("--max-stop", cfg.limits.max_stop, "most stop sequences in a request (4)")
      ->check(CLI::Range(size_t(0), size_t(1024)));
  app.add_option("--max-stop-bytes", cfg.limits.max_stop_bytes, "longest stop sequence in bytes (256)")
      ->check(CLI::Range(size_t(1), size_t(1) << 16));
  app.add_option("--max-tools", cfg.limits.max_tools, "most tools in a chat request (128)")
      ->check(CLI::Range(size_t(0), size_t(1) << 16));
  app.add_option("--max-schema-bytes", cfg.limits.max_schema_bytes,
                 "largest tool definition and response_format, each as JSON text, in bytes (65536)")
      ->check(CLI::Range(size_t(64), size_t(1) << 26));
  app.add_option("--image-dir", image_dir,
                 "let image_url parts name local files (file:///... or a path) under this directory only; off by default");
  app.add_option("--threads", threads,
                 "HTTP worker threads (32); more connections wait in a queue; each thread may hold one request body")
      ->check(CLI::Range(1, 4096));
  app.add_option("--request-read-timeout", request_read_timeout,
                 "seconds a connection has to send a request's headers and body whole, from when a worker starts "
                 "reading it (time queued for a worker does not count) or from the end of its previous response "
                 "plus the 5 s keep-alive wait (10; 0: no bound); then it gets a 408 and is closed")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--max-connections-per-client", max_per_client,
                 "open connections per client IP address, queued or served (8; 0: no bound); one more gets a 503 "
                 "and is closed at once");
  int64_t compute_wait_ms = 30'000;
  app.add_option("--compute-wait", compute_wait_ms, "ms to wait at start for compute to answer before giving up (30000)")
      ->check(CLI::Range(int64_t(0), int64_t(3'600'000)));
  app.add_option("--compute-timeout", cfg.compute_timeout_ms,
                 "ms compute may take to answer a call or a liveness ping before the request fails with 503 (10000)")
      ->check(CLI::Range(int64_t(1), int64_t(3'600'000)));
  app.add_option("--model-name", cfg.model_name, "model id reported to clients (default: the container's name)");
  app.add_option("--model-alias", aliases,
                 "another name a request's \"model\" may give for the served model (repeatable); the model id and "
                 "the container's name without .waste are always taken, any other name is a 404 model_not_found");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  try {
    for (const std::string& f : api_key_files)
      for (std::string& k : waste::serve::read_api_key_file(f)) cfg.api_keys.push_back(std::move(k));
  } catch (const std::exception& e) {
    spdlog::error("serve: {}", e.what());
    return 2;
  }
  if (cfg.api_keys.empty())
    if (const char* k = ::getenv("WASTE_API_KEY")) {
      std::stringstream list(k);
      for (std::string key; std::getline(list, key, ',');)
        if (!key.empty()) cfg.api_keys.push_back(key);
    }
  cfg.address = waste::client::engine_address(connect);
  try {
    if (!image_dir.empty()) cfg.image_dir = waste::serve::ImageDir(image_dir);
  } catch (const std::exception& e) {
    spdlog::error("serve: {}", e.what());
    return 2;
  }
  cfg.limits.local_images = cfg.image_dir.enabled();

  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    spdlog::error("--listen {}: expected HOST:PORT", listen);
    return 2;
  }
  // ":PORT" means loopback, as the supervisor's readiness probe reads it (an empty host used to
  // bind [::1] while the probe waited on 127.0.0.1 for ten minutes).
  const std::string host = colon == 0 ? std::string("127.0.0.1") : listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
      std::stoi(port_text) > 65535) {
    spdlog::error("--listen {}: the port must be a number from 0 to 65535", listen);
    return 2;
  }
  const int port = std::stoi(port_text);
  try {
    // Compute may be restarting (a supervisor restarts each process on its own): wait for it
    // up to --compute-wait instead of exiting at once into a restart loop.
    std::unique_ptr<waste::client::Client> conn;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(compute_wait_ms);
    for (bool said = false;;) {
      try {
        conn = std::make_unique<waste::client::Client>(cfg.address, cfg.compute_timeout_ms);
        break;
      } catch (const waste::Error& e) {
        if (e.kind() != waste::ErrorKind::Unavailable || std::chrono::steady_clock::now() >= give_up) throw;
        if (!said) spdlog::info("serve: waiting for compute at {} ({})", cfg.address, e.what());
        said = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a retry interval, bounded by give_up
      }
    }
    waste::client::Client& c = *conn;
    const auto info = c.info();
    const std::filesystem::path container = std::filesystem::path(info.model).filename();
    if (cfg.model_name.empty()) cfg.model_name = container.string();
    if (cfg.model_name.empty()) cfg.model_name = "waste";
    // The names a request's "model" may give: the id, the container's name and its stem (what
    // clients and this repository's examples send: "tiny" for tiny.waste), the aliases.
    for (const std::string& n : {cfg.model_name, container.string(), container.stem().string()})
      if (!n.empty() && !serves(cfg, n)) cfg.model_names.push_back(n);
    for (const std::string& n : aliases)
      if (!n.empty() && !serves(cfg, n)) cfg.model_names.push_back(n);
    // Paths of this host that error messages must not show a client (error_body scrubs them).
    std::vector<std::string> private_paths = {connect, cfg.address, info.model, waste::client::default_run_dir()};
    for (const std::string& pth : std::vector<std::string>(private_paths)) {
      std::error_code ec;
      const auto abs = std::filesystem::absolute(pth, ec);
      if (!ec) private_paths.push_back(abs.string());
      const auto canon = std::filesystem::weakly_canonical(pth, ec);
      if (!ec) private_paths.push_back(canon.string());
    }
    if (!image_dir.empty()) private_paths.push_back(cfg.image_dir.root());
    waste::serve::set_private_paths(private_paths);
    cfg.vision = info.vision;
    if (max_body_opt->count() == 0) max_body = waste::serve::default_max_body(info.vision);
    spdlog::info("serve: compute at {}: {} ({}), context {}, request bodies up to {} bytes{}", cfg.address,
                 cfg.model_name, info.family, info.default_context, max_body, info.vision ? " (vision)" : "");
  } catch (const std::exception& e) {
    spdlog::error("serve: {}", e.what());
    return 1;
  }

  httplib::Server svr;
  svr.new_task_queue = [threads] { return waste::serve::new_guarded_pool(size_t(threads)); };
  svr.set_payload_max_length(max_body);
  svr.set_read_timeout(30, 0);  // per read(); the request as a whole has --request-read-timeout
  constexpr int kKeepAliveSeconds = 5;  // httplib's default, named: the read deadline counts it
  svr.set_keep_alive_timeout(kKeepAliveSeconds);
  // Each request gets an id (X-Request-Id, and the log line of its error); the connection's
  // next request gets its read deadline when a response went out.
  // A body httplib could not bound is refused unread (body_framing.h): true when res holds the
  // refusal. The connection then ends, the body (if any) still on the wire.
  auto refuse_framing = [](const httplib::Request& req, httplib::Response& res) {
    auto header = [&](const char* name) -> std::optional<std::string> {
      if (!req.has_header(name)) return std::nullopt;
      return req.get_header_value(name);
    };
    const waste::serve::BodyHeaders h{req.method, header("Content-Length"), header("Transfer-Encoding"),
                                      header("Content-Encoding"), header("Content-Type")};
    auto refused = waste::serve::refuse_body_framing(h);
    if (!refused) return false;
    send_error(res, *refused);
    res.set_header("Connection", "close");
    waste::serve::close_after_response();
    return true;
  };
  // Runs before httplib reads a body.
  svr.set_pre_routing_handler([refuse_framing](const httplib::Request& req, httplib::Response& res) {
    t_request_id = "req-" + std::to_string(g_http_request++);
    res.set_header("X-Request-Id", t_request_id);
    waste::serve::close_after_response(false);
    return refuse_framing(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  // "Expect: 100-continue" (curl sends it for bodies over 1 MiB) is answered before routing: a
  // body that would be refused is refused here, before the client uploads it.
  // (A 100 goes on to the pre-routing handler, which names the request.)
  svr.set_expect_100_continue_handler([refuse_framing](const httplib::Request& req, httplib::Response& res) {
    waste::serve::close_after_response(false);
    if (!refuse_framing(req, res)) return 100;
    t_request_id = "req-" + std::to_string(g_http_request++);
    res.set_header("X-Request-Id", t_request_id);
    return res.status;
  });
  svr.set_logger([](const httplib::Request&, const httplib::Response&) { waste::serve::response_sent(); });
  // The library's default sets SO_REUSEPORT, which let a second waste-serve (of another model)
  // bind the same port and take half the connections. SO_REUSEADDR alone: a restart may rebind
  // at once (no TIME_WAIT wait), and a port in use fails with EADDRINUSE.
  static int listen_fd = -1;  // the server socket, seen here before it binds (for the backlog below)
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  // httplib's own refusals (413 body too large, 404, 400 bad request line) get OpenAI bodies.
  svr.set_error_handler([max_body](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_error(res, {413, "the request body is more than " + std::to_string(max_body) + " bytes (waste-serve --max-body)",
                       "invalid_request_error", "", "payload_too_large"});
    else if (res.status == 404) send_error(res, {404, "no such endpoint", "invalid_request_error", "", "not_found"});
    else if (res.status == 405) send_error(res, {405, "method not allowed", "invalid_request_error", "", ""});
    else send_error(res, {res.status, "bad request", res.status >= 500 ? "server_error" : "invalid_request_error", "", ""});
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, what, "server_error", "", ""});
  });

  // A handler runs once its request is read whole (httplib reads the body before it): from
  // here the request's read deadline no longer applies.
  auto read = [](httplib::Server::Handler h) {
    return [h = std::move(h)](const httplib::Request& q, httplib::Response& r) {
      waste::serve::request_read();
      h(q, r);
    };
  };
  svr.Post("/v1/chat/completions",
           read([&](const httplib::Request& q, httplib::Response& r) { handle_generate(cfg, q, r, true); }));
  svr.Post("/v1/completions", read([&](const httplib::Request& q, httplib::Response& r) { handle_generate(cfg, q, r, false); }));
  // The generation endpoints take POST only: another method gets 405 naming it, not a 404.
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    auto wrong_method = [](const httplib::Request& q, httplib::Response& r) {
      send_error(r, {405, q.method + " is not allowed here: send POST", "invalid_request_error", "", "method_not_allowed"});
      r.set_header("Allow", "POST");
    };
    svr.Get(path, wrong_method);
    svr.Put(path, wrong_method);
    svr.Delete(path, wrong_method);
    svr.Patch(path, wrong_method);
  }
  // "vision" (an extension): image_url content parts are taken.
  auto model_json = [&] {
    return json{{"id", cfg.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "waste"}, {"vision", cfg.vision}};
  };
  svr.Get("/v1/models", read([&](const httplib::Request& q, httplib::Response& r) {
    if (!authorized(cfg, q, r)) return;
    r.set_content(json{{"object", "list"}, {"data", json::array({model_json()})}}.dump(), "application/json");
  }));
  // One model by name: any name a request's "model" may give; else 404 model_not_found.
  svr.Get(R"(/v1/models/(.+))", read([&](const httplib::Request& q, httplib::Response& r) {
    if (!authorized(cfg, q, r)) return;
    const std::string name = q.matches[1];
    if (!serves(cfg, name)) return send_error(r, model_not_found(name));
    r.set_content(model_json().dump(), "application/json");
  }));
  // The real state of the instance, for load balancers and the supervisor: 200 when compute
  // answered in time and its iod (if any) answers; else 503 saying which is not. It needs no
  // key (a liveness probe) and tells nothing a client could not learn from a failed request.
  svr.Get("/health", read([&](const httplib::Request&, httplib::Response& r) {
    json compute = {{"state", "ok"}}, iod = {{"state", "unknown"}};
    json sessions = nullptr;
    std::string problem;
    try {
      waste::client::Client c(cfg.address, cfg.compute_timeout_ms);
      const waste::client::Health h = c.health();
      compute["busy_seconds"] = h.busy_seconds;
      iod = {{"state", h.iod}};
      if (h.iod != "none") iod["seconds_since_answer"] = h.iod_since_answer_seconds;
      if (h.iod != "ok" && h.iod != "none") problem = "iod is " + h.iod + (h.iod_detail.empty() ? "" : ": " + h.iod_detail);
      sessions = c.stats()["engine"]["sessions"];
    } catch (const std::exception& e) {
      // Unanswered: compute is there but stopped or wedged; else it is gone.
      compute = {{"state", waste::unanswered(e) ? "not_answering" : "unreachable"}};
      problem = e.what();
    }
    json body = {{"status", problem.empty() ? "ok" : "unavailable"}, {"model", cfg.model_name},
                 {"compute", compute}, {"iod", iod}, {"sessions", sessions}};
    if (!problem.empty()) {
      // The whole reason goes to the log under the request id; the reply says which part is
      // down, without paths (error_json).
      r.status = 503;
      const waste::serve::ApiError err{503, problem, "server_error", "",
                                       compute["state"] == "ok" ? "iod_unavailable" : "compute_unavailable"};
      body["error"] = error_json(err)["error"];
    }
    r.set_content(body.dump(), "application/json");
  }));
  svr.Get("/metrics", read([&](const httplib::Request& q, httplib::Response& r) {
    if (!authorized(cfg, q, r)) return;
    try {
      r.set_content(metrics(cfg), "text/plain; version=0.0.4");
    } catch (const std::exception& e) {
      send_error(r, {503, e.what(), "server_error", "", "compute_unavailable"});
    }
  }));

  // SIGTERM/SIGINT stop the listener; in-flight requests finish on their threads. Declared
  // after svr: its destructor ignores the signals and joins its thread before svr goes.
  std::signal(SIGPIPE, SIG_IGN);
  std::optional<waste::serve::StopOnSignal> stop_on_signal;
  try {
    stop_on_signal.emplace([&svr] {
      if (!svr.is_running()) return false;  // not listening yet: stop() would be lost; retried
      svr.stop();
      return true;
    });
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }

  int bound = port;
  if (port == 0) {
    bound = svr.bind_to_any_port(host);
  } else if (!svr.bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound < 0) {
    spdlog::error("serve: cannot bind {} (in use by another server, or not an address of this host)", listen);
    return 1;
  }
  // The library (compiled, Debian's libcpp-httplib) listens with a backlog of 5: 16 clients
  // connecting at once overflowed it into seconds of SYN retries. listen() again raises it.
  constexpr int kListenBacklog = 256;
  if (listen_fd >= 0 && ::listen(listen_fd, kListenBacklog) != 0)
    spdlog::warn("serve: cannot raise the listen backlog to {}: {}", kListenBacklog, std::strerror(errno));
  // Deadlines and per-client bounds for the connections of this listener (connection_guard.h).
  waste::serve::GuardOptions guard;
  // Rounded up: a small positive timeout is a short bound, never "no bound" (0).
  guard.request_read_timeout = std::chrono::milliseconds(int64_t(std::ceil(request_read_timeout * 1000)));
  guard.keep_alive_idle = std::chrono::seconds(kKeepAliveSeconds);
  guard.max_connections_per_client = max_per_client;
  waste::serve::guard_connections(listen_fd, guard);
  // Beyond loopback anyone who reaches the port can use the model (and its prompt cache).
  const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  if (!loopback && cfg.api_keys.empty())
    spdlog::warn("serve: listening on {} without an API key: anyone who reaches it can use the model "
                 "(--api-key KEY or WASTE_API_KEY)", host);
  // The line the supervisor and tests read to learn the port.
  spdlog::info("serve: listening on http://{}:{}", host, bound);
  std::fflush(stdout);
  if (stop_on_signal->requested()) {  // a signal before listening: the watcher's retry would end it too
    spdlog::info("serve: stopped before listening");
    return 0;
  }
  if (!svr.listen_after_bind()) {
    spdlog::error("serve: listening on {}:{} failed", host, bound);
    return 1;
  }
  spdlog::info("serve: stopped");
  return 0;
}
