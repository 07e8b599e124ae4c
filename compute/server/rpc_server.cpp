#include "compute/server/rpc_server.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <deque>
#include <map>

#include "compute/server/request_decode.h"
#include "compute/server/token_mailbox.h"
#include "proto/engine.capnp.h"
#include "shared/chat/render.h"
#include "shared/ipc/rpc_error.h"
#include "shared/stats/capnp.h"
#include "shared/util/error.h"

namespace waste::server {

namespace {

// An RPC error whose text the client shows, with its kind (shared/ipc/rpc_error.h) for the
// client to act on: waste-serve answers the HTTP status of the kind, no text matching.
kj::Exception failure(const std::string& message, ErrorKind kind = ErrorKind::Internal, const std::string& param = "") {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str(ipc::encode_error(kind, param, message).c_str()));
}

// The RPC error of a failure. waste::Error (bad input, a refused limit) keeps its kind across
// the call. A request field at fault reads "invalid request (PARAM): message" for people (and
// the C API's older parsers). An RPC error (kj::Exception) stays what it is.
kj::Exception rpc_failure(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const chat::RequestError& e) {
    return failure("invalid request (" + e.param + "): " + e.what(), ErrorKind::InvalidRequest, e.param);
  } catch (const Error& e) {
    return failure(e.what(), e.kind(), e.param());
  } catch (const std::exception& e) {
    return failure(e.what());
  } catch (kj::Exception& e) {
    return kj::mv(e);
  } catch (...) {
    return failure("unknown error");
  }
}

template <typename F>
kj::Promise<void> guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception&) {
    return rpc_failure(std::current_exception());
  }
}

// What the worker hands back from EngineService's control calls: nothing, or the RPC error its
// failure makes. Made on the worker, so that the exception object never crosses threads: its
// reference count lives in libstdc++, which ThreadSanitizer does not see, so the worker's end of
// a catch block and the RPC thread's reading of what() looked like a race (and a value is
// simpler to reason about than a shared exception).
using WorkerFailure = kj::Maybe<kj::Exception>;
WorkerFailure worker_failure(std::exception_ptr thrown) {
  if (!thrown) return nullptr;
  return rpc_failure(thrown);
}
kj::Promise<void> failed_or_done(WorkerFailure f) {
  KJ_IF_MAYBE(e, f) return kj::mv(*e);
  return kj::READY_NOW;
}

// The worker's answer to an RPC call, fulfilled on the RPC thread through the mailbox (after
// every token posted before it), never from the worker: kj hands a cross-thread fulfiller's
// value over in header code ordered by a futex TSan cannot see (token_mailbox.h).
template <typename T>
using SharedFulfiller = std::shared_ptr<kj::Own<kj::CrossThreadPromiseFulfiller<T>>>;
template <typename T>
void answer_from_worker(TokenMailbox& mailbox, SharedFulfiller<T> f, T value) {
  // Dropped with a closed mailbox: the fulfiller's end then rejects a promise nobody waits for.
  mailbox.post([f = std::move(f), value = std::move(value)]() mutable { (*f)->fulfill(kj::mv(value)); });
}

// How many tokens may wait for a slow client before its request is skipped in the rounds.
constexpr int kMaxUnsentTokens = 64;
// Decodes and fits every image to its patch grid (cheap beside the tower, which runs later on
// the vision thread). A model without a tower refuses, naming the first image.
std::vector<PreparedImage> prepare_images(EngineService& svc, const std::vector<RequestImage>& images, uint32_t patches) {
  std::vector<PreparedImage> out;
  if (images.empty()) {
    if (patches != 0) throw chat::RequestError("image_patches", "given, but the request has no images");
    return out;
  }
  if (!svc.vision().available())
    throw chat::RequestError(images[0].field, "this model has no vision tower: it takes no images");
  // The operator's --image-patches is the most a request may ask for: it bounds the tower's
  // time and the planner counted its activations.
  const int budget = patches ? int(std::min<uint32_t>(patches, 1u << 20)) : svc.image_patches();
  if (budget > svc.image_patches())
    throw chat::RequestError("image_patches", std::to_string(budget) + " is more than this server allows (" +
                                                  std::to_string(svc.image_patches()) + ", waste-compute --image-patches)");
  try {
    svc.vision().patch_budget(budget);
  } catch (const Error& e) {
    throw chat::RequestError("image_patches", e.what());
  }
  int64_t total_patches = 0;
  uint64_t decoded_pixels = 0;
  for (const RequestImage& im : images) {
    try {
      out.push_back(svc.vision().prepare(im.bytes, im.field, budget));
    } catch (const chat::RequestError&) {
      throw;
    } catch (const Error& e) {
      // A bad image is the client's: 400 naming it. The decoder's message already starts with
      // the field (its source), which RequestError puts in front again.
      std::string msg = e.what();
      if (msg.rfind(im.field + ": ", 0) == 0) msg.erase(0, im.field.size() + 2);
      throw chat::RequestError(im.field, msg);
    }
    total_patches += int64_t(out.back().grid.h_patches) * out.back().grid.w_patches;
    decoded_pixels += uint64_t(out.back().width) * uint64_t(out.back().height);
    if (decoded_pixels > kMaxDecodedPixelsPerRequest)
      throw chat::RequestError(im.field, "the request's images decode to more than " +
                                             std::to_string(kMaxDecodedPixelsPerRequest >> 20) + " Mi pixels together");
    if (total_patches > kMaxPatchesPerRequest)
      throw chat::RequestError(im.field, "the request's images take more than " + std::to_string(kMaxPatchesPerRequest) +
                                             " patches together (lower image_patches or send fewer images)");
  }
  return out;
}

// Expands the placeholders of `ids` for `images` (their runs in prompt order).
PromptImages expand_prompt(EngineService& svc, std::vector<int32_t>& ids, std::vector<PreparedImage> images,
                           const std::string& field) {
  PromptImages out;
  if (images.empty() && !svc.vision().available()) return out;
  std::vector<int64_t> counts;
  for (const PreparedImage& im : images) counts.push_back(im.tokens());
  MediaPrompt m = expand_media(ids, int32_t(svc.vision().placeholder_id()), counts, field);
  ids = std::move(m.ids);
  out.runs = std::move(m.images);
  out.images = std::move(images);
  return out;
}

class SinkPump;
// RPC thread only. Shared by its pumps: a request's promise chain, and the pump with it, can end
// after its listener's Server is gone (at shutdown, capnp drops calls late), and the pump still
// takes itself out.
using PumpRegistry = std::map<uint64_t, SinkPump*>;

// Sends one request's tokens to its TokenSink in order, one streaming call after another (the
// stream's flow control decides when the next may go). Lives on the RPC thread.
class SinkPump final : public kj::TaskSet::ErrorHandler {
 public:
  SinkPump(proto::TokenSink::Client sink, std::shared_ptr<std::atomic<bool>> cancel, std::shared_ptr<PumpRegistry> registry,
           uint64_t key, const tok::Tokenizer* tokenizer)
      : sink_(kj::mv(sink)), cancel_(std::move(cancel)), registry_(std::move(registry)), key_(key), tokenizer_(tokenizer), tasks_(*this) {
    (*registry_)[key_] = this;
  }
  ~SinkPump() noexcept(false) { registry_->erase(key_); }

  // Tokens posted for this pump and not yet sent: the worker counts each when it posts it.
  std::shared_ptr<std::atomic<int>> unsent() const { return unsent_; }
  bool failed() const { return failed_; }

  void push(TokenEvent ev) {
    if (failed_) return;
    queue_.push_back(std::move(ev));
    if (!sending_) send_next();
  }

  // Resolves once every pushed token went out (or sending failed).
  kj::Promise<void> drained() {
    if (!sending_ && queue_.empty()) return kj::READY_NOW;
    auto paf = kj::newPromiseAndFulfiller<void>();
    waiter_ = kj::mv(paf.fulfiller);
    return kj::mv(paf.promise);
  }

 private:
  void send_next() {
    if (queue_.empty() || failed_) {
      sending_ = false;
      KJ_IF_MAYBE(w, waiter_) {
        (*w)->fulfill();
        waiter_ = nullptr;
      }
      return;
    }
    sending_ = true;
    TokenEvent ev = std::move(queue_.front());
    queue_.pop_front();
    auto req = sink_.tokenRequest();
    req.setId(ev.id);
    req.setText(ev.text);
    req.setReasoning(ev.reasoning);
    if (!ev.tool_calls.empty()) {
      auto tcs = req.initToolCalls(unsigned(ev.tool_calls.size()));
      for (size_t i = 0; i < ev.tool_calls.size(); ++i) {
        tcs[unsigned(i)].setIndex(uint32_t(ev.tool_calls[i].index));
        tcs[unsigned(i)].setId(ev.tool_calls[i].id);
        tcs[unsigned(i)].setName(ev.tool_calls[i].name);
        tcs[unsigned(i)].setArguments(ev.tool_calls[i].arguments);
      }
    }
    if (ev.logprob) {
      auto lp = req.initLogprob();
      lp.setLogprob(ev.logprob->logprob);
      if (tokenizer_ && ev.id >= 0 && uint32_t(ev.id) < tokenizer_->vocab_size()) {
        const std::string b = tokenizer_->token_bytes(uint32_t(ev.id));
        lp.setBytes(kj::arrayPtr(reinterpret_cast<const kj::byte*>(b.data()), b.size()));
      }
      auto top = lp.initTop(unsigned(ev.logprob->top.size()));
      for (size_t i = 0; i < ev.logprob->top.size(); ++i) {
        const auto [tid, l] = ev.logprob->top[i];
        top[unsigned(i)].setId(tid);
        top[unsigned(i)].setLogprob(l);
        if (tokenizer_ && uint32_t(tid) < tokenizer_->vocab_size() && !tokenizer_->is_special(uint32_t(tid))) {
          const std::string b = tokenizer_->token_bytes(uint32_t(tid));
          top[unsigned(i)].setBytes(kj::arrayPtr(reinterpret_cast<const kj::byte*>(b.data()), b.size()));
        }
      }
    }
    tasks_.add(req.send().then([this] {
      unsent_->fetch_sub(1);
      send_next();
    }));
  }

  void taskFailed(kj::Exception&& e) override {
    // The client's sink refused a token (it wants no more, or it is gone): end the request.
    failed_ = true;
    cancel_->store(true);
    queue_.clear();
    unsent_->store(0);
    sending_ = false;
    KJ_IF_MAYBE(w, waiter_) {
      (*w)->fulfill();
      waiter_ = nullptr;
    }
  }

  proto::TokenSink::Client sink_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<PumpRegistry> registry_;
  uint64_t key_;
  const tok::Tokenizer* tokenizer_;  // the bytes of top logprob ids
  std::deque<TokenEvent> queue_;
  std::shared_ptr<std::atomic<int>> unsent_ = std::make_shared<std::atomic<int>>(0);
  bool sending_ = false, failed_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> waiter_;
  kj::TaskSet tasks_;
};

// Messages from the engine worker to this RPC thread that may wait at once: a round posts one
// token per request in it, so this is many rounds of the largest batch.
constexpr size_t kMailboxCapacity = 4096;
// The delivery loop's fallback wake-up (see Server::deliver_loop).
constexpr int64_t kMailPollMs = 50;

// Shared by all connections: the service, the live pumps, the worker's way to them.
struct ServerState {
  EngineService& service;
  std::shared_ptr<PumpRegistry> pumps = std::make_shared<PumpRegistry>();
  uint64_t next_pump = 1;
  // Session files are paths on this host: only peers of the run directory's socket (its owner)
  // may name them, never a TCP peer (who could write any file compute can, or probe for files).
  bool session_files = false;
  std::shared_ptr<TokenMailbox> mailbox = std::make_shared<TokenMailbox>(kMailboxCapacity);
};

const tok::Tokenizer& need_tokenizer(EngineService& svc) {
  const tok::Tokenizer* tk = svc.tokenizer();
  require(tk != nullptr, "this model has no tokenizer: send token ids");
  return *tk;
}

// The tool's parameters schema (an empty object schema when it declares none).
chat::Json tool_parameters(const chat::ChatRequest& r, const std::string& name) {
  auto find_in = [&](const chat::Json& tools) -> std::optional<chat::Json> {
    if (!tools.is_array()) return std::nullopt;
    for (const auto& t : tools) {
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
      const chat::Json& f = t["function"];
      if (!f.contains("name") || f["name"] != name) continue;
      return f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : chat::Json{{"type", "object"}};
    }
    return std::nullopt;
  };
  if (auto p = find_in(r.tools)) return *p;
  for (const auto& m : r.messages)
    if (auto p = find_in(m.tools)) return *p;
  throw chat::RequestError("tool_choice", "\"" + name + "\" is not a declared tool");
}

// A schema the grammar cannot enforce is the client's field at fault (400), not a server error.
std::shared_ptr<const constrain::Grammar> compile_schema(const chat::Json& schema, const std::string& where) {
  try {
    return constrain::compile_json_schema(schema, where);
  } catch (const chat::RequestError&) {
    throw;
  } catch (const Error& e) {
    throw chat::RequestError(where, e.what());
  }
}

ReplyOptions reply_options(EngineService& svc, const chat::ChatRequest* chat, proto::GenerateRequest::Reader req,
                           uint64_t session) {
  ReplyOptions ro;
  if (req.getLogprobs()) {
    require(req.getTopLogprobs() <= 20, "top_logprobs must be from 0 to 20");
    ro.top_logprobs = int(req.getTopLogprobs());
  } else {
    require(req.getTopLogprobs() == 0, "top_logprobs needs logprobs");
  }
  if (!chat) return ro;
  const tok::Tokenizer& tk = need_tokenizer(svc);
  ro.chat = true;
  ro.thinking = tk.config().chat_format == tok::ChatFormat::K3 && chat->thinking && chat->add_generation_prompt;
  ro.call_id_prefix = "call_" + std::to_string(session) + "_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000) + "_";
  require(chat->add_generation_prompt || (chat->response_format.type == chat::ResponseFormat::Type::Text &&
                                          (chat->tool_choice.mode == chat::ToolChoice::Mode::Auto ||
                                           chat->tool_choice.mode == chat::ToolChoice::Mode::None)),
          "add_generation_prompt: false cannot be combined with a constrained reply");
  using Mode = chat::ToolChoice::Mode;
  if (chat->tool_choice.mode == Mode::Required || chat->tool_choice.mode == Mode::Named) {
    ro.constraint.kind = ConstraintSpec::Kind::ToolCall;
    std::vector<std::string> names = chat->tool_choice.mode == Mode::Named
                                         ? std::vector<std::string>{chat->tool_choice.name}
                                         : chat::declared_tool_names(*chat);
    if (names.empty()) throw chat::RequestError("tool_choice", "needs tools to choose from");
    for (const std::string& n : names)
      ro.constraint.tools.push_back({n, compile_schema(tool_parameters(*chat, n), "tools[" + n + "].function.parameters")});
    // Kimi numbers calls across the conversation (functions.NAME:IDX): the forced call is next.
    for (const chat::Message& m : chat->messages) ro.constraint.call_index += m.tool_calls.size();
  } else if (chat->response_format.type == chat::ResponseFormat::Type::JsonSchema) {
    ro.constraint.kind = ConstraintSpec::Kind::Json;
    ro.constraint.json = compile_schema(chat->response_format.schema, "response_format.json_schema.schema");
  } else if (chat->response_format.type == chat::ResponseFormat::Type::JsonObject) {
    ro.constraint.kind = ConstraintSpec::Kind::Json;
    ro.constraint.json = constrain::any_json_object();
  }
  ro.no_tool_calls = chat->tool_choice.mode == Mode::None && chat->tool_choice.given;
  return ro;
}

void fill_session_stats(proto::SessionStats::Builder b, const SessionSnapshot& s) {
  b.setId(s.id);
  b.setPosition(uint64_t(s.position));
  b.setContext(uint64_t(s.context));
  b.setGenerating(s.generating);
  stats::to_capnp(s.counters, b);
}

class SessionImpl final : public proto::Session::Server {
 public:
  SessionImpl(ServerState& st, uint64_t id) : st_(st), id_(id) {}
  ~SessionImpl() { st_.service.close(id_); }

  kj::Promise<void> generate(GenerateContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      EngineService& svc = st_.service;
      auto params = ctx.getParams();
      auto req = params.getRequest();
      std::vector<int32_t> prompt;
      std::optional<chat::ChatRequest> chat;
      auto p = req.getPrompt();
      std::vector<RequestImage> images;
      if (req.getImages().size() > 0) {
        if (p.which() != proto::GenerateRequest::Prompt::TOKENS)
          throw chat::RequestError("images", "only a token prompt takes `images` (a chat carries them in its messages)");
        uint64_t total = 0;
        for (uint32_t i = 0; i < req.getImages().size(); ++i)
          add_image(images, total, bytes_of(req.getImages()[i]), "images[" + std::to_string(i) + "]");
      }
      if (p.which() == proto::GenerateRequest::Prompt::CHAT) images = chat_images(p.getChat());
      if (!images.empty()) svc.check_admission(id_);  // refuse cheaply before decoding anything
      std::vector<PreparedImage> prepared = prepare_images(svc, images, req.getImagePatches());
      switch (p.which()) {
        case proto::GenerateRequest::Prompt::TEXT: {
          auto t = p.getText();
          const tok::Tokenizer& tk = need_tokenizer(svc);
          // A plain prompt opening a session starts with bos when the tokenizer asks for one
          // (as `waste run` does), so both give the same tokens.
          if (svc.position(id_) == 0 && tk.config().add_bos && tk.config().bos_id) prompt.push_back(int32_t(*tk.config().bos_id));
          for (uint32_t id : tk.encode(std::string_view(t.cStr(), t.size()))) prompt.push_back(int32_t(id));
          break;
        }
        case proto::GenerateRequest::Prompt::TOKENS:
          for (int32_t id : p.getTokens()) prompt.push_back(id);
          break;
        case proto::GenerateRequest::Prompt::CHAT: {
          const tok::Tokenizer& tk = need_tokenizer(svc);
          chat = chat_request_of(p.getChat(), req.getChatOptions());
          require(!chat->messages.empty(), "chat: no messages");
          if (!prepared.empty()) {
            // Each image part renders as its media markup, whose one placeholder expands below.
            chat->image_prompts.emplace();
            for (const PreparedImage& im : prepared) chat->image_prompts->push_back(im.prompt_markup());
          }
          // A continuing session already holds the conversation: no second default system message, no BOS.
          const auto ids = chat::encode_prompt(tk, *chat, svc.position(id_) != 0);
          prompt.assign(ids.begin(), ids.end());
          break;
        }
      }
      PromptImages prompt_images = expand_prompt(svc, prompt, std::move(prepared), images.empty() ? "images" : images[0].field);
      SamplingParams sp = sampling_of(req);
      ReplyOptions ro = reply_options(svc, chat ? &*chat : nullptr, req, id_);
      auto cancel = std::make_shared<std::atomic<bool>>(false);
      const uint64_t key = st_.next_pump++;
      auto pump = kj::heap<SinkPump>(params.getSink(), cancel, st_.pumps, key, svc.tokenizer());
      auto paf = kj::newPromiseAndCrossThreadFulfiller<GenerateOutcome>();
      auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<GenerateOutcome>>>(kj::mv(paf.fulfiller));
      GenerateCallbacks cb;
      // Tokens and the end go through one mailbox, so the end never overtakes a token: by the time
      // paf.promise resolves here, every token is in the pump and drained() waits for all of them.
      std::shared_ptr<TokenMailbox> mailbox = st_.mailbox;
      std::shared_ptr<PumpRegistry> pumps = st_.pumps;
      cb.token = [mailbox, pumps, key, unsent = pump->unsent()](TokenEvent ev) {
        unsent->fetch_add(1);
        mailbox->post([pumps, key, ev = std::move(ev)]() mutable {
          auto it = pumps->find(key);
          if (it != pumps->end()) it->second->push(std::move(ev));
        });
      };
      cb.backed_up = [unsent = pump->unsent()] { return unsent->load() > kMaxUnsentTokens; };
      cb.done = [mailbox, fulfiller](GenerateOutcome o) {
        // Dropped with the mailbox when the RPC side is gone: the fulfiller's end rejects the
        // promise nobody waits for any more.
        answer_from_worker(*mailbox, fulfiller, std::move(o));
      };
      svc.generate(id_, std::move(prompt), sp, std::move(ro), cancel, std::move(cb), str(req.getCacheScope()),
                   std::move(prompt_images));

      SinkPump* raw = pump.get();
      return paf.promise
          .then([ctx, raw](GenerateOutcome o) mutable -> kj::Promise<void> {
            if (!o.error.empty()) return failure(o.error, o.error_kind, o.error_param);
            return raw->drained().then([ctx, raw, o = std::move(o)]() mutable {
              auto s = ctx.getResults().initStats();
              o.tok_per_s = stats::tokens_per_second(o.tokens, o.decode_seconds);
              stats::to_capnp(static_cast<const stats::GenerateStats&>(o), s);
              s.setStopReason(raw->failed() ? "cancelled" : o.stop_reason);
            });
          })
          .attach(kj::mv(pump), kj::defer([cancel] { cancel->store(true); }));
    });
  }

  kj::Promise<void> tokenize(TokenizeContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      auto t = ctx.getParams().getText();
      const auto ids = need_tokenizer(st_.service).encode(std::string_view(t.cStr(), t.size()));
      auto out = ctx.getResults().initTokens(uint32_t(ids.size()));
      for (size_t i = 0; i < ids.size(); ++i) out.set(uint32_t(i), int32_t(ids[i]));
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> detokenize(DetokenizeContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      const tok::Tokenizer& tk = need_tokenizer(st_.service);
      std::vector<uint32_t> ids;
      for (int32_t id : ctx.getParams().getTokens()) {
        require(id >= 0 && uint32_t(id) < tk.vocab_size(), "detokenize: id " + std::to_string(id) + " has no token");
        ids.push_back(uint32_t(id));
      }
      ctx.getResults().setText(tk.decode(ids));
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> reset(ResetContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      auto paf = kj::newPromiseAndCrossThreadFulfiller<WorkerFailure>();
      auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<WorkerFailure>>>(kj::mv(paf.fulfiller));
      st_.service.reset(id_, [f, mailbox = st_.mailbox](std::exception_ptr err) {
        answer_from_worker(*mailbox, f, worker_failure(err));
      });
      return paf.promise.then([](WorkerFailure err) { return failed_or_done(kj::mv(err)); });
    });
  }

  kj::Promise<void> cancel(CancelContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      st_.service.cancel(id_);
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> save(SaveContext ctx) override {
    return save_or_load(str(ctx.getParams().getPath()), true, [ctx](EngineService::FileResult r) mutable {
      ctx.getResults().setTokens(r.tokens);
      ctx.getResults().setBytes(r.bytes);
      ctx.getResults().setSeconds(r.seconds);
    });
  }
  kj::Promise<void> load(LoadContext ctx) override {
    return save_or_load(str(ctx.getParams().getPath()), false, [ctx](EngineService::FileResult r) mutable {
      ctx.getResults().setTokens(r.tokens);
      ctx.getResults().setBytes(r.bytes);
      ctx.getResults().setSeconds(r.seconds);
    });
  }

  // Logits on a fresh state (EngineService::eval), run on the worker between rounds.
  kj::Promise<void> eval(EvalContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      auto params = ctx.getParams();
      auto tokens = params.getTokens();
      std::vector<int32_t> ids;
      ids.reserve(tokens.size());
      for (int32_t id : tokens) ids.push_back(id);
      std::vector<RequestImage> images;
      uint64_t total = 0;
      for (uint32_t i = 0; i < params.getImages().size(); ++i)
        add_image(images, total, bytes_of(params.getImages()[i]), "images[" + std::to_string(i) + "]");
      PromptImages prompt_images;
      std::vector<float> pad_rows;
      if (params.getPadEmbeddings().size() > 0) {
        require(images.empty(), "eval: give images or padEmbeddings, not both");
        require(params.getImagePatches() == 0, "eval: imagePatches goes with images, not with padEmbeddings");
        auto d = params.getPadEmbeddings();
        require(d.size() % sizeof(float) == 0, "eval: padEmbeddings is not a whole number of f32");
        pad_rows.resize(d.size() / sizeof(float));
        std::memcpy(pad_rows.data(), d.begin(), d.size());
      } else {
        prompt_images = expand_prompt(st_.service, ids, prepare_images(st_.service, images, params.getImagePatches()), "images");
      }
      using Reply = std::pair<WorkerFailure, std::vector<float>>;
      auto paf = kj::newPromiseAndCrossThreadFulfiller<Reply>();
      auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<Reply>>>(kj::mv(paf.fulfiller));
      st_.service.eval(id_, std::move(ids), params.getStepwise(),
                       [f, mailbox = st_.mailbox](std::exception_ptr err, std::vector<float> logits) {
                         answer_from_worker(*mailbox, f, std::make_pair(worker_failure(err), std::move(logits)));
                       },
                       std::move(prompt_images), std::move(pad_rows));
      const uint32_t vocab = uint32_t(st_.service.config().vocab);
      return paf.promise.then([ctx, vocab](Reply r) mutable -> kj::Promise<void> {
        if (r.first != nullptr) return failed_or_done(kj::mv(r.first));
        static_assert(std::endian::native == std::endian::little, "eval sends the logits as little-endian f32");
        const size_t bytes = r.second.size() * sizeof(float);
        // One segment big enough for the blob (no growth copies of up to 64 MiB).
        auto res = ctx.getResults(capnp::MessageSize{bytes / 8 + 64, 0});
        res.setVocab(vocab);
        auto data = res.initLogits(capnp::uint(bytes));
        std::memcpy(data.begin(), r.second.data(), bytes);
        return kj::READY_NOW;
      });
    });
  }

  kj::Promise<void> stats(StatsContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      fill_session_stats(ctx.getResults().initStats(), st_.service.snapshot(id_));
      return kj::READY_NOW;
    });
  }

 private:
  template <typename Set>
  kj::Promise<void> save_or_load(std::string path, bool save, Set set) {
    return guarded([&]() -> kj::Promise<void> {
      require_request(st_.session_files, "save/load: refused on a TCP connection (a peer there could write or probe any "
                                 "file compute can); use the run directory's compute.sock");
      require_request(!path.empty(), "save/load: empty path", "path");
      // A NUL would end the path early for the kernel: another file than the one named.
      require_request(path.find('\0') == std::string::npos, "save/load: the path holds a NUL byte", "path");
      // Compute's working directory is not the client's: a relative path would land elsewhere.
      require_request(path[0] == '/', std::string(save ? "save" : "load") + ": " + path + ": give an absolute path (the file is on the compute host)", "path");
      using Result = std::pair<WorkerFailure, EngineService::FileResult>;
      auto paf = kj::newPromiseAndCrossThreadFulfiller<Result>();
      auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<Result>>>(kj::mv(paf.fulfiller));
      auto done = [f, mailbox = st_.mailbox](std::exception_ptr err, EngineService::FileResult r) {
        answer_from_worker(*mailbox, f, std::make_pair(worker_failure(err), r));
      };
      if (save) st_.service.save(id_, path, done);
      else st_.service.load(id_, path, done);
      return paf.promise.then([set](Result r) mutable -> kj::Promise<void> {
        if (r.first != nullptr) return failed_or_done(kj::mv(r.first));
        set(r.second);
        return kj::READY_NOW;
      });
    });
  }

  ServerState& st_;
  uint64_t id_;
};

class EngineImpl final : public proto::Engine::Server {
 public:
  explicit EngineImpl(ServerState& st) : st_(st) {}

  kj::Promise<void> info(InfoContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      EngineService& svc = st_.service;
      const ModelConfig& c = svc.config();
      auto i = ctx.getResults().initInfo();
      i.setModel(svc.options().model);
      i.setFamily(arch_name(c.arch));
      i.setLayers(uint32_t(c.n_layers));
      i.setHidden(uint32_t(c.hidden));
      i.setVocab(uint32_t(c.vocab));
      i.setRoutedExperts(uint32_t(c.n_experts));
      i.setTopK(uint32_t(c.top_k));
      i.setDefaultContext(uint32_t(svc.options().context));
      i.setMaxContext(uint32_t(svc.max_context()));
      i.setMaxSessions(uint32_t(svc.options().max_sessions));
      i.setMaxQueued(uint32_t(svc.options().max_queued));
      i.setExpertPath(svc.expert_path());
      i.setBudgetBytes(svc.budget_bytes());
      i.setTrunkBytes(svc.trunk_bytes());
      const tok::Tokenizer* tk = svc.tokenizer();
      i.setHasTokenizer(tk != nullptr);
      i.setChatFormat(tk ? tok::chat_format_name(tk->config().chat_format) : "none");
      i.setVision(svc.vision().available());
      i.setImagePatches(uint32_t(svc.image_patches()));
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> openSession(OpenSessionContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      const uint64_t id = st_.service.open(int64_t(ctx.getParams().getOptions().getContext()));
      ctx.getResults().setSession(kj::heap<SessionImpl>(st_, id));
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> stats(StatsContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      const ServiceStats s = st_.service.stats();
      auto r = ctx.getResults();
      auto g = r.initStats();
      stats::to_capnp(static_cast<const stats::EngineStats&>(s), g);
      g.setExpertPath(st_.service.expert_path());
      stats::to_capnp(s.prompt_cache, g.initPromptCache());
      auto list = r.initSessions(uint32_t(s.sessions_detail.size()));
      for (size_t i = 0; i < s.sessions_detail.size(); ++i) fill_session_stats(list[uint32_t(i)], s.sessions_detail[i]);
      return kj::READY_NOW;
    });
  }

  kj::Promise<void> health(HealthContext ctx) override {
    return guarded([&]() -> kj::Promise<void> {
      const uint32_t asked = ctx.getParams().getNotAnsweringAfterMs();
      const double after = double(asked ? asked : uint64_t(st_.service.options().iod_timeout_ms)) / 1000.0;
      const ServiceHealth h = st_.service.health(after);
      auto g = ctx.getResults().initHealth();
      using S = proto::EngineHealth::IodState;
      if (!h.has_iod) {
        g.setIodState(S::NONE);
      } else {
        switch (h.iod.state) {
          case IodHealth::State::Ok: g.setIodState(S::OK); break;
          case IodHealth::State::NotAnswering: g.setIodState(S::NOT_ANSWERING); break;
          case IodHealth::State::Down: g.setIodState(S::DOWN); break;
        }
      }
      g.setIodDetail(h.iod.detail);
      g.setIodSinceAnswerSeconds(h.iod.since_answer);
      g.setBusySeconds(h.busy_seconds);
      g.setReattaches(h.reattaches);
      return kj::READY_NOW;
    });
  }

 private:
  ServerState& st_;
};

// Cap'n Proto refuses to send a message over the network's receive limit (64 MiB by default):
// an eval reply holds up to EngineService::kMaxEvalLogitsBytes of logits plus its framing, so
// the limit is 80 MiB (the client, tools/libwaste/engine_client.cpp, reads with the same).
capnp::ReaderOptions connection_options() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = (EngineService::kMaxEvalLogitsBytes + (uint64_t(16) << 20)) / 8;
  return o;
}

struct Connection {
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  Connection(kj::Own<kj::AsyncIoStream>&& s, ServerState& st)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, connection_options()),
        rpc(capnp::makeRpcServer(network, capnp::Capability::Client(kj::heap<EngineImpl>(st)))) {}
};

// final: kj::heap deletes it through its own type (ErrorHandler has no virtual destructor).
struct Server final : public kj::TaskSet::ErrorHandler {
  ServerState state;
  kj::UnixEventPort::FdObserver mail_observer;  // the mailbox's eventfd, on this thread's loop
  kj::UnixEventPort& port;
  kj::Own<kj::ConnectionReceiver> listener;
  kj::TaskSet tasks;
  Server(EngineService& svc, kj::Own<kj::ConnectionReceiver> l, bool session_files, kj::UnixEventPort& port)
      : state{.service = svc, .session_files = session_files},
        mail_observer(port, state.mailbox->wake_fd(), kj::UnixEventPort::FdObserver::OBSERVE_READ),
        port(port),
        listener(kj::mv(l)),
        tasks(*this) {
    tasks.add(deliver_loop());
  }
  // The worker may still post for requests of this listener: they are dropped from now on.
  ~Server() noexcept(false) { state.mailbox->close(); }
  void taskFailed(kj::Exception&& e) override {
    spdlog::info("compute: connection ended: {}", e.getDescription().cStr());
  }

  // Runs the worker's messages on this thread as they arrive. take() empties the eventfd before
  // the watcher waits again, as its edge-triggered wait requires.
  kj::Promise<void> deliver_loop() {
    for (TokenMailbox::Message& m : state.mailbox->take()) {
        // One request's failure to take its token (its sink is gone) must not stop the delivery
        // of every other request's.
        try {
          m();
        } catch (const std::exception& e) {
          spdlog::warn("compute: a token could not be delivered: {}", e.what());
        } catch (const kj::Exception& e) {
          spdlog::warn("compute: a token could not be delivered: {}", e.getDescription().cStr());
        }
    }
    // The eventfd's edge wakes this loop; a bounded timer as well, so that a wake-up lost
    // anywhere (kernel, kj, or a flaw in the mailbox) costs at most kMailPollMs, and is logged.
    auto woken = mail_observer.whenBecomesReadable().then([] { return true; });
    auto polled = port.getTimer().afterDelay(kMailPollMs * kj::MILLISECONDS).then([] { return false; });
    return woken.exclusiveJoin(kj::mv(polled)).then([this](bool by_edge) {
      // Messages waiting with the eventfd empty: the edge was lost, not just late.
      if (!by_edge && state.mailbox->waiting() > 0 && !state.mailbox->wake_pending())
        spdlog::warn("compute: {} message(s) waited for the RPC thread without a wake-up", state.mailbox->waiting());
      return deliver_loop();
    });
  }

  kj::Promise<void> accept_loop() {
    return listener->accept().then([this](kj::Own<kj::AsyncIoStream>&& stream) {
      auto c = kj::heap<Connection>(kj::mv(stream), state);
      auto done = c->network.onDisconnect();
      tasks.add(done.attach(kj::mv(c)));
      return accept_loop();
    });
  }
};

}  // namespace

kj::Promise<void> serve_engine(EngineService& service, kj::Own<kj::ConnectionReceiver> listener, bool session_files,
                               kj::UnixEventPort& port) {
  auto server = kj::heap<Server>(service, kj::mv(listener), session_files, port);
  auto loop = server->accept_loop();
  return loop.attach(kj::mv(server));
}

}  // namespace waste::server
