// Images to the rows that replace their positions in a prompt: decode and preprocess
// (shared/image), then the vision tower and projector (compute/model) on weights loaded from
// the container the first time an image is used (the text-only path never pays for them).
//
//   VisionEncoder v(container, {});
//   PreparedImage img = v.prepare(bytes, "messages[0].content[1]");   // cheap: no tower
//   std::vector<float> rows = v.embed(img);   // [img.tokens(), text hidden]
#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "shared/image/image_budget.h"
#include "shared/image/image_decode.h"
#include "shared/image/image_preprocess.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/vision_config.h"

namespace waste {

class Container;
class Trunk;
class TrunkWeights;
class ThreadPool;
struct VisionWeights;


// The media placeholder as K3's chat markup writes it: the one id an image's rows replace.
constexpr const char* kMediaPadMarkup = "<|media_pad|>";

// One image ready for the tower: its source size (what the prompt's "image WxH" says), its
// patch grid and pixels [h w, 3, p, p].
struct PreparedImage {
  int width = 0, height = 0;
  PatchGrid grid;
  int merge_h = 2, merge_w = 2;
  std::vector<float> pixels;
  int64_t tokens() const { return int64_t(grid.h_patches / merge_h) * (grid.w_patches / merge_w); }
  // The markup of the image in a K3 prompt: <|media_begin|>image WxH<|media_content|><|media_pad|><|media_end|>.
  std::string prompt_markup() const;
  // Of the grid and pixels (the image as the tower sees it), keyed with a random per-process
  // seed so that no client can aim a collision at another's image. Set once by prepare() and
  // from_pixels(); the prompt cache and the embedding cache both key on it.
  uint64_t hash = 0;
};

struct VisionOptions {
  bool verify_checksums = true;   // of the vision tensors, when they load
  unsigned threads = 0;           // the tower's own pool; 0: the machine's cores
  ImageLimits limits;
};

class VisionEncoder {
 public:
  // `container` must outlive the encoder. Reads the vision and preprocessor configs when the
  // container has a tower (else available() is false and every call says so).
  VisionEncoder(const Container& container, const VisionOptions& options);
  ~VisionEncoder();

  bool available() const { return available_; }
  const VisionConfig& config() const;
  const PreprocessorConfig& preprocessor() const;
  int64_t placeholder_id() const { return config().media_placeholder_token_id; }

  // Decodes an encoded file and fits it to the patch grid within `max_patches` (0: the
  // default). Thread-safe; `source` names the image in every error.
  PreparedImage prepare(std::span<const uint8_t> file, const std::string& source, int max_patches = 0) const;
  // Pixels given directly ([h w, 3, p, p]), checked against the grid.
  PreparedImage from_pixels(std::vector<float> pixels, PatchGrid grid, const std::string& source) const;
  // The budget a request asked for, checked (0: the default).
  int patch_budget(int max_patches) const;

  // The tower and projector: [tokens, text hidden]. tower_out, if given, gets the tower's
  // output [h w, D] before the merge (and bypasses the embedding cache). Loads the weights on
  // first use; one image at a time. `cancel` set ends it between blocks (Error "cancelled").
  std::shared_ptr<const std::vector<float>> embed(const PreparedImage& image, std::vector<float>* tower_out = nullptr,
                                                  const std::atomic<bool>* cancel = nullptr);

  uint64_t resident_bytes() const;  // vision weights in RAM (0 until the first image)

 private:
  void load_locked();
  const Container& container_;
  VisionOptions options_;
  bool available_ = false;
  VisionConfig config_;
  PreprocessorConfig pre_;
  mutable std::mutex mu_;
  std::unique_ptr<Trunk> trunk_;
  std::unique_ptr<TrunkWeights> source_;
  std::unique_ptr<VisionWeights> weights_;
  std::unique_ptr<ThreadPool> pool_;
  // LRU of recent images' rows by content hash, in kImageEmbeddingCacheBytes (under mu_).
  struct Cached {
    uint64_t hash;
    std::shared_ptr<const std::vector<float>> rows;
  };
  std::list<Cached> cache_;
  uint64_t cache_bytes_ = 0;
};

}  // namespace waste
