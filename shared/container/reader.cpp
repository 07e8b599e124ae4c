#include "shared/container/reader.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <set>
#include <unordered_map>

#include "shared/container/manifest_io.h"
#include "shared/container/vision_check.h"
#include "shared/model/tensors.h"
#include "shared/util/error.h"
#include "shared/util/large_alloc.h"
#include "shared/util/file.h"

namespace waste {

uint64_t TensorInfo::cols() const {
  uint64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

namespace {

// Rows and cols as stored: a vector is one row.
void stored_dims(const TensorInfo& t, uint64_t& rows, uint64_t& cols) {
  if (t.shape.size() == 1) {
    rows = 1;
    cols = t.shape[0];
  } else {
    rows = t.rows();
    cols = t.cols();
  }
}

constexpr uint64_t kMaxDimension = 1ull << 32;

void check_tensor(const TensorInfo& t, uint64_t trunk_bytes, const std::string& where) {
  const std::string who = where + ": tensor " + t.name + ": ";
  require(!t.shape.empty(), who + "has no shape");
  uint64_t elements = 1;
  for (uint64_t d : t.shape) {
    require(d > 0 && d < kMaxDimension, who + "dimension out of range");
    require(elements <= (1ull << 40) / d, who + "more than 2^40 elements");
    elements *= d;
  }
  require(t.format == TensorFormat::F32 || t.format == TensorFormat::BF16 || t.format == TensorFormat::F16 ||
              t.format == TensorFormat::Q8G || t.format == TensorFormat::Q4G,
          who + "format " + format_name(t.format) + " (" + std::to_string(int(t.format)) + ") is not a trunk format");
  if (t.format == TensorFormat::Q8G || t.format == TensorFormat::Q4G)
    require(t.group >= 8 && t.group <= 4096 && t.group % 2 == 0, who + "bad group size " + std::to_string(t.group));
  uint64_t rows, cols;
  stored_dims(t, rows, cols);
  if (t.format == TensorFormat::Q8G || t.format == TensorFormat::Q4G)
    require(cols % t.group == 0, who + "columns not a multiple of the group size");
  TensorBytes b = trunk_tensor_bytes(t.format, rows, cols, t.group);
  require(b.total == t.bytes, who + "stores " + std::to_string(t.bytes) + " bytes but its shape and format need " +
                                  std::to_string(b.total));
  require(b.scales_offset == t.scales_offset, who + "scales offset disagrees with its shape");
  require(t.offset % kTensorAlign == 0, who + "offset not 64-byte aligned");
  require(t.offset <= trunk_bytes && t.bytes <= trunk_bytes - t.offset,
          who + "lies outside trunk.bin (" + std::to_string(trunk_bytes) + " bytes)");
}

// Field by field: the struct has padding, which memcmp would compare too.
bool same_layout(const RecordLayout& a, const RecordLayout& b) {
  return a.format == b.format && a.hidden == b.hidden && a.intermediate == b.intermediate &&
         a.gate_offset == b.gate_offset && a.up_offset == b.up_offset && a.down_offset == b.down_offset &&
         a.scales_offset == b.scales_offset && a.payload_bytes == b.payload_bytes && a.stride == b.stride;
}

}  // namespace

Container Container::open(const std::string& dir_in) {
  Container c;
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  c.dir_ = dir;
  const std::string manifest_path = dir + "/manifest";
  require(path_exists(dir), dir + ": no such container directory");
  require(path_exists(manifest_path),
          dir + ": no manifest (not a WASTE container, or its conversion did not finish; rerun it to resume)");
  ManifestData m = decode_manifest(read_file_bytes(manifest_path, kMaxManifestBytes), manifest_path);
  c.config_ = ModelConfig::from_json(m.config_json, manifest_path + " (config)");
  require(m.arch == arch_name(c.config_.arch),
          manifest_path + ": arch '" + m.arch + "' disagrees with the config (" + arch_name(c.config_.arch) + ")");
  c.config_json_ = m.config_json;
  c.created_by_ = m.created_by;
  c.container_id_ = m.container_id;
  c.synthetic_ = m.synthetic;
  auto safe_name = [&](const std::string& name, const char* field) {
    require(name.find('/') == std::string::npos && name != ".." && name != ".",
            manifest_path + ": field " + field + " names a file outside the container: " + name);
    return name;
  };
  c.trunk_file_ = safe_name(m.trunk_file, "trunkFile");
  c.trunk_bytes_ = m.trunk_bytes;
  c.codebooks_file_ = m.codebooks_file.empty() ? "" : safe_name(m.codebooks_file, "codebooksFile");
  c.codebooks_bytes_ = m.codebooks_bytes;
  c.tokenizer_file_ = m.tokenizer_file.empty() ? "" : safe_name(m.tokenizer_file, "tokenizerFile");
  c.tokenizer_config_file_ =
      m.tokenizer_config_file.empty() ? "" : safe_name(m.tokenizer_config_file, "tokenizerConfigFile");

  // Trunk: the file's size, each tensor inside it, and every tensor the config needs.
  c.trunk_handle_ = std::make_shared<const File>(c.trunk_path(), O_RDONLY);
  const uint64_t trunk_size = c.trunk_handle_->size();
  require(trunk_size == c.trunk_bytes_, c.trunk_path() + ": " + std::to_string(trunk_size) +
                                            " bytes, the manifest says " + std::to_string(c.trunk_bytes_) +
                                            " (truncated or replaced)");
  std::set<std::string> seen;
  for (auto& t : m.tensors) {
    check_tensor(t, c.trunk_bytes_, manifest_path);
    require(seen.insert(t.name).second, manifest_path + ": tensor " + t.name + " listed twice");
  }
  c.tensors_ = std::move(m.tensors);
  for (const TensorSpec& spec : trunk_tensor_specs(c.config_)) {
    const TensorInfo* t = c.find_tensor(spec.name);
    require(t != nullptr, manifest_path + ": tensor " + spec.name + " is missing");
    bool ok = spec.padded ? (t->shape.size() == 1 && t->shape[0] >= spec.min_len) : t->shape == spec.shape;
    require(ok, manifest_path + ": tensor " + spec.name + " has a shape the config does not allow");
  }
  // The vision tower and projector: all or none, shapes from vision_config, and the
  // preprocessor config that goes with them.
  const VisionCheck vision = check_vision(c.tensors_, m.config_json, m.preprocessor_config_json, c.config_, manifest_path);
  c.has_vision_ = vision.has_vision;
  c.vision_bytes_ = vision.bytes;
  c.preprocessor_config_json_ = m.preprocessor_config_json;

  // Expert banks: one per MoE layer, sizes and layouts recomputed from the config.
  c.layer_index_.assign(size_t(c.config_.n_layers), -1);
  if (!c.codebooks_file_.empty()) {
    c.codebooks_handle_ = std::make_shared<const File>(c.codebooks_path(), O_RDONLY);
    require(c.codebooks_handle_->size() == c.codebooks_bytes_, c.codebooks_path() + ": size disagrees with the manifest");
  }
  for (auto& l : m.layers) {
    const std::string who = manifest_path + ": layer " + std::to_string(l.layer) + ": ";
    require(l.layer >= 0 && l.layer < c.config_.n_layers && c.config_.is_moe_layer(l.layer),
            who + "is not a MoE layer of this model");
    require(c.layer_index_[size_t(l.layer)] < 0, who + "listed twice");
    require(l.expert_count == uint32_t(c.config_.n_experts), who + "expert count disagrees with the config");
    require(l.layout.hidden == uint32_t(c.config_.expert_hidden()) &&
                l.layout.intermediate == uint32_t(c.config_.moe_intermediate),
            who + "expert shape disagrees with the config");
    require(l.layout.format == TensorFormat::VQ3R || l.layout.format == TensorFormat::F32 ||
                l.layout.format == TensorFormat::BF16,
            who + "expert format " + std::to_string(int(l.layout.format)) + " is not vq3r, f32 or bf16");
    RecordLayout expect = record_layout(l.layout.format, l.layout.hidden, l.layout.intermediate);
    require(same_layout(expect, l.layout), who + "record layout disagrees with its format");
    if (expect.format == TensorFormat::VQ3R) {
      constexpr uint64_t kLayerBookBytes = 3 * kCodebookFloats * sizeof(float);
      require(!c.codebooks_file_.empty(), who + "is vq3r but the manifest names no codebooks file");
      // Subtract rather than add: the offset is read from disk and may be near 2^64.
      require(l.codebook_offset % sizeof(float) == 0 && c.codebooks_bytes_ >= kLayerBookBytes &&
                  l.codebook_offset <= c.codebooks_bytes_ - kLayerBookBytes,
              who + "codebooks lie outside codebooks.bin");
    }
    require(l.relative_error.size() <= 3, who + "too many relative error values");
    std::string bank = safe_name(l.bank_path, "bankFile");
    l.bank_path = dir + "/" + bank;
    auto bank_file = std::make_shared<const File>(l.bank_path, O_RDONLY);
    const uint64_t bank_size = bank_file->size();
    require(bank_size == uint64_t(l.expert_count) * l.layout.stride,
            l.bank_path + ": " + std::to_string(bank_size) + " bytes, expected " +
                std::to_string(uint64_t(l.expert_count) * l.layout.stride) + " (" + std::to_string(l.expert_count) +
                " records of " + std::to_string(l.layout.stride) + ")");
    c.layer_index_[size_t(l.layer)] = int(c.layers_.size());
    c.layers_.push_back(std::move(l));
    c.bank_files_.push_back(std::move(bank_file));
  }
  for (int layer : c.config_.moe_layers())
    require(c.layer_index_[size_t(layer)] >= 0, manifest_path + ": MoE layer " + std::to_string(layer) + " has no bank");
  return c;
}

const TensorInfo* Container::find_tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& Container::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(dir_ + ": no tensor " + name + " in the container");
  return *t;
}

const ExpertLayerInfo* Container::expert_layer(int layer) const {
  if (layer < 0 || size_t(layer) >= layer_index_.size() || layer_index_[size_t(layer)] < 0) return nullptr;
  return &layers_[size_t(layer_index_[size_t(layer)])];
}

std::vector<float> Container::read_codebooks(int layer) const {
  const ExpertLayerInfo* l = expert_layer(layer);
  require(l && l->layout.format == TensorFormat::VQ3R, "layer " + std::to_string(layer) + " has no vq3r codebooks");
  std::vector<float> books(3 * kCodebookFloats);
  codebooks_handle_->pread_exact(books.data(), books.size() * sizeof(float), l->codebook_offset);
  // A damaged book decodes every expert of its layer wrong: checked on every read.
  const std::string who = codebooks_path() + ": layer " + std::to_string(layer) + "'s codebooks ";
  require(l->codebook_checksum == 0 || checksum64(books.data(), books.size() * sizeof(float)) == l->codebook_checksum,
          who + "are damaged (checksum mismatch)");
  for (float x : books) require(std::isfinite(x), who + "hold a NaN or infinite value");
  return books;
}

void Container::read_record(int layer, uint32_t expert, uint8_t* dst, bool verify_checksum) const {
  const ExpertLayerInfo* l = expert_layer(layer);
  require(l != nullptr, "layer " + std::to_string(layer) + " is not a MoE layer");
  require(expert < l->expert_count, "layer " + std::to_string(layer) + ": expert " + std::to_string(expert) +
                                        " out of range (" + std::to_string(l->expert_count) + " experts)");
  const File& bank = *bank_files_[size_t(layer_index_[size_t(layer)])];
  bank.pread_exact(dst, l->layout.stride, uint64_t(expert) * l->layout.stride);
  std::string why = check_record(dst, l->layout, uint32_t(layer), expert, verify_checksum);
  require(why.empty(), l->bank_path + ": " + why);
}

Trunk::Trunk(const Container& c, const std::vector<std::string>& skip, bool verify_checksums,
             void (*progress)(uint64_t, uint64_t), TrunkPart part)
    : container_(&c), part_(part) {
  require(part == TrunkPart::Text || c.has_vision(), c.dir() + ": the container has no vision tower to load");
  const auto& tensors = c.tensors();
  offset_in_blob_.assign(tensors.size(), -1);
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (is_vision_tensor(tensors[i].name) != (part == TrunkPart::Vision)) continue;
    if (std::find(skip.begin(), skip.end(), tensors[i].name) != skip.end()) continue;
    offset_in_blob_[i] = int64_t(total);
    total = round_up(total + tensors[i].bytes, kTensorAlign);
  }
  resident_ = total;
  void* p = alloc_large(std::max<uint64_t>(total, kTensorAlign));  // 2 MiB-aligned, so kTensorAlign too
  require(p != nullptr, c.trunk_path() + ": cannot allocate " + std::to_string(total) + " bytes for the trunk");
  blob_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
  const File& f = c.trunk_file();
  // Progress in stored bytes of this part (what a caller sizing its bar can sum too).
  uint64_t done = 0, to_load = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (offset_in_blob_[i] >= 0) to_load += tensors[i].bytes;
  // The checksums are verified by a second thread while the next tensors are read, so the
  // check costs about nothing beside a cold read (xxh3 here: ~3 GB/s, the disk ~1.2 GB/s).
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (offset_in_blob_[i] >= 0) order.push_back(i);
  std::mutex mu;
  std::condition_variable cv;
  size_t loaded = 0;     // order[0, loaded) are in memory (under mu)
  bool abandon = false;  // a read failed: the hasher stops (under mu)
  std::string damaged;   // the first tensor whose checksum does not match (hasher only, read after join)
  std::thread hasher;
  if (verify_checksums)
    hasher = std::thread([&] {
      for (size_t k = 0; k < order.size(); ++k) {
        {
          std::unique_lock lk(mu);
          cv.wait(lk, [&] { return loaded > k || abandon; });
          if (loaded <= k) return;
        }
        const TensorInfo& t = tensors[order[k]];
        if (damaged.empty() && checksum64(blob_.get() + offset_in_blob_[order[k]], t.bytes) != t.checksum) damaged = t.name;
      }
    });
  try {
    for (size_t k = 0; k < order.size(); ++k) {
      const TensorInfo& t = tensors[order[k]];
      f.pread_exact(blob_.get() + offset_in_blob_[order[k]], t.bytes, t.offset);
      {
        std::lock_guard lk(mu);
        loaded = k + 1;
      }
      cv.notify_one();
      done += t.bytes;
      if (progress) progress(done, to_load);
    }
  } catch (...) {
    {
      std::lock_guard lk(mu);
      abandon = true;
    }
    cv.notify_one();
    if (hasher.joinable()) hasher.join();
    throw;
  }
  if (hasher.joinable()) hasher.join();
  require(damaged.empty(), c.trunk_path() + ": tensor " + damaged + " is damaged (checksum mismatch): run waste verify");
}

bool Trunk::has(const std::string& name) const {
  const auto& tensors = container_->tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return offset_in_blob_[i] >= 0;
  return false;
}

const void* Trunk::data(const std::string& name) const {
  const auto& tensors = container_->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name != name) continue;
    if (offset_in_blob_[i] < 0 && is_vision_tensor(name) != (part_ == TrunkPart::Vision))
      throw Error("tensor " + name +
                  (part_ == TrunkPart::Text ? " belongs to the vision tower, which the text trunk does not load"
                                            : " belongs to the text model, which the vision trunk does not load"));
    require(offset_in_blob_[i] >= 0, "tensor " + name + " is not resident (it stays on disk)");
    return blob_.get() + offset_in_blob_[i];
  }
  throw Error(container_->dir() + ": no tensor " + name + " in the container");
}

MatrixView Trunk::matrix(const std::string& name) const {
  const TensorInfo& t = info(name);
  MatrixView v;
  v.format = t.format;
  if (t.shape.size() == 1) {
    v.rows = 1;
    v.cols = int64_t(t.shape[0]);
  } else {
    v.rows = int64_t(t.rows());
    v.cols = int64_t(t.cols());
  }
  v.group = t.group;
  v.data = data(name);
  if (t.format == TensorFormat::Q8G || t.format == TensorFormat::Q4G)
    v.scales = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(v.data) + t.scales_offset);
  return v;
}

const float* Trunk::f32(const std::string& name) const {
  require(info(name).format == TensorFormat::F32, "tensor " + name + " is not stored as f32");
  return static_cast<const float*>(data(name));
}

void read_tensor_row(const Container& c, const TensorInfo& t, uint64_t row, float* out) {
  uint64_t rows, cols;
  stored_dims(t, rows, cols);
  require(row < rows, "tensor " + t.name + ": row " + std::to_string(row) + " out of range (" + std::to_string(rows) + ")");
  const File& f = c.trunk_file();
  // Read just this row's values and scales, then dequantize through the shared code path.
  // Per-thread buffers: this runs once per token.
  thread_local std::vector<uint8_t> values;
  thread_local std::vector<uint16_t> scales;
  MatrixView v;
  v.format = t.format;
  v.rows = 1;
  v.cols = int64_t(cols);
  v.group = t.group;
  // Rows start on whole bytes: check_tensor() made q4g's columns even (a multiple of the group).
  const uint64_t row_bytes = trunk_value_bytes(t.format, cols);
  values.resize(row_bytes);
  f.pread_exact(values.data(), row_bytes, t.offset + row * row_bytes);
  v.data = values.data();
  if (t.format == TensorFormat::Q8G || t.format == TensorFormat::Q4G) {
    uint64_t groups = cols / t.group;
    scales.resize(groups);
    f.pread_exact(scales.data(), groups * 2, t.offset + t.scales_offset + row * groups * 2);
    v.scales = scales.data();
  }
  dequantize_row(v, 0, out);
}

}  // namespace waste
