// Model shape presets for `waste synth` and `waste plan --preset`: config.json text in the
// release's own layout for the real shapes (kimi-linear-48b, kimi-k3, kimi-k2) and a tiny
// shape per family (tiny-kimi-linear, tiny-k3, tiny-k2), with overrides applied.
#pragma once
#include <string>
#include <vector>

namespace waste {

struct PresetOverrides {
  int layers = 0;             // num_hidden_layers (0 = keep); layer lists are cut to fit
  int experts = 0;            // routed experts per layer
  int hidden = 0;             // hidden_size
  int moe_intermediate = 0;   // moe_intermediate_size
  int vocab = 0;              // vocab_size
};

std::vector<std::string> preset_names();
// Release-layout config.json for the preset; throws Error for an unknown name.
std::string preset_config_json(const std::string& name, const PresetOverrides& overrides = {});

}  // namespace waste
