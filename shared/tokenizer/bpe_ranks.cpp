#include "shared/tokenizer/bpe_ranks.h"

#include <xxhash.h>

#include <charconv>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::tok {

namespace {

constexpr char kB64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

uint64_t hash_bytes(const uint8_t* p, size_t n) { return XXH3_64bits(p, n); }

std::string line_ref(const std::string& source, size_t line) {
  return source + ":" + std::to_string(line);
}

}  // namespace

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      char c = in[i + j];
      if (c == '=' && last && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad) return false;  // data after padding
      v[j] = b64_value(c);
      if (v[j] < 0) return false;
    }
    uint32_t w = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(char(w >> 16));
    if (pad < 2) out.push_back(char((w >> 8) & 0xff));
    if (pad < 1) out.push_back(char(w & 0xff));
  }
  return true;
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t w = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    out += kB64Alphabet[w >> 18];
    out += kB64Alphabet[(w >> 12) & 63];
    out += kB64Alphabet[(w >> 6) & 63];
    out += kB64Alphabet[w & 63];
  }
  if (i < in.size()) {
    uint32_t w = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) w |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kB64Alphabet[w >> 18];
    out += kB64Alphabet[(w >> 12) & 63];
    out += i + 1 < in.size() ? kB64Alphabet[(w >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

void BpeRanks::add(std::string_view bytes, uint32_t rank, const std::string& where) {
  require(!bytes.empty(), where + ": empty token");
  require(bytes.size() <= kMaxTokenBytes,
          where + ": token of " + std::to_string(bytes.size()) + " bytes (limit " + std::to_string(kMaxTokenBytes) + ")");
  require(rank < kMaxRanks, where + ": rank " + std::to_string(rank) + " too large (limit " + std::to_string(kMaxRanks) + ")");
  require(entries_.size() < kMaxRanks, where + ": more than " + std::to_string(kMaxRanks) + " tokens");
  entries_.push_back({static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), rank});
  arena_.append(bytes);
}

// Fills the hash table and the rank index; rejects duplicate ranks, duplicate byte strings and
// missing single bytes, each with the file name.
void BpeRanks::build_index(const std::string& source) {
  require(!entries_.empty(), source + ": no tokens");
  uint32_t max_rank = 0;
  for (const Entry& e : entries_) max_rank = std::max(max_rank, e.rank);
  by_rank_.assign(size_t(max_rank) + 1, kNoRank);
  size_t cap = 16;
  while (cap < entries_.size() * 2) cap *= 2;
  slots_.assign(cap, 0);
  const size_t mask = cap - 1;
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const auto* p = reinterpret_cast<const uint8_t*>(arena_.data()) + e.offset;
    if (by_rank_[e.rank] != kNoRank)
      throw Error(source + ": rank " + std::to_string(e.rank) + " appears twice");
    by_rank_[e.rank] = i;
    size_t s = hash_bytes(p, e.length) & mask;
    while (slots_[s] != 0) {
      const Entry& o = entries_[slots_[s] - 1];
      if (o.length == e.length && std::char_traits<char>::compare(arena_.data() + o.offset, arena_.data() + e.offset, e.length) == 0)
        throw Error(source + ": token of rank " + std::to_string(e.rank) + " has the same bytes as rank " + std::to_string(o.rank));
      s = (s + 1) & mask;
    }
    slots_[s] = i + 1;
  }
  for (int b = 0; b < 256; ++b) {
    uint8_t byte = static_cast<uint8_t>(b);
    byte_rank_[b] = rank(&byte, 1);
    if (byte_rank_[b] == kNoRank)
      throw Error(source + ": byte 0x" + "0123456789abcdef"[b >> 4] + "0123456789abcdef"[b & 15] +
                  " has no token (a byte-level BPE file needs all 256 single bytes)");
  }
}

uint32_t BpeRanks::rank(const uint8_t* bytes, size_t n) const {
  if (slots_.empty() || n == 0 || n > kMaxTokenBytes) return kNoRank;
  const size_t mask = slots_.size() - 1;
  size_t s = hash_bytes(bytes, n) & mask;
  for (;;) {
    uint32_t idx = slots_[s];
    if (idx == 0) return kNoRank;
    const Entry& e = entries_[idx - 1];
    if (e.length == n && std::char_traits<char>::compare(arena_.data() + e.offset, reinterpret_cast<const char*>(bytes), n) == 0)
      return e.rank;
    s = (s + 1) & mask;
  }
}

std::string_view BpeRanks::token_bytes(uint32_t r) const {
  if (!has_rank(r)) return {};
  const Entry& e = entries_[by_rank_[r]];
  return std::string_view(arena_.data() + e.offset, e.length);
}

BpeRanks BpeRanks::parse(std::string_view text, const std::string& source) {
  BpeRanks out;
  size_t pos = 0, line_no = 0;
  std::string bytes;
  while (pos < text.size()) {
    ++line_no;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = line_ref(source, line_no);
    require(line.size() <= kMaxRankLineChars,
            where + ": line of " + std::to_string(line.size()) + " chars (limit " + std::to_string(kMaxRankLineChars) + ")");
    size_t sp = line.find(' ');
    require(sp != std::string_view::npos, where + ": expected `base64 rank`");
    std::string_view b64 = line.substr(0, sp), num = line.substr(sp + 1);
    require(base64_decode(b64, bytes), where + ": bad base64 '" + std::string(b64) + "'");
    uint64_t rank = 0;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    require(ec == std::errc() && ptr == num.data() + num.size() && !num.empty(),
            where + ": bad rank '" + std::string(num) + "'");
    require(rank < kMaxRanks, where + ": rank " + std::string(num) + " too large (limit " + std::to_string(kMaxRanks) + ")");
    out.add(bytes, static_cast<uint32_t>(rank), where);
  }
  out.build_index(source);
  return out;
}

BpeRanks BpeRanks::load_file(const std::string& path) {
  return parse(read_file_text(path, kMaxRankFileBytes), path);
}

BpeRanks BpeRanks::from_tokens(const std::vector<std::string>& tokens, const std::string& source) {
  BpeRanks out;
  for (size_t i = 0; i < tokens.size(); ++i)
    out.add(tokens[i], static_cast<uint32_t>(i), source + ": token " + std::to_string(i));
  out.build_index(source);
  return out;
}

std::string BpeRanks::to_rank_file() const {
  std::string out;
  for (uint32_t r = 0; r < by_rank_.size(); ++r) {
    if (by_rank_[r] == kNoRank) continue;
    out += base64_encode(token_bytes(r));
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

}  // namespace waste::tok
