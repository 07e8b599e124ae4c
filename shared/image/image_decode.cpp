#include "shared/image/image_decode.h"

// jpeglib.h needs <cstdio> (FILE, size_t) before it and jerror.h after it (JWRN_JPEG_EOF).
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {
namespace {

std::string hex_magic(const uint8_t* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < size && i < 8; ++i) {
    if (i) s += ' ';
    s += digits[data[i] >> 4];
    s += digits[data[i] & 15];
  }
  return s.empty() ? "none: empty input" : s;
}

// The header's dimensions against the limits, before any pixel buffer exists.
void check_dimensions(uint64_t w, uint64_t h, size_t input_size, const std::string& source,
                      const ImageLimits& limits) {
  const std::string dims = std::to_string(w) + "x" + std::to_string(h);
  require(w > 0 && h > 0, source + ": image header claims " + dims + " pixels");
  require(w <= uint64_t(limits.max_width) && h <= uint64_t(limits.max_height),
          source + ": image is " + dims + ", larger than the limit of " + std::to_string(limits.max_width) +
              "x" + std::to_string(limits.max_height));
  require(w * h <= limits.max_pixels, source + ": image is " + dims + " = " + std::to_string(w * h) +
                                          " pixels, more than the limit of " + std::to_string(limits.max_pixels));
  const uint64_t rgb_bytes = w * h * 3;
  require(rgb_bytes <= limits.ratio_free_bytes || rgb_bytes / input_size <= limits.max_ratio,
          source + ": " + std::to_string(input_size) + " bytes claim a " + dims +
              " image, a decompression ratio above " + std::to_string(limits.max_ratio) +
              " (refused as a decompression bomb)");
}

// Alpha over white, rounded: c*a/255 + 255*(255-a)/255.
inline uint8_t over_white(unsigned c, unsigned a) { return uint8_t((c * a + 255u * (255u - a) + 127u) / 255u); }

// w x h pixels of `channels` interleaved 8-bit samples to RGB; `pixel(s, d)` writes one pixel's
// three bytes d from its samples s (the only part that differs between the formats).
template <class Pixel>
RgbImage rgb_of_samples(const std::vector<uint8_t>& samples, unsigned w, unsigned h, int channels, Pixel pixel) {
  RgbImage out;
  out.width = int(w);
  out.height = int(h);
  out.rgb.resize(size_t(w) * h * 3);
  const size_t n = size_t(w) * h;
  const uint8_t* s = samples.data();
  uint8_t* d = out.rgb.data();
  for (size_t i = 0; i < n; ++i, s += channels, d += 3) pixel(s, d);
  return out;
}

// ---- PNG -------------------------------------------------------------------------------------
// libpng reports errors through a callback that must not return; it longjmps back to
// decode_png's setjmp. Nothing with a destructor lives in the frames it skips (libpng's own C
// frames and these callbacks), and everything decode_png owns is declared before the setjmp.

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  std::jmp_buf jump;
  char message[256];
};

[[noreturn]] void png_on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg ? msg : "unknown libpng error");
  std::longjmp(r->jump, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // benign (e.g. an unknown ancillary chunk)

void png_on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

struct PngGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngGuard() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& source, const ImageLimits& limits) {
  PngReader reader{data, size, 0, {}, {}};
  PngGuard g;
  std::vector<uint8_t> decoded;  // rows after libpng's transforms: 1-4 channels of 8 bits
  std::vector<png_bytep> rows;
  g.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_on_error, png_on_warning);
  require(g.png != nullptr, source + ": out of memory starting the PNG decoder");
  g.info = png_create_info_struct(g.png);
  require(g.info != nullptr, source + ": out of memory starting the PNG decoder");
  if (setjmp(reader.jump)) throw Error(source + ": " + reader.message);

  png_set_read_fn(g.png, &reader, png_on_read);
  // Bounds libpng's own allocations for ancillary chunks (text, ICC, ...) too.
  png_set_chunk_malloc_max(g.png, 8u << 20);
  png_read_info(g.png, g.info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(g.png, g.info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  check_dimensions(w, h, size, source, limits);  // a C++ throw from this frame unwinds normally

  png_set_expand(g.png);    // palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha
  png_set_strip_16(g.png);  // high byte, as stb_image does
  png_set_interlace_handling(g.png);
  png_read_update_info(g.png, g.info);
  const int channels = png_get_channels(g.png, g.info);
  const size_t row_bytes = png_get_rowbytes(g.png, g.info);
  if (channels < 1 || channels > 4 || row_bytes != size_t(w) * channels)
    png_error(g.png, "unexpected PNG layout after expansion");
  decoded.resize(row_bytes * h);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = decoded.data() + y * row_bytes;
  png_read_image(g.png, rows.data());
  png_read_end(g.png, nullptr);  // checks the CRCs up to IEND: a cut file is an error

  return rgb_of_samples(decoded, w, h, channels, [channels](const uint8_t* s, uint8_t* d) {
    switch (channels) {
      case 1: d[0] = d[1] = d[2] = s[0]; break;
      case 2: d[0] = d[1] = d[2] = over_white(s[0], s[1]); break;
      case 3: d[0] = s[0], d[1] = s[1], d[2] = s[2]; break;
      default: d[0] = over_white(s[0], s[3]), d[1] = over_white(s[1], s[3]), d[2] = over_white(s[2], s[3]);
    }
  });
}

// ---- JPEG ------------------------------------------------------------------------------------
// Same longjmp discipline as the PNG path: error_exit and the EOF warning jump back to
// decode_jpeg's setjmp, past libjpeg's C frames only.

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 32];
};

[[noreturn]] void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  char buf[JMSG_LENGTH_MAX];
  cinfo->err->format_message(cinfo, buf);
  std::snprintf(e->message, sizeof e->message, "%s", buf);
  std::longjmp(e->jump, 1);
}

// libjpeg only warns at the end of the data and pads the image with grey; a cut file must be an
// error. Other warnings (extraneous bytes before a marker, ...) are tolerated, as stb_image does.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "truncated JPEG data");
    std::longjmp(e->jump, 1);
  }
}

// A progressive JPEG may hold thousands of tiny scans, each a full pass over the coefficients:
// a few KB that cost minutes. Real encoders write ~10; libjpeg-turbo's djpeg -maxscans guards
// the same way.
constexpr int kMaxJpegScans = 256;

void jpeg_on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than %d progressive JPEG scans", kMaxJpegScans);
    std::longjmp(e->jump, 1);
  }
}

struct JpegGuard {
  jpeg_decompress_struct cinfo;
  volatile bool created = false;  // set after the setjmp, read after a longjmp
  ~JpegGuard() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& source, const ImageLimits& limits) {
  JpegError err;
  JpegGuard g;
  jpeg_progress_mgr progress{};
  std::vector<uint8_t> decoded;
  std::memset(&err, 0, sizeof err);
  progress.progress_monitor = jpeg_on_progress;
  g.cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  if (setjmp(err.jump)) throw Error(source + ": " + err.message);

  jpeg_create_decompress(&g.cinfo);
  g.created = true;
  g.cinfo.progress = &progress;
  jpeg_mem_src(&g.cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&g.cinfo, JPEG_APP0 + 1, 0xffff);  // EXIF (the orientation)
  jpeg_read_header(&g.cinfo, TRUE);
  check_dimensions(g.cinfo.image_width, g.cinfo.image_height, size, source, limits);
  int orientation = 1;  // after the setjmp: never read after a longjmp, so never clobbered
  for (jpeg_saved_marker_ptr m = g.cinfo.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && orientation == 1) orientation = exif_orientation(m->data, m->data_length);

  const J_COLOR_SPACE in = g.cinfo.jpeg_color_space;
  const bool cmyk = in == JCS_CMYK || in == JCS_YCCK;
  g.cinfo.out_color_space = cmyk ? JCS_CMYK : in == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&g.cinfo);
  const unsigned w = g.cinfo.output_width, h = g.cinfo.output_height;
  const int channels = g.cinfo.output_components;
  if (w != g.cinfo.image_width || h != g.cinfo.image_height || (channels != 1 && channels != 3 && channels != 4))
    ERREXIT(&g.cinfo, JERR_BAD_J_COLORSPACE);
  decoded.resize(size_t(w) * h * channels);
  while (g.cinfo.output_scanline < h) {
    JSAMPROW row = decoded.data() + size_t(g.cinfo.output_scanline) * w * channels;
    jpeg_read_scanlines(&g.cinfo, &row, 1);
  }
  // Adobe (Photoshop) CMYK JPEGs store inverted ink values; plain CMYK stores them as is.
  const bool inverted = g.cinfo.saw_Adobe_marker;
  jpeg_finish_decompress(&g.cinfo);

  RgbImage out = rgb_of_samples(decoded, w, h, channels, [channels, inverted](const uint8_t* s, uint8_t* d) {
    if (channels == 1) {
      d[0] = d[1] = d[2] = s[0];
    } else if (channels == 3) {
      d[0] = s[0], d[1] = s[1], d[2] = s[2];
    } else {
      const unsigned k = inverted ? s[3] : 255u - s[3];
      for (int c = 0; c < 3; ++c) {
        const unsigned v = inverted ? s[c] : 255u - s[c];
        d[c] = uint8_t((v * k + 127u) / 255u);
      }
    }
  });
  if (orientation != 1) return apply_orientation(out, orientation);
  return out;
}

}  // namespace

int exif_orientation(const uint8_t* p, size_t size) {
  // "Exif\0\0", then a TIFF header: byte order ("II" or "MM"), 42, offset of IFD0.
  if (size < 14 || std::memcmp(p, "Exif\0\0", 6) != 0) return 1;
  const uint8_t* t = p + 6;
  const size_t n = size - 6;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> unsigned { return le ? t[at] | t[at + 1] << 8 : t[at] << 8 | t[at + 1]; };
  auto u32 = [&](size_t at) -> uint32_t {
    return le ? uint32_t(t[at]) | uint32_t(t[at + 1]) << 8 | uint32_t(t[at + 2]) << 16 | uint32_t(t[at + 3]) << 24
              : uint32_t(t[at]) << 24 | uint32_t(t[at + 1]) << 16 | uint32_t(t[at + 2]) << 8 | uint32_t(t[at + 3]);
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > n) return 1;
  const unsigned count = u16(ifd);
  // Each entry: tag, type, count (4), value (4). Entries past the payload are not read.
  for (unsigned i = 0; i < count; ++i) {
    const uint64_t e = ifd + 2 + uint64_t(i) * 12;
    if (e + 12 > n) return 1;
    if (u16(e) != 0x0112) continue;
    if (u16(e + 2) != 3 || u32(e + 4) != 1) return 1;  // must be one SHORT
    const unsigned o = u16(e + 8);
    return o >= 1 && o <= 8 ? int(o) : 1;
  }
  return 1;
}

RgbImage apply_orientation(const RgbImage& img, int o) {
  if (o < 2 || o > 8) return img;
  const int W = img.width, H = img.height;
  const bool swap = o >= 5;
  RgbImage out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.rgb.resize(img.rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      // The source pixel shown at (x, y) once the image is upright (EXIF 2.3, tag 0x0112).
      int sx = x, sy = y;
      switch (o) {
        case 2: sx = W - 1 - x; break;                   // mirrored
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;   // rotated 180
        case 4: sy = H - 1 - y; break;                   // flipped
        case 5: sx = y, sy = x; break;                   // transposed
        case 6: sx = y, sy = H - 1 - x; break;           // needs 90 clockwise
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;   // transversed
        case 8: sx = W - 1 - y, sy = x; break;           // needs 90 counter-clockwise
      }
      std::memcpy(&out.rgb[(size_t(y) * out.width + x) * 3], &img.rgb[(size_t(sy) * W + sx) * 3], 3);
    }
  }
  return out;
}

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& source, const ImageLimits& limits) {
  require(size <= limits.max_bytes, source + ": " + std::to_string(size) + " bytes, more than the limit of " +
                                        std::to_string(limits.max_bytes) + " for an image");
  require(size > 0, source + ": empty image (0 bytes)");
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(data, png_magic, 8) == 0) return decode_png(data, size, source, limits);
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return decode_jpeg(data, size, source, limits);
  throw Error(source + ": not a PNG or JPEG image (magic " + hex_magic(data, size) + ")");
}

RgbImage decode_image(const std::vector<uint8_t>& data, const std::string& source, const ImageLimits& limits) {
  return decode_image(data.data(), data.size(), source, limits);
}

RgbImage decode_image_file(const std::string& path, const ImageLimits& limits) {
  return decode_image(read_file_bytes(path, limits.max_bytes), path, limits);
}

}  // namespace waste
