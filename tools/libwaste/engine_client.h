// The client side of Engine RPC (proto/engine.capnp) for front ends: waste chat, waste-serve,
// libwaste's C API and tests. One Client per thread (its RPC runs on the calling thread's kj
// event loop); a Session dies with its Client's connection.
//
//   waste::client::Client c(waste::client::default_run_dir());
//   auto s = c.open_session();
//   waste::client::Request r; r.text = "Hello";
//   auto res = s->generate(r, [](int32_t id, std::string_view t) { fwrite(t.data(), 1, t.size(), stdout); return true; });
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/chat/chat_request.h"
#include "shared/reply/reply_parser.h"
#include "shared/stats/generate_stats.h"

namespace waste::client {

// WASTE_RUN_DIR, else $XDG_RUNTIME_DIR/waste, else /tmp/waste-<uid>.
std::string default_run_dir();
// A run directory -> its compute.sock; a socket path -> "unix:<path>"; "unix:..." or host:port as is.
std::string engine_address(const std::string& where);

struct Info {
  std::string model, family, expert_path, chat_format;
  uint32_t layers = 0, hidden = 0, vocab = 0, routed_experts = 0, top_k = 0;
  uint32_t default_context = 0, max_context = 0, max_sessions = 0, max_queued = 0;
  uint64_t budget_bytes = 0, trunk_bytes = 0;
  bool has_tokenizer = false;
  bool vision = false;          // the model has a vision tower: prompts may carry images
  uint32_t image_patches = 0;   // compute's default patch budget per image (image tokens = patches / 4 at most)
};

struct Request {
  enum class Kind { Text, Tokens, Chat } kind = Kind::Text;
  std::string text;
  std::vector<int32_t> tokens;
  // Kind::Tokens only: the encoded files (PNG, JPEG) of the prompt's images; each media
  // placeholder id (<|media_pad|>) of `tokens` takes the next one. A chat carries its images in
  // its messages' Image parts instead (the file in `data`, or a data: URL in `text`).
  std::vector<std::vector<uint8_t>> images;
  uint32_t image_patches = 0;  // patch budget per image; 0: compute's default (Info::image_patches)
  chat::ChatRequest chat;  // messages (with tool calls, reasoning), tools, tool_choice, response_format, thinking
  uint32_t max_tokens = 256;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, repetition_penalty = 1.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  uint32_t top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool logprobs = false;
  uint32_t top_logprobs = 0;  // with logprobs: alternatives per token, at most 20
  // Whose prompt-cache checkpoints a fresh session may start from (and adds to): "" is shared
  // by every client that sends ""; waste-serve sends its caller's API key's.
  std::string cache_scope;
  // A chat of plain {role, content} messages.
  void set_chat(const std::vector<std::pair<std::string, std::string>>& messages);
};

struct TopLogprob {
  int32_t id = 0;
  std::string bytes;
  float logprob = 0;
};

// What one generated token adds to the reply (a chat's reply is parsed by token id in compute:
// `text` is content only, never markup).
struct TokenEvent {
  int32_t id = 0;  // -1: held-back text at the end
  std::string_view text, reasoning;
  std::vector<reply::ToolCallDelta> tool_calls;
  bool has_logprob = false;
  float logprob = 0;
  std::string token;  // with logprobs: the generated token's bytes (a special token: its name)
  std::vector<TopLogprob> top;
};

// What a generate did: its statistics (one definition: shared/stats/generate_stats.h) and how
// it ended.
struct Result : stats::GenerateStats {
  std::string stop_reason;
};

// What a session file save or load did.
struct FileResult {
  uint64_t tokens = 0, bytes = 0;  // tokens in the state, the file's size
  double seconds = 0;              // in compute
};

// Gets each token and the text it completes (id -1: held-back text at the end). Return false
// to stop the generation (the result then says "cancelled").
using OnToken = std::function<bool(int32_t id, std::string_view text)>;
// The same with everything a token adds (reasoning, tool call pieces, logprobs).
using OnEvent = std::function<bool(const TokenEvent& ev)>;

class Client;

class Session {
 public:
  ~Session();
  // Streams tokens into on_token; when *interrupt turns true (e.g. from a signal handler) the
  // generation is cancelled and the call returns what was generated. Throws Error on failure
  // (the server's message: a refused limit, a lost compute).
  Result generate(const Request& r, const OnToken& on_token, const std::atomic<bool>* interrupt = nullptr);
  Result generate_events(const Request& r, const OnEvent& on_event, const std::atomic<bool>* interrupt = nullptr);
  std::vector<int32_t> tokenize(const std::string& text);
  std::string detokenize(const std::vector<int32_t>& ids);
  void reset();
  void cancel();
  // The session's state to a session file on the compute host and back (load: no prefill).
  // path must be absolute (compute refuses a relative one).
  FileResult save(const std::string& path);
  FileResult load(const std::string& path);
  nlohmann::json stats();
  // The logits after each of `ids`, [ids.size() x vocab] (row i after ids[i]), computed by
  // compute on a fresh state: this session's conversation and position are untouched.
  // stepwise: one token at a time through the decode path, else prefill chunks (as `waste eval
  // [--step]`). *vocab (may be NULL) gets the row length. Compute refuses more ids than the
  // session's context or more than 64 MiB of logits (Error naming the limit).
  // With `images` (encoded files), each media placeholder id of `ids` takes the next one and
  // expands into its image tokens, so there is a row per expanded position. With
  // `pad_embeddings` (f32 [k x hidden]) instead, the k placeholder ids are not expanded: the i-th
  // takes row i (the tower's output given directly). image_patches: the budget, 0 = compute's.
  std::vector<float> eval(const std::vector<int32_t>& ids, bool stepwise = false, uint32_t* vocab = nullptr,
                          const std::vector<std::vector<uint8_t>>& images = {},
                          const std::vector<float>& pad_embeddings = {}, uint32_t image_patches = 0);

 private:
  friend class Client;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How long a client waits for compute's answer by default. Compute's RPC thread answers at
// once (the work runs on its worker), so no answer in this long means a stopped or wedged compute.
constexpr int64_t kDefaultTimeoutMs = 10'000;

// What compute says of itself and its iod (Engine.health).
struct Health {
  std::string iod;         // "none" (in-process experts), "ok", "not_answering", "down"
  std::string iod_detail;  // why, when not ok
  double iod_since_answer_seconds = -1;  // -1: never
  double busy_seconds = 0;               // the worker's current step (0: idle)
  uint32_t reattaches = 0;
};

class Client {
 public:
  // Connects (see engine_address); throws Error naming the address when nothing answers.
  // Every call waits at most timeout_ms for compute (<= 0: no deadline): a short call for its
  // answer; a long one (generate, eval, save, load), which may rightly take minutes, for the
  // answers to the liveness pings it sends every few seconds while it waits. Either way a
  // stopped or wedged compute is an Error ("no answer within ..."), never a hang.
  explicit Client(const std::string& where, int64_t timeout_ms = kDefaultTimeoutMs);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& address() const;
  Info info();
  nlohmann::json stats();  // {"engine": {...}, "sessions": [...]}
  // not_answering_after_ms: how long a call to iod may wait before iod counts as not
  // answering (0: compute's --iod-timeout).
  Health health(uint32_t not_answering_after_ms = 0);
  std::unique_ptr<Session> open_session(uint32_t context = 0);

  struct Impl;  // opaque (engine_client.cpp); a Session must not outlive its Client

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste::client
