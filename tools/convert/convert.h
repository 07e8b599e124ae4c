// `waste convert`: a Hugging Face release directory (Kimi-Linear, K3, DeepSeek-V3/K2, in any of
// their storage formats) to a .waste container. Resumable: a rerun after a crash skips the
// finished trunk and expert banks and writes byte-identical files. Memory: one trunk tensor,
// or per worker one expert (plus, for VQ3R, one layer's training sample), at a time.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/rvq/encoder.h"
#include "tools/convert/trunk_plan.h"
#include "tools/convert/vision_plan.h"

namespace waste {

struct ConvertOptions {
  std::string hf_dir, out;
  TensorFormat expert_format = TensorFormat::VQ3R;  // vq3r, f32 or bf16
  TrunkChoice trunk = TrunkChoice::Q4G;
  std::optional<TensorFormat> head;  // --head; nullopt: q8g with a quantized trunk (trunk_storage.h)
  // --trunk-group, --router; nullopt: the model's default (trunk_storage_for).
  std::optional<uint32_t> trunk_group;
  std::optional<TensorFormat> router;
  VisionChoice vision = VisionChoice::Q8G;  // K3's vision tower and projector (vision_plan.h)
  unsigned threads = 0;  // 0: ThreadPool::global()
  bool progress = true;
  RvqOptions rvq;              // `pool` is set by the converter
  int train_sample_experts = 16;  // experts per layer whose rows train the codebooks
  // Memory allowed for experts being encoded at once (one f32 copy per worker).
  uint64_t expert_memory_budget = 4ull << 30;
  // Tests: throw Error once this many layers were written in this run (a simulated crash).
  int crash_after_layers = -1;
};

struct ConvertLayerReport {
  int layer = 0;
  bool resumed = false;               // finished by an earlier run, not redone
  std::vector<float> relative_error;  // gate, up, down relative MSE (vq3r)
  double seconds = 0;
};

struct ConvertReport {
  bool trunk_resumed = false;
  bool tokenizer = false;
  size_t vision_tensors = 0;  // 0: no vision tower in the container
  std::vector<ConvertLayerReport> layers;
  double seconds = 0;
};

ConvertReport convert_checkpoint(const ConvertOptions& options);

}  // namespace waste
