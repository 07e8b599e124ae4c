// `waste plan MODEL_DIR | --preset NAME`: the memory plan (trunk, session state, scratch,
// experts in flight, prompt cache, vision tower, floor, working set, cache, total) against the
// usable RAM of this machine.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "shared/container/format.h"
#include "shared/container/reader.h"
#include "shared/model/presets.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/plan/container_plan.h"
#include "shared/plan/memory_plan.h"
#include "shared/platform/memory.h"
#include "shared/util/error.h"
#include "shared/model/trunk_storage.h"
#include "tools/convert/trunk_plan.h"
#include "tools/convert/vision_plan.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

struct PlanOptions {
  std::string model_dir, preset, budget = "auto", prompt_cache = "auto";
  // A preset's trunk storage, as `waste convert` would store it (shared/model/trunk_storage.h);
  // empty: the default. Refused with a container, whose manifest says how it is stored.
  std::string trunk, head, trunk_group, router;
  uint64_t context = uint64_t(limits::kDefaultContextTokens);  // compute's default
  uint32_t sessions = uint32_t(limits::kDefaultLiveSessions);
  uint32_t threads = 0;  // 0: compute's default on this machine (ThreadPool::global_size)
  bool http = false;  // the instance runs waste-serve (waste up --http)
  int image_patches = kDefaultImagePatches;
  bool json = false;
};

// Without a container the trunk is summed tensor by tensor as `waste convert` would store it
// (trunk_resident_bytes, the same rule); experts are VQ3R records.
TrunkStorage preset_trunk_storage(const PlanOptions& o, const ModelConfig& c) {
  std::optional<TensorFormat> head, router;
  std::optional<uint32_t> group;
  if (!o.head.empty()) head = head_format_from_name(o.head);
  if (!o.trunk_group.empty()) group = trunk_group_from_text(o.trunk_group);
  if (!o.router.empty()) router = router_format_from_name(o.router);
  const TensorFormat matrices = o.trunk.empty() ? TensorFormat::Q4G : trunk_choice_format(trunk_choice_from_name(o.trunk));
  return trunk_storage_for(c, matrices, head, group, router);
}

// A preset with a vision_config: its tower as `waste convert` stores it by default (q8g
// matrices, f32 norms and position grid), padding between tensors aside.
void estimate_preset_vision(const std::string& config_json, const std::string& source, uint64_t patches,
                            plan::PlanRequest& r) {
  const nlohmann::json root = nlohmann::json::parse(config_json);
  if (!root.contains("vision_config")) return;
  const VisionConfig v = VisionConfig::from_json(config_json, source);
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    const VisionStorage st = vision_storage(s, VisionChoice::Q8G);
    const uint64_t rows = s.shape.size() == 1 ? 1 : s.shape[0];
    r.vision_weight_bytes += trunk_tensor_bytes(st.format, rows, s.elements() / rows, st.group).total;
  }
  r.vision_activation_bytes = plan::vision_runtime_bytes(v, patches);
  r.vision_source = "estimate: q8g matrices, f32 norms and position grid";
}

plan::PlanRequest request_for(const PlanOptions& o, std::string& model_name) {
  plan::PlanRequest r;
  require(o.model_dir.empty() != o.preset.empty(), "plan: give either MODEL_DIR or --preset NAME");
  if (!o.preset.empty()) {
    model_name = o.preset + " (preset)";
    const std::string config_json = preset_config_json(o.preset);
    r.config = ModelConfig::from_json(config_json, "preset " + o.preset);
    estimate_preset_vision(config_json, "preset " + o.preset, uint64_t(o.image_patches), r);
    const TrunkStorage storage = preset_trunk_storage(o, r.config);
    r.trunk_bytes = trunk_resident_bytes(r.config, storage);
    r.trunk_source = "as stored: " + trunk_storage_text(storage);
    const std::vector<uint64_t> kv_b = {uint64_t(r.config.n_heads) * uint64_t(r.config.qk_nope + r.config.v_head),
                                       uint64_t(r.config.kv_lora_rank)};
    r.mla_cache = mla_cache_format(trunk_storage(TensorRole::Matrix, kv_b, storage).format);
    r.record_stride =
        record_layout(TensorFormat::VQ3R, uint32_t(r.config.expert_hidden()), uint32_t(r.config.moe_intermediate)).stride;
  } else {
    for (const auto& [flag, value] : {std::pair{"--trunk", &o.trunk}, {"--head", &o.head},
                                      {"--trunk-group", &o.trunk_group}, {"--router", &o.router}})
      if (!value->empty())
        throw Error(std::string("plan: ") + flag + " applies to --preset; a container's manifest says how it is stored",
                    ErrorKind::InvalidRequest, flag);
    model_name = o.model_dir;
    r = plan::plan_request_of_container(o.model_dir, uint64_t(o.image_patches));
  }
  r.context = o.context;
  r.sessions = o.sessions;
  if (o.threads > 0) r.threads = o.threads;
  r.http_front_end = o.http;
  if (o.budget != "auto") r.budget = plan::parse_size(o.budget);
  if (o.prompt_cache != "auto") r.prompt_cache = plan::parse_size(o.prompt_cache);
  return r;
}

void run_plan(const PlanOptions& o) {
  std::string model;
  plan::PlanRequest req = request_for(o, model);
  plan::MemoryPlan p = plan::make_plan(req, platform::usable_memory());
  const ModelConfig& c = req.config;
  if (o.json) {
    nlohmann::json j;
    j["model"] = model;
    j["context"] = p.context;
    j["sessions"] = p.sessions;
    j["threads"] = p.threads;
    j["http_front_end"] = p.http_front_end;
    j["trunk_bytes"] = p.trunk;
    j["trunk_source"] = p.trunk_source;
    j["session_state_bytes"] = p.session_state;
    j["session_state"] = {{"mla_bytes_per_token", p.state_per_session.mla_bytes_per_token},
                          {"mla_format", mla_cache_format_name(p.state_per_session.mla_format)},
                          {"kda_state_bytes", p.state_per_session.kda_state_bytes},
                          {"kda_conv_bytes", p.state_per_session.kda_conv_bytes}};
    j["scratch_bytes"] = p.scratch;
    j["experts_in_flight_bytes"] = p.experts_in_flight;
    j["prompt_cache_bytes"] = p.prompt_cache;
    j["vision_bytes"] = p.vision;
    if (p.vision > 0)
      j["vision"] = {{"weight_bytes", p.vision_weights},
                     {"activation_bytes", p.vision_activations},
                     {"patches", o.image_patches},
                     {"source", p.vision_source}};
    j["record_stride"] = p.record_stride;
    j["floor_bytes"] = p.floor;
    j["comparable_floor_bytes"] = p.comparable_floor;
    j["working_set_records"] = p.working_set_records;
    j["working_set_bytes"] = p.working_set_bytes;
    j["cache_bytes"] = p.cache;
    j["cache_working_sets"] = p.cache_working_sets;
    j["slots"] = p.slots;
    j["total_bytes"] = p.total;
    j["budget"] = p.auto_budget ? "auto" : std::to_string(p.budget_limit);
    j["budget_limit_bytes"] = p.budget_limit;
    j["usable_bytes"] = p.memory.usable;
    j["physical_bytes"] = p.memory.physical;
    j["usable_source"] = p.memory.source;
    j["fits"] = p.fits;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  auto line = [](const char* what, uint64_t bytes, const std::string& note) {
    std::printf("  %-22s %12s  %s\n", what, plan::format_bytes(bytes).c_str(), note.c_str());
  };
  std::printf("model %s: %s, %d layers (%d MoE x top-%d of %d experts)\n", model.c_str(), arch_name(c.arch),
              c.n_layers, c.n_moe_layers(), c.top_k, c.n_experts);
  std::printf("context %llu tokens x %u session(s)\n", (unsigned long long)p.context, p.sessions);
  line("trunk", p.trunk, p.trunk_source);
  line("session state", p.session_state,
       "MLA " + std::string(mla_cache_format_name(p.state_per_session.mla_format)) + " " +
           std::to_string(p.state_per_session.mla_bytes_per_token) + " B/token, KDA state " +
           plan::format_bytes(p.state_per_session.kda_state_bytes) + " + conv " +
           plan::format_bytes(p.state_per_session.kda_conv_bytes) + " per session");
  line("scratch", p.scratch,
       std::string("activations, logits, attention scores, ") + std::to_string(p.threads) +
           " compute threads' expert buffers + the processes' own " +
           (p.http_front_end ? "(compute, iod, waste-serve)" : "(compute, iod; --http adds waste-serve's)"));
  line("experts in flight", p.experts_in_flight,
       std::to_string(c.top_k) + " x " + std::to_string(p.record_stride) + " B record");
  line("prompt cache", p.prompt_cache,
       o.prompt_cache == "auto" ? "checkpoints of session states: two at full context (--prompt-cache)"
                                : "checkpoints of session states (--prompt-cache " + o.prompt_cache + ")");
  if (p.vision > 0)
    line("vision", p.vision,
         "tower weights " + plan::format_bytes(p.vision_weights) + " (" + p.vision_source + ") + one image's activations " +
             plan::format_bytes(p.vision_activations) + " at " + std::to_string(o.image_patches) +
             " patches with the embedding cache; resident once an image is used");
  line("floor", p.floor, "");
  char gb[96];
  std::snprintf(gb, sizeof gb, "%.2f GB (10^9 B): ", double(p.comparable_floor) / 1e9);
  line("comparable floor", p.comparable_floor,
       std::string(gb) + "the floor without the prompt cache and the vision line (trunk, session state, scratch, "
                         "experts in flight), as the C engine's floor");
  line("working set / token", p.working_set_bytes, std::to_string(p.working_set_records) + " records");
  char ws[64];
  std::snprintf(ws, sizeof ws, "%.2f working sets", p.cache_working_sets);
  line("cache", p.cache, std::string(ws) + ", " + std::to_string(p.slots) + " slots incl. in flight");
  line("total", p.total, p.auto_budget ? "budget auto: <= 7/8 of usable RAM" : "budget " + o.budget);
  line("usable RAM", p.memory.usable, "limit from " + p.memory.source);
  if (!p.fits)
    std::printf("warning: the plan needs %s but only %s is usable; it does not fit this machine\n",
                plan::format_bytes(p.total).c_str(), plan::format_bytes(p.memory.usable).c_str());
  else if (p.auto_budget && p.cache == 0)
    std::printf("note: not even one working set fits under 7/8 of usable RAM; experts stream with no cache\n");
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Print the memory plan for a model on this machine");
  cmd->add_option("model_dir", o->model_dir, "a .waste container directory");
  cmd->add_option("--preset", o->preset, "a model preset instead of a container (kimi-linear-48b, kimi-k3, kimi-k2, ...)");
  cmd->add_option("--budget", o->budget, "total memory budget (e.g. 12G, 900M) or auto");
  cmd->add_option("--ctx", o->context, "context length per session (tokens; default compute's, 4096)");
  cmd->add_option("--sessions", o->sessions, "session states in memory at once (waste-compute --sessions; 1)");
  cmd->add_option("--threads", o->threads, "compute threads (waste-compute --threads; default: all cores, or WASTE_THREADS)")
      ->check(CLI::Range(1, limits::kMaxThreads));
  cmd->add_flag("--http", o->http, "the instance serves HTTP (waste up --http): count waste-serve's own memory");
  cmd->add_option("--prompt-cache", o->prompt_cache, "prompt-cache checkpoint bytes (0: off) or auto");
  cmd->add_option("--image-patches", o->image_patches,
                  "the most patches a request's image may take (waste-compute --image-patches): the vision line "
                  "counts one such image's activations")
      ->check(CLI::Range(kMinImagePatches, kMaxImagePatches));
  cmd->add_option("--trunk", o->trunk, "a preset's trunk matrices as waste convert --trunk (q4g default)");
  cmd->add_option("--head", o->head, "a preset's output head as waste convert --head");
  cmd->add_option("--trunk-group", o->trunk_group, "a preset's q4g/q8g matrix group as waste convert --trunk-group");
  cmd->add_option("--router", o->router, "a preset's routers as waste convert --router (f32, bf16 or q8g)");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace waste::cli
