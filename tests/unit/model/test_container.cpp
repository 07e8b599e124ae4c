// The forward pass on a .waste container: trunk resident in RAM (BF16 matrices, f32 vectors),
// embedding read a row per token from trunk.bin, experts read as BF16 records. The fixtures'
// weights are bf16 (MXFP4 for K3's experts, also exact in bf16), so this storage is lossless
// and the reference tolerance applies unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "compute/model/container_weights.h"
#include "compute/model/model.h"
#include "shared/container/reader.h"
#include "shared/container/writer.h"
#include "shared/hf/checkpoint.h"
#include "shared/model/tensors.h"
#include "shared/util/file.h"
#include "shared/util/half.h"

using namespace waste;

namespace {

void write_bf16(const std::vector<float>& v, uint8_t* dst) {
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
}

// A lossless container of a bf16 fixture: matrices BF16, vectors f32, experts BF16.
void write_container(const Checkpoint& ck, const std::string& out) {
  const ModelConfig& c = ck.config();
  ContainerWriter w(out, ck.config_json(), WriterOptions{"unit-model test", false});
  w.begin_trunk();
  for (const TensorSpec& spec : trunk_tensor_specs(c)) {
    const std::string full = c.tensor_prefix + spec.name;
    std::vector<uint64_t> shape;
    const bool vector = spec.role == TensorRole::Vector;
    const bool weight = spec.name.size() > 7 && spec.name.compare(spec.name.size() - 7, 7, ".weight") == 0;
    std::vector<float> v = (!vector && weight) ? ck.read_weight(full.substr(0, full.size() - 7), &shape)
                                               : ck.read_tensor(full, &shape);
    const TensorFormat f = (vector || spec.role == TensorRole::Router) ? TensorFormat::F32 : TensorFormat::BF16;
    w.add_tensor(spec.name, shape, v.data(), f);
  }
  w.end_trunk();
  for (int L : c.moe_layers()) {
    w.begin_layer(L, TensorFormat::BF16, uint32_t(c.expert_hidden()), uint32_t(c.moe_intermediate), nullptr);
    const RecordLayout& lay = w.layout();
    std::vector<uint8_t> payload(lay.payload_bytes, 0);
    for (int e = 0; e < c.n_experts; ++e) {
      const ExpertNames n = expert_tensor_names(c, L, e);
      write_bf16(ck.read_weight(c.tensor_prefix + n.gate), &payload[lay.gate_offset - kRecordHeaderBytes]);
      write_bf16(ck.read_weight(c.tensor_prefix + n.up), &payload[lay.up_offset - kRecordHeaderBytes]);
      write_bf16(ck.read_weight(c.tensor_prefix + n.down), &payload[lay.down_offset - kRecordHeaderBytes]);
      w.write_expert(uint32_t(e), payload.data());
    }
    w.end_layer();
  }
  w.finish();
}

}  // namespace

TEST_CASE("forward on a lossless container (BF16 trunk and experts) matches the reference logits") {
  const char* root = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(root != nullptr);
  const auto tmp = std::filesystem::temp_directory_path() / ("waste-unit-model-" + std::to_string(::getpid()));
  for (const char* name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    const std::string dir = std::string(root) + "/fixtures/" + name;
    const std::string out = (tmp / name).string();
    {
      Checkpoint ck = Checkpoint::open(dir);
      write_container(ck, out);
    }
    Container container = Container::open(out);
    Trunk trunk(container, {"model.embed_tokens.weight"}, true);
    TrunkWeights weights(container, trunk);
    ContainerExperts experts(container);
    Model model = Model::create(weights, experts, container.config());

    const auto ids =
        nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>();
    const std::vector<uint8_t> ref_bytes = read_file_bytes(dir + "/reference_logits.f32", 16 << 20);
    const int64_t V = container.config().vocab, n = int64_t(ids.size());
    REQUIRE(int64_t(ref_bytes.size()) == n * V * 4);
    std::vector<float> ref(size_t(n * V)), logits(size_t(n * V));
    std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
    Session s = model.new_session(n);
    model.forward(s, ids, logits.data(), LogitRows::All);
    double diff = 0;
    int argmax_mismatch = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* a = &logits[size_t(t * V)];
      const float* b = &ref[size_t(t * V)];
      for (int64_t i = 0; i < V; ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      if (std::max_element(a, a + V) - a != std::max_element(b, b + V) - b) ++argmax_mismatch;
    }
    MESSAGE(std::string(name), " from a BF16 container: max |logit diff| ", diff);
    CHECK(diff <= 1e-3);
    CHECK(argmax_mismatch == 0);
  }
  std::filesystem::remove_all(tmp);
}
