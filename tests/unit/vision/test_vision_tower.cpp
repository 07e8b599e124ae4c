// The Kimi K3 vision tower and projector against the fixture's independent float64 reference
// (shared/vision/kimi-k3): for every image_N, the given pixels through the tower and the
// projector, with BF16 weights widened exactly to f32. Bound: the README's strict one,
// max |diff| <= 1e-4 x rms(ref), which the GELU mix-up (~1e-3) does not pass.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/model/mm_projector.h"
#include "compute/model/vision_tower.h"
#include "compute/model/weights.h"
#include "shared/hf/checkpoint.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/thread_pool.h"
#include "tests/support/error_of.h"

using namespace waste;
using waste::test::error_of;

namespace {

constexpr double kStrict = 1e-4;

std::string vision_dir() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/vision/kimi-k3";
}

std::vector<float> read_f32(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path, 64 << 20);
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// max |got - ref| / rms(ref).
double rel_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double mx = 0, ss = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::abs(double(got[i]) - double(ref[i])));
    ss += double(ref[i]) * ref[i];
  }
  return mx / std::sqrt(ss / double(ref.size()));
}

// The vision tensors by their full release names (no language_model. prefix, which
// CheckpointWeights adds), read and widened to f32 by the checkpoint reader. A matrix is
// [shape0, product of the rest], as CheckpointWeights flattens it.
class VisionCheckpointSource : public WeightSource {
 public:
  explicit VisionCheckpointSource(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  MatrixView matrix(const std::string& name) const override {
    const Stored& s = load(name);
    MatrixView m;
    m.format = TensorFormat::F32;
    m.rows = int64_t(s.shape.at(0));
    m.cols = m.rows ? int64_t(s.values.size()) / m.rows : 0;
    m.data = s.values.data();
    return m;
  }
  std::span<const float> vector(const std::string& name) const override {
    const Stored& s = load(name);
    return {s.values.data(), s.values.size()};
  }
  void embedding_row(int64_t, float*) const override { throw Error("no embeddings in the vision tower"); }

 private:
  struct Stored {
    std::vector<float> values;
    std::vector<uint64_t> shape;
  };
  const Stored& load(const std::string& name) const {
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    require(ckpt_.has(name), "checkpoint has no tensor " + name);
    Stored s;
    s.values = ckpt_.read_tensor(name, &s.shape);
    return cache_.emplace(name, std::move(s)).first->second;
  }
  const Checkpoint& ckpt_;
  mutable std::map<std::string, Stored> cache_;
};

// Serves one tensor with a wrong shape (its first row dropped), the rest as stored.
class MisshapedSource : public WeightSource {
 public:
  MisshapedSource(const WeightSource& base, std::string bad) : base_(base), bad_(std::move(bad)) {}
  MatrixView matrix(const std::string& name) const override {
    MatrixView m = base_.matrix(name);
    if (name == bad_) m.rows -= 1;
    return m;
  }
  std::span<const float> vector(const std::string& name) const override {
    std::span<const float> v = base_.vector(name);
    return name == bad_ ? v.first(v.size() - 1) : v;
  }
  void embedding_row(int64_t t, float* out) const override { base_.embedding_row(t, out); }

 private:
  const WeightSource& base_;
  std::string bad_;
};

struct Fixture {
  std::string dir = vision_dir();
  VisionConfig cfg = VisionConfig::load(dir + "/config.json");
  Checkpoint ckpt = Checkpoint::open(dir);
  VisionCheckpointSource src{ckpt};
  VisionWeights w = VisionWeights::load(src, cfg);
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

}  // namespace

TEST_CASE("vision config: the fixture's vision_config") {
  const VisionConfig c = fixture().cfg;
  CHECK(c.hidden == 64);
  CHECK(c.heads == 4);
  CHECK(c.qkv_hidden == 96);
  CHECK(c.head_dim == 24);
  CHECK(c.intermediate == 128);
  CHECK(c.n_layers == 2);
  CHECK(c.pos_emb_height == 64);
  CHECK(c.pos_emb_width == 64);
  CHECK(c.patch_size == 14);
  CHECK(c.text_hidden == 128);
  CHECK(c.merge_h == 2);
  CHECK(c.merge_w == 2);
  CHECK(c.projector_eps == doctest::Approx(1e-5));
  CHECK(c.tower_eps == 1.1920928955078125e-07f);
  CHECK(c.media_placeholder_token_id == 509);
  CHECK(fixture().w.blocks.size() == 2);
}

TEST_CASE("vision config: missing and out-of-range fields are refused by name") {
  const std::string text = read_file_text(fixture().dir + "/config.json", 1 << 20);
  for (const char* field : {"qkv_hidden_size", "vt_hidden_size", "vt_num_attention_heads", "vt_intermediate_size",
                            "vt_num_hidden_layers", "init_pos_emb_height", "init_pos_emb_width", "patch_size",
                            "text_hidden_size"}) {
    auto j = nlohmann::json::parse(text);
    j["vision_config"].erase(field);
    const std::string msg = error_of([&] { VisionConfig::from_json(j.dump(), "cfg.json"); });
    CHECK_MESSAGE(msg.find(std::string("missing field '") + field + "'") != std::string::npos, msg);
  }
  {
    auto j = nlohmann::json::parse(text);
    j["vision_config"]["vt_hidden_size"] = int64_t(1) << 40;
    const std::string msg = error_of([&] { VisionConfig::from_json(j.dump(), "cfg.json"); });
    CHECK_MESSAGE(msg.find("vt_hidden_size") != std::string::npos, msg);
  }
  {
    auto j = nlohmann::json::parse(text);
    j["vision_config"]["qkv_hidden_size"] = 90;  // not a multiple of 4 heads
    const std::string msg = error_of([&] { VisionConfig::from_json(j.dump(), "cfg.json"); });
    CHECK_MESSAGE(msg.find("qkv_hidden_size") != std::string::npos, msg);
  }
  {
    auto j = nlohmann::json::parse(text);
    j.erase("vision_config");
    const std::string msg = error_of([&] { VisionConfig::from_json(j.dump(), "cfg.json"); });
    CHECK_MESSAGE(msg.find("vision_config") != std::string::npos, msg);
  }
  {
    auto j = nlohmann::json::parse(text);
    j["vision_config"].erase("projector_ln_eps");  // optional: 1e-5
    CHECK(VisionConfig::from_json(j.dump(), "cfg.json").projector_eps == doctest::Approx(1e-5));
  }
}

TEST_CASE("vision weights: a tensor of the wrong shape is refused by name") {
  Fixture& f = fixture();
  for (const char* name : {"vision_tower.encoder.blocks.1.wo.weight", "vision_tower.patch_embed.proj.weight",
                           "vision_tower.patch_embed.pos_emb.weight", "vision_tower.encoder.blocks.0.norm1.weight",
                           "mm_projector.proj.2.weight", "mm_projector.post_norm.weight"}) {
    MisshapedSource bad(f.src, name);
    const std::string msg = error_of([&] { VisionWeights::load(bad, f.cfg); });
    CHECK_MESSAGE(msg.find(name) != std::string::npos, msg);
  }
  // A config whose qkv width disagrees with the stored wqkv.
  VisionConfig c = f.cfg;
  c.qkv_hidden = 48;
  c.head_dim = 12;
  const std::string msg = error_of([&] { VisionWeights::load(f.src, c); });
  CHECK_MESSAGE(msg.find("vision_tower.encoder.blocks.0.wqkv.weight") != std::string::npos, msg);
}

TEST_CASE("vision tower: image_0's debug stages (position grid, embed, every block)") {
  Fixture& f = fixture();
  const int h = 4, w = 6;
  const std::vector<float> pixels = read_f32(f.dir + "/image_0.pixels.f32");
  const double pos = rel_diff(vision_pos_embedding(f.cfg, f.w, h, w), read_f32(f.dir + "/debug_pos_emb.f32"));
  std::vector<float> embed, layers;
  ThreadPool pool(2);
  vision_tower(f.cfg, f.w, pixels.data(), h, w, &pool, &embed, &layers);
  const double emb = rel_diff(embed, read_f32(f.dir + "/debug_embed.f32"));
  const double lay = rel_diff(layers, read_f32(f.dir + "/debug_layers.f32"));
  MESSAGE("image_0 debug: pos_emb ", pos, ", embed ", emb, ", layers ", lay, " (max |diff| / rms(ref))");
  CHECK(pos <= kStrict);
  CHECK(emb <= kStrict);
  CHECK(lay <= kStrict);
}

TEST_CASE("vision tower + projector: every image against the reference") {
  Fixture& f = fixture();
  ThreadPool pool(2);
  int images = 0;
  for (int n = 0;; ++n) {
    const std::string base = f.dir + "/image_" + std::to_string(n);
    if (!std::filesystem::exists(base + ".json")) break;
    ++images;
    const auto j = nlohmann::json::parse(read_file_text(base + ".json", 1 << 20));
    const int h = j.at("grid").at("h_patches").get<int>(), w = j.at("grid").at("w_patches").get<int>();
    const int tokens = j.at("grid").at("image_tokens").get<int>();
    const std::vector<float> pixels = read_f32(base + ".pixels.f32");
    REQUIRE(pixels.size() == size_t(h) * w * f.cfg.patch_values());
    const std::vector<float> tower = vision_tower(f.cfg, f.w, pixels.data(), h, w, &pool);
    const std::vector<float> emb = mm_projector(f.cfg, f.w, tower.data(), h, w, &pool);
    REQUIRE(emb.size() == size_t(tokens) * f.cfg.text_hidden);
    const double rt = rel_diff(tower, read_f32(base + ".tower.f32"));
    const double re = rel_diff(emb, read_f32(base + ".embeddings.f32"));
    MESSAGE("image_", n, " (", h, " x ", w, " patches, ", tokens, " tokens): tower ", rt, ", embeddings ", re,
            " (max |diff| / rms(ref))");
    CHECK(rt <= kStrict);
    CHECK(re <= kStrict);
    if (n == 2) {  // the thread count never changes a result
      const std::vector<float> serial = vision_tower(f.cfg, f.w, pixels.data(), h, w, nullptr);
      CHECK(serial == tower);
    }
  }
  CHECK(images >= 4);
}

TEST_CASE("vision projector: a grid that does not merge 2x2 is refused") {
  Fixture& f = fixture();
  std::vector<float> tower(size_t(3 * 4 * f.cfg.hidden), 0.5f);
  const std::string msg = error_of([&] { mm_projector(f.cfg, f.w, tower.data(), 3, 4, nullptr); });
  CHECK_MESSAGE(msg.find("merge") != std::string::npos, msg);
}
