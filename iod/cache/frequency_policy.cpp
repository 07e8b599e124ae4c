#include "iod/cache/frequency_policy.h"

#include <algorithm>
#include <cmath>

#include "shared/util/error.h"

namespace waste::cache {

FrequencyPolicy::FrequencyPolicy(const CacheGeometry& geometry, FrequencyParams params, KeyPrior prior)
    : geometry_(geometry), params_(params), prior_(std::move(prior)) {
  require(params_.gamma > 0 && params_.gamma < 1, "cache policy: gamma must be in (0, 1)");
  require(params_.prior_weight >= 0, "cache policy: prior weight must be >= 0");
  require(params_.prefetch_p >= 0 && params_.prefetch_p <= 1, "cache policy: prefetch_p must be in [0, 1]");
  require(params_.floor_p > 0 && params_.floor_p <= 1, "cache policy: floor_p must be in (0, 1]");
  require(prior_.empty() || prior_.size() == geometry_.key_count(),
          "cache policy: prior has " + std::to_string(prior_.size()) + " entries, geometry has " +
              std::to_string(geometry_.key_count()) + " keys");
  // Past ~200 tokens the factor is negligible for any gamma <= 0.95; the table ends at zero.
  decay_pow_.resize(512);
  double v = 1;
  for (double& d : decay_pow_) {
    d = v;
    v *= params_.gamma;
  }
  decay_pow_.back() = 0;
  reset(0);
}

std::string FrequencyPolicy::name() const {
  return params_.mode == FrequencyParams::Mode::Cyclic ? "cyclic" : "lrfu";
}

void FrequencyPolicy::reset(uint32_t slots) {
  count_.assign(geometry_.key_count(), 0.0f);
  last_token_.assign(geometry_.key_count(), 0);
  slot_key_.assign(slots, kNoSlot);
  prefetch_until_.assign(slots, 0);
  token_ = 0;
  position_ = 0;
  started_ = false;
}

void FrequencyPolicy::advance_to(uint32_t position) {
  // Layers come round in order; returning to an earlier (or the same) position starts a token.
  if (started_ && position <= position_) ++token_;
  position_ = position;
  started_ = true;
}

void FrequencyPolicy::on_fetch(uint32_t layer, std::span<const uint32_t>) { advance_to(geometry_.position(layer)); }

void FrequencyPolicy::count_access(uint32_t k) {
  uint32_t age = token_ - last_token_[k];
  // A key is read at most once per token; a second access in the same token (prefetch turned
  // demand) does not count twice.
  if (age == 0 && count_[k] > 0) return;
  double decayed = count_[k] * decay_pow_[std::min<size_t>(age, decay_pow_.size() - 1)];
  count_[k] = float(decayed + 1.0);
  last_token_[k] = token_;
}

uint32_t FrequencyPolicy::age(uint32_t k) const {
  // Decode steps are counted per layer: a key's layer that has not come round yet in this token
  // has had one opportunity fewer than a layer already visited. Counting ages from the token
  // clock alone would make every key of a later layer look a token staler than it is.
  uint32_t pos = k / geometry_.experts_per_layer();
  uint32_t visits = (pos <= position_ || token_ == 0) ? token_ : token_ - 1;
  return visits >= last_token_[k] ? visits - last_token_[k] : 0;
}

double FrequencyPolicy::probability(uint32_t k) const {
  uint32_t age = this->age(k);
  double p = count_[k] * decay_pow_[std::min<size_t>(age, decay_pow_.size() - 1)] * (1 - params_.gamma);
  if (!prior_.empty()) p += params_.prior_weight * prior_[k];
  return std::clamp(p, params_.floor_p, 1.0);
}

double FrequencyPolicy::use_probability(ExpertKey key) const { return probability(geometry_.key_index(key)); }

void FrequencyPolicy::on_hit(uint32_t slot, ExpertKey key) {
  uint32_t k = geometry_.key_index(key);
  if (!started_ || geometry_.position(key.layer) != position_) advance_to(geometry_.position(key.layer));
  count_access(k);
  slot_key_.at(slot) = k;
  prefetch_until_[slot] = 0;
}

void FrequencyPolicy::on_insert(uint32_t slot, ExpertKey key, InsertKind kind) {
  uint32_t k = geometry_.key_index(key);
  slot_key_.at(slot) = k;
  prefetch_until_[slot] = 0;
  if (kind == InsertKind::Demand) {
    if (!started_ || geometry_.position(key.layer) != position_) advance_to(geometry_.position(key.layer));
    count_access(k);
  } else if (kind == InsertKind::Prefetch) {
    // The guess holds until the key's layer has next come round.
    uint64_t L = geometry_.moe_layer_count(), pos = geometry_.position(key.layer);
    uint64_t now = uint64_t(token_) * L + position_;
    uint64_t next = uint64_t(token_) * L + pos;
    if (next <= now) next += L;
    prefetch_until_[slot] = next;
  }
  // Prewarm: no access to count; the prior carries it.
}

void FrequencyPolicy::on_evict(uint32_t slot, ExpertKey) {
  slot_key_.at(slot) = kNoSlot;
  prefetch_until_[slot] = 0;
}

double FrequencyPolicy::eviction_score(uint32_t slot) const {
  uint32_t k = slot_key_[slot];
  double p = probability(k);
  uint64_t L = geometry_.moe_layer_count();
  if (prefetch_until_[slot] != 0 && prefetch_until_[slot] >= uint64_t(token_) * L + position_)
    p = std::max(p, params_.prefetch_p);
  if (params_.mode == FrequencyParams::Mode::Lrfu) return -p;
  uint32_t pos = k / geometry_.experts_per_layer();
  double d = pos > position_ ? double(pos - position_) : double(pos + L - position_);
  return d + double(L) * (1.0 / p - 1.0);
}

uint32_t FrequencyPolicy::choose_victim(const EvictableFn& evictable) {
  uint32_t best = kNoSlot;
  double best_score = 0;
  for (uint32_t s = 0; s < slot_key_.size(); ++s) {
    if (slot_key_[s] == kNoSlot || !evictable(s)) continue;
    double score = eviction_score(s);
    if (best == kNoSlot || score > best_score) {
      best = s;
      best_score = score;
    }
  }
  return best;
}

}  // namespace waste::cache
