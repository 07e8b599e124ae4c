// How a trunk tensor is stored, by role: the one rule `waste convert` and `waste synth` share,
// and the one the planner sums for a preset (docs/FORMAT.md). Vectors are always f32 (norms are
// sensitive and small). Routers are f32 unless chosen bf16 or q8g (--router): they are 2.36 GB
// of f32 in K3 (896 experts x 7168 x 92 layers), and a routing decision only needs their
// ranking right (docs/MEASUREMENTS.md has the measured top-k agreement of each). A quantized
// trunk (q4g or q8g matrices) keeps the embedding at q8g and the output head at q8g unless the
// head is chosen apart (--head): the head is the largest matrix every decoded token reads in full (vocab x
// hidden), so its bytes are a decode cost of their own, while its error shows directly in the
// logits (docs/MEASUREMENTS.md has both for q4g).
//
// Groups: the matrices' q4g/q8g scale group is chosen (--trunk-group; by default kTrunkGroup,
// or kLargeTrunkGroup for a large trunk, below).
// An f16 scale per 32 inputs costs 0.5 bit per weight, one per 128 costs 0.125, which on K3's
// ~54 G trunk matrix weights is 2.5 GB. The embedding and the head keep kTrunkGroup: they are
// 8-bit, where the scale is a smaller share, and the head's error is the logits' own. A matrix
// whose columns are not a multiple of its group takes kTrunkGroup when that divides them (finer
// groups only cost bytes, never accuracy), else bf16.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/model/config.h"
#include "shared/model/tensors.h"

namespace waste {

// Columns per quantization group of the trunk's q4g/q8g tensors unless --trunk-group says
// otherwise (and always for the embedding and the head).
constexpr uint32_t kTrunkGroup = 32;
// The widest --trunk-group: the SIMD int8 paths handle 32 x a power of two (matvec_int8.h,
// int8_simd_handles) and the kernel tests cover up to 1024.
constexpr uint32_t kMaxTrunkGroup = 1024;

// A quantized trunk over kLargeTrunkBytes at the small-model defaults (q4g-32, f32 routers) is
// "large" (K3: 31.60 GiB; K2 6.60, Kimi-Linear 1.09): there every GiB of trunk is a GiB the expert
// cache of a 64 GB machine does not get, so by default its matrices take kLargeTrunkGroup and its
// routers q8g. Measured (docs/MEASUREMENTS.md 2026-12-05): group 128 adds ~7% to q4g's own logit
// error for 2.35 GiB less on K3. q8g routers (-1.62 GiB against f32, -0.52 against bf16) change one
// routing set in 20 on the K3 fixture with f32 matrices, but on top of q4g-128 matrices the logit
// error and the routing agreement are those of bf16 routers within the runs' noise on all five
// models measured (the matrices' own error is ten times theirs); that puts K3's floor at 4K
// context under the original C engine's (which stores its routers at 4 bits). bf16 routers are
// exact on a BF16 release: --router bf16 keeps them so.
constexpr uint64_t kLargeTrunkBytes = 16ull << 30;
constexpr uint32_t kLargeTrunkGroup = 128;

struct TrunkStorage {
  TensorFormat matrices = TensorFormat::Q4G;  // --trunk
  std::optional<TensorFormat> head;           // --head; nullopt: q8g for a quantized trunk, else as the matrices
  uint32_t group = kTrunkGroup;               // --trunk-group: the matrices' q4g/q8g group
  TensorFormat router = TensorFormat::F32;    // --router: f32, bf16 or q8g (group kTrunkGroup)
};

// A tensor's stored format and, for q4g/q8g, its group (0 otherwise).
struct StoredAs {
  TensorFormat format = TensorFormat::F32;
  uint32_t group = 0;
};

// `shape` is the release shape; a tensor of one dimension is one row of shape[0] columns (a
// quantized format falls back for it like for any width its group does not divide).
StoredAs trunk_storage(TensorRole role, const std::vector<uint64_t>& shape, const TrunkStorage& storage);

// The storage of a model's trunk from the flags given (nullopt: not given): --trunk-group and
// --router default by the model's size (kLargeTrunkBytes), the rest as TrunkStorage's defaults.
TrunkStorage trunk_storage_for(const ModelConfig& c, TensorFormat matrices, std::optional<TensorFormat> head,
                               std::optional<uint32_t> group, std::optional<TensorFormat> router);

// Exact bytes of the text trunk resident in RAM when stored under `storage`: every tensor of
// trunk_tensor_specs but the embedding (one row is read from disk per token), at its
// trunk_tensor_bytes, 64-byte padding between tensors excluded (as the manifest counts it).
uint64_t trunk_resident_bytes(const ModelConfig& c, const TrunkStorage& storage);
// "q4g-128 matrices, q8g-32 head, bf16 routers, f32 vectors": what trunk_resident_bytes counted.
std::string trunk_storage_text(const TrunkStorage& storage);

// The help text of --trunk-group and --router (convert, synth and plan say the same).
std::string trunk_group_help();
std::string router_help();

// --head's value: q8g, q4g, bf16 or f32; anything else is an Error naming --head.
TensorFormat head_format_from_name(const std::string& name);
// --trunk-group's value: 32 times a power of two up to kMaxTrunkGroup; else an Error naming it.
uint32_t trunk_group_from_text(const std::string& text);
// --router's value: f32, bf16 or q8g; anything else is an Error naming --router.
TensorFormat router_format_from_name(const std::string& name);

}  // namespace waste
