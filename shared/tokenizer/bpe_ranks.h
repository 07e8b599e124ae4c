// The byte-level BPE vocabulary of a tiktoken rank file: token byte strings and their ranks
// (a token's rank is its id). Lookup by bytes is an open-addressing hash table over one byte
// arena, so the merge loop never allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste::tok {

inline constexpr uint32_t kNoRank = UINT32_MAX;

// Limits on a rank file; everything read from disk is bounded by these before use.
inline constexpr uint64_t kMaxRankFileBytes = 64ull << 20;
inline constexpr size_t kMaxRankLineChars = 2048;
inline constexpr size_t kMaxTokenBytes = 1024;
inline constexpr uint32_t kMaxRanks = 1u << 22;  // also the bound on a rank value

class BpeRanks {
 public:
  BpeRanks() = default;

  // Parses `base64(token bytes) rank` lines (empty lines skipped, as tiktoken does). Errors name
  // `source` (the file) and the 1-based line. Every single byte must have a rank, or byte-level
  // BPE could not encode arbitrary text.
  static BpeRanks parse(std::string_view text, const std::string& source);
  static BpeRanks load_file(const std::string& path);
  // Builds from token byte strings whose rank is their index (used by the synthetic generator).
  static BpeRanks from_tokens(const std::vector<std::string>& tokens, const std::string& source);

  // Rank of exactly these bytes, or kNoRank.
  uint32_t rank(const uint8_t* bytes, size_t n) const;
  uint32_t rank(std::string_view s) const {
    return rank(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  uint32_t byte_rank(uint8_t b) const { return byte_rank_[b]; }

  // The bytes of the token with this rank; empty view and false from has_rank() for a gap.
  bool has_rank(uint32_t r) const { return r < by_rank_.size() && by_rank_[r] != kNoRank; }
  std::string_view token_bytes(uint32_t r) const;

  size_t size() const { return entries_.size(); }
  // One past the largest rank (ids below this may still be gaps).
  uint32_t rank_end() const { return static_cast<uint32_t>(by_rank_.size()); }

  // The rank file text (`base64 rank` lines in rank order), as tiktoken writes it.
  std::string to_rank_file() const;

 private:
  struct Entry {
    uint32_t offset;  // into arena_
    uint32_t length;
    uint32_t rank;
  };
  void add(std::string_view bytes, uint32_t rank, const std::string& where);
  void build_index(const std::string& source);

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;    // entry index + 1; 0 = empty. Size is a power of two.
  std::vector<uint32_t> by_rank_;  // rank -> entry index, kNoRank for gaps
  uint32_t byte_rank_[256] = {};
};

// Strict standard base64 (with '=' padding). Returns false on any malformed input.
bool base64_decode(std::string_view in, std::string& out);
std::string base64_encode(std::string_view in);

}  // namespace waste::tok
