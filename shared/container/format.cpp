#include "shared/container/format.h"

#include <xxhash.h>

#include <cstring>

#include "shared/util/error.h"

namespace waste {

const char* format_name(TensorFormat f) {
  switch (f) {
    case TensorFormat::F32: return "f32";
    case TensorFormat::BF16: return "bf16";
    case TensorFormat::F16: return "f16";
    case TensorFormat::Q8G: return "q8g";
    case TensorFormat::Q4G: return "q4g";
    case TensorFormat::VQ3R: return "vq3r";
  }
  return "?";
}

TensorFormat format_from_name(const std::string& name) {
  for (auto f : {TensorFormat::F32, TensorFormat::BF16, TensorFormat::F16, TensorFormat::Q8G, TensorFormat::Q4G,
                 TensorFormat::VQ3R})
    if (name == format_name(f)) return f;
  throw Error("unknown tensor format '" + name + "' (f32, bf16, f16, q8g, q4g, vq3r)");
}

uint64_t trunk_value_bytes(TensorFormat f, uint64_t n) {
  switch (f) {
    case TensorFormat::F32: return n * 4;
    case TensorFormat::BF16:
    case TensorFormat::F16: return n * 2;
    case TensorFormat::Q8G: return n;
    case TensorFormat::Q4G: return (n + 1) / 2;
    case TensorFormat::VQ3R: break;
  }
  throw Error(std::string("format ") + format_name(f) + " is not a trunk format");
}

TensorBytes trunk_tensor_bytes(TensorFormat f, uint64_t rows, uint64_t cols, uint32_t group) {
  TensorBytes b;
  b.total = trunk_value_bytes(f, rows * cols);
  if (f == TensorFormat::Q8G || f == TensorFormat::Q4G) {
    require(group > 0 && cols % group == 0, "q8g/q4g need cols divisible by the group size");
    b.scales_offset = round_up(b.total, kTensorAlign);
    b.total = b.scales_offset + rows * (cols / group) * 2;
  }
  return b;
}

uint64_t RecordLayout::matrix_bytes(ExpertMatrix m) const {
  uint32_t rows = m == ExpertMatrix::Down ? hidden : intermediate;
  uint32_t cols = m == ExpertMatrix::Down ? intermediate : hidden;
  switch (format) {
    case TensorFormat::F32: return uint64_t(rows) * cols * 4;
    case TensorFormat::BF16: return uint64_t(rows) * cols * 2;
    case TensorFormat::VQ3R: return vq3r_code_bytes(int(rows), int(cols));
    default: throw Error(std::string("expert format ") + format_name(format) + " is not supported");
  }
}

RecordLayout record_layout(TensorFormat format, uint32_t hidden, uint32_t intermediate) {
  require(format == TensorFormat::F32 || format == TensorFormat::BF16 || format == TensorFormat::VQ3R,
          std::string("expert format must be vq3r, f32 or bf16, not ") + format_name(format));
  require(hidden % kVqDim == 0 && intermediate % kVqDim == 0,
          "expert widths must be multiples of 8 (hidden " + std::to_string(hidden) + ", intermediate " +
              std::to_string(intermediate) + ")");
  RecordLayout l{};
  l.format = format;
  l.hidden = hidden;
  l.intermediate = intermediate;
  uint64_t at = kRecordHeaderBytes;
  l.gate_offset = uint32_t(at);
  at = round_up(at + l.matrix_bytes(ExpertMatrix::Gate), kTensorAlign);
  l.up_offset = uint32_t(at);
  at = round_up(at + l.matrix_bytes(ExpertMatrix::Up), kTensorAlign);
  l.down_offset = uint32_t(at);
  at = at + l.matrix_bytes(ExpertMatrix::Down);
  if (format == TensorFormat::VQ3R) {
    at = round_up(at, kTensorAlign);
    l.scales_offset = uint32_t(at);
    at += (2ull * intermediate + hidden) * 2;
  }
  require(at < (1ull << 32), "expert record larger than 4 GiB");
  l.payload_bytes = uint32_t(at - kRecordHeaderBytes);
  l.stride = round_up(at, kRecordAlign);
  return l;
}

uint64_t checksum64(const void* data, size_t n) { return XXH3_64bits(data, n); }

RecordHeader make_record_header(const RecordLayout& layout, uint32_t layer, uint32_t expert, const uint8_t* payload) {
  RecordHeader h{};
  h.magic = kRecordMagic;
  h.version = kRecordVersion;
  h.format = uint16_t(layout.format);
  h.layer = layer;
  h.expert = expert;
  h.hidden = layout.hidden;
  h.intermediate = layout.intermediate;
  h.payload_bytes = layout.payload_bytes;
  h.gate_offset = layout.gate_offset;
  h.up_offset = layout.up_offset;
  h.down_offset = layout.down_offset;
  h.scales_offset = layout.scales_offset;
  h.checksum = checksum64(payload, layout.payload_bytes);
  return h;
}

std::string check_record(const uint8_t* record, const RecordLayout& layout, uint32_t layer, uint32_t expert,
                         bool verify_checksum) {
  RecordHeader h;
  std::memcpy(&h, record, sizeof h);
  // Built only for a message: this runs on every expert a step uses.
  auto who = [&] { return "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + ": "; };
  if (h.magic != kRecordMagic) return who() + "bad magic (not an expert record)";
  if (h.version != kRecordVersion) return who() + "record version " + std::to_string(h.version) + " is not supported";
  if (h.layer != layer || h.expert != expert)
    return who() + "header names layer " + std::to_string(h.layer) + " expert " + std::to_string(h.expert);
  if (h.format != uint16_t(layout.format) || h.hidden != layout.hidden || h.intermediate != layout.intermediate ||
      h.payload_bytes != layout.payload_bytes || h.gate_offset != layout.gate_offset ||
      h.up_offset != layout.up_offset || h.down_offset != layout.down_offset ||
      h.scales_offset != layout.scales_offset)
    return who() + "header shape or offsets disagree with the manifest";
  if (verify_checksum && checksum64(record + kRecordHeaderBytes, h.payload_bytes) != h.checksum)
    return who() + "payload checksum mismatch (damaged record)";
  return {};
}

std::string bank_file_name(int layer) { return "experts-L" + std::to_string(layer) + ".bin"; }

}  // namespace waste
