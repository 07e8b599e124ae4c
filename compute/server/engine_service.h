// The compute process's sessions and scheduler, independent of any RPC: one worker thread owns
// the Engine (trunk, model, expert source) and runs every running generation together. Each
// step is one batched forward (Model::forward_batch): the next token of every decoding session
// plus at most one prefill chunk (of the oldest prefilling request), so a long prefill never
// starves the sessions that decode, and every MoE layer fetches the union of the step's experts
// once. Each session's tokens depend only on its own state and request (a batched forward is
// bit-identical to each session alone): two clients at once get exactly what each gets alone.
//
// Callers (the RPC layer, on its own thread) submit work and get results through callbacks
// that run on the worker thread. Limits (sessions, context, queued requests) are refused with
// an Error that says which limit.
//
// One file a part: engine_service.cpp (the threads, health), engine_scheduler.cpp (the steps),
// session_registry.cpp (sessions, admission), session_persistence.cpp (session files),
// session_eval.cpp (eval), engine_stats.cpp (statistics); engine_service_state.h holds what
// they share (a session's state, a Job).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shared/util/option_limits.h"
#include "shared/util/private_dir.h"
#include "compute/engine.h"
#include "compute/reply_constraint.h"
#include "compute/server/iod_health.h"
#include "compute/server/prompt_cache.h"
#include "compute/server/step_gate.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/reply/reply_parser.h"
#include "shared/stats/engine_stats.h"
#include "shared/stats/generate_stats.h"

namespace waste::server {

class ReattachingExperts;

struct ServiceOptions {
  std::string model;
  std::string iod_socket;          // empty: experts read in-process
  int64_t context = limits::kDefaultContextTokens;  // a session's default context
  int64_t max_context = 0;         // the most a session may ask for; 0: = context
  int max_sessions = limits::kDefaultMaxSessions;  // open sessions at most
  // Session states held in memory at once (--sessions): the memory planner counts this many.
  // A request whose session has no state in memory waits until one is free; an idle session's
  // state is parked in a file under park_dir to make room, and read back at its next request.
  int live_sessions = limits::kDefaultLiveSessions;
  std::string park_dir;            // where parked states go (a private directory is made in it); empty: $TMPDIR or /var/tmp
  int max_queued = 32;             // generate requests waiting or running at once
  int prefill_chunk = 128;          // prompt tokens per step when no other session is decoding
  int prefill_chunk_beside_decoders = 32;  // ... and when some are: bounds their wait per token
  int max_batch = 0;               // sessions in one forward step at most; 0: all that are ready
  uint64_t in_process_cache_bytes = 1ull << 30;
  // Bytes of prompt-cache checkpoints (prompt_cache.h); nullopt: the memory planner's default
  // (plan::default_prompt_cache_bytes), 0: off.
  std::optional<uint64_t> prompt_cache_bytes;
  // Test hook (env WASTE_COMPUTE_TEST_START_GATE): no step runs until this many generate
  // requests are running at once (then the gate stays open), so a test can make requests
  // share steps from their first token without depending on thread timing. 0: no gate.
  size_t start_gate = 0;
  // Test hook (env WASTE_COMPUTE_TEST_STEP_GATE): a FIFO through which a test lets each
  // forward step run (step_gate.h), so a reply is still streaming when the test interrupts it.
  // Empty: none.
  std::string step_gate;
  // Test hook (env WASTE_COMPUTE_TEST_REPLY): every reply is these ids (template markup text,
  // encoded with its special tokens) instead of sampled ones, then it stops; so a test on a
  // random-weight model can check how a given reply (a tool call, reasoning) reaches a client.
  std::string test_reply;
  int image_patches = kDefaultImagePatches;  // patch budget per image when a request gives none
  // The deadline of every call to iod (--iod-timeout): a stopped or wedged iod fails the
  // requests that need it within this, instead of holding them.
  int64_t iod_timeout_ms = ipc::kDefaultCallTimeoutMs;
  // How long compute waits at start for iod to answer (--iod-wait) before it gives up.
  int64_t iod_wait_ms = 30'000;
  // An idle worker asks iod "are you there" this often, so that /health knows iod's state
  // (and compute reattaches to a restarted iod) without waiting for a request. 0: never.
  int idle_ping_ms = 1000;
};

// What Engine.health reports: compute answered (so its RPC thread is alive); the rest says
// what its worker and its iod are doing.
struct ServiceHealth {
  bool has_iod = false;        // false: experts are read in-process
  IodHealth::Snapshot iod;
  double busy_seconds = 0;     // how long the worker's current step or control call has run (0: idle)
  uint32_t reattaches = 0;
};

// A session's counters: one definition (shared/stats/engine_stats.h) for compute and its clients.
using SessionCounters = stats::SessionStats;

struct SessionSnapshot {
  uint64_t id = 0;
  int64_t position = 0, context = 0;
  bool generating = false;
  SessionCounters counters;
};

// The engine's totals (one definition: shared/stats/engine_stats.h), its prompt cache and each
// session's snapshot.
struct ServiceStats : stats::EngineStats {
  PromptCacheStats prompt_cache;
  std::vector<SessionSnapshot> sessions_detail;
};

// A request's statistics (one definition: shared/stats/generate_stats.h), how it ended, or why
// it failed.
struct GenerateOutcome : stats::GenerateStats {
  std::string error;          // empty: success
  ErrorKind error_kind = ErrorKind::Internal;  // of a failure: what front ends answer (HTTP status)
  std::string error_param;                     // of a failure: the field at fault, the process unavailable
  std::string stop_reason;    // max_tokens, stop_token, stop_string, context, cancelled
};

// A prompt's images: where each one's positions are (ImageRun, rows not yet computed) and its
// pixels, for the tower. Parallel vectors, in prompt order.
struct PromptImages {
  std::vector<ImageRun> runs;
  std::vector<PreparedImage> images;
};

struct TokenLogprob {
  float logprob = 0;                           // of the generated id
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

// What one generated token adds to the reply. A chat's reply is parsed by token id
// (shared/reply/): `text` is content only; markup and special ids never appear in it.
struct TokenEvent {
  int32_t id = 0;  // -1: held-back text at the end
  std::string text, reasoning;
  std::vector<reply::ToolCallDelta> tool_calls;
  std::optional<TokenLogprob> logprob;
};

// How a request's reply is read and shaped beyond sampling.
struct ReplyOptions {
  bool chat = false;        // parse the reply in the tokenizer's chat format
  bool thinking = true;     // K3: the prompt opened the think element
  std::string call_id_prefix = "call_";
  ConstraintSpec constraint;  // kind None: free
  int top_logprobs = -1;    // -1: no logprobs; else this many alternatives (<= 20)
  bool no_tool_calls = false;  // tool_choice "none": calls the model writes anyway are not returned
};

// What a generate request reports back, all called on the worker thread.
struct GenerateCallbacks {
  std::function<void(TokenEvent)> token;
  std::function<bool()> backed_up;   // true: the client is behind; skip this request for a round
  std::function<void(GenerateOutcome)> done;
};

class EngineService {
 public:
  struct SessionState;  // engine_service_state.h

  // Starts the worker, which opens the engine; throws what opening threw.
  explicit EngineService(const ServiceOptions& o);
  ~EngineService();  // cancels everything, joins the worker
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  const ServiceOptions& options() const { return options_; }
  // Fixed once the engine is open.
  const ModelConfig& config() const { return config_; }
  uint64_t trunk_bytes() const { return trunk_bytes_; }
  std::string expert_path() const { return expert_path_; }
  uint64_t budget_bytes() const { return budget_bytes_; }
  int64_t max_context() const;

  // The engine's tokenizer (nullptr: none). Safe from any thread: its only mutable state,
  // the regex match data, is thread_local.
  const tok::Tokenizer* tokenizer() const { return engine_->has_tokenizer() ? &engine_->tokenizer() : nullptr; }

  // Sessions. open() refuses past max_sessions or max_context; close() cancels its request and
  // frees its state (on the worker).
  uint64_t open(int64_t context);
  void close(uint64_t session);
  int64_t position(uint64_t session) const;  // tokens in its state (including an unfed last token)
  SessionSnapshot snapshot(uint64_t session) const;

  // Queues a generation; refuses when the session is busy, the queue is full, or the prompt
  // does not fit the session's context. `cancel` may be set at any time to end it. A session
  // that holds nothing yet starts from the longest prompt-cache checkpoint of `cache_scope`
  // that the prompt begins with, and its prefill ends with a checkpoint for that scope.
  // A prompt with images (expanded already: Engine::vision(), expand_media) first waits for
  // the vision thread, which runs the tower on them one request at a time beside the steps, so
  // the sessions that decode are not stalled for the seconds a tower takes.
  void generate(uint64_t session, std::vector<int32_t> prompt, const SamplingParams& params, ReplyOptions reply,
                std::shared_ptr<std::atomic<bool>> cancel, GenerateCallbacks cb, std::string cache_scope = "",
                PromptImages images = {});
  // The refusals generate() would give for the session and the queue alone (closed, busy,
  // queue full), so that a request is refused before its images are decoded.
  void check_admission(uint64_t session) const;
  // The engine's vision encoder (prepare() is thread-safe; the tower runs on the vision thread).
  const VisionEncoder& vision() const { return engine_->vision(); }
  int image_patches() const { return options_.image_patches; }
  // The vocabulary grammars mask, built once on first use (thread-safe).
  std::shared_ptr<const constrain::TokenVocabulary> grammar_vocabulary() const;
  void cancel(uint64_t session);

  // reset / save / load / eval run on the worker between rounds; `done` gets a null
  // exception_ptr, or the failure (its waste::Error kind crosses the RPC as it is).
  void reset(uint64_t session, std::function<void(std::exception_ptr)> done);
  // The session's state to a session file (compute/model/session_file.h) and back: load
  // replaces the state with the file's, no prefill. `done` gets the tokens and the file's bytes.
  struct FileResult {
    uint64_t tokens = 0, bytes = 0;
    double seconds = 0;
  };
  void save(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done);
  void load(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done);
  // The logits after each of `ids` ([ids.size() x vocab], row i after ids[i]) on a fresh model
  // state: the session's own state is neither read nor changed, so this may run while it
  // generates. stepwise: one token at a time through the decode path (Engine::step_all), else
  // prefill chunks (Engine::prefill, LogitRows::All), as `waste eval [--step]`. Runs on the
  // worker between rounds (blocking the steps while it runs, as load does); refused at once
  // (Error) for no ids, an id outside the vocabulary, more ids than the session's context or
  // more than kMaxEvalLogitsBytes of logits; `done` gets null and the logits, or the failure.
  static constexpr uint64_t kMaxEvalLogitsBytes = 64ull << 20;
  // With images, the prompt was expanded (as for generate) and the tower runs on the worker
  // first; with pad_rows (f32 [k, hidden]) the k placeholder ids of `ids` take those rows.
  void eval(uint64_t session, std::vector<int32_t> ids, bool stepwise,
            std::function<void(std::exception_ptr failure, std::vector<float> logits)> done, PromptImages images = {},
            std::vector<float> pad_rows = {});

  ServiceStats stats() const;
  // Any thread, never blocks on the worker or iod. not_answering_after: seconds a call to iod
  // may wait before iod counts as not answering.
  ServiceHealth health(double not_answering_after) const;

  // Ends every request ("compute is shutting down") and stops the worker; `stopped` runs on the
  // worker as it exits. A caller whose thread serves the token callbacks must keep serving
  // them until then (the destructor only joins).
  void stop(std::function<void()> stopped);

 private:
  struct Job;
  void worker_main(std::shared_ptr<std::promise<void>> ready);
  void ping_iod_if_idle();  // worker: one iod round trip unless a call got an answer lately
  std::shared_ptr<SessionState> find(uint64_t id) const;  // under mu_
  // One batched step over every job that is not waiting on its client.
  void run_round(std::vector<std::shared_ptr<Job>>& jobs);
  // Ends a cancelled job (stop reason "cancelled"); false when it was not cancelled.
  bool end_if_cancelled(Job& j);
  // While the step gate holds: ends the cancelled jobs and keeps the rest waiting.
  void end_cancelled(std::vector<std::shared_ptr<Job>>& jobs);
  enum class Plan { Feed, Wait, Ended };
  // Before the forward: starts the job, samples and hands out a decoding job's token, and says
  // whether the job feeds tokens this step (`item`), waits, or has ended (finished already).
  // prefill_taken: a prefill chunk is already in this step.
  Plan plan(Job& j, bool& prefill_taken, BatchItem& item);
  // The next id of a decoding job: the test reply's, else sampled (through the constraint's
  // mask when the sample is not allowed, so greedy stays exact).
  int32_t next_id(Job& j);
  // After the forward: records what the job fed; false when the job ended (finished already).
  bool fed(Job& j);
  bool fed_unguarded(Job& j);
  // The prompt is in the state: set up sampling, and checkpoint the state for the prompt cache.
  // False: the request ends here (max_tokens 0).
  bool start_decoding(Job& j);
  // A job whose session holds nothing starts from the prompt cache's longest match, if any.
  void restore_from_cache(Job& j);
  // resets the session's state, then finish()
  // An Error's kind and param go with its message (failed_with); anything else is Internal.
  void fail(Job& j, const std::string& error, ErrorKind kind = ErrorKind::Internal, std::string param = "");
  void finish(Job& j, std::string error, ErrorKind kind = ErrorKind::Internal, std::string param = "");
  void failed_with(Job& j, const std::exception& e);  // fail() with e's message, kind and param
  void ensure_model_session(SessionState& s);
  void vision_main();
  void check_admission_locked(const SessionState& s) const;  // under mu_

  // Session states in memory (session_parking.cpp; worker only). Live: a session whose state
  // is in memory, or whose running job will make one. At most options_.live_sessions.
  size_t live_states(const std::vector<std::shared_ptr<Job>>& jobs) const;
  // Parks the least recently used session with a state and no running request; false when
  // there is none.
  bool park_one_idle(const std::vector<std::shared_ptr<Job>>& jobs);
  // After control calls (load, save) may have made states: parks idle ones down to the limit.
  void enforce_live_limit(const std::vector<std::shared_ptr<Job>>& jobs);
  // Moves waiting jobs to `jobs` in arrival order while their sessions can have a state;
  // ends cancelled waiting jobs.
  void admit(std::vector<std::shared_ptr<Job>>& jobs);
  void park(SessionState& s);    // its state to a file, out of memory
  void unpark(SessionState& s);  // ... and back (the file is removed)

  ServiceOptions options_;
  IodHealth iod_health_;                       // written by the worker's iod calls, read by health()
  std::atomic<int64_t> busy_since_ns_{0};      // the worker's current work began (steady ns; 0: idle)
  std::unique_ptr<Container> expert_container_;
  std::unique_ptr<ReattachingExperts> iod_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<PromptCache> prompt_cache_;
  std::unique_ptr<StepGate> step_gate_;  // options_.step_gate; made on the worker
  ModelConfig config_;
  uint64_t trunk_bytes_ = 0;
  std::string expert_path_;
  uint64_t budget_bytes_ = 0;
  std::chrono::steady_clock::time_point started_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t next_session_ = 1;
  std::vector<std::shared_ptr<SessionState>> sessions_;
  std::deque<std::shared_ptr<Job>> incoming_;
  std::deque<std::shared_ptr<Job>> waiting_;  // worker: queued until their session can have a state
  std::optional<PrivateDir> park_dir_;        // worker: the private directory of parked states, once made
  uint64_t use_clock_ = 0;                    // worker: orders sessions by last use (parking picks the oldest)
  uint32_t live_ = 0;                         // under mu_: live states as of the worker's last admission
  uint64_t parked_ = 0, unparked_ = 0;        // under mu_
  std::deque<std::function<void()>> control_;  // reset/save/load/eval/close, run on the worker
  int queued_ = 0, running_ = 0;
  uint64_t requests_ = 0, failed_ = 0, prompt_tokens_ = 0, tokens_ = 0;
  double decode_seconds_ = 0;
  Job* resume_ = nullptr;  // where the next step starts when --max-batch cut this one short (worker)
  size_t step_prefill_chunk_ = 1;  // prompt tokens one prefill may feed in this step (worker)
  uint64_t batches_ = 0, batched_sessions_ = 0;
  uint32_t max_batch_ = 0;
  ExpertSourceStats expert_stats_;  // as of the last take_expert_traffic (under mu_)
  // The expert traffic since the last call (worker only): one stats call to iod, whose answer
  // also becomes expert_stats_ (and its time traffic_taken_).
  ExpertSourceStats take_expert_traffic();
  // Takes the traffic and charges it to the jobs that fed rows since the last charge, each its
  // share by rows (the global counters stay exact). A take is a round trip waking iod, whose
  // task switches cost the model's threads their TLB (docs/LEARNED.md, session 24), so steps
  // charge at most every kTrafficInterval; a job with uncharged rows is charged before it
  // finishes, and an eval charges first (what came before is the jobs', not the eval's).
  void charge_traffic();
  // As IodExperts::kTouchDelay: iod's counters lag a running request by about this much.
  static constexpr std::chrono::milliseconds kTrafficInterval{250};
  std::vector<std::shared_ptr<Job>> uncharged_;  // worker: jobs with uncharged rows
  std::chrono::steady_clock::time_point traffic_taken_{};  // worker: the last take_expert_traffic
  std::function<void()> on_stopped_;
  std::vector<uint32_t> test_reply_ids_;
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const constrain::TokenVocabulary> vocab_;
  std::thread worker_;
  std::deque<std::shared_ptr<Job>> vision_queue_;  // under mu_; bounded by max_queued
  std::condition_variable vision_wake_;
  std::thread vision_thread_;  // started by the first request with images
};

}  // namespace waste::server
