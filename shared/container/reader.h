// Opens a .waste container: reads and validates the manifest (every size and offset against
// the files on disk and the config), and gives the trunk tensors, expert layers and codebooks.
// A K3 container may also hold the vision tower and projector (trunk tensors named
// vision_tower.* / mm_projector.*) and the release's preprocessor_config.json; the text model
// never loads them (Trunk with TrunkPart::Text), the vision encoder loads them on first use.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

class File;

struct TensorInfo {
  std::string name;
  TensorFormat format = TensorFormat::F32;
  std::vector<uint64_t> shape;
  uint64_t offset = 0, bytes = 0;
  uint32_t group = 0;
  uint64_t scales_offset = 0;
  uint64_t checksum = 0;
  uint64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  uint64_t cols() const;  // product of the remaining dims (1 for a vector)
  uint64_t elements() const;
};

struct ExpertLayerInfo {
  int layer = 0;
  std::string bank_path;  // absolute path of experts-L<layer>.bin
  uint32_t expert_count = 0;
  RecordLayout layout{};
  uint64_t codebook_offset = 0;
  uint64_t codebook_checksum = 0;  // xxh3-64 of the 3 books; 0 in containers written before it existed
  std::vector<float> relative_error;  // gate, up, down (vq3r), may be empty
};

class Container {
 public:
  // Throws Error naming the file and field on any inconsistency.
  static Container open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const std::string& config_json() const { return config_json_; }
  const std::string& created_by() const { return created_by_; }
  uint64_t container_id() const { return container_id_; }
  bool synthetic() const { return synthetic_; }

  // True when config.json has a vision_config and the manifest holds the vision tower's and
  // projector's tensors (open() checked them all against it, and that the preprocessor config
  // parses). A container converted with --vision none, or written before vision existed, has
  // none.
  bool has_vision() const { return has_vision_; }
  // The release's preprocessor_config.json, verbatim; "" without a vision tower.
  const std::string& preprocessor_config_json() const { return preprocessor_config_json_; }
  // Stored bytes of the vision tensors in trunk.bin (0 without a vision tower).
  uint64_t vision_bytes() const { return vision_bytes_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // throws naming the tensor

  const std::vector<ExpertLayerInfo>& expert_layers() const { return layers_; }
  const ExpertLayerInfo* expert_layer(int layer) const;  // nullptr for a dense layer

  std::string trunk_path() const { return dir_ + "/" + trunk_file_; }
  uint64_t trunk_bytes() const { return trunk_bytes_; }
  std::string codebooks_path() const { return codebooks_file_.empty() ? "" : dir_ + "/" + codebooks_file_; }
  std::string tokenizer_path() const { return tokenizer_file_.empty() ? "" : dir_ + "/" + tokenizer_file_; }
  std::string tokenizer_config_path() const {
    return tokenizer_config_file_.empty() ? "" : dir_ + "/" + tokenizer_config_file_;
  }

  // The layer's gate, up and down codebooks: 3 x kCodebookFloats floats (vq3r layers only).
  std::vector<float> read_codebooks(int layer) const;
  // Reads one record (stride bytes) into dst; validates header and checksum.
  void read_record(int layer, uint32_t expert, uint8_t* dst, bool verify_checksum = true) const;
  // trunk.bin, open for pread (e.g. the embedding row read per token).
  const File& trunk_file() const { return *trunk_handle_; }

 private:
  std::string dir_, config_json_, created_by_, trunk_file_, codebooks_file_, tokenizer_file_, tokenizer_config_file_;
  std::string preprocessor_config_json_;
  ModelConfig config_;
  uint64_t container_id_ = 0, trunk_bytes_ = 0, codebooks_bytes_ = 0, vision_bytes_ = 0;
  bool synthetic_ = false, has_vision_ = false;
  std::vector<TensorInfo> tensors_;
  std::vector<ExpertLayerInfo> layers_;
  std::vector<int> layer_index_;  // decoder layer -> index in layers_, or -1
  // Opened once by open() (and shared by copies), so reads per token or per expert do not
  // reopen files. bank_files_ runs parallel to layers_; codebooks_handle_ may be null.
  std::shared_ptr<const File> trunk_handle_, codebooks_handle_;
  std::vector<std::shared_ptr<const File>> bank_files_;
};

// Which tensors a Trunk loads: the text model's (every trunk tensor but the vision tower's and
// projector's), or the vision tower's and projector's alone (vision_tensor_specs). The two are
// loaded apart so that a text-only session never pays for the tower: it is loaded when the
// first image arrives.
enum class TrunkPart { Text, Vision };

// The trunk in RAM: every tensor of `part` except those named in `skip` (the embedding table
// stays on disk and is read a row per token). Memory is 64-byte aligned. Keeps a pointer to the
// Container (for tensor names and shapes): the Container must outlive the Trunk.
class Trunk {
 public:
  // progress(bytes_done, bytes_total) is called while loading (for a progress bar); the total
  // counts only `part`. TrunkPart::Vision needs a container with has_vision().
  Trunk(const Container& c, const std::vector<std::string>& skip, bool verify_checksums,
        void (*progress)(uint64_t, uint64_t) = nullptr, TrunkPart part = TrunkPart::Text);
  const TensorInfo& info(const std::string& name) const { return container_->tensor(name); }
  TrunkPart part() const { return part_; }
  bool has(const std::string& name) const;          // in the container and loaded by this trunk
  const void* data(const std::string& name) const;  // throws if absent, skipped or of the other part
  MatrixView matrix(const std::string& name) const;  // 2-D view (dims past the first flattened)
  const float* f32(const std::string& name) const;   // F32 tensors only (norms, biases, router)
  uint64_t resident_bytes() const { return resident_; }  // of the loaded part only

 private:
  const Container* container_;
  TrunkPart part_ = TrunkPart::Text;
  std::shared_ptr<uint8_t> blob_;
  std::vector<int64_t> offset_in_blob_;  // per tensor, -1 when skipped
  uint64_t resident_ = 0;
};

// Reads row r of a tensor straight from trunk.bin, dequantized (the per-token embedding row).
void read_tensor_row(const Container& c, const TensorInfo& t, uint64_t row, float* out);

}  // namespace waste
