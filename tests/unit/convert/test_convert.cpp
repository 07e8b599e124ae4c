#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/container/manifest_io.h"
#include "shared/container/reader.h"
#include "shared/hf/checkpoint.h"
#include "shared/rvq/encoder.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/half.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/fixture_dir.h"
#include "tools/convert/convert.h"
#include "tools/synth/synth.h"

using namespace waste;
using waste::test::TempDir;
namespace fs = std::filesystem;

namespace {

const char* kFixtures[] = {"deepseek-v3", "deepseek-v3-fp8", "kimi-k3", "kimi-linear"};

ConvertOptions options(const std::string& fixture, const std::string& out, TensorFormat experts, TrunkChoice trunk) {
  ConvertOptions o;
  o.hf_dir = fixture_dir(fixture);
  o.out = out;
  o.expert_format = experts;
  o.trunk = trunk;
  o.progress = false;
  o.threads = 2;
  return o;
}

std::map<std::string, std::vector<uint8_t>> dir_contents(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file_bytes(e.path().string(), 1ull << 30);
  return out;
}

std::vector<float> trunk_row(const Container& c, const std::string& name, uint64_t row) {
  const TensorInfo& t = c.tensor(name);
  std::vector<float> out(t.shape.size() == 1 ? t.elements() : t.cols());
  read_tensor_row(c, t, row, out.data());
  return out;
}

// The checkpoint's values of a trunk tensor by its release name without prefix.
std::vector<float> checkpoint_values(const Checkpoint& ck, const std::string& name) {
  const std::string full = ck.config().tensor_prefix + name;
  if (ck.has(full)) return ck.read_tensor(full);
  return ck.read_weight(full.substr(0, full.size() - 7));
}

}  // namespace

TEST_CASE("every fixture converts losslessly and reads back exactly") {
  for (const char* fx : kFixtures) {
    CAPTURE(fx);
    TempDir tmp;
    const std::string out = tmp.path() + "/m.waste";
    ConvertReport r = convert_checkpoint(options(fx, out, TensorFormat::F32, TrunkChoice::F32));
    CHECK(!r.trunk_resumed);
    Checkpoint ck = Checkpoint::open(fixture_dir(fx));
    const ModelConfig& cfg = ck.config();
    Container c = Container::open(out);
    CHECK(!path_exists(out + "/.progress"));
    CHECK(c.config().n_layers == cfg.n_layers);
    // Every trunk tensor, every row, equals the checkpoint's (dequantised) values.
    for (const TensorSpec& s : trunk_tensor_specs(cfg)) {
      CAPTURE(s.name);
      const TensorInfo& t = c.tensor(s.name);
      CHECK(t.format == TensorFormat::F32);
      std::vector<float> want = checkpoint_values(ck, s.name);
      const uint64_t rows = t.shape.size() == 1 ? 1 : t.rows();
      const uint64_t cols = want.size() / rows;
      for (uint64_t row = 0; row < rows; row += std::max<uint64_t>(1, rows / 7)) {
        std::vector<float> got = trunk_row(c, s.name, row);
        REQUIRE(got.size() == cols);
        CHECK(std::memcmp(got.data(), want.data() + row * cols, cols * 4) == 0);
      }
    }
    // Expert records hold the f32 matrices bit for bit.
    for (int layer : cfg.moe_layers()) {
      const ExpertLayerInfo* li = c.expert_layer(layer);
      REQUIRE(li != nullptr);
      CHECK(li->layout.format == TensorFormat::F32);
      for (int e : {0, cfg.n_experts - 1}) {
        std::vector<uint8_t> rec(li->layout.stride);
        c.read_record(layer, uint32_t(e), rec.data());
        const ExpertNames n = expert_tensor_names(cfg, layer, e);
        std::vector<float> gate = ck.read_weight(cfg.tensor_prefix + n.gate);
        std::vector<float> down = ck.read_weight(cfg.tensor_prefix + n.down);
        CHECK(std::memcmp(rec.data() + li->layout.gate_offset, gate.data(), gate.size() * 4) == 0);
        CHECK(std::memcmp(rec.data() + li->layout.down_offset, down.data(), down.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("every fixture converts with VQ3R experts and the default trunk") {
  for (const char* fx : kFixtures) {
    CAPTURE(fx);
    TempDir tmp;
    const std::string out = tmp.path() + "/m.waste";
    ConvertOptions o = options(fx, out, TensorFormat::VQ3R, TrunkChoice::Q4G);
    if (std::string(fx) != "kimi-k3") {
      // Default training on one fixture (MXFP4 input); lighter elsewhere to keep the test fast
      // on a shared machine (the checks below hold for any codebooks).
      o.rvq.kmeans_iters = 3;
      o.rvq.train_refine_passes = 1;
      o.rvq.max_train_vectors = 8192;
    }
    ConvertReport r = convert_checkpoint(o);
    Checkpoint ck = Checkpoint::open(fixture_dir(fx));
    const ModelConfig& cfg = ck.config();
    Container c = Container::open(out);
    // Default formats by role.
    for (const TensorSpec& s : trunk_tensor_specs(cfg)) {
      CAPTURE(s.name);
      const TensorInfo& t = c.tensor(s.name);
      if (s.role == TensorRole::Router || s.role == TensorRole::Vector) {
        CHECK(t.format == TensorFormat::F32);
        std::vector<float> want = checkpoint_values(ck, s.name);
        const uint64_t rows = t.shape.size() == 1 ? 1 : t.rows();
        std::vector<float> got = trunk_row(c, s.name, rows - 1);
        CHECK(std::memcmp(got.data(), want.data() + (rows - 1) * got.size(), got.size() * 4) == 0);
      } else if (s.role == TensorRole::Matrix) {
        CHECK((t.format == TensorFormat::Q4G || (t.format == TensorFormat::BF16 && t.cols() % 32 != 0)));
      } else {
        CHECK(t.format == TensorFormat::Q8G);
      }
    }
    // A q4g matrix reads back within half a quantization step of its group.
    {
      const std::string name = cfg.arch == Arch::DeepseekV3 ? "model.layers.0.self_attn.o_proj.weight"
                                                            : "model.layers.0.self_attn.q_proj.weight";
      std::vector<float> want = checkpoint_values(ck, name);
      const TensorInfo& t = c.tensor(name);
      REQUIRE(t.format == TensorFormat::Q4G);
      const uint64_t cols = t.cols();
      for (uint64_t row : {uint64_t(0), t.rows() - 1}) {
        std::vector<float> got = trunk_row(c, name, row);
        for (uint64_t g = 0; g < cols; g += 32) {
          float amax = 0;
          for (uint64_t k = g; k < g + 32; ++k) amax = std::max(amax, std::fabs(want[row * cols + k]));
          for (uint64_t k = g; k < g + 32; ++k)
            CHECK(std::fabs(got[k] - want[row * cols + k]) <= amax / 7.0f * 0.5f * 1.01f + 1e-6f);
        }
      }
    }
    // The reported relative error is what decoding the records gives.
    REQUIRE(r.layers.size() == cfg.moe_layers().size());
    for (const ConvertLayerReport& lr : r.layers) {
      CAPTURE(lr.layer);
      REQUIRE(lr.relative_error.size() == 3);
      const ExpertLayerInfo* li = c.expert_layer(lr.layer);
      REQUIRE(li != nullptr);
      CHECK(li->relative_error == lr.relative_error);
      const std::vector<float> books = c.read_codebooks(lr.layer);
      const int H = cfg.expert_hidden(), I = cfg.moe_intermediate;
      double err[3] = {0, 0, 0}, energy[3] = {0, 0, 0};
      std::vector<uint8_t> rec(li->layout.stride);
      for (int e = 0; e < cfg.n_experts; ++e) {
        c.read_record(lr.layer, uint32_t(e), rec.data());
        const ExpertNames n = expert_tensor_names(cfg, lr.layer, e);
        const std::string names[3] = {n.gate, n.up, n.down};
        const uint32_t offsets[3] = {li->layout.gate_offset, li->layout.up_offset, li->layout.down_offset};
        const auto* scales = reinterpret_cast<const uint16_t*>(rec.data() + li->layout.scales_offset);
        const uint16_t* sc[3] = {scales, scales + I, scales + 2 * I};
        for (int k = 0; k < 3; ++k) {
          const int rows = k == 2 ? H : I, cols = k == 2 ? I : H;
          std::vector<float> want = ck.read_weight(cfg.tensor_prefix + names[k]);
          std::vector<float> got(want.size());
          decode_matrix(rec.data() + offsets[k], sc[k], rows, cols, books.data() + size_t(k) * kCodebookFloats, got.data());
          for (size_t i = 0; i < want.size(); ++i) {
            err[k] += double(got[i] - want[i]) * double(got[i] - want[i]);
            energy[k] += double(want[i]) * double(want[i]);
          }
        }
      }
      for (int k = 0; k < 3; ++k) {
        CAPTURE(k);
        const double rel = err[k] / energy[k];
        CHECK(rel == doctest::Approx(lr.relative_error[size_t(k)]).epsilon(0.02));
        CHECK(rel < 0.2);  // 3 bits per weight: far better than nothing (1.0)
        CHECK(rel > 0.0);
      }
    }
    // Damaged manifests: each refusal names what is wrong.
    const ManifestData good = decode_manifest(read_file_bytes(out + "/manifest", kMaxManifestBytes), "manifest");
    auto open_with = [&](const ManifestData& m) {
      const std::vector<uint8_t> bytes = encode_manifest(m);
      write_file_atomic(out + "/manifest", bytes.data(), bytes.size());
      return Container::open(out);
    };
    ManifestData m = good;
    REQUIRE_FALSE(m.layers.empty());
    m.layers[0].codebook_offset = ~uint64_t(0) - 15;  // near 2^64 (a multiple of 4): must not wrap past the check
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains("codebooks lie outside"), Error);
    m = good;
    m.tensors[0].format = TensorFormat(9);  // no such format
    const std::string bad_format = "tensor " + m.tensors[0].name + ": format";
    CHECK_THROWS_WITH_AS(open_with(m), doctest::Contains(bad_format.c_str()), Error);
    CHECK_NOTHROW(open_with(good));
  }
}

TEST_CASE("a checkpoint missing a tensor is refused, naming it") {
  const std::string fx = fixture_dir("deepseek-v3");
  for (const std::string victim : {"model.layers.2.self_attn.o_proj.weight", "model.layers.3.mlp.experts.5.up_proj.weight"}) {
    CAPTURE(victim);
    TempDir tmp;
    const std::string ck_dir = tmp.path() + "/ck";
    fs::create_directories(ck_dir);
    fs::copy_file(fx + "/config.json", ck_dir + "/config.json");
    // Rewrite the header with the tensor renamed; the data section is unchanged (offsets are
    // relative to it). No index: it would still list the old name.
    std::vector<uint8_t> file = read_file_bytes(fx + "/model.safetensors", 64 << 20);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[size_t(i)];
    nlohmann::json h = nlohmann::json::parse(std::string(file.begin() + 8, file.begin() + 8 + ptrdiff_t(n)));
    REQUIRE(h.contains(victim));
    h["renamed." + victim] = h[victim];
    h.erase(victim);
    std::string text = h.dump();
    std::ofstream f(ck_dir + "/model.safetensors", std::ios::binary);
    uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) f.put(char(len >> (8 * i)));
    f << text;
    f.write(reinterpret_cast<const char*>(file.data() + 8 + n), std::streamsize(file.size() - 8 - n));
    f.close();
    ConvertOptions o = options("deepseek-v3", tmp.path() + "/m.waste", TensorFormat::F32, TrunkChoice::F32);
    o.hf_dir = ck_dir;
    const std::string base = victim.substr(0, victim.size() - 7);
    CHECK_THROWS_WITH_AS(convert_checkpoint(o), doctest::Contains(base.c_str()), Error);
    CHECK(!path_exists(tmp.path() + "/m.waste"));  // refused before writing anything
  }
}

TEST_CASE("a conversion interrupted mid-way resumes and writes byte-identical files") {
  for (TensorFormat experts : {TensorFormat::F32, TensorFormat::VQ3R}) {
    CAPTURE(format_name(experts));
    TempDir tmp;
    const std::string clean = tmp.path() + "/clean.waste", resumed = tmp.path() + "/resumed.waste";
    // Light codebook training keeps the test fast; determinism does not depend on it.
    auto light = [&](const std::string& out) {
      ConvertOptions o = options("kimi-linear", out, experts, TrunkChoice::Q4G);
      o.rvq.kmeans_iters = 2;
      o.rvq.train_refine_passes = 1;
      o.rvq.max_train_vectors = 4096;
      return o;
    };
    convert_checkpoint(light(clean));

    ConvertOptions o = light(resumed);
    o.crash_after_layers = 1;
    CHECK_THROWS_WITH_AS(convert_checkpoint(o), doctest::Contains("simulated crash"), Error);
    CHECK(!path_exists(resumed + "/manifest"));
    o.crash_after_layers = -1;
    o.threads = 1;  // a different thread count must not change a byte
    ConvertReport r = convert_checkpoint(o);
    CHECK(r.trunk_resumed);
    REQUIRE(r.layers.size() >= 2);
    CHECK(r.layers[0].resumed);
    CHECK(!r.layers[1].resumed);
    CHECK(dir_contents(clean) == dir_contents(resumed));

    // A plain rerun over a finished container also gives the same bytes.
    convert_checkpoint(light(resumed));
    CHECK(dir_contents(clean) == dir_contents(resumed));
  }
}

TEST_CASE("progress from a run with other options is not reused") {
  TempDir tmp;
  const std::string out = tmp.path() + "/m.waste";
  ConvertOptions o = options("kimi-linear", out, TensorFormat::F32, TrunkChoice::F32);
  o.crash_after_layers = 1;
  CHECK_THROWS_AS(convert_checkpoint(o), Error);
  o.crash_after_layers = -1;
  o.expert_format = TensorFormat::BF16;
  o.trunk = TrunkChoice::BF16;
  ConvertReport r = convert_checkpoint(o);
  CHECK(!r.trunk_resumed);
  for (const auto& l : r.layers) CHECK(!l.resumed);
  Container c = Container::open(out);
  CHECK(c.expert_layers().front().layout.format == TensorFormat::BF16);
  CHECK(c.tensor("model.layers.0.self_attn.q_proj.weight").format == TensorFormat::BF16);
}

TEST_CASE("a release tiktoken.model is copied with WASTE's tokenizer_config for the family") {
  TempDir tmp;
  const std::string ck_dir = tmp.path() + "/ck";
  fs::create_directories(ck_dir);
  for (const char* f : {"config.json", "model.safetensors", "model.safetensors.index.json"})
    fs::copy_file(fixture_dir("kimi-linear") + "/" + f, ck_dir + "/" + f);
  // A rank file of the 256 single bytes ("<base64> <rank>" per line).
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string ranks;
  for (int i = 0; i < 256; ++i) ranks += std::string{b64[i >> 2], b64[(i & 3) << 4], '=', '='} + " " + std::to_string(i) + "\n";
  std::ofstream(ck_dir + "/tiktoken.model") << ranks;
  ConvertOptions o = options("kimi-linear", tmp.path() + "/m.waste", TensorFormat::BF16, TrunkChoice::BF16);
  o.hf_dir = ck_dir;
  ConvertReport r = convert_checkpoint(o);
  CHECK(r.tokenizer);
  Container c = Container::open(o.out);
  REQUIRE(!c.tokenizer_path().empty());
  CHECK(read_file_text(c.tokenizer_path(), 1 << 20) == ranks);
  const std::string cfg = read_file_text(c.tokenizer_config_path(), 1 << 20);
  nlohmann::json j = nlohmann::json::parse(cfg);
  CHECK(j.at("waste_tokenizer") == 1);
  CHECK(j.at("reserved_tokens").at("begin") == 256);  // specials follow the 256 base ranks
}

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("huge or NaN expert weights are refused naming the tensor, layer, expert and row; lossless formats take huge ones") {
  const std::string fx = fixture_dir("deepseek-v3");
  const std::string victim = "model.layers.3.mlp.experts.5.up_proj.weight";
  // The fixture's safetensors with one value of the victim replaced.
  auto patched = [&](const std::string& ck_dir, float value) {
    fs::create_directories(ck_dir);
    fs::copy_file(fx + "/config.json", ck_dir + "/config.json");
    std::vector<uint8_t> file = read_file_bytes(fx + "/model.safetensors", 64 << 20);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[size_t(i)];
    const nlohmann::json h = nlohmann::json::parse(std::string(file.begin() + 8, file.begin() + 8 + ptrdiff_t(n)));
    REQUIRE(h.contains(victim));
    const uint64_t at = 8 + n + h[victim]["data_offsets"][0].get<uint64_t>() + 2 * 7;  // element 7
    const std::string dtype = h[victim]["dtype"];
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if (dtype == "BF16") {
      file[at] = uint8_t(bits >> 16), file[at + 1] = uint8_t(bits >> 24);
    } else {
      REQUIRE(dtype == "F32");
      const uint64_t at32 = 8 + n + h[victim]["data_offsets"][0].get<uint64_t>() + 4 * 7;
      std::memcpy(&file[at32], &bits, 4);
    }
    std::ofstream(ck_dir + "/model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  };
  TempDir tmp;
  patched(tmp.path() + "/huge", 3e38f);
  patched(tmp.path() + "/nan", std::nanf(""));
  ConvertOptions o = options("deepseek-v3", tmp.path() + "/m.waste", TensorFormat::VQ3R, TrunkChoice::F32);
  o.hf_dir = tmp.path() + "/huge";
  // Training samples expert 5 or not; either way the error names the place and the cause.
  const std::string huge = error_of([&] { convert_checkpoint(o); });
  CHECK_MESSAGE(huge.find("f16 row scale") != std::string::npos, huge);
  CHECK_MESSAGE(huge.find("layer 3, expert 5: up_proj: encode_matrix: row 0") != std::string::npos, huge);
  // A rerun after the refusal fails the same clear way (no half-written resume state in the way).
  CHECK(error_of([&] { convert_checkpoint(o); }) == huge);
  // Stored losslessly the huge value is kept.
  ConvertOptions lossless = o;
  lossless.out = tmp.path() + "/lossless.waste";
  lossless.expert_format = TensorFormat::F32;
  CHECK_NOTHROW(convert_checkpoint(lossless));

  o.hf_dir = tmp.path() + "/nan";
  o.out = tmp.path() + "/nan.waste";
  for (TensorFormat f : {TensorFormat::VQ3R, TensorFormat::F32}) {
    o.expert_format = f;
    const std::string nan = error_of([&] { convert_checkpoint(o); });
    CHECK_MESSAGE(nan.find("tensor model.layers.3.mlp.experts.5.up_proj (layer 3, expert 5) holds NaN at [0, 7]") !=
                      std::string::npos,
                  nan);
  }
}

TEST_CASE("--head stores the output head apart from the trunk; the default keeps it at q8g") {
  // The rule (shared/model/trunk_storage.h) on every role, then a converted fixture.
  auto format = [](TensorRole role, uint64_t cols, const TrunkStorage& s) {
    return trunk_storage(role, {7, cols}, s).format;
  };
  const TrunkStorage q4{TensorFormat::Q4G, std::nullopt};
  CHECK(format(TensorRole::Head, 128, q4) == TensorFormat::Q8G);
  CHECK(format(TensorRole::Embedding, 128, q4) == TensorFormat::Q8G);
  CHECK(format(TensorRole::Matrix, 128, q4) == TensorFormat::Q4G);
  CHECK(format(TensorRole::Matrix, 100, q4) == TensorFormat::BF16);  // 100 % 32 != 0
  CHECK(format(TensorRole::Router, 128, q4) == TensorFormat::F32);
  const TrunkStorage q4_head{TensorFormat::Q4G, TensorFormat::Q4G};
  CHECK(format(TensorRole::Head, 128, q4_head) == TensorFormat::Q4G);
  CHECK(format(TensorRole::Embedding, 128, q4_head) == TensorFormat::Q8G);  // the embedding stays
  CHECK(format(TensorRole::Head, 100, q4_head) == TensorFormat::BF16);
  const TrunkStorage f32_q4_head{TensorFormat::F32, TensorFormat::Q4G};
  CHECK(format(TensorRole::Head, 128, f32_q4_head) == TensorFormat::Q4G);
  CHECK(format(TensorRole::Matrix, 128, f32_q4_head) == TensorFormat::F32);
  CHECK_THROWS_WITH_AS(head_format_from_name("q3"), doctest::Contains("--head"), Error);

  TempDir tmp;
  ConvertOptions o = options("kimi-linear", tmp.path() + "/m.waste", TensorFormat::F32, TrunkChoice::F32);
  o.head = TensorFormat::Q4G;
  convert_checkpoint(o);
  Container c = Container::open(o.out);
  const ModelConfig& cfg = c.config();
  int heads = 0;
  for (const TensorSpec& s : trunk_tensor_specs(cfg)) {
    CAPTURE(s.name);
    const TensorFormat want = s.role == TensorRole::Head ? TensorFormat::Q4G : TensorFormat::F32;
    CHECK(c.tensor(s.name).format == want);
    heads += s.role == TensorRole::Head;
  }
  CHECK_EQ(heads, 1);
}

namespace {

// Every trunk tensor of c is stored as the rule says under `storage`, group included.
struct StoredCounts {
  int wide = 0;     // tensors at a group of 128
  int routers = 0;  // routers in storage.router's format
  int moe_layers = 0;
};
StoredCounts check_stored_by_rule(const Container& c, const TrunkStorage& storage) {
  StoredCounts n;
  n.moe_layers = c.config().n_moe_layers();
  for (const TensorSpec& s : trunk_tensor_specs(c.config())) {
    CAPTURE(s.name);
    const TensorInfo& t = c.tensor(s.name);
    const StoredAs want = trunk_storage(s.role, t.shape, storage);
    CHECK(t.format == want.format);
    CHECK_EQ(t.group, want.group);
    n.wide += t.group == 128;
    n.routers += s.role == TensorRole::Router && t.format == storage.router;
  }
  return n;
}

}  // namespace

TEST_CASE("--trunk-group and --router: the matrices' group, its fallbacks, bf16 routers, refused values") {
  // The rule (shared/model/trunk_storage.h).
  TrunkStorage wide{TensorFormat::Q4G, std::nullopt, 128, TensorFormat::BF16};
  auto stored = [&](TensorRole role, std::vector<uint64_t> shape) { return trunk_storage(role, shape, wide); };
  CHECK(stored(TensorRole::Matrix, {7, 7168}).format == TensorFormat::Q4G);
  CHECK_EQ(stored(TensorRole::Matrix, {7, 7168}).group, 128u);
  CHECK_EQ(stored(TensorRole::Matrix, {7, 96}).group, 32u);  // 96 % 128 != 0: the default group
  CHECK(stored(TensorRole::Matrix, {7, 100}).format == TensorFormat::BF16);  // no group fits
  CHECK(stored(TensorRole::Matrix, {7168}).format == TensorFormat::BF16);    // one dimension: no rows
  CHECK(stored(TensorRole::Head, {7, 7168}).format == TensorFormat::Q8G);
  CHECK_EQ(stored(TensorRole::Head, {7, 7168}).group, 32u);  // the head and embedding keep 32
  CHECK_EQ(stored(TensorRole::Embedding, {7, 7168}).group, 32u);
  CHECK(stored(TensorRole::Router, {7, 7168}).format == TensorFormat::BF16);
  CHECK_EQ(stored(TensorRole::Router, {7, 7168}).group, 0u);
  CHECK(stored(TensorRole::Vector, {7168}).format == TensorFormat::F32);
  // Groups in a shape of several dimensions run along all but the first (a conv weight).
  CHECK_EQ(stored(TensorRole::Matrix, {7, 4, 32}).group, 128u);
  CHECK(trunk_storage_text(wide) == "q4g-128 matrices, q8g-32 head, bf16 routers, f32 vectors");
  CHECK(trunk_storage_text([] { TrunkStorage s; s.matrices = TensorFormat::F32; return s; }()) == "f32 matrices, f32 head, f32 routers, f32 vectors");

  CHECK_EQ(trunk_group_from_text("32"), 32u);
  CHECK_EQ(trunk_group_from_text("128"), 128u);
  CHECK_EQ(trunk_group_from_text("1024"), 1024u);
  for (const char* bad : {"", "0", "16", "48", "96", "100", "2048", "128k", "-128", "99999999999999999999"})
    CHECK_THROWS_WITH_AS(trunk_group_from_text(bad), doctest::Contains("--trunk-group must be one of 32, 64"), Error);
  CHECK(router_format_from_name("bf16") == TensorFormat::BF16);
  CHECK(router_format_from_name("f32") == TensorFormat::F32);
  CHECK(router_format_from_name("q8g") == TensorFormat::Q8G);
  CHECK_THROWS_WITH_AS(router_format_from_name("q4g"), doctest::Contains("--router must be f32, bf16 or q8g"), Error);
  // q8g routers keep the default group whatever the matrices' group.
  const TrunkStorage q8_router{TensorFormat::Q4G, std::nullopt, 128, TensorFormat::Q8G};
  CHECK(trunk_storage(TensorRole::Router, {7, 7168}, q8_router).format == TensorFormat::Q8G);
  CHECK_EQ(trunk_storage(TensorRole::Router, {7, 7168}, q8_router).group, 32u);
  CHECK(trunk_storage(TensorRole::Router, {7, 100}, q8_router).format == TensorFormat::BF16);
  CHECK(trunk_storage_text(q8_router) == "q4g-128 matrices, q8g-32 head, q8g-32 routers, f32 vectors");
  try {
    trunk_group_from_text("7");
  } catch (const Error& e) {
    CHECK(e.param() == "--trunk-group");
  }

  // A converted fixture: every stored tensor is what the rule says, the group included, and the
  // bf16 routers hold the release's values exactly.
  TempDir tmp;
  ConvertOptions o = options("kimi-linear", tmp / "m.waste", TensorFormat::F32, TrunkChoice::Q4G);
  o.trunk_group = 128;
  o.router = TensorFormat::BF16;
  convert_checkpoint(o);
  Container c = Container::open(o.out);
  const StoredCounts n = check_stored_by_rule(c, wide);
  CHECK_GT(n.wide, 10);
  CHECK_EQ(n.routers, n.moe_layers);
  // The release's routers are BF16, so bf16 storage gives back exactly its values.
  Checkpoint ck = Checkpoint::open(fixture_dir("kimi-linear"));
  for (const TensorSpec& s : trunk_tensor_specs(c.config())) {
    if (s.role != TensorRole::Router) continue;
    CAPTURE(s.name);
    const std::vector<float> want = checkpoint_values(ck, s.name);
    const uint64_t rows = c.tensor(s.name).rows();
    const std::vector<float> got = trunk_row(c, s.name, rows - 1);
    CHECK(std::memcmp(got.data(), want.data() + (rows - 1) * got.size(), got.size() * 4) == 0);
  }
}

TEST_CASE("waste synth stores its trunk by the same rule: --trunk-group 128, bf16 and q8g routers") {
  for (TensorFormat router : {TensorFormat::BF16, TensorFormat::Q8G}) {
    CAPTURE(format_name(router));
    TempDir tmp;
    SynthOptions o;
    o.preset = "tiny-kimi-linear";
    o.overrides.hidden = 256;  // a width 128 divides, so the wide group is used
    o.out = tmp / "s.waste";
    o.progress = false;
    o.trunk_group = 128;
    o.router = router;
    synthesize(o);
    Container c = Container::open(o.out);
    const StoredCounts n =
        check_stored_by_rule(c, trunk_storage_for(c.config(), TensorFormat::Q4G, std::nullopt, 128u, router));
    CHECK_GT(n.wide, 4);
    CHECK_EQ(n.routers, n.moe_layers);
  }
  // A group for an unquantized trunk would be ignored: refused by name, nothing written.
  TempDir bad_dir;
  SynthOptions bad;
  bad.preset = "tiny-kimi-linear";
  bad.out = bad_dir / "bad.waste";
  bad.progress = false;
  bad.trunk_format = TensorFormat::BF16;
  bad.trunk_group = 128;
  CHECK_THROWS_WITH_AS(synthesize(bad), doctest::Contains("--trunk-group applies to q4g/q8g"), Error);
  CHECK_FALSE(std::filesystem::exists(bad.out));
}
