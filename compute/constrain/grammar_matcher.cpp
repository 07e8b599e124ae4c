#include "compute/constrain/grammar_matcher.h"

#include <algorithm>
#include <cmath>

#include "compute/constrain/mask_cache.h"
#include "shared/util/error.h"

namespace waste::constrain {

namespace {

// Full-state masks kept per matcher: 16 x 20 KB for a 163,840-id vocabulary.
constexpr size_t kRecentMasks = 16;

const StepLimits kFull{};  // root frame at index 0, exact depth checks

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> v)
    : g_(std::move(g)), v_(std::move(v)) {
  require(g_ != nullptr && v_ != nullptr, "GrammarMatcher: no grammar or vocabulary");
  cache_ = g_->mask_cache(v_);
  state_ = start_set(*g_, g_->root(), kFull);
}

bool GrammarMatcher::run(const StackSet& from, std::string_view bytes, StackSet* out) const {
  StackSet a = from, b;
  for (char c : bytes) {
    if (a.stacks.empty()) return false;
    advance(*g_, kFull, a, uint8_t(c), b);
    std::swap(a, b);
  }
  const bool ok = !a.stacks.empty() || a.popped;
  if (ok && out) *out = std::move(a);
  return ok;
}

bool GrammarMatcher::allows(uint32_t id) const {
  if (!v_->ordinary(id)) return false;
  if (current_) return ((*current_)[id >> 6] >> (id & 63)) & 1;
  return run(state_, v_->bytes(id), nullptr);
}

bool GrammarMatcher::allows_bytes(std::string_view bytes) const { return run(state_, bytes, nullptr); }

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  StackSet next;
  if (!run(state_, bytes, &next)) return false;
  state_ = std::move(next);
  current_.reset();
  return true;
}

bool GrammarMatcher::accept(uint32_t id) {
  if (!allows(id)) return false;
  return accept_bytes(v_->bytes(id));
}

void GrammarMatcher::compute_bits(std::vector<uint64_t>& bits) {
  const TokenVocabulary& v = *v_;
  bits.assign((v.size() + 63) / 64, 0);
  std::vector<uint32_t> uncertain;
  for (const auto& st : state_.stacks) {
    size_t k = 1;  // key frames: the top, and the callers of wide-follow rules
    while (k < st.size() && k < kMaxKeyFrames && g_->wide_follow(g_->rule_of(st[st.size() - k]))) ++k;
    const uint32_t depth = uint32_t(st.size() - k + 1);  // of the lowest key frame
    const uint32_t headroom = std::min(kMaxStackDepth - depth, kHeadroomCap);
    const std::shared_ptr<const TokenSetEntry> e =
        cache_->entry(*g_, v, std::span<const uint32_t>(st).subspan(st.size() - k), headroom);
    if (!e->accepted_bits.empty())
      for (size_t w = 0; w < bits.size(); ++w) bits[w] |= e->accepted_bits[w];
    for (uint32_t id : e->accepted) bits[id >> 6] |= 1ull << (id & 63);
    uncertain.insert(uncertain.end(), e->uncertain.begin(), e->uncertain.end());
  }
  if (uncertain.empty()) return;
  // The uncertain tokens against the real stacks, in trie order so that tokens sharing a prefix
  // share its steps, and a dead prefix rejects every token below it at once.
  std::sort(uncertain.begin(), uncertain.end(),
            [&](uint32_t a, uint32_t b) { return v.position(a) < v.position(b); });
  uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
  std::vector<StackSet> at(v.max_token_bytes() + 1);
  at[0] = state_;
  std::string_view prev;
  size_t valid = 0;             // at[0..valid] are the sets after prev's first bytes
  size_t dead_at = SIZE_MAX;    // prev's prefix of this length is dead
  for (uint32_t id : uncertain) {
    if ((bits[id >> 6] >> (id & 63)) & 1) continue;
    const std::string_view s = v.bytes(id);
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    prev = s;
    if (lcp >= dead_at) continue;  // shares a dead prefix
    dead_at = SIZE_MAX;
    size_t d = std::min(lcp, valid);
    bool alive = true;
    for (; d < s.size(); ++d) {
      if (at[d].stacks.empty()) {
        dead_at = d;  // any later token with these d bytes needs a byte from this empty set
        alive = false;
        break;
      }
      advance(*g_, kFull, at[d], uint8_t(s[d]), at[d + 1]);
    }
    valid = d;
    if (alive && (!at[s.size()].stacks.empty() || at[s.size()].popped)) bits[id >> 6] |= 1ull << (id & 63);
  }
}

const std::vector<uint64_t>& GrammarMatcher::allowed_bits() {
  if (current_) return *current_;
  std::string key = state_.key();
  for (size_t i = 0; i < recent_.size(); ++i)
    if (recent_[i].key == key) {
      Recent r = std::move(recent_[i]);
      recent_.erase(recent_.begin() + long(i));
      current_ = r.bits;
      recent_.push_back(std::move(r));
      return *current_;
    }
  auto bits = std::make_shared<std::vector<uint64_t>>();
  compute_bits(*bits);
  current_ = bits;
  if (recent_.size() >= kRecentMasks) recent_.erase(recent_.begin());
  recent_.push_back({std::move(key), current_});
  return *current_;
}

void GrammarMatcher::mask(std::span<float> logits) {
  const std::vector<uint64_t>& bits = allowed_bits();
  const size_t n = std::min<size_t>(logits.size(), v_->size());
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    if (word == ~0ull) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((word >> (i & 63)) & 1)) logits[i] = -INFINITY;
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -INFINITY;
}

}  // namespace waste::constrain
