// `waste synth --preset NAME --out DIR [...]`
#include <cstdio>

#include "shared/container/reader.h"
#include "shared/util/progress.h"
#include "shared/model/trunk_storage.h"
#include "tools/convert/trunk_plan.h"
#include "tools/synth/synth.h"
#include "tools/waste/commands.h"

namespace waste::cli {

void register_synth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a container with random weights for any model shape");
  auto o = std::make_shared<SynthOptions>();
  auto expert_format = std::make_shared<std::string>("vq3r");
  auto trunk_format = std::make_shared<std::string>("q4g");
  auto vision = std::make_shared<std::string>("q8g");
  auto head = std::make_shared<std::string>();
  auto group = std::make_shared<std::string>();
  auto router = std::make_shared<std::string>();
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", o->preset, "Model shape: " + presets)->required();
  cmd->add_option("--out", o->out, "Container directory to write (e.g. demo.waste)")->required();
  cmd->add_option("--layers", o->overrides.layers, "Override num_hidden_layers (layer pattern kept)");
  cmd->add_option("--experts", o->overrides.experts, "Override routed experts per layer");
  cmd->add_option("--hidden", o->overrides.hidden, "Override hidden_size");
  cmd->add_option("--moe-intermediate", o->overrides.moe_intermediate, "Override moe_intermediate_size");
  cmd->add_option("--vocab", o->overrides.vocab, "Override vocab_size");
  cmd->add_option("--experts-format", *expert_format, "Expert records: vq3r (default), f32 or bf16");
  cmd->add_option("--trunk", *trunk_format, "Trunk matrices: q4g (default), q8g, bf16 or f32");
  cmd->add_option("--head", *head,
                  "Output head: q8g (the default with a quantized trunk; otherwise the trunk's format), q4g, bf16 "
                  "or f32 (as waste convert --head)");
  cmd->add_option("--trunk-group", *group, trunk_group_help() + " (as waste convert --trunk-group)");
  cmd->add_option("--router", *router, router_help() + " (as waste convert --router)");
  cmd->add_option("--vision", *vision,
                  "K3 presets' vision tower: q8g (default), bf16, f32 or none (as waste convert --vision; norms "
                  "and the position grid always f32)");
  cmd->add_option("--seed", o->seed, "Random seed (same seed, same bytes)");
  cmd->add_flag("!--no-progress", o->progress, "No progress bar");
  cmd->callback([o, expert_format, trunk_format, head, group, router, vision] {
    o->expert_format = format_from_name(*expert_format);
    o->trunk_format = trunk_choice_format(trunk_choice_from_name(*trunk_format));
    if (!head->empty()) o->head = head_format_from_name(*head);
    if (!group->empty()) o->trunk_group = trunk_group_from_text(*group);
    if (!router->empty()) o->router = router_format_from_name(*router);
    o->vision = vision_choice_from_name(*vision);
    synthesize(*o);
    Container c = Container::open(o->out);
    uint64_t experts = 0;
    for (const auto& l : c.expert_layers()) experts += l.layout.stride * l.expert_count;
    const std::string tower =
        c.has_vision() ? ", vision tower " + format_bytes(double(c.vision_bytes())) + " (" + *vision + ")" : "";
    std::printf("wrote %s: %s, %d layers (%d MoE x %d experts), trunk %s, experts %s%s\n", o->out.c_str(),
                o->preset.c_str(), c.config().n_layers, c.config().n_moe_layers(), c.config().n_experts,
                format_bytes(double(c.trunk_bytes() - c.vision_bytes())).c_str(), format_bytes(double(experts)).c_str(),
                tower.c_str());
  });
}

}  // namespace waste::cli
