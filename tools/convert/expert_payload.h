// One routed expert of a checkpoint turned into a container record payload (the bytes after
// the record header, layout from shared/container/format.h): lossless f32/bf16 matrices or
// VQ3R codes + f16 row scales. Also the per-layer VQ3R codebook training on a sample.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "shared/container/format.h"
#include "shared/hf/checkpoint.h"
#include "shared/rvq/encoder.h"

namespace waste {

struct ExpertWeights {
  std::vector<float> gate, up, down;  // [I, H], [I, H], [H, I] row-major f32
};

// Reads (and dequantises) one expert's three matrices.
ExpertWeights read_expert(const Checkpoint& ck, int layer, int expert);

// f32 or bf16 record payload; `payload` holds layout.payload_bytes bytes.
void fill_lossless_payload(const RecordLayout& layout, const ExpertWeights& w, uint8_t* payload);

// VQ3R payload against `books` (gate, up, down books, 3 x kCodebookFloats). Returns the
// squared error and energy per matrix kind (gate, up, down).
std::array<EncodeStats, 3> fill_vq3r_payload(const RecordLayout& layout, const ExpertWeights& w, const float* books,
                                             const RvqOptions& opt, uint8_t* payload);

// Trains gate, up and down codebooks for a layer on rows sampled from up to `sample_experts`
// experts spread evenly over the layer (about opt.max_train_vectors vectors per kind).
// Memory: one expert plus the sample. Deterministic for given inputs and options.
std::vector<float> train_layer_codebooks(const Checkpoint& ck, int layer, int sample_experts, const RvqOptions& opt);

}  // namespace waste
