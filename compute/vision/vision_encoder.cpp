#include "compute/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "compute/model/container_weights.h"
#include "compute/model/mm_projector.h"
#include "compute/model/vision_tower.h"
#include "shared/container/format.h"
#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

std::string PreparedImage::prompt_markup() const {
  return "<|media_begin|>image " + std::to_string(width) + "x" + std::to_string(height) +
         "<|media_content|><|media_pad|><|media_end|>";
}

uint64_t PreparedImage::content_hash() const {
  const int32_t dims[2] = {grid.h_patches, grid.w_patches};
  const uint64_t h = checksum64(dims, sizeof dims);
  return h ^ (checksum64(pixels.data(), pixels.size() * sizeof(float)) * 0x9e3779b97f4a7c15ull);
}

VisionEncoder::VisionEncoder(const Container& container, const VisionOptions& options)
    : container_(container), options_(options) {
  available_ = container.has_vision();
  if (!available_) return;
  config_ = VisionConfig::from_json(container.config_json(), container.dir() + "/manifest (config.json)");
  pre_ = PreprocessorConfig::from_json(container.preprocessor_config_json(),
                                       container.dir() + "/manifest (preprocessor_config.json)");
  require(pre_.patch_size == config_.patch_size,
          container.dir() + ": preprocessor_config.json patch_size " + std::to_string(pre_.patch_size) +
              " differs from vision_config.patch_size " + std::to_string(config_.patch_size));
  require(config_.text_hidden == container.config().hidden,
          container.dir() + ": vision_config.text_hidden_size " + std::to_string(config_.text_hidden) +
              " differs from the text model's hidden size " + std::to_string(container.config().hidden));
  require(config_.media_placeholder_token_id >= 0 && config_.media_placeholder_token_id < container.config().vocab,
          container.dir() + ": config.json media_placeholder_token_id " +
              std::to_string(config_.media_placeholder_token_id) + " is not an id of the vocabulary");
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
  require(max_patches >= 4 && max_patches <= cap,
          "image patches: " + std::to_string(max_patches) + " is outside 4.." + std::to_string(cap));
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
  // The learned grid is resized to the image's, so any grid works; the merge needs even sides.
  require(img.grid.h_patches % c.merge_h == 0 && img.grid.w_patches % c.merge_w == 0,
          source + ": patch grid does not fit the merge kernel");
  img.pixels = image_pixels(rgb, img.grid, c.patch_size, pre_.image_mean, pre_.image_std);
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

std::vector<float> VisionEncoder::embed(const PreparedImage& image, std::vector<float>* tower_out) {
  const VisionConfig& c = config();
  std::lock_guard lk(mu_);
  load_locked();
  std::vector<float> tower = vision_tower(c, *weights_, image.pixels.data(), image.grid.h_patches,
                                          image.grid.w_patches, pool_.get());
  std::vector<float> rows = mm_projector(c, *weights_, tower.data(), image.grid.h_patches, image.grid.w_patches,
                                         pool_.get());
  if (tower_out) *tower_out = std::move(tower);
  return rows;
}

bool VisionEncoder::loaded() const {
  std::lock_guard lk(mu_);
  return weights_ != nullptr;
}

uint64_t VisionEncoder::resident_bytes() const {
  std::lock_guard lk(mu_);
  return trunk_ ? trunk_->resident_bytes() : 0;
}

}  // namespace waste
