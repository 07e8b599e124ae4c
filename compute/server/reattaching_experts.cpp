#include "compute/server/reattaching_experts.h"

#include <spdlog/spdlog.h>

#include <string>
#include <type_traits>

#include "shared/stats/arithmetic.h"
#include "shared/util/error.h"

namespace waste::server {

ReattachingExperts::ReattachingExperts(const Container& container, std::string socket_path, int64_t call_timeout_ms,
                                       IodHealth& health)
    : container_(container), socket_(std::move(socket_path)), call_timeout_ms_(call_timeout_ms), health_(health) {
  forward([&] { inner_ = std::make_unique<IodExperts>(container_, socket_, call_timeout_ms_); });
}

IodExperts& ReattachingExperts::live() {
  if (lost_) {  // a stats call went unanswered (it only marks: the next call drops and reattaches)
    lost_ = false;
    if (inner_) inner_->abandon();  // its goodbye calls would wait out the deadline again
    drop();
  }
  if (!inner_) {
    inner_ = std::make_unique<IodExperts>(container_, socket_, call_timeout_ms_);  // throws while iod is still down
    ++reattaches_;
    last_seen_ = {};
    spdlog::info("compute: reattached to iod at {} ({} slots)", socket_, inner_->slot_count());
  }
  return *inner_;
}

void ReattachingExperts::drop() {
  if (!inner_) return;
  spdlog::warn("compute: lost iod at {}; will reattach on the next request", socket_);
  carried_ = stats::plus(carried_, last_seen_);
  last_seen_ = {};
  inner_.reset();  // ~IodExperts never throws: it swallows the errors of a daemon that is gone
}

// Every forwarded call: a failure drops the connection so the next call attaches afresh; one
// record that cannot be had is that record's fault, and the connection is fine (iod answered).
// iod counts as answered only when one of its calls got an answer (attach included): a call
// served from the shared segment alone says nothing of whether iod is there.
template <typename F>
auto ReattachingExperts::forward(F&& f) -> decltype(f()) {
  health_.call_started();
  const bool was_attached = inner_ != nullptr;
  const uint64_t answers_before = was_attached ? inner_->client().answers() : 0;
  struct Ended {
    IodHealth& h;
    ~Ended() { h.call_ended(); }
  } ended{health_};
  auto note_answer = [&] {
    if (inner_ && (!was_attached || inner_->client().answers() != answers_before)) health_.answered();
  };
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      note_answer();
    } else {
      auto r = f();
      note_answer();
      return r;
    }
  } catch (const ExpertUnavailable&) {
    note_answer();
    throw;
  } catch (const std::exception& e) {
    health_.failed(e.what());
    drop();
    throw;
  } catch (...) {
    health_.failed("unknown error");
    drop();
    throw;
  }
}

ExpertView ReattachingExperts::expert(int layer, int expert) {
  // Nothing asks for one expert at a time (moe_forward uses the batch protocol below); not
  // forwarded, so that the refusal is not taken for a fault of iod's.
  throw Error("iod experts are served by layer batch, not one at a time (layer " + std::to_string(layer) +
              ", expert " + std::to_string(expert) + ")");
}
void ReattachingExperts::prefetch(int layer, std::span<const int> experts) {
  forward([&] { live().prefetch(layer, experts); });
}
void ReattachingExperts::fetch_layer(int layer, std::span<const int> experts) {
  forward([&] { live().fetch_layer(layer, experts); });
}
int ReattachingExperts::next_ready(ExpertView& view) {
  return forward([&] { return live().next_ready(view); });
}

size_t ReattachingExperts::next_ready_group(std::span<Ready> out) {
  return forward([&] { return live().next_ready_group(out); });
}
void ReattachingExperts::end_layer() {
  forward([&] { live().end_layer(); });
}
void ReattachingExperts::ping() {
  forward([&] { live().ping(); });
}
uint32_t ReattachingExperts::slot_count() {
  return forward([&] { return live().slot_count(); });
}
uint64_t ReattachingExperts::slot_bytes() {
  return forward([&] { return live().client().info().layout.slot_bytes; });
}

ExpertSourceStats ReattachingExperts::stats() {
  if (inner_ && !lost_) {  // once lost, the last answer stands until the next call reattaches
    health_.call_started();
    try {
      last_seen_ = inner_->stats();
      health_.answered();
    } catch (const std::exception& e) {
      // Reported from the last good answer. iod did not answer in time (or is gone): the
      // connection is dropped like after any failed call, so the next model call attaches
      // afresh, and fails while iod stays away. (Unpinned reads may need no other call: this
      // one, every 250 ms while jobs run and when one ends, is what notices a stopped iod.)
      health_.failed(e.what());
      lost_ = true;
    }
    health_.call_ended();
  }
  return stats::plus(carried_, last_seen_);
}

}  // namespace waste::server
