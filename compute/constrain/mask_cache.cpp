#include "compute/constrain/mask_cache.h"

#include <chrono>

#include "compute/constrain/grammar.h"
#include "compute/constrain/token_vocabulary.h"

namespace waste::constrain {

int32_t MaskCache::Memo::intern(StackSet&& s) {
  if (s.dead()) return -1;
  std::string k = s.key();
  auto it = index.find(k);
  if (it != index.end()) return it->second;
  const int32_t id = int32_t(sets.size());
  open.push_back(!s.stacks.empty() || s.popped);
  sets.push_back(std::move(s));
  next.resize(next.size() + n_classes, -2);
  index.emplace(std::move(k), id);
  return id;
}

int32_t MaskCache::Memo::compute(const Grammar& g, const StepLimits& lim, int32_t from, uint32_t c) {
  StackSet out;
  advance(g, lim, sets[size_t(from)], g.class_byte(c), out);
  const int32_t to = intern(std::move(out));
  next[size_t(from) * n_classes + c] = to;
  return to;
}

std::shared_ptr<const TokenSetEntry> MaskCache::entry(const Grammar& g, const TokenVocabulary& v,
                                                      std::span<const uint32_t> frames, uint32_t headroom) {
  std::string key(1, char(headroom));
  key.append(reinterpret_cast<const char*>(frames.data()), 4 * frames.size());
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++stats_.hits;
    return it->second;
  }
  ++stats_.misses;
  // One walk at a time per grammar: the memo is shared, and two walks of one state would be
  // wasted work anyway.
  std::shared_ptr<const TokenSetEntry> e = walk(g, v, frames, headroom);
  if (bytes_ + e->bytes() > kMaxCacheBytes) {
    entries_.clear();
    bytes_ = 0;
  }
  bytes_ += e->bytes();
  entries_.emplace(std::move(key), e);
  return e;
}

MaskCacheStats MaskCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MaskCacheStats s = stats_;
  for (const auto& [h, m] : memo_) s.memo_states += m.sets.size();
  return s;
}

std::shared_ptr<const TokenSetEntry> MaskCache::walk(const Grammar& g, const TokenVocabulary& v,
                                                     std::span<const uint32_t> frames, uint32_t headroom) {
  const auto t0 = std::chrono::steady_clock::now();
  StepLimits lim;
  lim.local = true;
  lim.headroom = headroom;
  lim.approx = headroom >= kHeadroomCap;
  lim.base_rule = g.rule_of(frames[0]);
  // Steps depend on the base rule (its FOLLOW bytes): one memo per (rule, headroom).
  size_t memo_states = 0;
  for (const auto& [k, m] : memo_) memo_states += m.sets.size();
  if (memo_states > kMaxMemoStates) memo_.clear();  // between walks only: a walk holds memo ids
  Memo& memo = memo_[(uint64_t(lim.base_rule) << 8) | headroom];
  memo.n_classes = g.class_count();
  // The walk starts from the key frames as they stand in a closed set: only the top's byte
  // edges (its calls and pop are other stacks of the matcher's set, with their own entries).
  StackSet init;
  init.stacks.emplace_back(frames.begin(), frames.end());
  const int32_t root = memo.intern(std::move(init));

  auto e = std::make_shared<TokenSetEntry>();
  const std::vector<TrieNode>& nodes = v.nodes();
  const std::vector<uint32_t>& order = v.order();
  std::vector<int32_t> at_depth(v.max_token_bytes() + 1, -1);
  at_depth[0] = root;
  const uint32_t n = v.node_count();
  uint64_t visited = 0;
  for (uint32_t i = 0; i < n;) {
    const TrieNode& nd = nodes[i];
    ++visited;
    const int32_t s = memo.step(g, lim, at_depth[nd.depth - 1], nd.byte);
    if (s < 0) {
      i = nd.end;
      continue;
    }
    if (!memo.open[size_t(s)]) {
      // Only `unknown`: every token below depends on the frames below the top.
      for (uint32_t k = nd.sub_begin; k < nodes[nd.end].sub_begin; ++k) e->uncertain.push_back(order[k]);
      i = nd.end;
      continue;
    }
    for (uint32_t k = 0; k < nd.own; ++k) e->accepted.push_back(order[nd.sub_begin + k]);
    at_depth[nd.depth] = s;
    ++i;
  }
  // Dense sets as a bitset: ORing 20 KB beats setting 100k bits one by one per mask.
  if (e->accepted.size() > v.size() / 32) {
    e->accepted_bits.assign((v.size() + 63) / 64, 0);
    for (uint32_t id : e->accepted) e->accepted_bits[id >> 6] |= 1ull << (id & 63);
    e->accepted.clear();
    e->accepted.shrink_to_fit();
  }
  stats_.walk_nodes += visited;
  stats_.walk_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace waste::constrain
