#include "compute/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <xxhash.h>

#include "compute/model/container_weights.h"
#include "compute/model/mm_projector.h"
#include "compute/model/vision_tower.h"
#include "shared/container/format.h"
#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

std::string PreparedImage::prompt_markup() const {
  return "<|media_begin|>image " + std::to_string(width) + "x" + std::to_string(height) + "<|media_content|>" +
         kMediaPadMarkup + "<|media_end|>";
}

namespace {

uint64_t process_seed() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
  }();
  return seed;
}

uint64_t content_hash(const PatchGrid& grid, const std::vector<float>& pixels) {
  XXH3_state_t* st = XXH3_createState();
  require(st != nullptr, "out of memory hashing an image");
  XXH3_64bits_reset_withSeed(st, process_seed());
  const int32_t dims[2] = {grid.h_patches, grid.w_patches};
  XXH3_64bits_update(st, dims, sizeof dims);
  XXH3_64bits_update(st, pixels.data(), pixels.size() * sizeof(float));
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

VisionEncoder::VisionEncoder(const Container& container, const VisionOptions& options)
    : container_(container), options_(options) {
  available_ = container.has_vision();
  if (!available_) return;
  config_ = VisionConfig::from_json(container.config_json(), container.dir() + "/manifest (config.json)");
  pre_ = PreprocessorConfig::from_json(container.preprocessor_config_json(),
                                       container.dir() + "/manifest (preprocessor_config.json)");
  // Container::open checked both configs against each other and the text model (vision_check.h).
}

VisionEncoder::~VisionEncoder() = default;

const VisionConfig& VisionEncoder::config() const {
  require(available_, container_.dir() + ": this model has no vision tower (convert it with --vision)");
  return config_;
}

const PreprocessorConfig& VisionEncoder::preprocessor() const {
  config();
  return pre_;
}

int VisionEncoder::patch_budget(int max_patches) const {
  if (max_patches == 0) max_patches = kDefaultImagePatches;
  const int64_t cap = std::min<int64_t>(kMaxImagePatches, pre_.in_patch_limit);
  require(max_patches >= kMinImagePatches && max_patches <= cap,
          "image patches: " + std::to_string(max_patches) + " is outside " + std::to_string(kMinImagePatches) + ".." + std::to_string(cap));
  return max_patches;
}

PreparedImage VisionEncoder::prepare(std::span<const uint8_t> file, const std::string& source,
                                     int max_patches) const {
  const VisionConfig& c = config();
  const int budget = patch_budget(max_patches);
  const RgbImage rgb = decode_image(file.data(), file.size(), source, options_.limits);
  PreparedImage img;
  img.width = rgb.width;
  img.height = rgb.height;
  img.merge_h = c.merge_h;
  img.merge_w = c.merge_w;
  img.grid = fit_patch_grid(rgb.width, rgb.height, c.patch_size, budget);
  // The release's processor allows this many patches along a side; the default budget keeps
  // every grid within it (a side is at most budget / 2), a raised one might not.
  require(std::max(img.grid.h_patches, img.grid.w_patches) <= pre_.patch_limit_on_one_side,
          source + ": the patch grid " + std::to_string(img.grid.h_patches) + " x " + std::to_string(img.grid.w_patches) +
              " has a side over the model's patch_limit_on_one_side of " + std::to_string(pre_.patch_limit_on_one_side) +
              " (a lower image patch budget fits it)");
  // The learned grid is resized to the image's, so any grid works; the merge needs even sides.
  require(img.grid.h_patches % c.merge_h == 0 && img.grid.w_patches % c.merge_w == 0,
          source + ": patch grid does not fit the merge kernel");
  img.pixels = image_pixels(rgb, img.grid, c.patch_size, pre_.image_mean, pre_.image_std);
  img.hash = content_hash(img.grid, img.pixels);
  return img;
}

PreparedImage VisionEncoder::from_pixels(std::vector<float> pixels, PatchGrid grid, const std::string& source) const {
  const VisionConfig& c = config();
  require(grid.h_patches > 0 && grid.w_patches > 0 && int64_t(grid.h_patches) * grid.w_patches <= kMaxImagePatches,
          source + ": grid " + std::to_string(grid.h_patches) + "," + std::to_string(grid.w_patches) +
              " must be positive with at most " + std::to_string(kMaxImagePatches) + " patches");
  require(grid.h_patches % c.merge_h == 0 && grid.w_patches % c.merge_w == 0,
          source + ": grid " + std::to_string(grid.h_patches) + "," + std::to_string(grid.w_patches) +
              " is not a multiple of the " + std::to_string(c.merge_h) + "x" + std::to_string(c.merge_w) + " merge");
  const uint64_t want = uint64_t(grid.h_patches) * uint64_t(grid.w_patches) * uint64_t(c.patch_values());
  require(pixels.size() == want, source + ": " + std::to_string(pixels.size()) + " floats, the grid needs " +
                                     std::to_string(want) + " ([h w, 3, " + std::to_string(c.patch_size) + ", " +
                                     std::to_string(c.patch_size) + "])");
  for (float v : pixels) require(std::isfinite(v), source + ": a pixel value is not finite");
  PreparedImage img;
  img.width = grid.w_patches * c.patch_size;
  img.height = grid.h_patches * c.patch_size;
  img.grid = grid;
  img.merge_h = c.merge_h;
  img.merge_w = c.merge_w;
  img.pixels = std::move(pixels);
  img.hash = content_hash(img.grid, img.pixels);
  return img;
}

void VisionEncoder::load_locked() {
  if (weights_) return;
  auto trunk = std::make_unique<Trunk>(container_, std::vector<std::string>{}, options_.verify_checksums, nullptr,
                                       TrunkPart::Vision);
  auto source = std::make_unique<TrunkWeights>(container_, *trunk);
  auto weights = std::make_unique<VisionWeights>(VisionWeights::load(*source, config_));
  pool_ = std::make_unique<ThreadPool>(options_.threads);
  trunk_ = std::move(trunk);
  source_ = std::move(source);
  weights_ = std::move(weights);
}

std::shared_ptr<const std::vector<float>> VisionEncoder::embed(const PreparedImage& image, std::vector<float>* tower_out,
                                                               const std::atomic<bool>* cancel) {
  const VisionConfig& c = config();
  const uint64_t hash = image.hash;
  std::lock_guard lk(mu_);
  if (!tower_out)
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->hash == hash) {
        cache_.splice(cache_.begin(), cache_, it);  // most recent first
        return it->rows;
      }
  load_locked();
  std::vector<float> tower = vision_tower(c, *weights_, image.pixels.data(), image.grid.h_patches,
                                          image.grid.w_patches, pool_.get(), nullptr, nullptr, cancel);
  auto rows = std::make_shared<const std::vector<float>>(
      mm_projector(c, *weights_, tower.data(), image.grid.h_patches, image.grid.w_patches, pool_.get()));
  if (tower_out) {
    *tower_out = std::move(tower);
    return rows;
  }
  const uint64_t bytes = rows->size() * sizeof(float);
  if (bytes <= kImageEmbeddingCacheBytes) {
    while (!cache_.empty() && cache_bytes_ + bytes > kImageEmbeddingCacheBytes) {
      cache_bytes_ -= cache_.back().rows->size() * sizeof(float);
      cache_.pop_back();
    }
    cache_.push_front({hash, rows});
    cache_bytes_ += bytes;
  }
  return rows;
}

uint64_t VisionEncoder::resident_bytes() const {
  std::lock_guard lk(mu_);
  return trunk_ ? trunk_->resident_bytes() : 0;
}

}  // namespace waste
