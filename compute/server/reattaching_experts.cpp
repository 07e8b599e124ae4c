#include "compute/server/reattaching_experts.h"

#include <spdlog/spdlog.h>

namespace waste::server {

namespace {

ExpertSourceStats plus(const ExpertSourceStats& a, const ExpertSourceStats& b) {
  return {a.hits + b.hits, a.misses + b.misses, a.bytes_read + b.bytes_read};
}

}  // namespace

ReattachingExperts::ReattachingExperts(const Container& container, std::string socket_path)
    : container_(container), socket_(std::move(socket_path)) {
  inner_ = std::make_unique<IodExperts>(container_, socket_);
}

IodExperts& ReattachingExperts::live() {
  if (!inner_) {
    inner_ = std::make_unique<IodExperts>(container_, socket_);  // throws while iod is still down
    ++reattaches_;
    last_seen_ = {};
    spdlog::info("compute: reattached to iod at {} ({} slots)", socket_, inner_->slot_count());
  }
  return *inner_;
}

void ReattachingExperts::drop() {
  if (!inner_) return;
  spdlog::warn("compute: lost iod at {}; will reattach on the next request", socket_);
  carried_ = plus(carried_, last_seen_);
  last_seen_ = {};
  // Destroying the client must not throw even though its peer is gone.
  try {
    inner_.reset();
  } catch (...) {
    inner_.release();  // leak rather than terminate: the connection object is already broken
  }
}

// Every forwarded call: a failure drops the connection so the next call attaches afresh; one
// record that cannot be had is that record's fault, and the connection is fine.
#define WASTE_FORWARD(expr)              \
  try {                                  \
    return expr;                         \
  } catch (const ExpertUnavailable&) {   \
    throw;                               \
  } catch (...) {                        \
    drop();                              \
    throw;                               \
  }

ExpertView ReattachingExperts::expert(int layer, int expert) { WASTE_FORWARD(live().expert(layer, expert)) }
void ReattachingExperts::release(int layer, int expert) { WASTE_FORWARD(live().release(layer, expert)) }
void ReattachingExperts::prefetch(int layer, std::span<const int> experts) {
  WASTE_FORWARD(live().prefetch(layer, experts))
}
void ReattachingExperts::fetch_layer(int layer, std::span<const int> experts) {
  WASTE_FORWARD(live().fetch_layer(layer, experts))
}
int ReattachingExperts::next_ready(ExpertView& view) { WASTE_FORWARD(live().next_ready(view)) }
void ReattachingExperts::end_layer() { WASTE_FORWARD(live().end_layer()) }
uint32_t ReattachingExperts::slot_count() { WASTE_FORWARD(live().slot_count()) }
uint64_t ReattachingExperts::slot_bytes() { WASTE_FORWARD(live().client().info().layout.slot_bytes) }

#undef WASTE_FORWARD

ExpertSourceStats ReattachingExperts::stats() const {
  if (inner_) {
    try {
      last_seen_ = inner_->stats();
    } catch (...) {
      // Reported from the last good answer; the next model call notices and reattaches.
    }
  }
  return plus(carried_, last_seen_);
}

}  // namespace waste::server
