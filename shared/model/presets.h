// Model shape presets for `waste synth` and `waste plan --preset`: config.json text in the
// release's own layout for the real shapes (kimi-linear-48b, kimi-k3, kimi-k2) and a tiny
// shape per family (tiny-kimi-linear, tiny-k3, tiny-k2), with overrides applied.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace waste {

// Each field is the value of a `waste synth` flag; not given (nullopt) keeps the preset's value.
// A value given must be at least 1: preset_config_json throws Error naming the flag otherwise,
// instead of quietly keeping the preset's value (0 used to mean "keep", so --layers 0 and
// --experts -1 wrote the preset's defaults without a word).
struct PresetOverrides {
  std::optional<int> layers;            // --layers: num_hidden_layers; layer lists are cut to fit
  std::optional<int> experts;           // --experts: routed experts per layer
  std::optional<int> hidden;            // --hidden: hidden_size
  std::optional<int> moe_intermediate;  // --moe-intermediate: moe_intermediate_size
  std::optional<int> vocab;             // --vocab: vocab_size
};

std::vector<std::string> preset_names();
// Release-layout config.json for the preset; throws Error for an unknown name.
std::string preset_config_json(const std::string& name, const PresetOverrides& overrides = {});

}  // namespace waste
