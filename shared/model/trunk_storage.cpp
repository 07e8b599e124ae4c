#include "shared/model/trunk_storage.h"

#include "shared/util/error.h"

namespace waste {

namespace {
bool quantized(TensorFormat f) { return f == TensorFormat::Q4G || f == TensorFormat::Q8G; }
}  // namespace

TensorFormat trunk_storage_format(TensorRole role, uint64_t cols, const TrunkStorage& s) {
  if (role == TensorRole::Router || role == TensorRole::Vector) return TensorFormat::F32;
  TensorFormat f = s.matrices;
  if (role == TensorRole::Head && s.head) {
    f = *s.head;
  } else if (quantized(s.matrices) && (role == TensorRole::Embedding || role == TensorRole::Head)) {
    // The embedding and head see every token and dominate quality at 4 bits: 8 unless chosen.
    f = TensorFormat::Q8G;
  }
  if (quantized(f) && cols % kTrunkGroup != 0) return TensorFormat::BF16;
  return f;
}

TensorFormat head_format_from_name(const std::string& name) {
  if (name == "q8g") return TensorFormat::Q8G;
  if (name == "q4g") return TensorFormat::Q4G;
  if (name == "bf16") return TensorFormat::BF16;
  if (name == "f32") return TensorFormat::F32;
  throw Error("--head must be q8g, q4g, bf16 or f32, not '" + name + "'", ErrorKind::InvalidRequest, "--head");
}

}  // namespace waste
