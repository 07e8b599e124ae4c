#include "tools/convert/expert_payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/model/tensors.h"
#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

ExpertWeights read_expert(const Checkpoint& ck, int layer, int expert) {
  const ModelConfig& c = ck.config();
  const ExpertNames n = expert_tensor_names(c, layer, expert);
  ExpertWeights w;
  w.gate = ck.read_weight(c.tensor_prefix + n.gate);
  w.up = ck.read_weight(c.tensor_prefix + n.up);
  w.down = ck.read_weight(c.tensor_prefix + n.down);
  const size_t want = size_t(c.expert_hidden()) * size_t(c.moe_intermediate);
  const std::pair<const std::string*, const std::vector<float>*> parts[3] = {
      {&n.gate, &w.gate}, {&n.up, &w.up}, {&n.down, &w.down}};
  for (const auto& [name, values] : parts) {
    require(values->size() == want, ck.dir() + ": tensor " + c.tensor_prefix + *name + " has " +
                                        std::to_string(values->size()) + " values, the config's expert shape needs " +
                                        std::to_string(want) + " (" + std::to_string(c.moe_intermediate) + " x " +
                                        std::to_string(c.expert_hidden()) + ")");
    // A NaN or Inf weight would make every logit of a token routed here NaN: refused by name.
    const auto bad = std::find_if(values->begin(), values->end(), [](float x) { return !std::isfinite(x); });
    if (bad != values->end()) {
      const size_t at = size_t(bad - values->begin()), cols = want / size_t(values == &w.down ? c.expert_hidden() : c.moe_intermediate);
      throw Error(ck.dir() + ": tensor " + c.tensor_prefix + *name + " (layer " + std::to_string(layer) + ", expert " +
                  std::to_string(expert) + ") holds " + (std::isnan(*bad) ? "NaN" : "Inf") + " at [" +
                  std::to_string(at / cols) + ", " + std::to_string(at % cols) + "]");
    }
  }
  return w;
}

void fill_lossless_payload(const RecordLayout& l, const ExpertWeights& w, uint8_t* payload) {
  std::memset(payload, 0, l.payload_bytes);
  const std::pair<uint32_t, const std::vector<float>*> parts[3] = {
      {l.gate_offset, &w.gate}, {l.up_offset, &w.up}, {l.down_offset, &w.down}};
  for (const auto& [offset, values] : parts) {
    uint8_t* dst = payload + (offset - kRecordHeaderBytes);
    if (l.format == TensorFormat::F32) {
      std::memcpy(dst, values->data(), values->size() * sizeof(float));
    } else {
      require(l.format == TensorFormat::BF16, "lossless expert records are f32 or bf16");
      for (size_t i = 0; i < values->size(); ++i) {
        const uint16_t h = f32_to_bf16((*values)[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
}

std::array<EncodeStats, 3> fill_vq3r_payload(const RecordLayout& l, const ExpertWeights& w, const float* books,
                                             const RvqOptions& opt, uint8_t* payload) {
  std::memset(payload, 0, l.payload_bytes);
  const int H = int(l.hidden), I = int(l.intermediate);
  auto* scales = reinterpret_cast<uint16_t*>(payload + (l.scales_offset - kRecordHeaderBytes));
  std::array<EncodeStats, 3> stats;
  // Encoder errors name a row; say which matrix it is in.
  auto encode = [&](const char* kind, auto&& f) {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(std::string(kind) + ": " + e.what());
    }
  };
  stats[0] = encode("gate_proj", [&] {
    return encode_matrix(w.gate.data(), I, H, books, opt, payload + (l.gate_offset - kRecordHeaderBytes), scales);
  });
  stats[1] = encode("up_proj", [&] {
    return encode_matrix(w.up.data(), I, H, books + kCodebookFloats, opt, payload + (l.up_offset - kRecordHeaderBytes),
                         scales + I);
  });
  stats[2] = encode("down_proj", [&] {
    return encode_matrix(w.down.data(), H, I, books + 2 * kCodebookFloats, opt,
                         payload + (l.down_offset - kRecordHeaderBytes), scales + 2 * I);
  });
  return stats;
}

std::vector<float> train_layer_codebooks(const Checkpoint& ck, int layer, int sample_experts, const RvqOptions& opt) {
  const ModelConfig& c = ck.config();
  const int H = c.expert_hidden(), I = c.moe_intermediate;
  const int n_sample = std::max(1, std::min(sample_experts, c.n_experts));
  // Rows and widths per kind: gate and up are [I, H], down is [H, I].
  const int rows[3] = {I, I, H}, cols[3] = {H, H, I};
  std::vector<float> sample[3];
  size_t rows_per_expert[3];
  for (int k = 0; k < 3; ++k) {
    // Enough rows that the sample covers the trainer's vector cap, spread over the experts.
    const size_t target_rows = std::max<size_t>(1, opt.max_train_vectors * kVqDim / size_t(cols[k]));
    rows_per_expert[k] = std::min<size_t>(size_t(rows[k]), (target_rows + size_t(n_sample) - 1) / size_t(n_sample));
    sample[k].reserve(rows_per_expert[k] * size_t(n_sample) * size_t(cols[k]));
  }
  for (int i = 0; i < n_sample; ++i) {
    const int expert = int(int64_t(i) * c.n_experts / n_sample);  // evenly spread, deterministic
    ExpertWeights w = read_expert(ck, layer, expert);
    const std::vector<float>* mats[3] = {&w.gate, &w.up, &w.down};
    for (int k = 0; k < 3; ++k) {
      for (size_t j = 0; j < rows_per_expert[k]; ++j) {
        const size_t r = j * size_t(rows[k]) / rows_per_expert[k];
        const float* row = mats[k]->data() + r * size_t(cols[k]);
        sample[k].insert(sample[k].end(), row, row + cols[k]);
      }
    }
  }
  std::vector<float> books(3 * kCodebookFloats);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> b = train_codebooks(sample[k].data(), sample[k].size() / size_t(cols[k]), cols[k], opt);
    require(b.size() == kCodebookFloats, "train_codebooks returned a wrong-sized codebook");
    std::copy(b.begin(), b.end(), books.begin() + ptrdiff_t(k) * ptrdiff_t(kCodebookFloats));
  }
  return books;
}

}  // namespace waste
