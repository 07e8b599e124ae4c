// PreprocessorConfig: the release's preprocessor_config.json (media_proc_cfg) parses, and every
// missing, mistyped or out-of-range field is refused by name.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "shared/model/preprocessor_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

using namespace waste;
using nlohmann::json;

namespace {

json release() {
  return {{"media_proc_cfg",
           {{"image_mean", {0.5, 0.5, 0.5}},
            {"image_std", {0.5, 0.5, 0.5}},
            {"in_patch_limit", 65536},
            {"merge_kernel_size", 2},
            {"patch_limit_on_one_side", 512},
            {"patch_size", 14}}}};
}

std::string refusal(const json& j) {
  try {
    PreprocessorConfig::from_json(j.dump(), "pp.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the vision fixture's preprocessor_config.json parses") {
  const char* shared = std::getenv("WASTE_SHARED_DIR");
  const std::string path = std::string(shared ? shared : "../shared") + "/vision/kimi-k3/preprocessor_config.json";
  const PreprocessorConfig c = PreprocessorConfig::from_json(read_file_text(path, kMaxPreprocessorConfigBytes), path);
  CHECK(c.image_mean == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK(c.image_std == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK_EQ(c.patch_size, 14);
  CHECK_EQ(c.in_patch_limit, 65536);
  CHECK_EQ(c.patch_limit_on_one_side, 512);
  CHECK_EQ(c.merge_kernel_size, 2);
}

TEST_CASE("every missing, mistyped or out-of-range field is refused by name") {
  CHECK(refusal(release()).empty());
  for (const char* key : {"image_mean", "image_std", "in_patch_limit", "merge_kernel_size", "patch_limit_on_one_side",
                          "patch_size"}) {
    CAPTURE(key);
    json j = release();
    j["media_proc_cfg"].erase(key);
    const std::string missing = refusal(j);
    CHECK(missing.find("pp.json") != std::string::npos);
    CHECK(missing.find(std::string("missing field '") + key + "'") != std::string::npos);
    j["media_proc_cfg"][key] = "14";
    CHECK(refusal(j).find(std::string("'") + key + "'") != std::string::npos);
  }
  struct Bad {
    const char* key;
    json value;
    const char* says;
  };
  const Bad bad[] = {
      {"image_std", {0.5, 0.0, 0.5}, "'image_std' [1] = 0"},
      {"image_std", {0.5, 0.5, -1.0}, "must be positive"},
      {"image_std", {0.5, 0.5}, "list of 3 numbers"},
      {"image_mean", {0.5, 0.5, 1e300}, "'image_mean' [2] is not finite"},
      {"image_mean", {0.5, "x", 0.5}, "'image_mean' must be a list of 3 numbers"},
      {"patch_size", 0, "'patch_size' = 0 is outside [1, 64]"},
      {"patch_size", 65, "'patch_size' = 65"},
      {"patch_size", 14.5, "'patch_size' must be an integer"},
      {"in_patch_limit", -1, "'in_patch_limit' = -1"},
      {"in_patch_limit", json(uint64_t(1) << 63), "'in_patch_limit' = 9223372036854775808 is outside"},
      {"patch_limit_on_one_side", 0, "'patch_limit_on_one_side' = 0"},
      {"merge_kernel_size", 9, "'merge_kernel_size' = 9"},
  };
  for (const Bad& b : bad) {
    json j = release();
    j["media_proc_cfg"][b.key] = b.value;
    const std::string why = refusal(j);
    INFO(why);
    CHECK(why.find(b.says) != std::string::npos);
  }
  CHECK(refusal(json{{"image_mean", {0.5, 0.5, 0.5}}}).find("missing field 'media_proc_cfg'") != std::string::npos);
  CHECK(refusal(json::array()).find("expected a JSON object") != std::string::npos);
  CHECK_THROWS_WITH_AS(PreprocessorConfig::from_json("{", "pp.json"), doctest::Contains("pp.json: not valid JSON"), Error);
  CHECK_THROWS_WITH_AS(PreprocessorConfig::from_json(std::string(kMaxPreprocessorConfigBytes + 1, ' '), "pp.json"),
                       doctest::Contains("more than a preprocessor config may hold"), Error);
}
