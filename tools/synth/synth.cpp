#include "tools/synth/synth.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "shared/container/writer.h"
#include "shared/model/tensors.h"
#include "shared/model/trunk_storage.h"
#include "shared/util/error.h"
#include "shared/util/half.h"
#include "shared/util/progress.h"
#include "shared/util/random.h"
#include "shared/util/thread_pool.h"
#include "tools/synth/random_weights.h"
#include "tools/synth/synth_tokenizer.h"
#include "tools/synth/synth_vision.h"

namespace waste {

namespace {

// Values of the small f32 tensors, chosen so the random model's forward pass stays in a
// sane numeric range (norm weights 1, decays in (0, 1), modest conv taps).
double vector_value(const std::string& name, Rng& rng) {
  if (name.ends_with("norm.weight")) return 1.0;
  if (name.ends_with("e_score_correction_bias")) return kSynthRouterBiasStd * rng.normal();
  if (name.ends_with("A_log")) return std::log(1.0 + 15.0 * rng.uniform());
  if (name.ends_with("dt_bias")) return 0.1 * rng.normal();
  if (name.ends_with("conv1d.weight")) return 0.3 * rng.normal();
  if (name.ends_with("res_proj.weight")) return 0.05 * rng.normal();
  return 0.02 * rng.normal();
}

uint64_t stored_bytes(const TensorSpec& spec, const TrunkStorage& storage) {
  const uint64_t rows = spec.shape.size() == 1 ? 1 : spec.shape[0];
  const StoredAs st = trunk_storage(spec.role, spec.shape, storage);
  return trunk_tensor_bytes(st.format, rows, spec.elements() / rows, st.group).total;
}

// The text model's tensors, then (when `vision` is given) the vision tower's, in one trunk.
void write_trunk(ContainerWriter& w, const SynthOptions& o, const TrunkStorage& storage, const VisionConfig* vision,
                 Progress& progress) {
  const ModelConfig& c = w.config();
  Rng rng(o.seed, 1);
  w.begin_trunk();
  for (const TensorSpec& spec : trunk_tensor_specs(c)) {
    const uint64_t n = spec.elements();
    const uint64_t rows = spec.shape[0];
    const uint64_t cols = n / rows;
    // The converter's rule (shared/model/trunk_storage.h).
    const StoredAs st = trunk_storage(spec.role, spec.shape, storage);
    const TensorFormat f = st.format;
    if (spec.role == TensorRole::Vector || spec.role == TensorRole::Router) {
      // Drawn in f32 whatever the stored format, so a bf16 router is the f32 one rounded
      // (same seed, same routing up to bf16's error).
      std::vector<float> v(n);
      double router_std = 1.0 / std::sqrt(double(cols));
      for (auto& x : v) x = float(spec.role == TensorRole::Router ? router_std * rng.normal() : vector_value(spec.name, rng));
      w.add_tensor(spec.name, spec.shape, v.data(), f, st.group);
      progress.add(stored_bytes(spec, storage));
      continue;
    }
    // Embedding rows have unit scale (like a real model's); matrices keep activations unit-scale.
    const double std_dev = spec.role == TensorRole::Embedding ? 1.0 : 1.0 / std::sqrt(double(cols));
    if (f == TensorFormat::Q4G || f == TensorFormat::Q8G) {
      auto bytes = random_quantized(f, rows, cols, st.group, std_dev, rng);
      w.add_tensor_bytes(spec.name, spec.shape, f, st.group, bytes.data(), bytes.size());
      progress.add(bytes.size());
    } else {
      std::vector<float> v(n);
      for (auto& x : v) x = float(std_dev * rng.normal());
      w.add_tensor(spec.name, spec.shape, v.data(), f);
      progress.add(n * (f == TensorFormat::F32 ? 4 : 2));
    }
  }
  if (vision) write_synth_vision(w, *vision, o.vision, o.seed, progress);
  w.end_trunk();
}

// Codebooks with shrinking stages (each stage codes what the previous left), unit-variance rows
// after the row scale: std of stage s is 0.5^s, normalised over the three stages.
std::vector<float> random_codebooks(Rng& rng) {
  std::vector<float> books(3 * kCodebookFloats);
  const double total = std::sqrt(1.0 + 0.25 + 0.0625);
  for (int m = 0; m < 3; ++m)
    for (int s = 0; s < kVqStages; ++s)
      for (int e = 0; e < kVqEntries * kVqDim; ++e)
        books[size_t(m) * kCodebookFloats + size_t(s) * kVqEntries * kVqDim + size_t(e)] =
            float(std::pow(0.5, s) / total * rng.normal());
  return books;
}

// One expert's payload (everything after the record header), deterministic in (seed, layer, expert).
void random_expert_payload(const RecordLayout& l, uint64_t seed, int layer, uint32_t expert, uint8_t* payload) {
  Rng rng(seed, (uint64_t(layer) << 32) | expert);
  std::memset(payload, 0, l.payload_bytes);
  auto fill_matrix = [&](uint32_t offset, int rows, int cols) {
    uint8_t* p = payload + (offset - kRecordHeaderBytes);
    const double std_dev = 1.0 / std::sqrt(double(cols));
    if (l.format == TensorFormat::VQ3R) {
      size_t n = vq3r_code_bytes(rows, cols);
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        uint64_t r = rng.next();
        std::memcpy(p + i, &r, 8);
      }
      for (; i < n; ++i) p[i] = uint8_t(rng.next());
    } else if (l.format == TensorFormat::F32) {
      auto* f = reinterpret_cast<float*>(p);
      for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) f[i] = float(std_dev * rng.normal());
    } else {
      auto* h = reinterpret_cast<uint16_t*>(p);
      for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) h[i] = f32_to_bf16(float(std_dev * rng.normal()));
    }
  };
  const int H = int(l.hidden), I = int(l.intermediate);
  fill_matrix(l.gate_offset, I, H);
  fill_matrix(l.up_offset, I, H);
  fill_matrix(l.down_offset, H, I);
  if (l.format == TensorFormat::VQ3R) {
    // Codebook rows have unit variance per element, so the row scale alone sets the std.
    auto* scales = reinterpret_cast<uint16_t*>(payload + (l.scales_offset - kRecordHeaderBytes));
    for (int r = 0; r < 2 * I; ++r) scales[r] = f32_to_f16(float(1.0 / std::sqrt(double(H)) * (0.8 + 0.4 * rng.uniform())));
    for (int r = 0; r < H; ++r) scales[2 * I + r] = f32_to_f16(float(1.0 / std::sqrt(double(I)) * (0.8 + 0.4 * rng.uniform())));
  }
}

}  // namespace

void synthesize(const SynthOptions& o) {
  std::string config_json = preset_config_json(o.preset, o.overrides);
  std::optional<VisionConfig> vision;
  if (o.vision != VisionChoice::None && config_has_vision(config_json))
    vision = VisionConfig::from_json(config_json, "preset " + o.preset);
  // The storage is decided (and a bad combination of flags refused) before the writer makes
  // the output directory, so a refused run leaves nothing behind.
  const TrunkStorage storage = trunk_storage_for(ModelConfig::from_json(config_json, "preset " + o.preset),
                                                 o.trunk_format, o.head, o.trunk_group, o.router);
  WriterOptions wo;
  wo.synthetic = true;
  wo.created_by = "waste synth --preset " + o.preset + " --seed " + std::to_string(o.seed);
  if (vision) wo.created_by += std::string(" --vision ") + vision_choice_name(o.vision);
  ContainerWriter w(o.out, config_json, wo);
  const ModelConfig& c = w.config();
  const auto moe_layers = c.moe_layers();
  RecordLayout layout = record_layout(o.expert_format, uint32_t(c.expert_hidden()), uint32_t(c.moe_intermediate));
  uint64_t trunk_total = 0;
  for (const auto& s : trunk_tensor_specs(c)) trunk_total += stored_bytes(s, storage);
  if (vision) trunk_total += synth_vision_bytes(*vision, o.vision);
  const uint64_t expert_total = uint64_t(moe_layers.size()) * uint64_t(c.n_experts) * layout.stride;

  if (!w.trunk_done()) {
    Progress p("trunk  ", trunk_total, "B", o.progress);
    write_trunk(w, o, storage, vision ? &*vision : nullptr, p);
    p.finish();
  }
  Progress p("experts", expert_total, "B", o.progress);
  // Records are generated in parallel batches, then written in order by this thread.
  const size_t batch = 16;
  std::vector<std::vector<uint8_t>> payloads(batch, std::vector<uint8_t>(layout.payload_bytes));
  for (int layer : moe_layers) {
    if (w.layer_done(layer)) {
      p.add(uint64_t(c.n_experts) * layout.stride);
      continue;
    }
    Rng book_rng(o.seed, 0x100000000ull + uint64_t(layer));
    std::vector<float> books = random_codebooks(book_rng);
    w.begin_layer(layer, o.expert_format, layout.hidden, layout.intermediate,
                  o.expert_format == TensorFormat::VQ3R ? books.data() : nullptr);
    for (uint32_t first = 0; first < uint32_t(c.n_experts); first += batch) {
      uint32_t count = std::min<uint32_t>(batch, uint32_t(c.n_experts) - first);
      ThreadPool::global().parallel_for(count, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          random_expert_payload(layout, o.seed, layer, first + uint32_t(i), payloads[i].data());
      });
      for (uint32_t i = 0; i < count; ++i) {
        w.write_expert(first + i, payloads[i].data());
        p.add(layout.stride);
      }
    }
    w.end_layer();
  }
  p.finish();
  SynthTokenizer tokenizer = synth_tokenizer(c);
  w.set_tokenizer(tokenizer.ranks_text, tokenizer.config_json);
  if (vision) w.set_preprocessor_config(synth_preprocessor_config_json(*vision));
  w.finish();
}

}  // namespace waste
