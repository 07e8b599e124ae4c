// A prompt whose images have expanded: each media placeholder id (<|media_pad|>) stands for
// one image and becomes one position per image token, whose input rows come from the vision
// tower instead of the embedding table (README of shared/vision/kimi-k3, "Images in the
// prompt"). Runs are consumed in prompt order, so several images share a prompt.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace waste {

struct ImageRun {
  int64_t at = 0;      // first position in the prompt
  int64_t tokens = 0;  // positions it covers
  std::shared_ptr<const std::vector<float>> rows;  // [tokens, hidden]; null until the tower ran
  uint64_t hash = 0;   // of the image as the tower sees it (PreparedImage::hash)
};

struct MediaPrompt {
  std::vector<int32_t> ids;     // the placeholder repeated over every image position
  std::vector<ImageRun> images; // ascending, disjoint
  int64_t image_tokens() const;
};

// Expands the k-th placeholder of `ids` into counts[k] positions. Throws RequestError(field)
// when the prompt holds another number of placeholders than there are images.
MediaPrompt expand_media(std::span<const int32_t> ids, int32_t placeholder, std::span<const int64_t> counts,
                         const std::string& field);

// The placeholders of `ids` fed `rows` ([k, hidden]: the i-th placeholder takes row i) as
// they are, without expansion: the tower's output given directly (waste eval --pad-embeddings).
// Throws Error naming `field` when k is not the number of placeholders.
std::vector<ImageRun> placeholder_rows(std::span<const int32_t> ids, int32_t placeholder, std::span<const float> rows,
                                       int64_t hidden, const std::string& field);

// The prompt as the prompt cache compares it: `ids` with every image position replaced by a
// negative value drawn from the image's hash and the position in it, so two prompts share a
// checkpoint only where their images are the same (the ids alone are the same placeholder).
std::vector<int32_t> cache_key(std::span<const int32_t> ids, std::span<const ImageRun> images);

// Shifts every run by `by` positions (a token fed in front of the prompt).
void shift_images(std::vector<ImageRun>& images, int64_t by);

// The input rows of positions [from, from + n): `out` gets n entries, null where the table's row
// is used, or is cleared when no image touches the range. Every run touched must have its rows.
void image_inputs(std::span<const ImageRun> images, int64_t from, int64_t n, int64_t hidden,
                  std::vector<const float*>& out);

}  // namespace waste
