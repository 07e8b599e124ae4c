#include "shared/model/preprocessor_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "shared/model/config_json.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"

namespace waste {

using nlohmann::json;

namespace {

// Bounds that keep a corrupt file from asking for absurd grids (with the tower's patch and
// merge bounds, vision_config.h): the release's values are 65536 and 512; images are at most
// 16384 pixels a side (shared/image).
constexpr int64_t kMaxPatchLimit = int64_t(1) << 24;
constexpr int64_t kMaxPatchesOneSide = 1 << 16;

struct PreprocessorFields {
  const json& j;
  std::string where;

  const json& field(const char* key) const {
    if (!j.contains(key) || j.at(key).is_null()) throw Error(where + ": missing field '" + key + "'");
    return j.at(key);
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = field(key);
    if (!v.is_number_integer()) throw Error(where + ": field '" + key + "' must be an integer");
    const std::string range = " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    // Compared as unsigned first: a value past int64 would wrap in get<int64_t>().
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
      throw Error(where + ": field '" + key + "' = " + std::to_string(v.get<uint64_t>()) + range);
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) throw Error(where + ": field '" + key + "' = " + std::to_string(x) + range);
    return x;
  }
  // Three finite numbers, one per RGB channel; `positive` also refuses 0 and negatives (a
  // std divides every pixel).
  std::array<float, 3> channels(const char* key, bool positive) const {
    const json& v = field(key);
    if (!v.is_array() || v.size() != 3) throw Error(where + ": field '" + key + "' must be a list of 3 numbers (R, G, B)");
    std::array<float, 3> out{};
    for (size_t i = 0; i < 3; ++i) {
      if (!v[i].is_number()) throw Error(where + ": field '" + key + "' must be a list of 3 numbers (R, G, B)");
      const double x = v[i].get<double>();
      // Checked in float too: a double past FLT_MAX would become inf.
      if (!std::isfinite(x) || !std::isfinite(float(x)))
        throw Error(where + ": field '" + key + "' [" + std::to_string(i) + "] is not finite");
      if (positive && !(float(x) > 0.0f))
        throw Error(where + ": field '" + key + "' [" + std::to_string(i) + "] = " + std::to_string(x) +
                    " must be positive");
      out[i] = float(x);
    }
    return out;
  }
};

}  // namespace

PreprocessorConfig PreprocessorConfig::from_json(const std::string& text, const std::string& source) {
  require(text.size() <= kMaxPreprocessorConfigBytes,
          source + ": " + std::to_string(text.size()) + " bytes, more than a preprocessor config may hold (" +
              std::to_string(kMaxPreprocessorConfigBytes) + ")");
  const json root = parse_config_object(text, source);
  if (!root.contains("media_proc_cfg") || !root.at("media_proc_cfg").is_object())
    throw Error(source + ": missing field 'media_proc_cfg' (an object)");
  const PreprocessorFields r{root.at("media_proc_cfg"), source + " (media_proc_cfg)"};
  PreprocessorConfig c;
  c.image_mean = r.channels("image_mean", false);
  c.image_std = r.channels("image_std", true);
  c.patch_size = int(r.integer("patch_size", 1, kMaxVisionPatch));
  c.in_patch_limit = r.integer("in_patch_limit", 1, kMaxPatchLimit);
  c.patch_limit_on_one_side = int(r.integer("patch_limit_on_one_side", 1, kMaxPatchesOneSide));
  c.merge_kernel_size = int(r.integer("merge_kernel_size", 1, kMaxVisionMerge));
  return c;
}

}  // namespace waste
