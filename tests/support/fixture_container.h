// A .waste container of a checkpoint fixture written exactly, with no conversion step in
// between: what the model and engine unit tests run the container path on, so that the
// fixtures' reference logits (and their tolerance) still apply.
#pragma once
#include <string>

#include "shared/hf/checkpoint.h"

namespace waste::test {

enum class FixtureStorage {
  // Matrices and experts BF16, vectors and routers f32: lossless for the bf16 fixtures
  // (MXFP4 experts are exact in bf16 too), and the formats the engine serves.
  Lossless,
  // Every tensor and expert f32: the checkpoint's values bit for bit, whatever their dtype.
  F32,
};

// Writes the whole container (trunk, then every MoE layer's experts) to directory `out`.
// created_by: the manifest's writer, naming the test that wrote it.
void write_fixture_container(const Checkpoint& ck, const std::string& out, FixtureStorage storage,
                             const std::string& created_by);

}  // namespace waste::test
