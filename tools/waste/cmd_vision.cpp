// `waste vision MODEL --image FILE` / `--pixels P.f32 --grid H,W`: an image through the K3
// vision tower and projector of a container, by the code a prompt's images take
// (compute/vision/vision_encoder.h): decode, fit to the patch grid, normalize with the
// container's preprocessor config, tower, 2x2 merge, projector. Prints the grid and the image
// token count (--json: one object), and writes the stages asked for as little-endian f32:
// --pixels-out [h w, 3, p, p], --tower-out [h w, D], --embeddings [tokens, text hidden].
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "compute/vision/vision_encoder.h"
#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

struct VisionCliOptions {
  std::string model, image, pixels, grid, pixels_out, tower_out, embeddings;
  int image_patches = kDefaultImagePatches;
  unsigned threads = 0;
  bool json = false, no_verify = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// "H,W" in patches.
PatchGrid parse_grid(const std::string& s) {
  PatchGrid g;
  char tail = 0;
  require(std::sscanf(s.c_str(), "%d,%d%c", &g.h_patches, &g.w_patches, &tail) == 2,
          "--grid: expected H,W in patches (e.g. 4,6), got '" + s + "'");
  return g;
}

std::vector<float> read_f32_file(const std::string& path, uint64_t max_bytes) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, max_bytes);
  require(bytes.size() % sizeof(float) == 0, path + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of f32");
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  if (!path.empty()) write_file_atomic(path, v.data(), v.size() * sizeof(float));
}

void run_vision(const VisionCliOptions& o) {
  require(o.image.empty() != o.pixels.empty(), "give --image FILE or --pixels P.f32 with --grid H,W (one of them)");
  require(o.pixels.empty() || !o.grid.empty(), "--pixels needs --grid H,W (the patch grid the pixels were made for)");
  require(o.grid.empty() || !o.pixels.empty(), "--grid goes with --pixels");
  const Container c = Container::open(o.model);
  VisionOptions vo;
  vo.verify_checksums = !o.no_verify;
  vo.threads = o.threads;
  VisionEncoder v(c, vo);
  require(v.available(), o.model + ": the container has no vision tower (convert with --vision f32|bf16|q8g)");

  const auto t0 = std::chrono::steady_clock::now();
  PreparedImage img;
  if (!o.image.empty()) {
    const std::vector<uint8_t> file = read_file_bytes(o.image, vo.limits.max_bytes);
    img = v.prepare(file, o.image, o.image_patches);
  } else {
    const PatchGrid g = parse_grid(o.grid);
    const uint64_t max_bytes = uint64_t(kMaxImagePatches) * uint64_t(v.config().patch_values()) * sizeof(float);
    img = v.from_pixels(read_f32_file(o.pixels, max_bytes), g, o.pixels);
  }
  const double prepare_s = seconds_since(t0);
  write_f32(o.pixels_out, img.pixels);

  const auto t1 = std::chrono::steady_clock::now();
  std::vector<float> tower;
  const std::vector<float> rows = *v.embed(img, o.tower_out.empty() ? nullptr : &tower);
  const double embed_s = seconds_since(t1);
  write_f32(o.tower_out, tower);
  write_f32(o.embeddings, rows);

  const int patches = img.grid.h_patches * img.grid.w_patches;
  if (o.json) {
    nlohmann::json j = {{"width", img.width},
                        {"height", img.height},
                        {"h_patches", img.grid.h_patches},
                        {"w_patches", img.grid.w_patches},
                        {"patches", patches},
                        {"h_merged", img.grid.h_patches / img.merge_h},
                        {"w_merged", img.grid.w_patches / img.merge_w},
                        {"image_tokens", img.tokens()},
                        {"embedding_width", v.config().text_hidden},
                        {"prompt", img.prompt_markup()},
                        {"prepare_seconds", prepare_s},
                        {"tower_seconds", embed_s},
                        {"vision_resident_bytes", v.resident_bytes()}};
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  std::printf("%s: %dx%d -> grid %d x %d patches (%d), %d x %d merged: %lld image tokens of width %d\n",
              o.image.empty() ? o.pixels.c_str() : o.image.c_str(), img.width, img.height, img.grid.h_patches,
              img.grid.w_patches, patches, img.grid.h_patches / img.merge_h, img.grid.w_patches / img.merge_w,
              static_cast<long long>(img.tokens()), v.config().text_hidden);
  std::printf("prepare %.3f s, tower + projector %.3f s, the weights' load included (%.1f patches/s; %.1f MB of weights)\n",
              prepare_s, embed_s, embed_s > 0 ? patches / embed_s : 0.0, double(v.resident_bytes()) / 1e6);
}

}  // namespace

void register_vision_command(CLI::App& app) {
  auto o = std::make_shared<VisionCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "vision", "An image through the K3 vision tower and projector: patch grid, image tokens, stages as f32");
  cmd->add_option("model", o->model, "Container directory (with a vision tower)")->required();
  cmd->add_option("--image", o->image, "PNG or JPEG file");
  cmd->add_option("--pixels", o->pixels, "Preprocessed pixels, f32 [h w, 3, p, p] (instead of --image)");
  cmd->add_option("--grid", o->grid, "H,W: the patch grid of --pixels");
  cmd->add_option("--pixels-out", o->pixels_out, "Write the preprocessed pixels (f32 [h w, 3, p, p])");
  cmd->add_option("--tower-out", o->tower_out, "Write the tower's output before the merge (f32 [h w, D])");
  cmd->add_option("--embeddings", o->embeddings, "Write the image's embeddings (f32 [tokens, text hidden])");
  cmd->add_option("--image-patches", o->image_patches,
                  "Patch budget of the image (1024: at most 256 image tokens; each image token costs a text "
                  "token's prefill, and the tower's attention grows with the square of the patches)")
      ->check(CLI::Range(kMinImagePatches, kMaxImagePatches));
  cmd->add_option("--threads", o->threads, "Threads for the tower (default: all cores)");
  cmd->add_flag("--no-verify", o->no_verify, "Skip the vision tensors' checksums as they load (checked by default)");
  cmd->add_flag("--json", o->json, "Print one JSON object (h_patches, w_patches, image_tokens, ...)");
  cmd->callback([o] { run_vision(*o); });
}

}  // namespace waste::cli
