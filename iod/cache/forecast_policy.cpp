#include "iod/cache/forecast_policy.h"

#include <algorithm>
#include <bit>
#include <functional>

#include "shared/util/error.h"

namespace waste::cache {

namespace {

// Weight of the uninformed estimate in a class's probability: a class seen only a few times
// is not trusted over the base rate yet.
constexpr float kBaseWeight = 2.0f;

uint32_t count_bucket(uint32_t n) {
  // Routed-to count over the older visits: 0, 1, 2, 3-4, 5-7, 8-11, 12-19, 20-31, 32+.
  if (n <= 2) return n;
  if (n <= 4) return 3;
  if (n <= 7) return 4;
  if (n <= 11) return 5;
  if (n <= 19) return 6;
  if (n <= 31) return 7;
  return 8;
}

}  // namespace

ForecastPolicy::ForecastPolicy(const CacheGeometry& geometry, ForecastParams params, KeyPrior prior)
    : geometry_(geometry), params_(params) {
  require(params_.prefetch_p > 0 && params_.prefetch_p <= 1, "cache policy forecast: prefetch must be in (0, 1]");
  require(params_.prior_weight >= 0, "cache policy forecast: prior must be >= 0");
  require(params_.halve_at >= 16 && params_.halve_at <= 1e9, "cache policy forecast: halve must be in [16, 1e9]");
  require(prior.empty() || prior.size() == geometry_.key_count(),
          "cache policy forecast: prior has " + std::to_string(prior.size()) + " entries, geometry has " +
              std::to_string(geometry_.key_count()) + " keys");
  require(geometry_.experts_per_layer() > 0 && geometry_.moe_layer_count() > 0, "cache policy forecast: empty geometry");
  base_p_ = std::clamp(double(geometry_.top_k()) / geometry_.experts_per_layer(), 1e-4, 1.0);
  prefetch_far_ = float(geometry_.moe_layer_count() * (1.0 / params_.prefetch_p - 1.0));
  prior_bucket_.assign(geometry_.key_count(), 0);
  if (!prior.empty() && params_.prior_weight > 0) {
    // Popularity relative to uniform routing: below 0.5x, 1x, 2x, 4x, and 4x or more.
    for (size_t k = 0; k < prior.size(); ++k) {
      double r = prior[k] * params_.prior_weight / base_p_;
      prior_bucket_[k] = uint8_t(r < 0.5 ? 0 : r < 1 ? 1 : r < 2 ? 2 : r < 4 ? 3 : 4);
    }
  }
  reset(0);
}

void ForecastPolicy::reset(uint32_t slots) {
  const uint32_t keys = geometry_.key_count(), L = geometry_.moe_layer_count();
  history_.assign(keys, 0);
  idle_.assign(keys, kNeverUsed);
  class_.assign(keys, 0);
  for (uint32_t k = 0; k < keys; ++k) class_[k] = uint16_t(class_of(k));
  yes_.assign(kClasses, 0.0f);
  seen_.assign(kClasses, 0.0f);
  visit_yes_.assign(kClasses, 0.0f);
  visit_seen_.assign(kClasses, 0.0f);
  touched_.assign(kClasses, 0);
  touched_list_.clear();
  touched_list_.reserve(kClasses);
  p_.assign(kClasses, float(base_p_));
  const uint32_t parents = kClasses / kCountBuckets;
  parent_yes_.assign(parents, 0.0f);
  parent_seen_.assign(parents, 0.0f);
  parent_p_.assign(parents, float(base_p_));
  far_.assign(kClasses, 0.0f);
  for (uint32_t c = 0; c < kClasses; ++c) set_far(c);
  routed_.assign(geometry_.experts_per_layer(), 0);
  current_.clear();
  position_ = L - 1;
  slot_key_.assign(slots, kNoSlot);
  key_slot_.assign(keys, kNoSlot);
  slot_class_.assign(slots, kFreeSlot);
  slot_pos_.assign(slots, 0);
  slot_guess_.assign(slots, 0);
  guess_until_.assign(slots, 0);
  visits_ = 0;
  // Before the first token the last position was "just visited": layer 0 comes round next.
  distance_.assign(L, 0);
  for (uint32_t q = 0; q < L; ++q) distance_[q] = q + 1;
  groups_.reset(L * kClasses * 3, slots);
  group_score_.reserve(std::min<size_t>(size_t(L) * kClasses * 3, slots));
  guess_expiry_.clear();
}

void ForecastPolicy::regroup(uint32_t slot) {
  const uint16_t c = slot_class_[slot];
  if (c == kFreeSlot) {
    groups_.assign(slot, SlotGroups::kNone);
    return;
  }
  // The same cases as the score in choose_victim_scan.
  uint32_t guess = 0;
  if (slot_guess_[slot] == 1 && visits_ < guess_until_[slot]) guess = 1;
  else if (slot_guess_[slot] == 2) guess = 2;
  groups_.assign(slot, (slot_pos_[slot] * kClasses + c) * 3 + guess);
}

uint32_t ForecastPolicy::class_of(uint32_t key) const {
  uint64_t h = history_[key];
  uint32_t recent = uint32_t(h) & ((1u << kRecentBits) - 1);
  // Recently used keys: the count over the 29 visits before the recent ones; quiet ones: over 61.
  uint32_t older = count_bucket(uint32_t(std::popcount((recent ? uint32_t(h) : h) >> kRecentBits)));
  uint32_t age = 0;
  if (recent == 0 && idle_[key] != kNeverUsed) {
    // How long ago the last use was: keys with the same count but a fresher use are likelier.
    const uint32_t idle = idle_[key];
    age = idle < 8 ? 1 : idle < 16 ? 2 : idle < 32 ? 3 : idle < 64 ? 4 : idle < 128 ? 5 : 6;
  }
  return ((prior_bucket_[key] * kAgeBuckets + age) * kCountBuckets + older) * (1u << kRecentBits) + recent;
}

void ForecastPolicy::set_far(uint32_t c) {
  p_[c] = (yes_[c] + kBaseWeight * parent_p_[parent_of(c)]) / (seen_[c] + kBaseWeight);
  far_[c] = float(geometry_.moe_layer_count()) * (1.0f / std::max(p_[c], 1e-6f) - 1.0f);
}

void ForecastPolicy::on_fetch(uint32_t layer, std::span<const uint32_t> experts) {
  const uint32_t pos = geometry_.position(layer), E = geometry_.experts_per_layer(), L = geometry_.moe_layer_count();
  for (uint32_t e : current_) routed_[e] = 0;
  current_.clear();
  for (uint32_t e : experts)
    if (e < E && !routed_[e]) {
      routed_[e] = 1;
      current_.push_back(e);
    }
  // One sample per key of the layer: its class before this visit, and whether it was routed to.
  // Most keys share a few classes: the samples are summed per class first, then each touched
  // class (and its parent) is updated once.
  const uint32_t first = pos * E;
  for (uint32_t e = 0; e < E; ++e) {
    const uint32_t k = first + e, c = class_[k];
    if (!touched_[c]) {
      touched_[c] = 1;
      touched_list_.push_back(c);
    }
    visit_yes_[c] += float(routed_[e]);
    visit_seen_[c] += 1.0f;
    history_[k] = (history_[k] << 1) | routed_[e];
    if (routed_[e]) idle_[k] = 0;
    else if (idle_[k] < 1024) ++idle_[k];
    class_[k] = uint16_t(class_of(k));
    if (const uint32_t s = key_slot_[k]; s != kNoSlot) {
      slot_class_[s] = class_[k];
      regroup(s);
    }
  }
  const float halve_at = float(params_.halve_at);
  for (uint32_t c : touched_list_) {
    const uint32_t pc = parent_of(c);
    yes_[c] += visit_yes_[c];
    seen_[c] += visit_seen_[c];
    parent_yes_[pc] += visit_yes_[c];
    parent_seen_[pc] += visit_seen_[c];
    visit_yes_[c] = visit_seen_[c] = 0.0f;
    touched_[c] = 0;
    if (seen_[c] >= halve_at) {
      yes_[c] *= 0.5f;
      seen_[c] *= 0.5f;
    }
  }
  for (uint32_t c : touched_list_) {
    const uint32_t pc = parent_of(c);
    if (parent_seen_[pc] >= halve_at) {
      parent_yes_[pc] *= 0.5f;
      parent_seen_[pc] *= 0.5f;
    }
    parent_p_[pc] = (parent_yes_[pc] + kBaseWeight * float(base_p_)) / (parent_seen_[pc] + kBaseWeight);
  }
  for (uint32_t c : touched_list_) set_far(c);
  touched_list_.clear();
  position_ = pos;
  // Classes not sampled at this visit follow their parents' new estimates once per token.
  if (pos == 0)
    for (uint32_t c = 0; c < kClasses; ++c) set_far(c);
  for (uint32_t q = 0; q < L; ++q) distance_[q] = q > pos ? q - pos : q + L - pos;
  ++visits_;
  // Prefetch guesses whose window ended with this visit score as demanded records from now on.
  const auto later = std::greater<std::pair<uint64_t, uint32_t>>();
  while (!guess_expiry_.empty() && guess_expiry_.front().first <= visits_) {
    const uint32_t s = guess_expiry_.front().second;
    std::pop_heap(guess_expiry_.begin(), guess_expiry_.end(), later);
    guess_expiry_.pop_back();
    regroup(s);
  }
}

void ForecastPolicy::on_hit(uint32_t slot, ExpertKey key) {
  const uint32_t k = geometry_.key_index(key);
  if (slot_key_.at(slot) != k) {
    // The cache owner moved the key (or reused the slot without on_evict): forget the old pairs.
    if (slot_key_[slot] != kNoSlot) key_slot_[slot_key_[slot]] = kNoSlot;
    if (uint32_t old = key_slot_[k]; old != kNoSlot) {
      slot_key_[old] = kNoSlot;
      slot_class_[old] = kFreeSlot;
      regroup(old);
    }
    slot_key_[slot] = k;
    key_slot_[k] = slot;
  }
  slot_class_[slot] = class_[k];
  slot_pos_[slot] = geometry_.position(key.layer);
  slot_guess_[slot] = 0;
  regroup(slot);
}

void ForecastPolicy::on_insert(uint32_t slot, ExpertKey key, InsertKind kind) {
  on_hit(slot, key);
  if (kind != InsertKind::Demand) {
    slot_guess_[slot] = kind == InsertKind::Prefetch ? 1 : 2;
    // A prefetch guess holds until its layer's next visit, distance_ visits from now.
    if (kind == InsertKind::Prefetch) {
      guess_until_[slot] = visits_ + distance_[slot_pos_[slot]];
      // Bounded: one entry per prefetch insert, each popped within a cycle of visits.
      guess_expiry_.emplace_back(guess_until_[slot], slot);
      std::push_heap(guess_expiry_.begin(), guess_expiry_.end(), std::greater<std::pair<uint64_t, uint32_t>>());
    }
    regroup(slot);
  }
  // Demand: the history learns of the use at the layer's visit (on_fetch). Prewarm: only the
  // class (prior bucket, empty history) speaks for the record.
}

void ForecastPolicy::on_evict(uint32_t slot, ExpertKey) {
  if (slot_key_.at(slot) != kNoSlot) key_slot_[slot_key_[slot]] = kNoSlot;
  slot_key_[slot] = kNoSlot;
  slot_class_[slot] = kFreeSlot;
  slot_guess_[slot] = 0;
  regroup(slot);
}

double ForecastPolicy::use_probability(ExpertKey key) const { return p_[class_[geometry_.key_index(key)]]; }

uint32_t ForecastPolicy::choose_victim(const EvictableFn& evictable) {
  // choose_victim_scan's result, one score per group: the highest score wins, ties go to the
  // lowest slot; a record the layer being fetched still has to pin (score 0 in the scan) only
  // when no other slot is evictable. First the score of every non-empty group; then the groups
  // with the top score (nearly always one of their slots is evictable); only when all of those
  // are pinned, the rest.
  const uint32_t E = geometry_.experts_per_layer();
  const float cycle = float(distance_.size());
  const std::span<const uint32_t> groups = groups_.nonempty();
  group_score_.resize(groups.size());
  float top = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const uint32_t g = groups[i], guess = g % 3, c = (g / 3) % kClasses, q = g / (3 * kClasses);
    float far = far_[c];
    if (guess == 1) far = std::min(far, prefetch_far_);
    else if (guess == 2) far += cycle;
    group_score_[i] = float(distance_[q]) + far;
    top = i == 0 ? group_score_[i] : std::max(top, group_score_[i]);
  }
  uint32_t best = kNoSlot, needed_now = kNoSlot;
  float best_score = 0;
  // Looks at the group's slots: the lowest evictable one wins if the group's score beats the
  // best so far, or ties it with a lower slot.
  auto consider = [&](size_t i) {
    const uint32_t q = groups[i] / (3 * kClasses);
    const float score = group_score_[i];
    if (best != kNoSlot && score < best_score) return;
    for (const uint32_t s : groups_.members(groups[i])) {
      if (q == position_ && routed_[slot_key_[s] % E]) {
        if ((needed_now == kNoSlot || s < needed_now) && evictable(s)) needed_now = s;
      } else if ((best == kNoSlot || score > best_score || s < best) && evictable(s)) {
        best = s;
        best_score = score;
      }
    }
  };
  for (size_t i = 0; i < groups.size(); ++i)
    if (group_score_[i] == top) consider(i);
  if (best == kNoSlot)
    for (size_t i = 0; i < groups.size(); ++i)
      if (group_score_[i] != top) consider(i);
  return best != kNoSlot ? best : needed_now;
}

uint32_t ForecastPolicy::choose_victim_scan(const EvictableFn& evictable) const {
  uint32_t best = kNoSlot;
  float best_score = 0;
  const uint32_t E = geometry_.experts_per_layer();
  const uint32_t n = uint32_t(slot_class_.size());
  for (uint32_t s = 0; s < n; ++s) {
    const uint16_t c = slot_class_[s];
    if (c == kFreeSlot) continue;
    float far = far_[c];
    // A prefetch is expected to be used at its layer's visit (prefetch_p); a pre-warmed record
    // that no visit has used yet is a guess: one token further away than its class says, so it
    // goes before a demanded record with the same estimate.
    if (slot_guess_[s] == 1 && visits_ < guess_until_[s]) far = std::min(far, prefetch_far_);
    else if (slot_guess_[s] == 2) far += float(distance_.size());
    // Expected visits until the next use; ties go to the lower slot (deterministic), and
    // evictable() is only asked about a candidate that would win.
    float score = float(distance_[slot_pos_[s]]) + far;
    // A record the layer being fetched still has to pin is needed now, not a cycle from now:
    // it goes only when nothing else can (every other score is at least 1).
    if (slot_pos_[s] == position_ && routed_[slot_key_[s] % E]) score = 0.0f;
    if ((best == kNoSlot || score > best_score) && evictable(s)) {
      best = s;
      best_score = score;
    }
  }
  return best;
}

}  // namespace waste::cache
