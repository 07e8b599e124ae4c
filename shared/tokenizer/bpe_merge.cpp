#include "shared/tokenizer/bpe_merge.h"

#include <cstring>
#include <queue>

namespace waste::tok {

namespace {

const uint8_t* as_bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

void bpe_encode_piece_scan(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  const uint8_t* p = as_bytes(piece);
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(ranks.byte_rank(p[0]));
    return;
  }
  // start[i] is where part i begins (start[parts] == n); pair[i] is the rank of parts i and
  // i+1 joined. Merging part i with i+1 erases start[i+1] and pair[i+1], then refreshes
  // pair[i-1] and pair[i], the only pairs whose bytes changed. Short pieces (the common case)
  // use stack buffers so the loop never allocates.
  uint32_t start_buf[kBpeScanMaxBytes + 1], pair_buf[kBpeScanMaxBytes];
  std::vector<uint32_t> start_vec, pair_vec;
  uint32_t* start = start_buf;
  uint32_t* pair = pair_buf;
  if (n > kBpeScanMaxBytes) {
    start_vec.resize(n + 1);
    pair_vec.resize(n);
    start = start_vec.data();
    pair = pair_vec.data();
  }
  for (size_t i = 0; i <= n; ++i) start[i] = static_cast<uint32_t>(i);
  size_t parts = n;
  auto pair_rank = [&](size_t i) -> uint32_t {
    if (i + 2 > parts) return kNoRank;
    return ranks.rank(p + start[i], start[i + 2] - start[i]);
  };
  for (size_t i = 0; i + 1 < parts; ++i) pair[i] = pair_rank(i);
  while (parts > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts; ++i)
      if (pair[i] < best) best = pair[i], at = i;
    if (best == kNoRank) break;
    std::memmove(start + at + 1, start + at + 2, (parts - at - 1) * sizeof(uint32_t));
    if (at + 3 <= parts) std::memmove(pair + at + 1, pair + at + 2, (parts - at - 3) * sizeof(uint32_t));
    --parts;
    if (at > 0) pair[at - 1] = pair_rank(at - 1);
    pair[at] = pair_rank(at);
  }
  for (size_t i = 0; i < parts; ++i) out.push_back(ranks.rank(p + start[i], start[i + 1] - start[i]));
}

void bpe_encode_piece_heap(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  const uint8_t* p = as_bytes(piece);
  const uint32_t n = static_cast<uint32_t>(piece.size());
  if (n == 0) return;
  // A doubly linked list of parts, indexed by their start byte; next == n ends the list.
  // Heap entries are (rank, start); an entry is stale when its part is gone or its pair rank
  // changed since it was pushed. Ordering by (rank, start) picks the leftmost lowest pair,
  // exactly as the scan does.
  std::vector<uint32_t> next(n), prev(n), cur(n, kNoRank);
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i == 0 ? kNoRank : i - 1;
  using Item = std::pair<uint32_t, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto refresh = [&](uint32_t i) {
    uint32_t j = next[i];
    if (j >= n) {
      cur[i] = kNoRank;
      return;
    }
    uint32_t end = next[j];
    cur[i] = ranks.rank(p + i, end - i);
    if (cur[i] != kNoRank) heap.push({cur[i], i});
  };
  for (uint32_t i = 0; i < n; ++i) refresh(i);
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (!alive[i] || cur[i] != r) continue;
    uint32_t j = next[i];  // merge part j into part i
    alive[j] = false;
    next[i] = next[j];
    if (next[i] < n) prev[next[i]] = i;
    refresh(i);
    if (prev[i] != kNoRank) refresh(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(ranks.rank(p + i, next[i] - i));
}

void bpe_encode_piece(const BpeRanks& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  // Most pieces are whole tokens: one lookup, as tiktoken does first.
  uint32_t whole = ranks.rank(piece);
  if (whole != kNoRank) {
    out.push_back(whole);
    return;
  }
  if (piece.size() <= kBpeScanMaxBytes)
    bpe_encode_piece_scan(ranks, piece, out);
  else
    bpe_encode_piece_heap(ranks, piece, out);
}

}  // namespace waste::tok
