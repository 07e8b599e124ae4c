// `waste info MODEL [--json]` and `waste verify MODEL`.
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "shared/container/reader.h"
#include "shared/model/tensors.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/progress.h"
#include "shared/util/thread_pool.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

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
  uint64_t embedding = 0;
  json formats = json::object();
  for (const auto& t : c.tensors()) {
    if (t.name == "model.embed_tokens.weight") embedding = t.bytes;
    auto& f = formats[format_name(t.format)];
    if (f.is_null()) f = {{"tensors", 0}, {"bytes", uint64_t(0)}};
    f["tensors"] = f["tensors"].get<int>() + 1;
    f["bytes"] = f["bytes"].get<uint64_t>() + t.bytes;
  }
  j["trunk"] = {{"bytes", c.trunk_bytes()},
                {"resident_bytes", c.trunk_bytes() - embedding},
                {"embedding_bytes_on_disk", embedding},
                {"tensors", c.tensors().size()},
                {"formats", formats}};
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
              format_bytes(double(j["trunk"]["bytes"].get<uint64_t>())).c_str(), c.tensors().size(),
              format_bytes(double(j["trunk"]["resident_bytes"].get<uint64_t>())).c_str(),
              format_bytes(double(j["trunk"]["embedding_bytes_on_disk"].get<uint64_t>())).c_str());
  for (auto& [name, f] : j["trunk"]["formats"].items())
    std::printf("    %-5s        %d tensors, %s\n", name.c_str(), f["tensors"].get<int>(),
                format_bytes(double(f["bytes"].get<uint64_t>())).c_str());
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
