// Writes a .waste container directory (docs/FORMAT.md). Used by `waste convert` and
// `waste synth`. Crash-safe and resumable: the trunk and every expert bank are written to a
// `.partial` file and renamed when complete, and each finished piece leaves a small marker
// in `<dir>/.progress/`, so a rerun skips finished pieces and, given the same inputs,
// writes byte-identical files. finish() writes codebooks.bin and the manifest last and
// removes `.progress/`; a directory without a manifest is not a container.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/model/config.h"

namespace waste {

struct WriterOptions {
  std::string created_by;  // recorded in the manifest, e.g. "waste synth --preset kimi-k3"
  bool synthetic = false;  // random weights
};

class ContainerWriter {
 public:
  // Creates `dir` if needed. `config_json` is the release's config.json text, stored verbatim;
  // it must parse as a ModelConfig.
  ContainerWriter(const std::string& dir, const std::string& config_json, const WriterOptions& options);
  ~ContainerWriter();
  ContainerWriter(const ContainerWriter&) = delete;
  ContainerWriter& operator=(const ContainerWriter&) = delete;

  const ModelConfig& config() const;

  // --- trunk: begin, add every tensor in order, end -----------------------------------
  // True when a previous run already finished the trunk (then skip adding tensors).
  bool trunk_done() const;
  void begin_trunk();
  // Adds a tensor from f32 values, stored in `format` (q8g/q4g quantized with `group`).
  // `name` is the release name without the tensor prefix.
  void add_tensor(const std::string& name, const std::vector<uint64_t>& shape, const float* values,
                  TensorFormat format, uint32_t group = 0);
  // Adds already-encoded bytes (layout as docs/FORMAT.md), e.g. random q4g data from synth.
  void add_tensor_bytes(const std::string& name, const std::vector<uint64_t>& shape, TensorFormat format,
                        uint32_t group, const void* bytes, uint64_t n_bytes);
  void end_trunk();

  // --- experts: one bank per MoE layer -------------------------------------------------
  bool layer_done(int layer) const;
  // codebooks: vq3r only, 3 x kCodebookFloats floats (gate, up, down books), else nullptr.
  void begin_layer(int layer, TensorFormat format, uint32_t hidden, uint32_t intermediate, const float* codebooks);
  const RecordLayout& layout() const;  // of the layer being written
  // `payload` holds layout().payload_bytes bytes laid out as the record after its header;
  // the writer adds the header and checksum. Experts may come in any order; every expert of
  // the layer must be written before end_layer.
  void write_expert(uint32_t expert, const uint8_t* payload);
  // relative_error: gate, up, down relative MSE (vq3r), or empty.
  void end_layer(const std::vector<float>& relative_error = {});

  // --- tokenizer and finish --------------------------------------------------------------
  // Copies a tiktoken rank file and a tokenizer_config.json (WASTE's schema, see FORMAT.md).
  void set_tokenizer(const std::string& ranks_text, const std::string& tokenizer_config_json);
  // The release's preprocessor_config.json for a container with a vision tower (the vision
  // tensors go into the trunk under their release names). Must parse as a PreprocessorConfig.
  void set_preprocessor_config(const std::string& preprocessor_config_json);
  // Writes codebooks.bin and manifest. Throws if the trunk or any MoE layer is missing.
  void finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace waste
