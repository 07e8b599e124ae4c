#include "shared/hf/safetensors.h"

#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "shared/util/error.h"

namespace waste {

using nlohmann::json;

uint64_t SafetensorsTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F8_E4M3" || dtype == "F8_E5M2" || dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path, O_RDONLY) {
  const uint64_t file_size = file_.size();
  require(file_size >= 8, path + ": not a safetensors file: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  uint8_t len_bytes[8];
  file_.pread_exact(len_bytes, 8, 0);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  require(header_len <= kMaxSafetensorsHeaderBytes,
          path + ": safetensors header length " + std::to_string(header_len) + " exceeds the " +
              std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  require(header_len <= file_size - 8, path + ": safetensors header length " + std::to_string(header_len) +
                                           " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  std::string text(header_len, '\0');
  file_.pread_exact(text.data(), header_len, 8);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": safetensors header is not valid JSON: " + e.what());
  }
  require(header.is_object(), path + ": safetensors header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_bytes = file_size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor '" + name + "'";
    const json& t = it.value();
    require(t.is_object() && t.contains("dtype") && t["dtype"].is_string() && t.contains("shape") &&
                t["shape"].is_array() && t.contains("data_offsets") && t["data_offsets"].is_array() &&
                t["data_offsets"].size() == 2,
            where + ": header entry needs dtype, shape and two data_offsets");
    SafetensorsTensor info;
    info.dtype = t["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(info.dtype);
    require(esize > 0, where + ": unknown dtype '" + info.dtype + "'");
    uint64_t elements = 1;
    for (const json& d : t["shape"]) {
      require(d.is_number_unsigned(), where + ": shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      // Bound each dimension and the product by the file size so nothing can overflow.
      require(v <= data_bytes, where + ": dimension " + std::to_string(v) + " larger than the file's data");
      info.shape.push_back(v);
      if (v != 0) {
        require(elements <= data_bytes / v, where + ": shape has more elements than the file holds");
        elements *= v;
      } else {
        elements = 0;
      }
    }
    const json& off = t["data_offsets"];
    require(off[0].is_number_unsigned() && off[1].is_number_unsigned(), where + ": data_offsets must be non-negative integers");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    require(begin <= end && end <= data_bytes,
            where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the file's data section of " + std::to_string(data_bytes) + " bytes");
    require(end - begin == elements * esize,
            where + ": data_offsets cover " + std::to_string(end - begin) + " bytes but shape and dtype " + info.dtype +
                " need " + std::to_string(elements * esize));
    info.offset = data_start + begin;
    info.bytes = end - begin;
    tensors_.emplace(name, std::move(info));
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<uint8_t> SafetensorsFile::read_bytes(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  require(t != nullptr, path() + ": no tensor '" + name + "'");
  std::vector<uint8_t> out(t->bytes);
  file_.pread_exact(out.data(), out.size(), t->offset);
  return out;
}

}  // namespace waste
