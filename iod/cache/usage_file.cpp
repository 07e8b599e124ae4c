#include "iod/cache/usage_file.h"

#include <algorithm>
#include <cstring>

#include "shared/container/format.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::cache {

namespace {
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxExperts = 65536;
constexpr uint64_t kMaxEntries = 1u << 21;
constexpr size_t kHeaderBytes = 32;
constexpr uint64_t kMaxFileBytes = kHeaderBytes + 4ull * kMaxLayers + 4ull * kMaxEntries + 8;
constexpr uint32_t kAgeAt = 1u << 31;

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, arm64), as the container
  out.insert(out.end(), b, b + sizeof(T));
}
template <class T>
T get(std::span<const uint8_t> in, size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(T));
  return v;
}
}  // namespace

UsageCounts UsageCounts::for_geometry(const CacheGeometry& g, uint64_t container_id) {
  UsageCounts u;
  u.container_id = container_id;
  u.layers = g.moe_layers();
  std::sort(u.layers.begin(), u.layers.end());
  u.experts = g.experts_per_layer();
  u.counts.assign(u.layers.size() * u.experts, 0);
  return u;
}

bool UsageCounts::matches(const CacheGeometry& g) const {
  std::vector<uint32_t> gl = g.moe_layers();
  std::sort(gl.begin(), gl.end());
  return gl == layers && g.experts_per_layer() == experts;
}

void UsageCounts::add(ExpertKey key) {
  auto it = std::lower_bound(layers.begin(), layers.end(), key.layer);
  require(it != layers.end() && *it == key.layer && key.expert < experts,
          "usage: layer " + std::to_string(key.layer) + " expert " + std::to_string(key.expert) + " not tracked");
  uint32_t& c = counts[size_t(it - layers.begin()) * experts + key.expert];
  if (c + 1 >= kAgeAt) {
    for (uint32_t& x : counts) x /= 2;
    tokens /= 2;
  }
  ++c;
}

void UsageCounts::end_token() {
  if (tokens + 1 >= kAgeAt) {
    for (uint32_t& x : counts) x /= 2;
    tokens /= 2;
  }
  ++tokens;
}

KeyPrior UsageCounts::prior(const CacheGeometry& g) const {
  require(matches(g), "usage: counts are for a different model shape");
  if (tokens == 0) return {};
  KeyPrior p(g.key_count());
  for (size_t li = 0; li < layers.size(); ++li)
    for (uint32_t e = 0; e < experts; ++e)
      p[g.key_index(ExpertKey{layers[li], e})] =
          float(std::min(1.0, double(counts[li * experts + e]) / double(tokens)));
  return p;
}

std::vector<ExpertKey> UsageCounts::hottest(size_t n) const {
  std::vector<uint32_t> idx;
  for (uint32_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) idx.push_back(i);
  auto hotter = [&](uint32_t a, uint32_t b) { return counts[a] != counts[b] ? counts[a] > counts[b] : a < b; };
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(n), idx.end(), hotter);
  std::vector<ExpertKey> out;
  for (size_t i = 0; i < n; ++i) out.push_back(ExpertKey{layers[idx[i] / experts], idx[i] % experts});
  return out;
}

std::vector<uint8_t> encode_usage(const UsageCounts& u) {
  require(!u.layers.empty() && u.layers.size() <= kMaxLayers && u.experts > 0 && u.experts <= kMaxExperts &&
              u.layers.size() * uint64_t(u.experts) <= kMaxEntries && u.counts.size() == u.layers.size() * u.experts,
          "usage: counts table has an invalid shape");
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + 4 * u.layers.size() + 4 * u.counts.size() + 8);
  put<uint32_t>(out, kUsageMagic);
  put<uint16_t>(out, kUsageVersion);
  put<uint16_t>(out, 0);
  put<uint64_t>(out, u.container_id);
  put<uint64_t>(out, u.tokens);
  put<uint32_t>(out, uint32_t(u.layers.size()));
  put<uint32_t>(out, u.experts);
  for (uint32_t l : u.layers) put<uint32_t>(out, l);
  for (uint32_t c : u.counts) put<uint32_t>(out, c);
  put<uint64_t>(out, checksum64(out.data(), out.size()));
  return out;
}

UsageCounts decode_usage(std::span<const uint8_t> in, const std::string& source) {
  require(in.size() >= kHeaderBytes + 8, source + ": usage file truncated (" + std::to_string(in.size()) + " bytes)");
  require(get<uint32_t>(in, 0) == kUsageMagic, source + ": not a usage file (bad magic)");
  uint16_t version = get<uint16_t>(in, 4);
  require(version == kUsageVersion, source + ": usage file version " + std::to_string(version) + ", expected " +
                                        std::to_string(kUsageVersion));
  UsageCounts u;
  u.container_id = get<uint64_t>(in, 8);
  u.tokens = get<uint64_t>(in, 16);
  uint32_t n_layers = get<uint32_t>(in, 24);
  u.experts = get<uint32_t>(in, 28);
  require(n_layers >= 1 && n_layers <= kMaxLayers, source + ": usage n_layers " + std::to_string(n_layers) + " out of range");
  require(u.experts >= 1 && u.experts <= kMaxExperts, source + ": usage experts " + std::to_string(u.experts) + " out of range");
  uint64_t entries = uint64_t(n_layers) * u.experts;
  require(entries <= kMaxEntries, source + ": usage table too large");
  uint64_t expect = kHeaderBytes + 4ull * n_layers + 4ull * entries + 8;
  require(in.size() == expect, source + ": usage file is " + std::to_string(in.size()) + " bytes, header says " +
                                   std::to_string(expect));
  uint64_t sum = get<uint64_t>(in, in.size() - 8);
  require(sum == checksum64(in.data(), in.size() - 8), source + ": usage file checksum mismatch (damaged)");
  size_t off = kHeaderBytes;
  for (uint32_t i = 0; i < n_layers; ++i, off += 4) {
    u.layers.push_back(get<uint32_t>(in, off));
    require(i == 0 || u.layers[i] > u.layers[i - 1], source + ": usage layers not strictly increasing");
  }
  u.counts.resize(entries);
  for (uint64_t i = 0; i < entries; ++i, off += 4) u.counts[i] = get<uint32_t>(in, off);
  return u;
}

UsageCounts read_usage_file(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path, kMaxFileBytes);
  return decode_usage(bytes, path);
}

void write_usage_file(const std::string& path, const UsageCounts& u) {
  std::vector<uint8_t> bytes = encode_usage(u);
  write_file_atomic(path, bytes.data(), bytes.size());
}

UsageCounts usage_from_trace(const RoutingTrace& trace, const CacheGeometry& g) {
  UsageCounts u = UsageCounts::for_geometry(g);
  for (size_t t = 0; t < trace.tokens(); ++t) {
    for (uint32_t l = 0; l < trace.moe_layers; ++l) {
      const uint32_t* ex = trace.layer_experts(t, l);
      for (uint32_t j = 0; j < trace.top_k; ++j) u.add(ExpertKey{g.moe_layers()[l], ex[j]});
    }
    u.end_token();
  }
  return u;
}

}  // namespace waste::cache
