// Decodes a PNG or JPEG (from a file or from bytes a client sent) to 8-bit RGB, the input of the
// vision preprocessing (image_preprocess.h). The bytes are untrusted: every size is bounded by
// ImageLimits and checked from the header before any pixel buffer is allocated, and every
// decoder failure is a waste::Error naming the source, never an abort.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace waste {

// Row-major, 3 bytes per pixel (R, G, B), no padding: rgb.size() == width * height * 3.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

struct ImageLimits {
  uint64_t max_bytes = 64ull << 20;  // encoded input (file or buffer)
  int max_width = 16384;
  int max_height = 16384;
  uint64_t max_pixels = 64ull << 20;
  // Decompression bombs: a few KB of PNG can claim a huge uniform image. Decoded RGB bytes per
  // input byte above max_ratio are refused, except for images whose RGB fits in
  // ratio_free_bytes, where a high ratio (a flat icon) is harmless.
  uint64_t max_ratio = 1024;
  uint64_t ratio_free_bytes = 16ull << 20;
};

// `source` names the data in errors: a path, or e.g. "messages[0].content[1].image_url".
// The format is detected from the magic bytes; anything but PNG or JPEG is refused.
// Grayscale is replicated to RGB, alpha is composited on white, 16-bit samples keep their high
// byte, palettes are expanded, JPEG EXIF orientation (1-8) is applied.
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& source,
                      const ImageLimits& limits = {});
RgbImage decode_image(const std::vector<uint8_t>& data, const std::string& source,
                      const ImageLimits& limits = {});
// Reads at most limits.max_bytes from `path` and decodes it; errors name the path.
RgbImage decode_image_file(const std::string& path, const ImageLimits& limits = {});

// The EXIF orientation (1-8) in a JPEG APP1 payload ("Exif\0\0" + TIFF), or 1 when there is
// none or it is malformed. Exposed for the tests.
int exif_orientation(const uint8_t* app1, size_t size);
// Applies EXIF orientation `o` (1-8) so the image is upright; 5-8 swap width and height.
RgbImage apply_orientation(const RgbImage& img, int o);

}  // namespace waste
