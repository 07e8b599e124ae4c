// Constants and fixed layouts of the .waste container (docs/FORMAT.md is the spec; keep
// both in step). Everything here is little-endian on disk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace waste {

constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kRecordMagic = 0x31525857;  // "WXR1"
constexpr uint16_t kRecordVersion = 1;
constexpr uint64_t kRecordAlign = 4096;        // direct I/O granule: stride and offsets
constexpr uint64_t kTensorAlign = 64;          // trunk tensors and record sections
constexpr uint32_t kRecordHeaderBytes = 64;

// Values match proto/manifest.capnp TensorFormat.
enum class TensorFormat : uint16_t { F32 = 0, BF16 = 1, F16 = 2, Q8G = 3, Q4G = 4, VQ3R = 5 };
const char* format_name(TensorFormat f);
TensorFormat format_from_name(const std::string& name);  // "f32", "bf16", "q8g", ...

// VQ3R geometry: 8-dim vectors, 3 stages of 256 entries, index bytes blocked by tiles of
// 64 rows: byte (row r, vector g, stage s) lives at ((r/64)*G + g)*192 + s*64 + r%64, with
// G = cols/8. A kernel loads one 64-byte line per (tile, vector, stage).
constexpr int kVqDim = 8;
constexpr int kVqStages = 3;
constexpr int kVqEntries = 256;
constexpr int kVqTileRows = 64;
constexpr size_t kCodebookFloats = size_t(kVqStages) * kVqEntries * kVqDim;  // per matrix kind
enum class ExpertMatrix : int { Gate = 0, Up = 1, Down = 2 };

inline uint64_t round_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

inline size_t vq3r_code_bytes(int rows, int cols) {
  return size_t((rows + kVqTileRows - 1) / kVqTileRows) * size_t(cols / kVqDim) * kVqStages * kVqTileRows;
}
inline size_t vq3r_code_index(int row, int g, int stage, int cols) {
  return (size_t(row / kVqTileRows) * size_t(cols / kVqDim) + size_t(g)) * (kVqStages * kVqTileRows) +
         size_t(stage) * kVqTileRows + size_t(row % kVqTileRows);
}

// Bytes of the values of n consecutive elements in a trunk format (no scales): 4, 2, 1 or
// half a byte each; q4g packs two per byte, low nibble first. Throws for vq3r.
uint64_t trunk_value_bytes(TensorFormat f, uint64_t n);

// Bytes of a trunk matrix [rows, cols] in a format (values + scales, scales 64-aligned).
struct TensorBytes {
  uint64_t total = 0;
  uint64_t scales_offset = 0;  // 0 for unquantized formats
};
TensorBytes trunk_tensor_bytes(TensorFormat f, uint64_t rows, uint64_t cols, uint32_t group);

// The 64-byte header at the start of every expert record.
struct RecordHeader {
  uint32_t magic;          // kRecordMagic
  uint16_t version;        // kRecordVersion
  uint16_t format;         // TensorFormat of the three matrices
  uint32_t layer;          // 0-based decoder layer
  uint32_t expert;         // expert id within the layer
  uint32_t hidden;         // expert input width
  uint32_t intermediate;   // expert inner width
  uint32_t payload_bytes;  // bytes after the header covered by `checksum`
  uint32_t gate_offset;    // from the record start
  uint32_t up_offset;
  uint32_t down_offset;
  uint32_t scales_offset;  // vq3r: f16 row scales of gate, up, down back to back; else 0
  uint32_t reserved0;
  uint64_t checksum;       // xxh3-64 of bytes [64, 64 + payload_bytes)
  uint64_t reserved1;
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes, "record header is 64 bytes");

// Where each section of a record lives, derived from the format and the shapes alone, so
// the writer, the manifest and the reader agree by construction.
struct RecordLayout {
  TensorFormat format;
  uint32_t hidden, intermediate;
  uint32_t gate_offset, up_offset, down_offset, scales_offset;
  uint32_t payload_bytes;
  uint64_t stride;
  uint64_t matrix_bytes(ExpertMatrix m) const;
};
RecordLayout record_layout(TensorFormat format, uint32_t hidden, uint32_t intermediate);

uint64_t checksum64(const void* data, size_t n);  // xxh3-64

// Fills in a header for `layout` (checksum computed over payload, which must hold
// layout.payload_bytes bytes starting right after the header).
RecordHeader make_record_header(const RecordLayout& layout, uint32_t layer, uint32_t expert, const uint8_t* payload);

// Checks a record (header + payload, at least layout.stride bytes) against what the
// manifest says it must be. Returns an empty string when good, else the reason, naming
// layer and expert. verify_checksum=false skips the payload hash (header-only check).
std::string check_record(const uint8_t* record, const RecordLayout& layout, uint32_t layer, uint32_t expert,
                         bool verify_checksum);

std::string bank_file_name(int layer);  // "experts-L<layer>.bin"

}  // namespace waste
