// `waste info MODEL [--json]` and `waste verify MODEL`.
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "shared/container/reader.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/progress.h"
#include "shared/util/thread_pool.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

// Tensor count and stored bytes per format of the tensors `pick` selects.
template <typename Pick>
nlohmann::json formats_of(const Container& c, Pick pick) {
  nlohmann::json formats = nlohmann::json::object();
  for (const auto& t : c.tensors()) {
    if (!pick(t)) continue;
    auto& f = formats[format_name(t.format)];
    if (f.is_null()) f = {{"tensors", 0}, {"bytes", uint64_t(0)}};
    f["tensors"] = f["tensors"].get<int>() + 1;
    f["bytes"] = f["bytes"].get<uint64_t>() + t.bytes;
  }
  return formats;
}

// The vision tower and projector of a K3 container (null without one): shape, parameters,
// stored bytes and formats, and the preprocessing constants images are normalized with.
nlohmann::json vision_json(const Container& c) {
  using nlohmann::json;
  if (!c.has_vision()) return nullptr;
  const VisionConfig v = VisionConfig::from_json(c.config_json(), c.dir() + " (config)");
  const PreprocessorConfig p = PreprocessorConfig::from_json(c.preprocessor_config_json(), c.dir() + " (preprocessor config)");
  uint64_t tower = 0, projector = 0;
  for (const TensorSpec& s : vision_tensor_specs(v)) (s.name.starts_with("mm_projector.") ? projector : tower) += s.elements();
  size_t tensors = 0;
  for (const auto& t : c.tensors()) tensors += is_vision_tensor(t.name);
  return {{"layers", v.n_layers},
          {"hidden", v.hidden},
          {"heads", v.heads},
          {"head_dim", v.head_dim},
          {"qkv_hidden", v.qkv_hidden},
          {"mlp", v.intermediate},
          {"patch", v.patch_size},
          {"pos_grid", {v.pos_emb_height, v.pos_emb_width}},
          {"merge", {v.merge_h, v.merge_w}},
          {"projector", {{"in", v.merged_width()}, {"hidden", v.merged_width()}, {"out", v.text_hidden}}},
          {"media_placeholder_token_id", v.media_placeholder_token_id},
          {"params", {{"tower", tower}, {"projector", projector}, {"total", tower + projector}}},
          {"tensors", tensors},
          {"bytes", c.vision_bytes()},
          {"formats", formats_of(c, [](const TensorInfo& t) { return is_vision_tensor(t.name); })},
          {"preprocessor",
           {{"image_mean", p.image_mean},
            {"image_std", p.image_std},
            {"patch_size", p.patch_size},
            {"in_patch_limit", p.in_patch_limit},
            {"patch_limit_on_one_side", p.patch_limit_on_one_side},
            {"merge_kernel_size", p.merge_kernel_size}}}};
}

nlohmann::json info_json(const Container& c) {
  using nlohmann::json;
  const ModelConfig& cfg = c.config();
  json j;
  j["path"] = c.dir();
  j["arch"] = arch_name(cfg.arch);
  j["created_by"] = c.created_by();
  j["synthetic"] = c.synthetic();
  j["container_id"] = c.container_id();
  j["shape"] = {{"layers", cfg.n_layers},       {"moe_layers", cfg.n_moe_layers()}, {"hidden", cfg.hidden},
                {"vocab", cfg.vocab},           {"experts", cfg.n_experts},        {"top_k", cfg.top_k},
                {"shared_experts", cfg.n_shared}, {"expert_hidden", cfg.expert_hidden()},
                {"moe_intermediate", cfg.moe_intermediate}};
  // The text trunk: trunk.bin holds the vision tower too, which is counted apart ("vision").
  uint64_t embedding = 0;
  size_t text_tensors = 0;
  for (const auto& t : c.tensors()) {
    if (t.name == "model.embed_tokens.weight") embedding = t.bytes;
    text_tensors += !is_vision_tensor(t.name);
  }
  const uint64_t text_bytes = c.trunk_bytes() - c.vision_bytes();
  j["trunk"] = {{"bytes", text_bytes},
                {"resident_bytes", text_bytes - embedding},
                {"embedding_bytes_on_disk", embedding},
                {"file_bytes", c.trunk_bytes()},
                {"tensors", text_tensors},
                {"formats", formats_of(c, [](const TensorInfo& t) { return !is_vision_tensor(t.name); })}};
  j["vision"] = vision_json(c);
  json layers = json::array();
  uint64_t expert_bytes = 0, stride = 0;
  for (const auto& l : c.expert_layers()) {
    layers.push_back({{"layer", l.layer},
                      {"format", format_name(l.layout.format)},
                      {"experts", l.expert_count},
                      {"stride", l.layout.stride},
                      {"relative_error", l.relative_error}});
    expert_bytes += l.layout.stride * l.expert_count;
    stride = std::max(stride, l.layout.stride);
  }
  j["experts"] = {{"bytes", expert_bytes}, {"record_stride", stride}, {"layers", layers}};
  // A token's routed experts: top_k records in every MoE layer (the working set).
  uint64_t per_token = uint64_t(cfg.top_k) * uint64_t(cfg.n_moe_layers()) * stride;
  j["per_token"] = {{"routed_expert_bytes", per_token},
                    {"working_set_slots", cfg.top_k * cfg.n_moe_layers()},
                    {"note", "bytes read per token with a cold cache; the floor budget is printed by `waste plan`"}};
  return j;
}

void print_info(const Container& c) {
  auto j = info_json(c);
  const ModelConfig& cfg = c.config();
  std::printf("%s  (%s%s)\n", c.dir().c_str(), arch_name(cfg.arch), c.synthetic() ? ", synthetic random weights" : "");
  std::printf("  created by     %s\n", c.created_by().c_str());
  std::printf("  layers         %d (%d MoE), hidden %d, vocab %lld\n", cfg.n_layers, cfg.n_moe_layers(), cfg.hidden,
              (long long)cfg.vocab);
  std::printf("  experts        %d per layer, top-%d, %d shared, expert %d -> %d\n", cfg.n_experts, cfg.top_k,
              cfg.n_shared, cfg.expert_hidden(), cfg.moe_intermediate);
  std::printf("  trunk          %s in %zu tensors (%s resident, embedding %s stays on disk)\n",
              format_bytes(double(j["trunk"]["bytes"].get<uint64_t>())).c_str(), j["trunk"]["tensors"].get<size_t>(),
              format_bytes(double(j["trunk"]["resident_bytes"].get<uint64_t>())).c_str(),
              format_bytes(double(j["trunk"]["embedding_bytes_on_disk"].get<uint64_t>())).c_str());
  for (auto& [name, f] : j["trunk"]["formats"].items())
    std::printf("    %-5s        %d tensors, %s\n", name.c_str(), f["tensors"].get<int>(),
                format_bytes(double(f["bytes"].get<uint64_t>())).c_str());
  if (const auto& v = j["vision"]; !v.is_null()) {
    std::printf("  vision tower   %d blocks, hidden %d, %d x %d heads (qkv %d), MLP %d, patch %d, position grid %d x %d\n",
                v["layers"].get<int>(), v["hidden"].get<int>(), v["heads"].get<int>(), v["head_dim"].get<int>(),
                v["qkv_hidden"].get<int>(), v["mlp"].get<int>(), v["patch"].get<int>(), v["pos_grid"][0].get<int>(),
                v["pos_grid"][1].get<int>());
    std::printf("  projector      %d x %d merge, %d -> %d -> %d (the text hidden size)\n", v["merge"][0].get<int>(),
                v["merge"][1].get<int>(), v["projector"]["in"].get<int>(), v["projector"]["hidden"].get<int>(),
                v["projector"]["out"].get<int>());
    std::printf("  vision params  %.1f M (tower %.1f M + projector %.1f M), %s in %zu tensors, loaded once an image is used\n",
                double(v["params"]["total"].get<uint64_t>()) / 1e6, double(v["params"]["tower"].get<uint64_t>()) / 1e6,
                double(v["params"]["projector"].get<uint64_t>()) / 1e6,
                format_bytes(double(v["bytes"].get<uint64_t>())).c_str(), v["tensors"].get<size_t>());
    for (auto& [name, f] : v["formats"].items())
      std::printf("    %-5s        %d tensors, %s\n", name.c_str(), f["tensors"].get<int>(),
                  format_bytes(double(f["bytes"].get<uint64_t>())).c_str());
    const auto& p = v["preprocessor"];
    std::printf("  preprocessing  mean [%g, %g, %g], std [%g, %g, %g], patch %d, at most %lld patches (%d a side)\n",
                p["image_mean"][0].get<double>(), p["image_mean"][1].get<double>(), p["image_mean"][2].get<double>(),
                p["image_std"][0].get<double>(), p["image_std"][1].get<double>(), p["image_std"][2].get<double>(),
                p["patch_size"].get<int>(), (long long)p["in_patch_limit"].get<int64_t>(),
                p["patch_limit_on_one_side"].get<int>());
  }
  const auto& layers = c.expert_layers();
  if (!layers.empty()) {
    const auto& l0 = layers.front();
    std::printf("  expert banks   %zu x %u records of %s (%s), %s in all\n", layers.size(), l0.expert_count,
                format_bytes(double(l0.layout.stride)).c_str(), format_name(l0.layout.format),
                format_bytes(double(j["experts"]["bytes"].get<uint64_t>())).c_str());
    if (!l0.relative_error.empty())
      std::printf("  vq3r error     layer %d: gate %.4f up %.4f down %.4f (relative MSE)\n", l0.layer,
                  l0.relative_error[0], l0.relative_error.size() > 1 ? l0.relative_error[1] : 0.0,
                  l0.relative_error.size() > 2 ? l0.relative_error[2] : 0.0);
  }
  std::printf("  per token      %s of routed experts (%d records) with a cold cache\n",
              format_bytes(double(j["per_token"]["routed_expert_bytes"].get<uint64_t>())).c_str(),
              j["per_token"]["working_set_slots"].get<int>());
  std::printf("  tokenizer      %s\n", c.tokenizer_path().empty() ? "none" : c.tokenizer_path().c_str());
}

// Checks every trunk tensor and every expert record; returns the problems found.
std::vector<std::string> verify_container(const Container& c, bool show_progress) {
  std::vector<std::string> problems;
  std::mutex problems_mutex;
  auto report = [&](const std::string& p) {
    std::lock_guard<std::mutex> lock(problems_mutex);
    problems.push_back(p);
  };
  uint64_t total = c.trunk_bytes();
  for (const auto& l : c.expert_layers()) total += l.layout.stride * l.expert_count;
  Progress progress("verify", total, "B", show_progress);

  {
    File trunk(c.trunk_path(), O_RDONLY);
    std::vector<uint8_t> buf;
    for (const auto& t : c.tensors()) {
      buf.resize(t.bytes);
      trunk.pread_exact(buf.data(), t.bytes, t.offset);
      if (checksum64(buf.data(), t.bytes) != t.checksum) report(c.trunk_path() + ": tensor " + t.name + " is damaged");
      progress.add(t.bytes);
    }
  }
  // Codebooks: checksum (and finite values) per VQ3R layer.
  for (const auto& l : c.expert_layers()) {
    if (l.layout.format != TensorFormat::VQ3R) continue;
    try {
      c.read_codebooks(l.layer);
    } catch (const Error& e) {
      report(e.what());
    }
  }
  // Banks are read in large sequential chunks and checked in parallel.
  for (const auto& l : c.expert_layers()) {
    File bank(l.bank_path, O_RDONLY);
    const uint64_t per_chunk = std::max<uint64_t>(1, (64ull << 20) / l.layout.stride);
    std::vector<uint8_t> buf(per_chunk * l.layout.stride);
    for (uint64_t first = 0; first < l.expert_count; first += per_chunk) {
      uint64_t n = std::min<uint64_t>(per_chunk, l.expert_count - first);
      bank.pread_exact(buf.data(), n * l.layout.stride, first * l.layout.stride);
      ThreadPool::global().parallel_for(n, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          std::string why =
              check_record(buf.data() + i * l.layout.stride, l.layout, uint32_t(l.layer), uint32_t(first + i), true);
          if (!why.empty()) report(l.bank_path + ": " + why);
        }
      });
      progress.add(n * l.layout.stride);
    }
  }
  progress.finish();
  return problems;
}

}  // namespace

void register_container_commands(CLI::App& app) {
  auto* info = app.add_subcommand("info", "Print a container's manifest: shapes, sizes, bytes per token");
  auto model = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  info->add_option("MODEL", *model, "Container directory")->required();
  info->add_flag("--json", *as_json, "Print JSON");
  info->callback([model, as_json] {
    Container c = Container::open(*model);
    if (*as_json)
      std::printf("%s\n", info_json(c).dump(2).c_str());
    else
      print_info(c);
  });

  auto* verify = app.add_subcommand("verify", "Check every trunk tensor and expert record (headers and checksums)");
  auto vmodel = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  verify->add_option("MODEL", *vmodel, "Container directory")->required();
  verify->add_flag("--no-progress", *quiet, "No progress bar");
  verify->callback([vmodel, quiet] {
    Container c = Container::open(*vmodel);
    auto problems = verify_container(c, !*quiet);
    for (size_t i = 0; i < problems.size() && i < 50; ++i) std::fprintf(stderr, "damaged: %s\n", problems[i].c_str());
    if (!problems.empty())
      throw Error(*vmodel + ": " + std::to_string(problems.size()) + " damaged tensor(s) or record(s)");
    std::printf("%s: OK (%zu trunk tensors, %zu expert banks verified)\n", vmodel->c_str(), c.tensors().size(),
                c.expert_layers().size());
  });
}

}  // namespace waste::cli
