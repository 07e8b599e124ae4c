// The tokenizer of a synthetic container: a byte-level BPE vocabulary the project generates,
// sized so the model's whole vocabulary decodes (base tokens fill [0, vocab - 256), specials sit
// at the top as in the releases), with the family's special tokens and chat format.
#pragma once
#include <string>

#include "shared/model/config.h"

namespace waste {

struct SynthTokenizer {
  std::string ranks_text;          // tokenizer.model
  std::string config_json;         // tokenizer_config.json (docs/TOKENIZER.md)
};

SynthTokenizer synth_tokenizer(const ModelConfig& c);

}  // namespace waste
