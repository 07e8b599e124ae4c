// K3's vision tower through the converter and the container (issue 18): the vision fixture
// (../shared/vision/kimi-k3, read-only) converted with --vision f32 / q8g / none, the values
// and formats read back, the text and vision trunks apart, and the reader's refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/container/manifest_io.h"
#include "shared/container/reader.h"
#include "shared/hf/safetensors.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/half.h"
#include "tests/support/temp_dir.h"
#include "tools/convert/convert.h"

using namespace waste;
using waste::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string vision_fixture() {
  const char* shared = std::getenv("WASTE_SHARED_DIR");
  return std::string(shared ? shared : "../shared") + "/vision/kimi-k3";
}

ConvertOptions options(const std::string& hf_dir, const std::string& out, VisionChoice vision) {
  ConvertOptions o;
  o.hf_dir = hf_dir;
  o.out = out;
  o.expert_format = TensorFormat::BF16;  // lossless and fast: the experts are not what is tested
  o.trunk = TrunkChoice::Q4G;
  o.vision = vision;
  o.progress = false;
  o.threads = 2;
  return o;
}

// A tensor's values as the release stores them: BF16 bits widened to f32 (exact), read
// straight from the safetensors file, not through the Checkpoint under test.
std::vector<float> release_values(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsTensor* t = f.find(name);
  REQUIRE(t != nullptr);
  REQUIRE(t->dtype == "BF16");
  const std::vector<uint8_t> raw = f.read_bytes(name);
  std::vector<float> out(raw.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(uint16_t(raw[2 * i] | (raw[2 * i + 1] << 8)));
  return out;
}

// A checkpoint directory of the fixture's files (symlinks), without preprocessor_config.json,
// optionally with another one written in its place.
std::string fixture_copy(const TempDir& tmp, const std::string& preprocessor_text) {
  const std::string dir = tmp.path() + "/ck";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model-text.safetensors", "model-vision.safetensors", "model.safetensors.index.json"})
    fs::create_symlink(vision_fixture() + "/" + f, dir + "/" + f);
  if (!preprocessor_text.empty()) std::ofstream(dir + "/preprocessor_config.json") << preprocessor_text;
  return dir;
}

}  // namespace

TEST_CASE("vision_tensor_specs: the release's 165 + 3 tensors and parameter counts (MODELS.md 6.1)") {
  const std::string cfg = R"({"model_type": "kimi_k3", "vision_config": {"vt_hidden_size": 1024,
      "vt_num_attention_heads": 12, "qkv_hidden_size": 1536, "vt_intermediate_size": 4096, "vt_num_hidden_layers": 27,
      "init_pos_emb_height": 64, "init_pos_emb_width": 64, "patch_size": 14, "text_hidden_size": 7168,
      "merge_kernel_size": [2, 2]}})";
  const VisionConfig v = VisionConfig::from_json(cfg, "release");
  const std::vector<TensorSpec> specs = vision_tensor_specs(v);
  uint64_t tower = 0, projector = 0;
  size_t n_tower = 0, n_projector = 0;
  for (const TensorSpec& s : specs) {
    CHECK(is_vision_tensor(s.name));
    if (s.name.starts_with("mm_projector.")) {
      projector += s.elements();
      ++n_projector;
    } else {
      tower += s.elements();
      ++n_tower;
    }
  }
  CHECK_EQ(n_tower, 165);
  CHECK_EQ(n_projector, 3);
  CHECK_EQ(tower, 401214464);
  CHECK_EQ(projector, 46144512);
  CHECK(specs.front().name == "vision_tower.patch_embed.proj.weight");
  CHECK(specs.front().shape == std::vector<uint64_t>{1024, 3, 14, 14});
  CHECK(specs.front().role == TensorRole::Matrix);
  CHECK(specs[1].shape == std::vector<uint64_t>{64, 64, 1024});
  CHECK(specs[1].role == TensorRole::Vector);  // the position grid: f32, never quantized
  CHECK(specs[3].name == "vision_tower.encoder.blocks.0.wqkv.weight");
  CHECK(specs[3].shape == std::vector<uint64_t>{4608, 1024});
  CHECK(specs.back().name == "mm_projector.post_norm.weight");
  CHECK(specs.back().shape == std::vector<uint64_t>{7168});
  CHECK_FALSE(is_vision_tensor("model.layers.0.mlp.gate_proj.weight"));
  CHECK_FALSE(is_vision_tensor("language_model.vision_tower.x"));
}

TEST_CASE("q8g groups of vision matrices: 32, else the largest even divisor in [8, 32]") {
  CHECK_EQ(vision_q8g_group(1024), 32);
  CHECK_EQ(vision_q8g_group(588), 28);  // the patch embedding, 3 x 14 x 14
  CHECK_EQ(vision_q8g_group(96), 32);
  CHECK_EQ(vision_q8g_group(90), 30);
  CHECK_EQ(vision_q8g_group(2 * 17 * 19), 0);  // no even divisor in range: bf16
  CHECK_EQ(vision_q8g_group(7), 0);
}

TEST_CASE("--vision f32: every vision tensor is the BF16 release widened to f32, bit for bit") {
  TempDir tmp;
  const std::string out = tmp.path() + "/m.waste";
  ConvertReport r = convert_checkpoint(options(vision_fixture(), out, VisionChoice::F32));
  CHECK_EQ(r.vision_tensors, 18);
  const Container c = Container::open(out);
  REQUIRE(c.has_vision());
  const VisionConfig v = VisionConfig::load(vision_fixture() + "/config.json");
  const SafetensorsFile release(vision_fixture() + "/model-vision.safetensors");
  const Trunk vision(c, {}, true, nullptr, TrunkPart::Vision);
  uint64_t bytes = 0;
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    CAPTURE(s.name);
    const TensorInfo& t = c.tensor(s.name);
    CHECK(t.format == TensorFormat::F32);
    CHECK(t.shape == s.shape);
    REQUIRE(vision.has(s.name));
    const std::vector<float> want = release_values(release, s.name);
    REQUIRE_EQ(want.size(), t.elements());
    CHECK(std::memcmp(vision.data(s.name), want.data(), want.size() * 4) == 0);
    bytes += t.bytes;
  }
  CHECK_EQ(c.vision_bytes(), bytes);
  CHECK_GE(vision.resident_bytes(), bytes);
  CHECK_LT(vision.resident_bytes(), bytes + 18 * kTensorAlign);

  // The preprocessor config is the release's file, verbatim, and parses.
  CHECK(c.preprocessor_config_json() == read_file_text(vision_fixture() + "/preprocessor_config.json", 1 << 20));
  const PreprocessorConfig p = PreprocessorConfig::from_json(c.preprocessor_config_json(), "container");
  CHECK(p.image_mean == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK(p.image_std == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK_EQ(p.patch_size, 14);
  CHECK_EQ(p.in_patch_limit, 65536);
  CHECK_EQ(p.patch_limit_on_one_side, 512);
  CHECK_EQ(p.merge_kernel_size, 2);

  // The text trunk never holds a vision tensor, and the vision trunk nothing else.
  const Trunk text(c, {"model.embed_tokens.weight"}, true);
  CHECK_FALSE(text.has("vision_tower.patch_embed.pos_emb.weight"));
  CHECK_THROWS_WITH_AS(text.data("mm_projector.proj.0.weight"), doctest::Contains("vision tower"), Error);
  CHECK(text.has("model.norm.weight"));
  CHECK_FALSE(vision.has("model.norm.weight"));
  CHECK_THROWS_WITH_AS(vision.data("model.norm.weight"), doctest::Contains("text model"), Error);
  uint64_t text_bytes = 0;
  for (const TensorInfo& t : c.tensors())
    if (!is_vision_tensor(t.name) && t.name != "model.embed_tokens.weight") text_bytes += t.bytes;
  CHECK_GE(text.resident_bytes(), text_bytes);
  CHECK_LT(text.resident_bytes(), text_bytes + c.tensors().size() * kTensorAlign);
  // matrix() and f32() work on the vision part as on the text one.
  const MatrixView pe = vision.matrix("vision_tower.patch_embed.proj.weight");
  CHECK_EQ(pe.rows, v.hidden);
  CHECK_EQ(pe.cols, v.patch_values());
  CHECK(vision.f32("vision_tower.encoder.final_layernorm.weight") != nullptr);
}

TEST_CASE("--vision q8g (the default): matrices int8 within half a step, norms and the position grid exact") {
  TempDir tmp;
  const std::string out = tmp.path() + "/m.waste";
  CHECK(ConvertOptions{}.vision == VisionChoice::Q8G);
  convert_checkpoint(options(vision_fixture(), out, VisionChoice::Q8G));
  const Container c = Container::open(out);
  REQUIRE(c.has_vision());
  const VisionConfig v = VisionConfig::load(vision_fixture() + "/config.json");
  const SafetensorsFile release(vision_fixture() + "/model-vision.safetensors");
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    CAPTURE(s.name);
    const TensorInfo& t = c.tensor(s.name);
    const std::vector<float> want = release_values(release, s.name);
    const uint64_t rows = t.shape.size() == 1 ? 1 : t.rows(), cols = want.size() / rows;
    std::vector<float> got(cols);
    if (s.role == TensorRole::Vector) {
      CHECK(t.format == TensorFormat::F32);
      for (uint64_t r = 0; r < rows; ++r) {  // every row of the position grid, not one
        read_tensor_row(c, t, r, got.data());
        CHECK(std::memcmp(got.data(), want.data() + r * cols, cols * 4) == 0);
      }
      continue;
    }
    REQUIRE(t.format == TensorFormat::Q8G);
    CHECK_EQ(t.group, s.name == "vision_tower.patch_embed.proj.weight" ? 28u : 32u);
    // Every row: |x - q s| <= s / 2 with s = max|x| / 127 of the group (f16 scale rounding: 1%).
    for (uint64_t r = 0; r < rows; ++r) {
      read_tensor_row(c, t, r, got.data());
      for (uint64_t g = 0; g < cols; g += t.group) {
        float amax = 0;
        for (uint64_t k = g; k < g + t.group; ++k) amax = std::max(amax, std::fabs(want[r * cols + k]));
        for (uint64_t k = g; k < g + t.group; ++k)
          REQUIRE(std::fabs(got[k] - want[r * cols + k]) <= amax / 127.0f * 0.5f * 1.01f + 1e-7f);
      }
    }
  }
}

TEST_CASE("--vision none leaves the tower out; the choice is part of what a resumed run must match") {
  TempDir tmp;
  const std::string out = tmp.path() + "/m.waste";
  ConvertOptions o = options(vision_fixture(), out, VisionChoice::None);
  convert_checkpoint(o);
  {
    const Container c = Container::open(out);
    CHECK_FALSE(c.has_vision());
    CHECK_EQ(c.vision_bytes(), 0);
    CHECK(c.preprocessor_config_json().empty());
    for (const TensorInfo& t : c.tensors()) CHECK_FALSE(is_vision_tensor(t.name));
    CHECK_THROWS_WITH_AS(Trunk(c, {}, false, nullptr, TrunkPart::Vision), doctest::Contains("no vision tower"), Error);
  }
  // Interrupted without the tower, rerun with it: the trunk is written again.
  o.crash_after_layers = 1;
  CHECK_THROWS_AS(convert_checkpoint(o), Error);
  ConvertOptions with = options(vision_fixture(), out, VisionChoice::Q8G);
  ConvertReport r = convert_checkpoint(with);
  CHECK_FALSE(r.trunk_resumed);
  for (const auto& l : r.layers) CHECK_FALSE(l.resumed);
  CHECK(Container::open(out).has_vision());
}

TEST_CASE("a checkpoint with a tower needs its preprocessor_config.json, unless --vision none") {
  SUBCASE("missing") {
    TempDir tmp;
    const std::string ck = fixture_copy(tmp, "");
    CHECK_THROWS_WITH_AS(convert_checkpoint(options(ck, tmp.path() + "/m.waste", VisionChoice::Q8G)),
                         doctest::Contains("no preprocessor_config.json"), Error);
    CHECK_FALSE(path_exists(tmp.path() + "/m.waste"));  // refused before writing anything
    convert_checkpoint(options(ck, tmp.path() + "/m.waste", VisionChoice::None));
    CHECK_FALSE(Container::open(tmp.path() + "/m.waste").has_vision());
  }
  SUBCASE("does not parse") {
    TempDir tmp;
    const std::string ck = fixture_copy(tmp, R"({"media_proc_cfg": {"image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0, 0.5], "patch_size": 14, "in_patch_limit": 65536, "patch_limit_on_one_side": 512,
        "merge_kernel_size": 2}})");
    CHECK_THROWS_WITH_AS(convert_checkpoint(options(ck, tmp.path() + "/m.waste", VisionChoice::Q8G)),
                         doctest::Contains("'image_std' [1]"), Error);
  }
  SUBCASE("disagrees with vision_config") {
    TempDir tmp;
    const std::string ck = fixture_copy(tmp, R"({"media_proc_cfg": {"image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "patch_size": 16, "in_patch_limit": 65536, "patch_limit_on_one_side": 512,
        "merge_kernel_size": 2}})");
    CHECK_THROWS_WITH_AS(convert_checkpoint(options(ck, tmp.path() + "/m.waste", VisionChoice::Q8G)),
                         doctest::Contains("patch_size 16"), Error);
  }
}

TEST_CASE("the reader refuses a damaged vision part, naming the tensor or field") {
  TempDir tmp;
  const std::string out = tmp.path() + "/m.waste";
  convert_checkpoint(options(vision_fixture(), out, VisionChoice::F32));
  const std::string manifest = out + "/manifest";
  const ManifestData good = decode_manifest(read_file_bytes(manifest, kMaxManifestBytes), manifest);
  auto open_with = [&](const ManifestData& m) {
    const std::vector<uint8_t> bytes = encode_manifest(m);
    write_file_atomic(manifest, bytes.data(), bytes.size());
    return Container::open(out);
  };
  auto find = [](ManifestData& m, const std::string& name) -> TensorInfo& {
    for (TensorInfo& t : m.tensors)
      if (t.name == name) return t;
    throw Error("no " + name);
  };
  const std::string norm = "vision_tower.encoder.blocks.1.norm0.weight";
  SUBCASE("a wrong shape") {
    ManifestData m = good;
    find(m, norm).shape = {32, 2};  // the same bytes, so only the vision check can object
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains((norm + " has shape [32, 2]").c_str()), Error);
  }
  SUBCASE("a missing tensor") {
    ManifestData m = good;
    const std::string wo = "vision_tower.encoder.blocks.1.wo.weight";
    std::erase_if(m.tensors, [&](const TensorInfo& t) { return t.name == wo; });
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains((wo + " is missing").c_str()), Error);
  }
  SUBCASE("a tensor of no such block") {
    ManifestData m = good;
    find(m, norm).name = "vision_tower.encoder.blocks.7.norm0.weight";
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("blocks.7.norm0.weight is not a tensor of this vision tower"),
                         Error);
  }
  SUBCASE("a norm that is not f32") {
    ManifestData m = good;
    TensorInfo& t = find(m, norm);
    t.format = TensorFormat::BF16;
    t.bytes /= 2;
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains((norm + " is stored bf16").c_str()), Error);
  }
  SUBCASE("no preprocessor config") {
    ManifestData m = good;
    m.preprocessor_config_json.clear();
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("preprocessorConfigJson is empty"), Error);
  }
  SUBCASE("a preprocessor config that does not parse") {
    ManifestData m = good;
    m.preprocessor_config_json = R"({"media_proc_cfg": {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "patch_size": 14, "in_patch_limit": 65536, "patch_limit_on_one_side": 512}})";
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("preprocessorConfigJson"), Error);
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("'merge_kernel_size'"), Error);
  }
  SUBCASE("vision tensors without a vision_config") {
    ManifestData m = good;
    nlohmann::json cfg = nlohmann::json::parse(m.config_json);
    cfg.erase("vision_config");
    m.config_json = cfg.dump();
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("config.json has no vision_config"), Error);
  }
  SUBCASE("a container from before vision (no field 15, no vision tensors) opens as it did") {
    ManifestData m = good;
    std::erase_if(m.tensors, [](const TensorInfo& t) { return is_vision_tensor(t.name); });
    m.preprocessor_config_json.clear();
    const Container c = open_with(m);
    CHECK_FALSE(c.has_vision());
    CHECK_EQ(c.vision_bytes(), 0);
  }
  CHECK_NOTHROW(open_with(good));
}
