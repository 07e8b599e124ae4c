// libFuzzer target: untrusted bytes through the image path a request's image takes (decode with
// the default limits, then the patch grid and pixels at the default budget). Any waste::Error
// is a clean refusal; a crash, a sanitizer report, a hang or a leak is a defect.
// Built and run by tests/fuzz/run (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>

#include "shared/image/image_decode.h"
#include "shared/image/image_preprocess.h"
#include "shared/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const waste::RgbImage img = waste::decode_image(data, size, "fuzz");
    if (img.rgb.size() != size_t(img.width) * size_t(img.height) * 3) __builtin_trap();  // the decoder's contract
    const waste::PatchGrid g = waste::fit_patch_grid(img.width, img.height, 14, 1024);
    if (g.h_patches * g.w_patches > 1024 || g.h_patches % 2 || g.w_patches % 2) __builtin_trap();
    const std::vector<float> px = waste::image_pixels(img, g, 14, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
    if (px.size() != size_t(g.h_patches) * size_t(g.w_patches) * 588) __builtin_trap();
  } catch (const waste::Error&) {
  }
  return 0;
}
