// Random trunk-matrix bytes for `waste synth`, written straight in the on-disk layout of a
// quantized format (nothing is encoded, so large shapes are written at disk speed).
#pragma once
#include <cstdint>
#include <vector>

#include "shared/container/format.h"
#include "shared/util/random.h"

namespace waste {

// A q8g or q4g matrix [rows, cols] (docs/FORMAT.md layout: values, then f16 scales per
// `group` inputs) whose elements have standard deviation `std_dev`.
std::vector<uint8_t> random_quantized(TensorFormat f, uint64_t rows, uint64_t cols, uint32_t group, double std_dev,
                                      Rng& rng);

}  // namespace waste
