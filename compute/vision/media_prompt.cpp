#include "compute/vision/media_prompt.h"

#include "shared/chat/chat_request.h"
#include "shared/util/error.h"

namespace waste {

int64_t MediaPrompt::image_tokens() const {
  int64_t n = 0;
  for (const ImageRun& r : images) n += r.tokens;
  return n;
}

MediaPrompt expand_media(std::span<const int32_t> ids, int32_t placeholder, std::span<const int64_t> counts,
                         const std::string& field) {
  MediaPrompt p;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != placeholder) {
      p.ids.push_back(id);
      continue;
    }
    if (next == counts.size())
      throw chat::RequestError(field, "the prompt has more image placeholders than the " +
                                          std::to_string(counts.size()) + " images given");
    const int64_t n = counts[next++];
    require(n > 0, "an image expands into no positions");
    p.images.push_back({int64_t(p.ids.size()), n, nullptr});
    p.ids.insert(p.ids.end(), size_t(n), placeholder);
  }
  if (next != counts.size())
    throw chat::RequestError(field, std::to_string(counts.size()) + " images given but the prompt has " +
                                        std::to_string(next) + " image placeholders");
  return p;
}

std::vector<ImageRun> placeholder_rows(std::span<const int32_t> ids, int32_t placeholder, std::span<const float> rows,
                                       int64_t hidden, const std::string& field) {
  require(hidden > 0 && int64_t(rows.size()) % hidden == 0,
          field + ": " + std::to_string(rows.size()) + " floats are not whole rows of " + std::to_string(hidden));
  const int64_t k = int64_t(rows.size()) / hidden;
  std::vector<ImageRun> runs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != placeholder) continue;
    const int64_t r = int64_t(runs.size());
    require(r < k, field + ": " + std::to_string(k) + " rows for more placeholder ids (" + std::to_string(placeholder) + ")");
    auto row = std::make_shared<const std::vector<float>>(rows.begin() + r * hidden, rows.begin() + (r + 1) * hidden);
    runs.push_back({int64_t(i), 1, std::move(row), 0});
  }
  require(int64_t(runs.size()) == k, field + ": " + std::to_string(k) + " rows for " + std::to_string(runs.size()) +
                                         " placeholder ids (" + std::to_string(placeholder) + ")");
  return runs;
}

std::vector<int32_t> cache_key(std::span<const int32_t> ids, std::span<const ImageRun> images) {
  std::vector<int32_t> key(ids.begin(), ids.end());
  for (const ImageRun& r : images)
    for (int64_t t = 0; t < r.tokens && r.at + t < int64_t(key.size()); ++t) {
      const uint64_t h = (r.hash + uint64_t(t) * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
      key[size_t(r.at + t)] = -1 - int32_t((h >> 33) & 0x3fffffff);  // never a vocabulary id
    }
  return key;
}

void shift_images(std::vector<ImageRun>& images, int64_t by) {
  for (ImageRun& r : images) r.at += by;
}

void image_inputs(std::span<const ImageRun> images, int64_t from, int64_t n, int64_t hidden,
                  std::vector<const float*>& out) {
  out.clear();
  for (const ImageRun& r : images) {
    const int64_t lo = std::max(from, r.at), hi = std::min(from + n, r.at + r.tokens);
    if (lo >= hi) continue;
    require(r.rows != nullptr && int64_t(r.rows->size()) == r.tokens * hidden,
            "an image's rows are missing or of the wrong size");
    if (out.empty()) out.assign(size_t(n), nullptr);
    for (int64_t t = lo; t < hi; ++t) out[size_t(t - from)] = r.rows->data() + (t - r.at) * hidden;
  }
}

}  // namespace waste
