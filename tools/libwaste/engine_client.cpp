#include "tools/libwaste/engine_client.h"

#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <kj/exception.h>
#include <kj/timer.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>

#include "proto/engine.capnp.h"
#include "shared/ipc/rpc_call.h"
#include "shared/stats/capnp.h"
#include "shared/stats/engine_stats.h"
#include "shared/stats/json.h"
#include "shared/util/error.h"

namespace waste::client {

std::string default_run_dir() {
  if (const char* d = ::getenv("WASTE_RUN_DIR"); d && *d) return d;
  if (const char* x = ::getenv("XDG_RUNTIME_DIR"); x && *x) return std::string(x) + "/waste";
  return "/tmp/waste-" + std::to_string(::getuid());
}

std::string engine_address(const std::string& where) {
  if (where.rfind("unix:", 0) == 0) return where;
  std::error_code ec;
  if (std::filesystem::is_directory(where, ec)) return "unix:" + where + "/compute.sock";
  if (where.find('/') != std::string::npos || std::filesystem::exists(where, ec)) return "unix:" + where;
  return where;  // host:port
}

namespace {

// std::string to Text by its size: the implicit conversion goes through c_str() and would end
// the text at its first NUL (a U+0000 in a message is text like any other).
capnp::Text::Reader text_of(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }


// Every RPC error names compute's address, and says so when compute went away.
template <typename F>
auto call(const std::string& address, const char* what, F&& f) -> decltype(f()) {
  return waste::ipc::rpc_call("compute " + address, what, std::forward<F>(f), "compute went away");
}

nlohmann::json session_json(proto::SessionStats::Reader s) {
  nlohmann::json j = stats::to_json(stats::from_capnp<stats::SessionStats>(s));
  j["id"] = s.getId();
  j["position"] = s.getPosition();
  j["context"] = s.getContext();
  j["generating"] = s.getGenerating();
  return j;
}

// The client's TokenSink: hands each token to the callback; a false return fails the stream,
// which the server takes as "stop".
class SinkImpl final : public proto::TokenSink::Server {
 public:
  explicit SinkImpl(const OnEvent& f) : f_(f) {}
  kj::Promise<void> token(TokenContext ctx) override {
    auto p = ctx.getParams();
    auto t = p.getText();
    auto r = p.getReasoning();
    TokenEvent ev;
    ev.id = p.getId();
    ev.text = std::string_view(t.cStr(), t.size());
    ev.reasoning = std::string_view(r.cStr(), r.size());
    for (auto tc : p.getToolCalls())
      ev.tool_calls.push_back({tc.getIndex(), tc.getId().cStr(), tc.getName().cStr(), tc.getArguments().cStr()});
    if (p.hasLogprob()) {
      ev.has_logprob = true;
      ev.logprob = p.getLogprob().getLogprob();
      auto tb = p.getLogprob().getBytes();
      ev.token.assign(reinterpret_cast<const char*>(tb.begin()), tb.size());
      for (auto x : p.getLogprob().getTop()) {
        auto b = x.getBytes();
        ev.top.push_back({x.getId(), std::string(reinterpret_cast<const char*>(b.begin()), b.size()), x.getLogprob()});
      }
    }
    bool go_on = true;
    try {
      go_on = f_(ev);
    } catch (...) {
      go_on = false;
    }
    if (!go_on) return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str("client stopped"));
    return kj::READY_NOW;
  }

 private:
  const OnEvent& f_;
};

kj::ArrayPtr<const kj::byte> bytes_ptr(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

// An image part travels as the file itself when the client has it (`data`), else as its
// reference (`text`, a data: URL) for compute to decode: never both, so nothing is ignored.
void set_part(proto::ContentPart::Builder b, const chat::ContentPart& p, const std::string& field) {
  const bool image = p.kind == chat::ContentPart::Kind::Image;
  if (!image && !p.data.empty()) throw chat::RequestError(field, "a text part has no data (an image part carries the file)");
  b.setImage(image);
  if (image && !p.data.empty()) {
    if (!p.text.empty()) throw chat::RequestError(field, "an image part has both its file and a URL");
    b.setData(bytes_ptr(p.data));
  } else {
    b.setText(text_of(p.text));
  }
}

// Images belong to a token prompt only: a chat's are in its parts, and a text prompt has no
// placeholder ids for them to replace.
void set_images(proto::GenerateRequest::Builder g, const Request& r) {
  if (r.images.empty()) return;
  if (r.kind != Request::Kind::Tokens)
    throw chat::RequestError("images", "only a token prompt takes images (a chat carries them in its messages)");
  auto l = g.initImages(uint32_t(r.images.size()));
  for (size_t i = 0; i < r.images.size(); ++i) l.set(uint32_t(i), bytes_ptr(r.images[i]));
}

// The chat of a request into the RPC's messages and options.
void set_chat(proto::GenerateRequest::Builder g, const chat::ChatRequest& c) {
  auto l = g.getPrompt().initChat(uint32_t(c.messages.size()));
  for (size_t i = 0; i < c.messages.size(); ++i) {
    const chat::Message& m = c.messages[i];
    auto b = l[uint32_t(i)];
    b.setRole(text_of(m.role));
    auto parts = b.initParts(uint32_t(m.content.size()));
    for (size_t k = 0; k < m.content.size(); ++k)
      set_part(parts[uint32_t(k)], m.content[k], "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]");
    b.setName(text_of(m.name));
    b.setReasoning(text_of(m.reasoning));
    auto tcs = b.initToolCalls(uint32_t(m.tool_calls.size()));
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      const chat::ToolCall& tc = m.tool_calls[k];
      tcs[uint32_t(k)].setHasId(tc.id.has_value());
      if (tc.id) tcs[uint32_t(k)].setId(text_of(*tc.id));
      tcs[uint32_t(k)].setName(text_of(tc.name));
      tcs[uint32_t(k)].setArguments(text_of(tc.arguments));
    }
    b.setHasToolCallId(m.tool_call_id.has_value());
    if (m.tool_call_id) b.setToolCallId(text_of(*m.tool_call_id));
    b.setHasTool(m.tool.has_value());
    if (m.tool) b.setTool(text_of(*m.tool));
    if (!m.tools.is_null()) b.setToolsJson(m.tools.dump());
  }
  auto o = g.initChatOptions();
  if (!c.tools.is_null()) o.setToolsJson(c.tools.dump());
  using Mode = chat::ToolChoice::Mode;
  if (c.tool_choice.given) {
    switch (c.tool_choice.mode) {
      case Mode::Auto: o.setToolChoice("auto"); break;
      case Mode::None: o.setToolChoice("none"); break;
      case Mode::Required: o.setToolChoice("required"); break;
      case Mode::Named: o.setToolChoice("function:" + c.tool_choice.name); break;
    }
  }
  using T = chat::ResponseFormat::Type;
  if (c.response_format.type == T::JsonObject) o.setResponseFormat("json_object");
  if (c.response_format.type == T::JsonSchema) {
    o.setResponseFormat("json_schema");
    o.setSchemaJson(c.response_format.schema.dump());
  }
  o.setThinking(c.thinking);
  o.setThinkingGiven(c.thinking_given);
  o.setThinkingEffort(c.thinking_effort);
  o.setAddGenerationPrompt(c.add_generation_prompt);
}

struct Poller {
  kj::Timer& timer;
  const std::atomic<bool>* flag;
  proto::Session::Client session;
  kj::Promise<void> loop() {
    return timer.afterDelay(50 * kj::MILLISECONDS).then([this]() -> kj::Promise<void> {
      if (flag->load()) return session.cancelRequest().send().ignoreResult();
      return loop();
    });
  }
};

// Replies may be larger than Cap'n Proto's default 64 MiB read limit: an eval's logits alone
// may be 64 MiB (EngineService::kMaxEvalLogitsBytes), plus the message around them.
capnp::ReaderOptions reader_options() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = (uint64_t(64) << 20) / 8 + (uint64_t(16) << 20) / 8;  // 80 MiB
  return o;
}

}  // namespace

struct Client::Impl {
  std::string address;
  int64_t timeout_ms;
  capnp::EzRpcClient rpc;
  proto::Engine::Client engine;
  Impl(const std::string& a, int64_t timeout)
      : address(a), timeout_ms(timeout), rpc(a.c_str(), 0, reader_options()), engine(rpc.getMain<proto::Engine>()) {}
  kj::WaitScope& ws() { return rpc.getWaitScope(); }
  kj::Timer& timer() { return rpc.getIoProvider().getTimer(); }
  // A short call's answer, within the deadline.
  template <typename T>
  T wait(kj::Promise<T>&& p) {
    return waste::ipc::wait_within(kj::mv(p), ws(), timer(), timeout_ms);
  }
  // A long call's answer, however long it takes, as long as compute answers a ping every
  // few seconds (each within the deadline): its worker may be busy for minutes, its RPC
  // thread never is.
  template <typename T>
  T wait_alive(kj::Promise<T>&& p) {
    if (timeout_ms <= 0) return p.wait(ws());
    return p.exclusiveJoin(pings().then([]() -> kj::Promise<T> { return kj::Promise<T>(kj::NEVER_DONE); })).wait(ws());
  }
  // Never resolves; rejects when a ping goes unanswered.
  kj::Promise<void> pings() {
    const int64_t every = std::clamp<int64_t>(timeout_ms / 2, 1, 2000);
    return timer()
        .afterDelay(every * kj::MILLISECONDS)
        .then([this] { return waste::ipc::within(engine.healthRequest().send().ignoreResult(), timer(), timeout_ms); })
        .then([this] { return pings(); });
  }
};

struct Session::Impl {
  Client::Impl* client;
  proto::Session::Client session;
};

Client::Client(const std::string& where, int64_t timeout_ms) {
  const std::string a = engine_address(where);
  call(a, "connect", [&] {
    impl_ = std::make_unique<Impl>(a, timeout_ms);
    // EzRpcClient connects lazily: one round trip now so a missing compute fails here.
    impl_->wait(impl_->engine.infoRequest().send());
    return 0;
  });
}

Client::~Client() = default;

const std::string& Client::address() const { return impl_->address; }

Info Client::info() {
  return call(impl_->address, "info", [&] {
    auto r = impl_->wait(impl_->engine.infoRequest().send());
    auto i = r.getInfo();
    Info o;
    o.model = i.getModel().cStr();
    o.family = i.getFamily().cStr();
    o.expert_path = i.getExpertPath().cStr();
    o.chat_format = i.getChatFormat().cStr();
    o.layers = i.getLayers();
    o.hidden = i.getHidden();
    o.vocab = i.getVocab();
    o.routed_experts = i.getRoutedExperts();
    o.top_k = i.getTopK();
    o.default_context = i.getDefaultContext();
    o.max_context = i.getMaxContext();
    o.max_sessions = i.getMaxSessions();
    o.max_queued = i.getMaxQueued();
    o.budget_bytes = i.getBudgetBytes();
    o.trunk_bytes = i.getTrunkBytes();
    o.has_tokenizer = i.getHasTokenizer();
    o.vision = i.getVision();
    o.image_patches = i.getImagePatches();
    return o;
  });
}

nlohmann::json Client::stats() {
  return call(impl_->address, "stats", [&] {
    auto r = impl_->wait(impl_->engine.statsRequest().send());
    auto s = r.getStats();
    nlohmann::json e = stats::to_json(stats::from_capnp<stats::EngineStats>(s));
    e["expert_path"] = s.getExpertPath().cStr();
    e["prompt_cache"] = stats::to_json(stats::from_capnp<stats::PromptCacheStats>(s.getPromptCache()));
    nlohmann::json list = nlohmann::json::array();
    for (auto x : r.getSessions()) list.push_back(session_json(x));
    return nlohmann::json{{"engine", e}, {"sessions", list}};
  });
}

Health Client::health(uint32_t not_answering_after_ms) {
  return call(impl_->address, "health", [&] {
    auto req = impl_->engine.healthRequest();
    req.setNotAnsweringAfterMs(not_answering_after_ms);
    auto r = impl_->wait(req.send());
    auto h = r.getHealth();
    Health o;
    using S = proto::EngineHealth::IodState;
    switch (h.getIodState()) {
      case S::NONE: o.iod = "none"; break;
      case S::OK: o.iod = "ok"; break;
      case S::NOT_ANSWERING: o.iod = "not_answering"; break;
      case S::DOWN: o.iod = "down"; break;
      default: o.iod = "unknown"; break;  // a newer compute's state: not ok
    }
    o.iod_detail = h.getIodDetail().cStr();
    o.iod_since_answer_seconds = h.getIodSinceAnswerSeconds();
    o.busy_seconds = h.getBusySeconds();
    o.reattaches = h.getReattaches();
    return o;
  });
}

std::unique_ptr<Session> Client::open_session(uint32_t context) {
  return call(impl_->address, "openSession", [&] {
    auto req = impl_->engine.openSessionRequest();
    req.initOptions().setContext(context);
    auto r = impl_->wait(req.send());
    auto impl = std::make_unique<Session::Impl>(Session::Impl{impl_.get(), r.getSession()});
    return std::unique_ptr<Session>(new Session(std::move(impl)));
  });
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

void Request::set_chat(const std::vector<std::pair<std::string, std::string>>& messages) {
  kind = Kind::Chat;
  chat = chat::ChatRequest{};
  for (const auto& [role, content] : messages) {
    chat::Message m;
    m.role = role;
    if (!content.empty()) m.content.push_back(chat::ContentPart{chat::ContentPart::Kind::Text, content, {}});
    chat.messages.push_back(std::move(m));
  }
}

Result Session::generate(const Request& r, const OnToken& on_token, const std::atomic<bool>* interrupt) {
  return generate_events(r, [&](const TokenEvent& ev) { return on_token(ev.id, ev.text); }, interrupt);
}

Result Session::generate_events(const Request& r, const OnEvent& on_token, const std::atomic<bool>* interrupt) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "generate", [&] {
    auto req = impl_->session.generateRequest();
    auto g = req.initRequest();
    switch (r.kind) {
      case Request::Kind::Text:
        g.getPrompt().setText(text_of(r.text));
        break;
      case Request::Kind::Tokens: {
        auto l = g.getPrompt().initTokens(uint32_t(r.tokens.size()));
        for (size_t i = 0; i < r.tokens.size(); ++i) l.set(uint32_t(i), r.tokens[i]);
        break;
      }
      case Request::Kind::Chat:
        set_chat(g, r.chat);
        break;
    }
    g.setMaxTokens(r.max_tokens);
    g.setTemperature(r.temperature);
    g.setTopP(r.top_p);
    g.setTopK(r.top_k);
    g.setMinP(r.min_p);
    g.setRepetitionPenalty(r.repetition_penalty);
    g.setSeed(r.seed);
    g.setPresencePenalty(r.presence_penalty);
    g.setFrequencyPenalty(r.frequency_penalty);
    g.setLogprobs(r.logprobs);
    g.setTopLogprobs(r.top_logprobs);
    g.setCacheScope(r.cache_scope);
    set_images(g, r);
    g.setImagePatches(r.image_patches);
    auto stops = g.initStop(uint32_t(r.stop.size()));
    for (size_t i = 0; i < r.stop.size(); ++i) stops.set(uint32_t(i), r.stop[i]);
    req.setSink(kj::heap<SinkImpl>(on_token));
    auto reply = req.send();
    // While waiting, a flag set by a signal handler is polled and turned into a cancel; the
    // watcher runs on the same event loop as the wait and is dropped with it.
    Poller poller{c.rpc.getIoProvider().getTimer(), interrupt, impl_->session};
    kj::Promise<void> watcher = interrupt ? poller.loop().eagerlyEvaluate(nullptr) : kj::Promise<void>(kj::NEVER_DONE);
    auto out = c.wait_alive(kj::mv(reply));
    auto s = out.getStats();
    Result r;
    stats::from_capnp(s, static_cast<stats::GenerateStats&>(r));
    r.stop_reason = s.getStopReason().cStr();
    return r;
  });
}

std::vector<int32_t> Session::tokenize(const std::string& text) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "tokenize", [&] {
    auto req = impl_->session.tokenizeRequest();
    req.setText(text_of(text));
    auto r = c.wait(req.send());
    std::vector<int32_t> out;
    for (int32_t id : r.getTokens()) out.push_back(id);
    return out;
  });
}

std::string Session::detokenize(const std::vector<int32_t>& ids) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "detokenize", [&] {
    auto req = impl_->session.detokenizeRequest();
    auto l = req.initTokens(uint32_t(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) l.set(uint32_t(i), ids[i]);
    auto r = c.wait(req.send());
    return std::string(r.getText().cStr(), r.getText().size());
  });
}

void Session::reset() {
  Client::Impl& c = *impl_->client;
  call(c.address, "reset", [&] {
    c.wait_alive(impl_->session.resetRequest().send());  // runs on the worker, after its step
    return 0;
  });
}

void Session::cancel() {
  Client::Impl& c = *impl_->client;
  call(c.address, "cancel", [&] {
    c.wait(impl_->session.cancelRequest().send());
    return 0;
  });
}

FileResult Session::save(const std::string& path) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "save", [&] {
    auto req = impl_->session.saveRequest();
    req.setPath(text_of(path));
    auto r = c.wait_alive(req.send());
    return FileResult{r.getTokens(), r.getBytes(), r.getSeconds()};
  });
}

FileResult Session::load(const std::string& path) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "load", [&] {
    auto req = impl_->session.loadRequest();
    req.setPath(text_of(path));
    auto r = c.wait_alive(req.send());
    return FileResult{r.getTokens(), r.getBytes(), r.getSeconds()};
  });
}

std::vector<float> Session::eval(const std::vector<int32_t>& ids, bool stepwise, uint32_t* vocab,
                                 const std::vector<std::vector<uint8_t>>& images, const std::vector<float>& pad_embeddings,
                                 uint32_t image_patches) {
  Client::Impl& c = *impl_->client;
  return call(c.address, "eval", [&] {
    static_assert(std::endian::native == std::endian::little, "eval's logits are little-endian f32");
    require(ids.size() < (size_t(1) << 29), "eval: " + std::to_string(ids.size()) + " ids are too many for one call");
    if (!images.empty() && !pad_embeddings.empty())
      throw chat::RequestError("images", "eval: give images or pad embeddings, not both");
    auto req = impl_->session.evalRequest();
    auto l = req.initTokens(uint32_t(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) l.set(uint32_t(i), ids[i]);
    req.setStepwise(stepwise);
    auto li = req.initImages(uint32_t(images.size()));
    for (size_t i = 0; i < images.size(); ++i) li.set(uint32_t(i), bytes_ptr(images[i]));
    if (!pad_embeddings.empty())
      req.setPadEmbeddings({reinterpret_cast<const kj::byte*>(pad_embeddings.data()), pad_embeddings.size() * sizeof(float)});
    req.setImagePatches(image_patches);
    auto r = c.wait_alive(req.send());
    const uint32_t V = r.getVocab();
    auto data = r.getLogits();
    // Images expand their placeholders, so only then may there be more rows than ids.
    const uint64_t row_bytes = uint64_t(V) * sizeof(float);
    const bool rows_ok = V > 0 && (images.empty() ? data.size() == ids.size() * row_bytes
                                                  : data.size() % row_bytes == 0 && data.size() >= ids.size() * row_bytes);
    require(rows_ok, "eval: compute sent " + std::to_string(data.size()) + " bytes of logits for " +
                         std::to_string(ids.size()) + " tokens of a vocabulary of " + std::to_string(V));
    std::vector<float> out(data.size() / sizeof(float));
    std::memcpy(out.data(), data.begin(), data.size());
    if (vocab) *vocab = V;
    return out;
  });
}

nlohmann::json Session::stats() {
  Client::Impl& c = *impl_->client;
  return call(c.address, "stats", [&] {
    auto r = c.wait(impl_->session.statsRequest().send());
    return session_json(r.getStats());
  });
}

}  // namespace waste::client
