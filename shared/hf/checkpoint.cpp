#include "shared/hf/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "shared/hf/dequant.h"
#include "shared/hf/safetensors.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

namespace fs = std::filesystem;
using nlohmann::json;

struct Checkpoint::Impl {
  std::string dir;
  std::string config_json;
  ModelConfig config;
  size_t fp8_block = 128;  // quantization_config.weight_block_size
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  struct Entry {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  std::unordered_map<std::string, Entry> index;

  const Entry& get(const std::string& name) const {
    auto it = index.find(name);
    require(it != index.end(), dir + ": checkpoint has no tensor '" + name + "'");
    return it->second;
  }
  std::string where(const std::string& name) const {
    auto it = index.find(name);
    return (it == index.end() ? dir : it->second.file->path()) + ": tensor '" + name + "'";
  }
  std::vector<float> read_plain(const std::string& name) const;
  std::vector<float> read_fp8(const std::string& name, const std::string& scale_name) const;
  std::vector<float> read_packed(const std::string& base, std::vector<uint64_t>* shape_out) const;
  std::vector<uint64_t> packed_shape(const std::string& base) const;
  std::vector<int64_t> read_ints(const std::string& name) const;
};

namespace {

// Bytes converted per pread when reading a big plain tensor, so the raw copy never doubles
// the peak memory of the f32 result.
constexpr uint64_t kReadChunkBytes = 64ull << 20;

bool is_plain_filename(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..";
}

}  // namespace

std::vector<float> Checkpoint::Impl::read_plain(const std::string& name) const {
  const Entry& e = get(name);
  const SafetensorsTensor& t = *e.tensor;
  const size_t esize = safetensors_dtype_size(t.dtype);
  const uint64_t n = t.elements();
  std::vector<float> out;
  out.reserve(n);
  const uint64_t chunk_elems = std::max<uint64_t>(1, kReadChunkBytes / esize);
  std::vector<uint8_t> buf;
  for (uint64_t i = 0; i < n; i += chunk_elems) {
    const uint64_t m = std::min(chunk_elems, n - i);
    buf.resize(m * esize);
    e.file->read_at(buf.data(), buf.size(), t.offset + i * esize);
    std::vector<float> part = plain_to_f32(t.dtype, buf.data(), m, where(name));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<float> Checkpoint::Impl::read_fp8(const std::string& name, const std::string& scale_name) const {
  const Entry& e = get(name);
  const SafetensorsTensor& t = *e.tensor;
  require(t.shape.size() == 2, where(name) + ": an F8_E4M3 weight must be 2-D");
  const uint64_t rows = t.shape[0], cols = t.shape[1], B = fp8_block;
  const std::vector<uint64_t> want = {(rows + B - 1) / B, (cols + B - 1) / B};
  const SafetensorsTensor& st = *get(scale_name).tensor;
  require(st.shape == want, where(scale_name) + ": shape [" + (st.shape.size() == 2 ? std::to_string(st.shape[0]) + ", " + std::to_string(st.shape[1]) : std::string("?")) +
                                "] but a " + std::to_string(rows) + "x" + std::to_string(cols) + " weight with " +
                                std::to_string(B) + "x" + std::to_string(B) + " tiles needs [" + std::to_string(want[0]) +
                                ", " + std::to_string(want[1]) + "]");
  const std::vector<float> scale = read_plain(scale_name);
  std::vector<float> out(rows * cols);
  // One tile row (B weight rows) per pread keeps the raw buffer small.
  std::vector<uint8_t> buf;
  for (uint64_t r = 0; r < rows; r += B) {
    const uint64_t m = std::min(B, rows - r);
    buf.resize(m * cols);
    e.file->read_at(buf.data(), buf.size(), t.offset + r * cols);
    dequant_fp8_block(buf.data(), m, cols, scale.data() + (r / B) * want[1], B, out.data() + r * cols);
  }
  return out;
}

std::vector<int64_t> Checkpoint::Impl::read_ints(const std::string& name) const {
  const Entry& e = get(name);
  const SafetensorsTensor& t = *e.tensor;
  require(t.dtype == "I32" || t.dtype == "I64", where(name) + ": expected I32 or I64, got " + t.dtype);
  std::vector<uint8_t> b = e.file->read_bytes(name);
  std::vector<int64_t> out(t.elements());
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == "I32") {
      int32_t v;
      std::memcpy(&v, b.data() + 4 * i, 4);
      out[i] = v;
    } else {
      std::memcpy(&out[i], b.data() + 8 * i, 8);
    }
  }
  return out;
}

// Logical [rows, cols] of a packed weight; validates packed, scale and weight_shape agree.
std::vector<uint64_t> Checkpoint::Impl::packed_shape(const std::string& base) const {
  const std::string pname = base + ".weight_packed", sname = base + ".weight_scale";
  const SafetensorsTensor& p = *get(pname).tensor;
  require(index.count(sname), where(pname) + ": has no sibling '" + sname + "'");
  const SafetensorsTensor& s = *get(sname).tensor;
  require(p.shape.size() == 2 && s.shape.size() == 2 && s.shape[0] == p.shape[0],
          where(pname) + ": packed and scale tensors must be 2-D with the same row count");
  const bool mxfp4 = p.dtype == "U8";
  require(mxfp4 || p.dtype == "I32", where(pname) + ": weight_packed dtype " + p.dtype + " is neither U8 (MXFP4) nor I32 (INT4)");
  const uint64_t rows = p.shape[0];
  const uint64_t capacity = p.shape[1] * (mxfp4 ? 2 : 8);
  uint64_t cols = capacity;
  if (index.count(base + ".weight_shape")) {
    std::vector<int64_t> ws = read_ints(base + ".weight_shape");
    require(ws.size() == 2 && ws[0] == int64_t(rows) && ws[1] > 0 && uint64_t(ws[1]) <= capacity &&
                uint64_t(ws[1]) + (mxfp4 ? 2 : 8) > capacity,
            where(base + ".weight_shape") + ": does not match weight_packed [" + std::to_string(rows) + ", " +
                std::to_string(p.shape[1]) + "]");
    cols = uint64_t(ws[1]);
  }
  return {rows, cols};
}

std::vector<float> Checkpoint::Impl::read_packed(const std::string& base, std::vector<uint64_t>* shape_out) const {
  const std::string pname = base + ".weight_packed", sname = base + ".weight_scale";
  const std::vector<uint64_t> shp = packed_shape(base);
  const uint64_t rows = shp[0], cols = shp[1];
  const Entry& pe = get(pname);
  const SafetensorsTensor& p = *pe.tensor;
  const SafetensorsTensor& s = *get(sname).tensor;
  std::vector<float> out(rows * cols);
  std::vector<uint8_t> packed = pe.file->read_bytes(pname);
  if (p.dtype == "U8") {
    require(s.dtype == "U8", where(sname) + ": MXFP4 scales must be U8 (E8M0), got " + s.dtype);
    require(s.shape[1] == (cols + 31) / 32, where(sname) + ": " + std::to_string(s.shape[1]) + " scale columns but " +
                                                std::to_string(cols) + " inputs need one per 32");
    std::vector<uint8_t> scale = get(sname).file->read_bytes(sname);
    dequant_mxfp4(packed.data(), rows, cols, p.shape[1], scale.data(), s.shape[1], out.data());
  } else {
    const uint64_t sc = s.shape[1];
    require(sc > 0, where(sname) + ": no scale columns");
    // Group from the shapes: compressed-tensors stores ceil(cols / group) scales per row.
    uint64_t group = (cols % sc == 0) ? cols / sc : 32;
    require((cols + group - 1) / group == sc, where(sname) + ": " + std::to_string(sc) + " scale columns do not fit " +
                                                  std::to_string(cols) + " inputs in equal groups");
    std::vector<float> scale = read_plain(sname);
    std::vector<int32_t> words(p.elements());
    std::memcpy(words.data(), packed.data(), packed.size());
    dequant_int4_packed(words.data(), rows, cols, p.shape[1], scale.data(), sc, group, out.data());
  }
  if (shape_out) *shape_out = {rows, cols};
  return out;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  require(path_exists(config_path), dir + ": not a checkpoint directory: no config.json");
  impl->config_json = read_file_text(config_path, 16 << 20);
  impl->config = ModelConfig::from_json(impl->config_json, config_path);
  try {
    json cj = json::parse(impl->config_json);
    const json* q = nullptr;
    if (cj.contains("quantization_config")) q = &cj["quantization_config"];
    else if (cj.contains("text_config") && cj["text_config"].contains("quantization_config"))
      q = &cj["text_config"]["quantization_config"];
    if (q && q->contains("weight_block_size") && (*q)["weight_block_size"].is_array()) {
      const json& wb = (*q)["weight_block_size"];
      require(wb.size() == 2 && wb[0].is_number_unsigned() && wb[0] == wb[1] && wb[0].get<uint64_t>() > 0 &&
                  wb[0].get<uint64_t>() <= 65536,
              config_path + ": quantization_config.weight_block_size must be two equal positive integers");
      impl->fp8_block = wb[0].get<size_t>();
    }
  } catch (const json::exception& e) {
    throw Error(config_path + ": " + e.what());
  }

  // Which shard files make up the checkpoint.
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> index_map;  // tensor -> file named by the index
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (path_exists(index_path)) {
    json idx;
    try {
      idx = json::parse(read_file_text(index_path, 256 << 20));
    } catch (const json::exception& e) {
      throw Error(index_path + ": not valid JSON: " + e.what());
    }
    require(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(),
            index_path + ": needs a weight_map object");
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      require(it.value().is_string(), index_path + ": weight_map entry '" + it.key() + "' is not a file name");
      const std::string f = it.value().get<std::string>();
      require(is_plain_filename(f), index_path + ": weight_map entry '" + it.key() + "' names '" + f +
                                        "', not a file in the checkpoint directory");
      index_map[it.key()] = f;
      if (std::find(shard_names.begin(), shard_names.end(), f) == shard_names.end()) shard_names.push_back(f);
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else if (path_exists((fs::path(dir) / "model.safetensors").string())) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& de : fs::directory_iterator(dir))
      if (de.path().extension() == ".safetensors") shard_names.push_back(de.path().filename().string());
    std::sort(shard_names.begin(), shard_names.end());
  }
  require(!shard_names.empty(), dir + ": no .safetensors files");

  for (const std::string& f : shard_names) {
    impl->files.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / f).string()));
    const SafetensorsFile* file = impl->files.back().get();
    for (const auto& [name, t] : file->tensors()) {
      auto [it, fresh] = impl->index.emplace(name, Impl::Entry{file, &t});
      require(fresh, file->path() + ": tensor '" + name + "' also in " + it->second.file->path());
    }
  }
  for (const auto& [name, f] : index_map) {
    auto it = impl->index.find(name);
    require(it != impl->index.end() && fs::path(it->second.file->path()).filename() == f,
            index_path + ": lists tensor '" + name + "' in " + f + " but that file does not hold it");
  }
  Checkpoint c;
  c.impl_ = std::move(impl);
  return c;
}

const std::string& Checkpoint::dir() const { return impl_->dir; }
const std::string& Checkpoint::config_json() const { return impl_->config_json; }
const ModelConfig& Checkpoint::config() const { return impl_->config; }
bool Checkpoint::has(const std::string& n) const { return impl_->index.count(n) != 0; }
std::vector<uint64_t> Checkpoint::shape(const std::string& n) const { return impl_->get(n).tensor->shape; }
std::string Checkpoint::dtype(const std::string& n) const { return impl_->get(n).tensor->dtype; }
std::string Checkpoint::file_of(const std::string& n) const { return impl_->get(n).file->path(); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->index.size());
  for (const auto& kv : impl_->index) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> Checkpoint::weight_shape(const std::string& base) const {
  if (has(base + ".weight")) return shape(base + ".weight");
  if (has(base + ".weight_packed")) return impl_->packed_shape(base);
  throw Error(impl_->dir + ": checkpoint has neither '" + base + ".weight' nor '" + base + ".weight_packed'");
}

std::vector<float> Checkpoint::read_weight(const std::string& base, std::vector<uint64_t>* shape_out) const {
  if (has(base + ".weight")) return read_tensor(base + ".weight", shape_out);
  if (has(base + ".weight_packed")) return impl_->read_packed(base, shape_out);
  throw Error(impl_->dir + ": checkpoint has neither '" + base + ".weight' nor '" + base + ".weight_packed'");
}

std::vector<float> Checkpoint::read_tensor(const std::string& n, std::vector<uint64_t>* shape_out) const {
  const Impl::Entry& e = impl_->get(n);
  std::vector<float> out;
  if (e.tensor->dtype == "F8_E4M3") {
    const std::string scale = n + "_scale_inv";
    require(has(scale), impl_->where(n) + ": F8_E4M3 weight without '" + scale + "'");
    out = impl_->read_fp8(n, scale);
  } else {
    out = impl_->read_plain(n);
  }
  if (shape_out) *shape_out = e.tensor->shape;
  return out;
}

}  // namespace waste
