// Group quantization of trunk matrices (Q8G, Q4G), symmetric, one f16 scale per group.
// Q8G: q = round(x / s), s = max|x| / 127.  Q4G: q = round(x / s) + 8 in [0, 15],
// s = max|x| / 7 (so -8 is never produced and the grid is symmetric).
#pragma once
#include <cstdint>
#include <vector>

#include "shared/container/format.h"

namespace waste {

// Encodes src [rows, cols] into the on-disk layout of docs/FORMAT.md (values plane, then
// scales at trunk_tensor_bytes(...).scales_offset). Returns the bytes.
std::vector<uint8_t> quantize_matrix(TensorFormat format, const float* src, uint64_t rows, uint64_t cols,
                                     uint32_t group);

}  // namespace waste
