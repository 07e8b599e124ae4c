#include "tests/support/fixture_container.h"

#include <cstring>
#include <vector>

#include "shared/container/writer.h"
#include "shared/model/tensors.h"
#include "shared/util/half.h"

namespace waste::test {
namespace {

// A record's f32 values in the container's expert format, at dst.
void put_values(const std::vector<float>& v, TensorFormat f, uint8_t* dst) {
  if (f == TensorFormat::F32) {
    std::memcpy(dst, v.data(), v.size() * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
}

bool ends_with_weight(const std::string& name) {
  return name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

}  // namespace

void write_fixture_container(const Checkpoint& ck, const std::string& out, FixtureStorage storage,
                             const std::string& created_by) {
  const bool lossless = storage == FixtureStorage::Lossless;
  const ModelConfig& c = ck.config();
  ContainerWriter w(out, ck.config_json(), WriterOptions{created_by, false});
  w.begin_trunk();
  for (const TensorSpec& spec : trunk_tensor_specs(c)) {
    const std::string full = c.tensor_prefix + spec.name;
    std::vector<uint64_t> shape;
    const bool vector = spec.role == TensorRole::Vector;
    // A matrix by its base name through read_weight, which picks whichever quantised form the
    // checkpoint holds and dequantises it exactly; a vector (or another tensor) by its full name.
    std::vector<float> v = (!vector && ends_with_weight(spec.name))
                               ? ck.read_weight(full.substr(0, full.size() - 7), &shape)
                               : ck.read_tensor(full, &shape);
    const bool keep_f32 = !lossless || vector || spec.role == TensorRole::Router;
    w.add_tensor(spec.name, shape, v.data(), keep_f32 ? TensorFormat::F32 : TensorFormat::BF16);
  }
  w.end_trunk();
  const TensorFormat experts = lossless ? TensorFormat::BF16 : TensorFormat::F32;
  for (int L : c.moe_layers()) {
    w.begin_layer(L, experts, uint32_t(c.expert_hidden()), uint32_t(c.moe_intermediate), nullptr);
    const RecordLayout& lay = w.layout();
    std::vector<uint8_t> payload(lay.payload_bytes, 0);
    for (int e = 0; e < c.n_experts; ++e) {
      const ExpertNames n = expert_tensor_names(c, L, e);
      put_values(ck.read_weight(c.tensor_prefix + n.gate), experts, &payload[lay.gate_offset - kRecordHeaderBytes]);
      put_values(ck.read_weight(c.tensor_prefix + n.up), experts, &payload[lay.up_offset - kRecordHeaderBytes]);
      put_values(ck.read_weight(c.tensor_prefix + n.down), experts, &payload[lay.down_offset - kRecordHeaderBytes]);
      w.write_expert(uint32_t(e), payload.data());
    }
    w.end_layer();
  }
  w.finish();
}

}  // namespace waste::test
