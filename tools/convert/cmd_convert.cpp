// `waste convert HF_DIR --out MODEL.waste [--experts vq3r|f32|bf16] [--trunk q4g|q8g|bf16|f32]
//  [--head FORMAT] [--trunk-group 32|128|...] [--router f32|bf16|q8g] [--vision q8g|bf16|f32|none] [--threads N]`
#include <cstdio>
#include <memory>

#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "shared/util/progress.h"
#include "tools/convert/convert.h"
#include "tools/waste/commands.h"

namespace waste::cli {

void register_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert a Hugging Face release directory to a .waste container");
  auto o = std::make_shared<ConvertOptions>();
  auto experts = std::make_shared<std::string>("vq3r");
  auto trunk = std::make_shared<std::string>("q4g");
  auto vision = std::make_shared<std::string>("q8g");
  auto head = std::make_shared<std::string>();
  auto group = std::make_shared<std::string>();
  auto router = std::make_shared<std::string>();
  auto effort = std::make_shared<std::string>("greedy");
  cmd->add_option("hf_dir", o->hf_dir, "Release directory (config.json + *.safetensors)")->required();
  cmd->add_option("--out", o->out, "Container directory to write (e.g. model.waste)")->required();
  cmd->add_option("--experts", *experts, "Routed experts: vq3r (default, 3-bit RVQ), f32 or bf16 (lossless)");
  cmd->add_option("--trunk", *trunk,
                  "Trunk matrices: q4g (default; embedding and head q8g), q8g, bf16 or f32 (everything f32)");
  cmd->add_option("--head", *head,
                  "Output head: q8g (the default with a quantized trunk; otherwise the trunk's format), q4g (half "
                  "the bytes every decoded token reads, at a logit error docs/MEASUREMENTS.md gives), bf16 or f32");
  cmd->add_option("--trunk-group", *group, trunk_group_help());
  cmd->add_option("--router", *router, router_help());
  cmd->add_option("--vision", *vision,
                  "K3 vision tower and projector: q8g (default; int8, f16 scale per 32 inputs, 28 for the "
                  "588-wide patch embedding), bf16, f32 (lossless for a BF16 release) or none (drop the tower). "
                  "Norms and the position grid are always f32. Never below 8 bits: at 4 bits the original "
                  "engine measured 17.9% error on the packed QKV and 12.6% on the position grid. Needs the "
                  "release's preprocessor_config.json unless none");
  cmd->add_option("--threads", o->threads, "Worker threads (default: all cores or WASTE_THREADS)");
  cmd->add_option("--rvq-effort", *effort, "VQ3R encoding: greedy (default) or beam (slower, lower error)");
  cmd->add_option("--train-experts", o->train_sample_experts, "Experts per layer sampled to train codebooks (16)");
  cmd->add_flag("!--no-progress", o->progress, "No progress bar");
  cmd->callback([o, experts, trunk, head, group, router, vision, effort] {
    o->expert_format = format_from_name(*experts);
    o->trunk = trunk_choice_from_name(*trunk);
    if (!head->empty()) o->head = head_format_from_name(*head);
    if (!group->empty()) o->trunk_group = trunk_group_from_text(*group);
    if (!router->empty()) o->router = router_format_from_name(*router);
    o->vision = vision_choice_from_name(*vision);
    if (*effort == "beam") o->rvq.effort = RvqEffort::Beam;
    else require(*effort == "greedy", "--rvq-effort must be greedy or beam, not '" + *effort + "'");
    ConvertReport r = convert_checkpoint(*o);
    for (const ConvertLayerReport& l : r.layers) {
      if (l.resumed) {
        std::printf("layer %3d: done by an earlier run\n", l.layer);
      } else if (l.relative_error.size() == 3) {
        std::printf("layer %3d: relative MSE gate %.4f up %.4f down %.4f (%.1fs)\n", l.layer, l.relative_error[0],
                    l.relative_error[1], l.relative_error[2], l.seconds);
      }
    }
    Container c = Container::open(o->out);
    uint64_t expert_bytes = 0;
    for (const auto& l : c.expert_layers()) expert_bytes += l.layout.stride * l.expert_count;
    const std::string tower = c.has_vision() ? ", vision tower " + format_bytes(double(c.vision_bytes())) + " (" +
                                                   *vision + ")"
                                             : "";
    std::printf("wrote %s: %s, %d layers (%d MoE x %d experts), trunk %s, experts %s (%s)%s%s in %s\n", o->out.c_str(),
                arch_name(c.config().arch), c.config().n_layers, c.config().n_moe_layers(), c.config().n_experts,
                format_bytes(double(c.trunk_bytes() - c.vision_bytes())).c_str(),
                format_bytes(double(expert_bytes)).c_str(), experts->c_str(), tower.c_str(),
                r.tokenizer ? ", tokenizer" : ", no tokenizer", format_seconds(r.seconds).c_str());
  });
}

}  // namespace waste::cli
