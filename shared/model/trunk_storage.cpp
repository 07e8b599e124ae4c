#include "shared/model/trunk_storage.h"

#include "shared/util/error.h"

namespace waste {

namespace {

bool quantized(TensorFormat f) { return f == TensorFormat::Q4G || f == TensorFormat::Q8G; }

// A power of two times kTrunkGroup, up to kMaxTrunkGroup: the groups the SIMD paths take.
bool valid_group(uint64_t g) {
  if (g < kTrunkGroup || g > kMaxTrunkGroup || g % kTrunkGroup != 0) return false;
  const uint64_t units = g / kTrunkGroup;
  return (units & (units - 1)) == 0;
}

}  // namespace

StoredAs trunk_storage(TensorRole role, const std::vector<uint64_t>& shape, const TrunkStorage& s) {
  if (role == TensorRole::Vector) return {TensorFormat::F32, 0};
  TensorFormat f = role == TensorRole::Router ? s.router : s.matrices;
  if (role == TensorRole::Head && s.head) {
    f = *s.head;
  } else if (quantized(s.matrices) && (role == TensorRole::Embedding || role == TensorRole::Head)) {
    // The embedding and head see every token and dominate quality at 4 bits: 8 unless chosen.
    f = TensorFormat::Q8G;
  }
  if (!quantized(f)) return {f, 0};
  // A one-dimensional "matrix" has no rows to group: bf16 like any width no group fits.
  if (shape.size() < 2) return {TensorFormat::BF16, 0};
  uint64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  // Routers (q8g) keep kTrunkGroup like the head: their error is the routing decision's own.
  const uint32_t group = role == TensorRole::Matrix ? s.group : kTrunkGroup;
  if (cols % group == 0) return {f, group};
  if (cols % kTrunkGroup == 0) return {f, kTrunkGroup};
  return {TensorFormat::BF16, 0};
}

uint64_t trunk_resident_bytes(const ModelConfig& c, const TrunkStorage& s) {
  uint64_t bytes = 0;
  for (const TensorSpec& t : trunk_tensor_specs(c)) {
    if (t.role == TensorRole::Embedding) continue;  // on disk
    const StoredAs st = trunk_storage(t.role, t.shape, s);
    const uint64_t rows = t.shape.size() < 2 ? 1 : t.shape[0];
    bytes += trunk_tensor_bytes(st.format, rows, t.elements() / rows, st.group).total;
  }
  return bytes;
}

namespace {

// The --trunk-group values, "32, 64, 128, ...": the help and the error say the same list.
std::string allowed_groups() {
  std::string values;
  for (uint32_t v = kTrunkGroup; v <= kMaxTrunkGroup; v *= 2) values += (values.empty() ? "" : ", ") + std::to_string(v);
  return values;
}

}  // namespace

TrunkStorage trunk_storage_for(const ModelConfig& c, TensorFormat matrices, std::optional<TensorFormat> head,
                               std::optional<uint32_t> group, std::optional<TensorFormat> router) {
  // A group names how q4g/q8g matrices are scaled; for an f32 or bf16 trunk it would be ignored.
  require_kind(!group || quantized(matrices), ErrorKind::InvalidRequest,
               "--trunk-group applies to q4g/q8g trunk matrices, not " + std::string(format_name(matrices)));
  TrunkStorage s;
  s.matrices = matrices;
  s.head = head;
  // Large only when quantized: an f32 or bf16 trunk is asked for as lossless.
  const bool large = quantized(matrices) && trunk_resident_bytes(c, TrunkStorage{}) > kLargeTrunkBytes;
  s.group = group.value_or(large ? kLargeTrunkGroup : kTrunkGroup);
  s.router = router.value_or(large ? TensorFormat::Q8G : TensorFormat::F32);
  return s;
}

std::string trunk_storage_text(const TrunkStorage& s) {
  auto named = [](TensorFormat f, uint32_t group) {
    return std::string(format_name(f)) + (quantized(f) ? "-" + std::to_string(group) : "");
  };
  const TensorFormat head = s.head ? *s.head : quantized(s.matrices) ? TensorFormat::Q8G : s.matrices;
  return named(s.matrices, s.group) + " matrices, " + named(head, kTrunkGroup) + " head, " +
         named(s.router, kTrunkGroup) + " routers, f32 vectors";
}

std::string trunk_group_help() {
  return "Inputs per f16 scale of the q4g/q8g trunk matrices: " + allowed_groups() + ". Default " + std::to_string(kTrunkGroup) +
         ", " + std::to_string(kLargeTrunkGroup) + " for a quantized trunk over " + std::to_string(kLargeTrunkBytes >> 30) +
         " GiB (K3; 3/8 bit a weight less, at the logit error docs/MEASUREMENTS.md gives). The embedding and head keep " +
         std::to_string(kTrunkGroup) + "; a matrix whose columns the group does not divide takes " +
         std::to_string(kTrunkGroup) + ", else bf16";
}

std::string router_help() {
  return "MoE router matrices: f32, bf16 (half the bytes; exact for a BF16 release) or q8g (group " +
         std::to_string(kTrunkGroup) + "; lossy, docs/MEASUREMENTS.md gives the routing agreement). Default f32, "
         "q8g for a quantized trunk over " + std::to_string(kLargeTrunkBytes >> 30) +
         " GiB (K3: its routing error stays under the q4g matrices' own; --router bf16 keeps a BF16 release's routers exact)";
}

TensorFormat head_format_from_name(const std::string& name) {
  if (name == "q8g") return TensorFormat::Q8G;
  if (name == "q4g") return TensorFormat::Q4G;
  if (name == "bf16") return TensorFormat::BF16;
  if (name == "f32") return TensorFormat::F32;
  throw Error("--head must be q8g, q4g, bf16 or f32, not '" + name + "'", ErrorKind::InvalidRequest, "--head");
}

uint32_t trunk_group_from_text(const std::string& text) {
  uint64_t g = 0;
  bool digits = !text.empty() && text.size() <= 5;
  for (char ch : text) digits = digits && ch >= '0' && ch <= '9';
  if (digits) g = std::stoull(text);
  if (!digits || !valid_group(g)) {
    throw Error("--trunk-group must be one of " + allowed_groups() + ", not '" + text + "'", ErrorKind::InvalidRequest,
                "--trunk-group");
  }
  return uint32_t(g);
}

TensorFormat router_format_from_name(const std::string& name) {
  if (name == "f32") return TensorFormat::F32;
  if (name == "bf16") return TensorFormat::BF16;
  if (name == "q8g") return TensorFormat::Q8G;
  throw Error("--router must be f32, bf16 or q8g, not '" + name + "'", ErrorKind::InvalidRequest, "--router");
}

}  // namespace waste
