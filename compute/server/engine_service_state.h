// EngineService's own parts (engine_service.h), shared by the files that implement it: a
// session's state and a queued request (a Job), and the clock they are timed with. Not for
// users of EngineService.
#pragma once
#include <chrono>
#include <unistd.h>

#include <cstdint>

#include "compute/server/engine_service.h"

namespace waste::server {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A session's state. `model`, `fed` and `unfed` are touched by the worker only; the rest
// under the service mutex.
struct EngineService::SessionState {
  uint64_t id = 0;
  int64_t context = 0;
  std::optional<Session> model;
  std::vector<int32_t> fed;      // ids in the model state, in order
  std::optional<int32_t> unfed;  // the last sampled id, fed before the next prompt
  std::string parked;            // the file its state is parked in (model empty), or empty
  uint64_t last_used = 0;        // the worker's use clock when a request of it last started
  bool empty() const { return fed.empty() && !unfed; }
  void drop_parked() {  // the parked file, once its state is read back or replaced
    if (!parked.empty()) ::unlink(parked.c_str());
    parked.clear();
  }
  void forget() {
    model.reset();
    fed.clear();
    unfed.reset();
    drop_parked();
  }
  // under mu_
  int64_t position = 0;          // fed + unfed
  bool busy = false, closed = false;
  std::shared_ptr<std::atomic<bool>> cancel;  // of the running request
  SessionCounters counters;
};

struct EngineService::Job {
  std::shared_ptr<SessionState> s;
  std::vector<int32_t> feed;  // unfed id + prompt
  size_t fed = 0;
  std::string cache_scope;    // whose prompt-cache checkpoints it may start from and adds to
  bool fresh = false;         // the session held nothing: the prompt cache was asked, and gets its checkpoint
  SamplingParams params;
  std::shared_ptr<std::atomic<bool>> cancel;
  GenerateCallbacks cb;
  bool decoding = false;
  std::optional<Sampler> sampler;
  std::optional<StopMatcher> stops;
  std::optional<tok::DecodeStream> text;
  ReplyOptions reply;
  std::optional<reply::ReplyParser> parser;
  std::optional<ReplyConstraint> constraint;
  std::vector<float> masked;     // the logits with the constraint's mask applied
  size_t generated_from = 0;     // history[generated_from..] is what this request generated
  std::vector<int32_t> history;  // this request's prompt + generated (the sampler's penalty window)
  std::vector<float> logits;     // of the last token fed: what the next sample reads
  int32_t next = 0;              // the token fed in this step (decoding)
  std::vector<uint32_t> test_reply;  // ServiceOptions::test_reply's ids
  size_t test_reply_at = 0;
  size_t pending = 0;            // tokens fed in this step
  std::vector<ImageRun> images;  // positions in `feed` that take the tower's rows
  std::vector<PreparedImage> to_embed;  // the images' pixels until the vision thread ran them
  std::vector<const float*> inputs;     // this step's input rows (BatchItem::inputs points here)
  std::string vision_error;             // the tower failed: the worker ends the job with this
  Clock::time_point submitted, started, decode_started;
  bool has_started = false;
  // Rows fed since the expert traffic was last charged (charge_traffic): this job's share of
  // the traffic to come is by these rows. ever_fed: it has been in a step.
  uint64_t uncharged_rows = 0;
  bool ever_fed = false;
  GenerateOutcome out;
};

}  // namespace waste::server
