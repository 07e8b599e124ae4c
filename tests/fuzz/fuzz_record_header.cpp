// libFuzzer target: an expert record as read from a bank file (or by iod into a slot) through
// check_record, against the layout the manifest gives. The first bytes choose the layout (format,
// shapes) and whether the payload checksum is verified; with verification the checksum field is
// set right in half the inputs so the checks behind it are reached too. The rest is the record,
// zero-padded to the layout's stride as a slot would be.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/util/error.h"

namespace {

constexpr size_t kLayoutBytes = 6;
// Widths in units of 8 (what the layouts allow), at most 1024: bounds the stride (and so each
// input's allocation); the records of the test models are far smaller.
constexpr uint32_t kMaxWidthUnits = 128;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kLayoutBytes) return 0;
  const auto format = waste::TensorFormat(data[0] % 6);
  // A width not a multiple of 8 now and then, so record_layout's refusal is reached too.
  const uint32_t hidden = data[1] == 0xff ? data[2] : (data[2] % kMaxWidthUnits + 1) * 8;
  const uint32_t intermediate = data[3] == 0xff ? data[4] : (data[4] % kMaxWidthUnits + 1) * 8;
  const bool verify = data[5] & 1, fix_checksum = data[5] & 2;
  waste::RecordLayout layout;
  try {
    layout = waste::record_layout(format, hidden, intermediate);
  } catch (const waste::Error&) {
    return 0;  // shapes this format cannot store
  }
  std::vector<uint8_t> record(layout.stride, 0);
  std::memcpy(record.data(), data + kLayoutBytes, std::min(size - kLayoutBytes, record.size()));
  waste::RecordHeader h;
  std::memcpy(&h, record.data(), sizeof h);
  if (fix_checksum && h.payload_bytes <= record.size() - sizeof h) {
    h.checksum = waste::checksum64(record.data() + sizeof h, h.payload_bytes);
    std::memcpy(record.data(), &h, sizeof h);
  }
  try {
    const std::string why = waste::check_record(record.data(), layout, h.layer, h.expert, verify);
    // A record accepted must be the one the layout describes.
    if (why.empty() && (h.magic != waste::kRecordMagic || h.payload_bytes != layout.payload_bytes ||
                        h.gate_offset != layout.gate_offset || h.down_offset != layout.down_offset))
      __builtin_trap();
  } catch (const waste::Error&) {
  }
  return 0;
}
