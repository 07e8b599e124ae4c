#include "tools/convert/trunk_plan.h"

#include "shared/util/error.h"

namespace waste {

namespace {


// Whether a ".weight" tensor (or its quantized ".weight_packed" form) exists under `base`.
bool has_weight(const Checkpoint& ck, const std::string& base) {
  return ck.has(base + ".weight") || ck.has(base + ".weight_packed");
}

}  // namespace

TrunkChoice trunk_choice_from_name(const std::string& name) {
  if (name == "q4g") return TrunkChoice::Q4G;
  if (name == "q8g") return TrunkChoice::Q8G;
  if (name == "bf16") return TrunkChoice::BF16;
  if (name == "f32") return TrunkChoice::F32;
  throw Error("--trunk must be q4g, q8g, bf16 or f32, not '" + name + "'", ErrorKind::InvalidRequest, "--trunk");
}

const char* trunk_choice_name(TrunkChoice t) {
  switch (t) {
    case TrunkChoice::Q4G: return "q4g";
    case TrunkChoice::Q8G: return "q8g";
    case TrunkChoice::BF16: return "bf16";
    case TrunkChoice::F32: return "f32";
  }
  return "?";
}

TensorFormat trunk_choice_format(TrunkChoice choice) {
  switch (choice) {
    case TrunkChoice::Q4G: return TensorFormat::Q4G;
    case TrunkChoice::Q8G: return TensorFormat::Q8G;
    case TrunkChoice::BF16: return TensorFormat::BF16;
    case TrunkChoice::F32: return TensorFormat::F32;
  }
  throw Error("unknown trunk choice");
}

std::vector<TrunkItem> plan_trunk(const Checkpoint& ck, const TrunkStorage& storage) {
  const ModelConfig& c = ck.config();
  std::vector<TrunkItem> out;
  for (const TensorSpec& spec : trunk_tensor_specs(c)) {
    TrunkItem item;
    item.spec = spec;
    const std::string full = c.tensor_prefix + spec.name;
    // Matrices may be stored quantized (FP8 ".weight" + scale, or ".weight_packed"):
    // read them through read_weight by base name; everything else as stored.
    const bool is_weight = full.ends_with(".weight");
    const std::string base = is_weight ? full.substr(0, full.size() - 7) : full;
    if (is_weight && has_weight(ck, base)) {
      item.via_read_weight = true;
      item.source = base;
      item.shape = ck.weight_shape(base);
    } else if (ck.has(full)) {
      item.source = full;
      item.shape = ck.shape(full);
    } else {
      throw Error(ck.dir() + ": checkpoint lacks tensor '" + full + "' (shape " + shape_text(spec.shape) +
                  " expected for " + arch_name(c.arch) + ")");
    }
    const bool ok = spec.padded ? (item.shape.size() == 1 && item.shape[0] >= spec.min_len) : item.shape == spec.shape;
    require(ok, ck.dir() + ": tensor '" + full + "' has shape " + shape_text(item.shape) + ", the config needs " +
                    shape_text(spec.shape));
    const StoredAs stored = trunk_storage(spec.role, item.shape, storage);
    item.format = stored.format;
    item.group = stored.group;
    out.push_back(std::move(item));
  }
  return out;
}

void check_expert_tensors(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  const uint64_t H = uint64_t(c.expert_hidden()), I = uint64_t(c.moe_intermediate);
  for (int layer : c.moe_layers()) {
    for (int e = 0; e < c.n_experts; ++e) {
      const ExpertNames n = expert_tensor_names(c, layer, e);
      const std::pair<std::string, std::vector<uint64_t>> want[3] = {
          {n.gate, {I, H}}, {n.up, {I, H}}, {n.down, {H, I}}};
      for (const auto& [name, shape] : want) {
        const std::string base = c.tensor_prefix + name;
        require(has_weight(ck, base), ck.dir() + ": checkpoint lacks expert tensor '" + base + ".weight' (or '" +
                                          base + ".weight_packed')");
        const std::vector<uint64_t> got = ck.weight_shape(base);
        require(got == shape, ck.dir() + ": expert tensor '" + base + "' has shape " + shape_text(got) +
                                  ", the config needs " + shape_text(shape));
      }
    }
  }
}

}  // namespace waste
