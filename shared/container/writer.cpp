#include "shared/container/writer.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shared/container/manifest_io.h"
#include "shared/kernels/quantize.h"
#include "shared/model/preprocessor_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json tensor_to_json(const TensorInfo& t) {
  return {{"name", t.name},     {"format", format_name(t.format)}, {"shape", t.shape},
          {"offset", t.offset}, {"bytes", t.bytes},                {"group", t.group},
          {"scales_offset", t.scales_offset}, {"checksum", t.checksum}};
}

TensorInfo tensor_from_json(const json& j) {
  TensorInfo t;
  t.name = j.at("name").get<std::string>();
  t.format = format_from_name(j.at("format").get<std::string>());
  t.shape = j.at("shape").get<std::vector<uint64_t>>();
  t.offset = j.at("offset").get<uint64_t>();
  t.bytes = j.at("bytes").get<uint64_t>();
  t.group = j.at("group").get<uint32_t>();
  t.scales_offset = j.at("scales_offset").get<uint64_t>();
  t.checksum = j.at("checksum").get<uint64_t>();
  return t;
}

void write_text_atomic(const std::string& path, const std::string& text) { write_file_atomic(path, text.data(), text.size()); }

}  // namespace

struct ContainerWriter::State {
  std::string dir, progress_dir, config_json;
  ModelConfig config;
  WriterOptions options;
  // Trunk being written.
  bool in_trunk = false;
  File trunk;
  uint64_t trunk_offset = 0;
  std::vector<TensorInfo> tensors;
  // Layer being written.
  int layer = -1;
  RecordLayout layout{};
  File bank;
  std::vector<bool> written;
  std::vector<float> codebooks;
  std::vector<uint8_t> record;  // one record: header + payload + zero padding
  bool tokenizer_set = false;
  std::string preprocessor_config_json;

  std::string path(const std::string& name) const { return dir + "/" + name; }
  std::string marker(const std::string& name) const { return progress_dir + "/" + name; }
};

ContainerWriter::ContainerWriter(const std::string& dir, const std::string& config_json, const WriterOptions& options)
    : s_(std::make_unique<State>()) {
  s_->dir = dir;
  s_->progress_dir = dir + "/.progress";
  s_->config_json = config_json;
  s_->options = options;
  s_->config = ModelConfig::from_json(config_json, dir + " (config)");
  std::error_code ec;
  fs::create_directories(s_->progress_dir, ec);
  if (ec) throw Error(dir + ": cannot create container directory: " + ec.message());
  // A container being (re)written is not a container until finish(): drop an old manifest first.
  fs::remove(s_->path("manifest"), ec);
  // Progress from a run with another config is worthless: start over.
  std::string cfg_marker = s_->marker("config.json");
  if (!path_exists(cfg_marker) || read_file_text(cfg_marker, 64 << 20) != config_json) {
    fs::remove_all(s_->progress_dir, ec);
    fs::create_directories(s_->progress_dir, ec);
    if (ec) throw Error(dir + ": cannot create " + s_->progress_dir + ": " + ec.message());
    write_text_atomic(cfg_marker, config_json);
  }
}

ContainerWriter::~ContainerWriter() = default;

const ModelConfig& ContainerWriter::config() const { return s_->config; }

bool ContainerWriter::trunk_done() const {
  return path_exists(s_->marker("trunk.json")) && path_exists(s_->path("trunk.bin"));
}

void ContainerWriter::begin_trunk() {
  require(!s_->in_trunk, "begin_trunk called twice");
  s_->trunk = File(s_->path("trunk.bin.partial"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  s_->trunk_offset = 0;
  s_->tensors.clear();
  s_->in_trunk = true;
}

void ContainerWriter::add_tensor(const std::string& name, const std::vector<uint64_t>& shape, const float* values,
                                 TensorFormat format, uint32_t group) {
  uint64_t rows = shape.empty() ? 1 : shape[0];
  uint64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  if (shape.size() == 1) {  // vectors are one row
    cols = rows;
    rows = 1;
  }
  std::vector<uint8_t> bytes = quantize_matrix(format, values, rows, cols, group);
  add_tensor_bytes(name, shape, format, group, bytes.data(), bytes.size());
}

void ContainerWriter::add_tensor_bytes(const std::string& name, const std::vector<uint64_t>& shape, TensorFormat format,
                                       uint32_t group, const void* bytes, uint64_t n_bytes) {
  require(s_->in_trunk, "add_tensor outside begin_trunk/end_trunk");
  TensorInfo t;
  t.name = name;
  t.format = format;
  t.shape = shape;
  t.group = (format == TensorFormat::Q8G || format == TensorFormat::Q4G) ? group : 0;
  require(t.cols() * t.rows() == t.elements(), "tensor " + name + ": bad shape");
  uint64_t rows = shape.size() == 1 ? 1 : t.rows();
  uint64_t cols = shape.size() == 1 ? t.elements() : t.cols();
  TensorBytes expect = trunk_tensor_bytes(format, rows, cols, t.group);
  require(expect.total == n_bytes, "tensor " + name + ": " + std::to_string(n_bytes) + " bytes given, " +
                                       std::to_string(expect.total) + " expected for its shape and format");
  t.scales_offset = expect.scales_offset;
  t.offset = round_up(s_->trunk_offset, kTensorAlign);
  t.bytes = n_bytes;
  t.checksum = checksum64(bytes, n_bytes);
  if (t.offset > s_->trunk_offset) {
    static const uint8_t zeros[kTensorAlign] = {};
    s_->trunk.write_all(zeros, t.offset - s_->trunk_offset);
  }
  s_->trunk.write_all(bytes, n_bytes);
  s_->trunk_offset = t.offset + n_bytes;
  s_->tensors.push_back(std::move(t));
}

void ContainerWriter::end_trunk() {
  require(s_->in_trunk, "end_trunk without begin_trunk");
  s_->trunk.fsync();
  s_->trunk.close();
  if (std::rename(s_->path("trunk.bin.partial").c_str(), s_->path("trunk.bin").c_str()) != 0)
    throw Error(s_->path("trunk.bin") + ": rename failed");
  json j = json::array();
  for (const auto& t : s_->tensors) j.push_back(tensor_to_json(t));
  write_text_atomic(s_->marker("trunk.json"), json{{"bytes", s_->trunk_offset}, {"tensors", j}}.dump());
  s_->in_trunk = false;
}

bool ContainerWriter::layer_done(int layer) const {
  return path_exists(s_->marker("layer-" + std::to_string(layer) + ".json")) &&
         path_exists(s_->path(bank_file_name(layer)));
}

void ContainerWriter::begin_layer(int layer, TensorFormat format, uint32_t hidden, uint32_t intermediate,
                                  const float* codebooks) {
  require(s_->layer < 0, "begin_layer while layer " + std::to_string(s_->layer) + " is open");
  require(s_->config.is_moe_layer(layer), "layer " + std::to_string(layer) + " is not a MoE layer of this model");
  require(int(hidden) == s_->config.expert_hidden() && int(intermediate) == s_->config.moe_intermediate,
          "layer " + std::to_string(layer) + ": expert shape disagrees with the config");
  require((format == TensorFormat::VQ3R) == (codebooks != nullptr), "vq3r layers need codebooks, others none");
  s_->layer = layer;
  s_->layout = record_layout(format, hidden, intermediate);
  s_->bank = File(s_->path(bank_file_name(layer) + ".partial"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  s_->bank.truncate(s_->layout.stride * uint64_t(s_->config.n_experts));
  s_->written.assign(size_t(s_->config.n_experts), false);
  s_->codebooks.assign(codebooks ? codebooks : nullptr, codebooks ? codebooks + 3 * kCodebookFloats : nullptr);
  s_->record.assign(s_->layout.stride, 0);
}

const RecordLayout& ContainerWriter::layout() const { return s_->layout; }

void ContainerWriter::write_expert(uint32_t expert, const uint8_t* payload) {
  require(s_->layer >= 0, "write_expert outside begin_layer/end_layer");
  require(expert < s_->written.size(), "expert " + std::to_string(expert) + " out of range");
  RecordHeader h = make_record_header(s_->layout, uint32_t(s_->layer), expert, payload);
  std::memcpy(s_->record.data(), &h, sizeof h);
  std::memcpy(s_->record.data() + kRecordHeaderBytes, payload, s_->layout.payload_bytes);
  s_->bank.pwrite_exact(s_->record.data(), s_->record.size(), uint64_t(expert) * s_->layout.stride);
  s_->written[expert] = true;
}

void ContainerWriter::end_layer(const std::vector<float>& relative_error) {
  // JSON has no NaN: a non-finite figure would be written as null and break every resume.
  for (float e : relative_error)
    require(std::isfinite(e), "layer " + std::to_string(s_->layer) + ": a relative error is not finite (" +
                                  std::to_string(e) + ")");
  require(s_->layer >= 0, "end_layer without begin_layer");
  for (size_t e = 0; e < s_->written.size(); ++e)
    require(s_->written[e], "layer " + std::to_string(s_->layer) + ": expert " + std::to_string(e) + " was not written");
  s_->bank.fsync();
  s_->bank.close();
  std::string bank = s_->path(bank_file_name(s_->layer));
  if (std::rename((bank + ".partial").c_str(), bank.c_str()) != 0) throw Error(bank + ": rename failed");
  std::string prefix = "layer-" + std::to_string(s_->layer);
  if (!s_->codebooks.empty())
    write_file_atomic(s_->marker(prefix + ".codebooks"), s_->codebooks.data(), s_->codebooks.size() * sizeof(float));
  const RecordLayout& l = s_->layout;
  json j = {{"layer", s_->layer},          {"format", format_name(l.format)}, {"hidden", l.hidden},
            {"intermediate", l.intermediate}, {"relative_error", relative_error}};
  write_text_atomic(s_->marker(prefix + ".json"), j.dump());
  s_->layer = -1;
}

void ContainerWriter::set_tokenizer(const std::string& ranks_text, const std::string& tokenizer_config_json) {
  write_text_atomic(s_->path("tokenizer.model"), ranks_text);
  write_text_atomic(s_->path("tokenizer_config.json"), tokenizer_config_json);
  s_->tokenizer_set = true;
}

void ContainerWriter::set_preprocessor_config(const std::string& text) {
  PreprocessorConfig::from_json(text, s_->dir + " (preprocessor config)");
  s_->preprocessor_config_json = text;
}

void ContainerWriter::finish() {
  require(s_->layer < 0 && !s_->in_trunk, "finish with a layer or the trunk still open");
  ManifestData m;
  m.arch = arch_name(s_->config.arch);
  m.config_json = s_->config_json;
  m.tensor_prefix = s_->config.tensor_prefix;
  m.created_by = s_->options.created_by;
  m.synthetic = s_->options.synthetic;
  m.preprocessor_config_json = s_->preprocessor_config_json;
  require(trunk_done(), s_->dir + ": the trunk was not written");
  json trunk = json::parse(read_file_text(s_->marker("trunk.json"), 256 << 20));
  m.trunk_bytes = trunk.at("bytes").get<uint64_t>();
  for (const auto& t : trunk.at("tensors")) m.tensors.push_back(tensor_from_json(t));

  // Codebooks of all vq3r layers, concatenated in layer order.
  std::vector<float> books;
  uint64_t id = checksum64(s_->config_json.data(), s_->config_json.size());
  for (const auto& t : m.tensors) id ^= t.checksum + 0x9e3779b97f4a7c15ull + (id << 6) + (id >> 2);
  for (int layer : s_->config.moe_layers()) {
    std::string prefix = "layer-" + std::to_string(layer);
    require(layer_done(layer), s_->dir + ": MoE layer " + std::to_string(layer) + " was not written");
    json j = json::parse(read_file_text(s_->marker(prefix + ".json"), 1 << 20));
    ExpertLayerInfo info;
    info.layer = layer;
    info.bank_path = bank_file_name(layer);
    info.expert_count = uint32_t(s_->config.n_experts);
    info.layout = record_layout(format_from_name(j.at("format").get<std::string>()), j.at("hidden").get<uint32_t>(),
                                j.at("intermediate").get<uint32_t>());
    info.relative_error = j.at("relative_error").get<std::vector<float>>();
    if (info.layout.format == TensorFormat::VQ3R) {
      auto bytes = read_file_bytes(s_->marker(prefix + ".codebooks"), 3 * kCodebookFloats * sizeof(float));
      require(bytes.size() == 3 * kCodebookFloats * sizeof(float), s_->marker(prefix + ".codebooks") + ": wrong size");
      info.codebook_offset = books.size() * sizeof(float);
      info.codebook_checksum = checksum64(bytes.data(), bytes.size());
      size_t at = books.size();
      books.resize(at + 3 * kCodebookFloats);
      std::memcpy(books.data() + at, bytes.data(), bytes.size());
      id ^= checksum64(bytes.data(), bytes.size()) + (id << 6) + (id >> 2);
    }
    id ^= uint64_t(layer) * 0x100000001b3ull + info.layout.stride;
    m.layers.push_back(std::move(info));
  }
  if (!books.empty()) {
    m.codebooks_file = "codebooks.bin";
    m.codebooks_bytes = books.size() * sizeof(float);
    write_file_atomic(s_->path(m.codebooks_file), books.data(), m.codebooks_bytes);
  }
  if (path_exists(s_->path("tokenizer.model"))) {
    m.tokenizer_file = "tokenizer.model";
    m.tokenizer_config_file = path_exists(s_->path("tokenizer_config.json")) ? "tokenizer_config.json" : "";
  }
  // Only when present, so containers without vision keep the ids they always had.
  if (!m.preprocessor_config_json.empty())
    id ^= checksum64(m.preprocessor_config_json.data(), m.preprocessor_config_json.size()) + (id << 6) + (id >> 2);
  // Deterministic identity: the same inputs give the same id (and byte-identical manifests).
  m.container_id = id;
  std::vector<uint8_t> bytes = encode_manifest(m);
  write_file_atomic(s_->path("manifest"), bytes.data(), bytes.size());
  std::error_code ec;
  fs::remove_all(s_->progress_dir, ec);
}

}  // namespace waste
