// Image decoding and vision preprocessing against ../shared/vision/kimi-k3 (grid, pixels, the
// stb_image decode of the JPEG), plus hostile inputs built here: each must be a waste::Error
// naming its source, never a crash. Exits 77 (SKIP) when the fixture is missing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <jpeglib.h>
#include <png.h>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/image/image_decode.h"
#include "shared/image/image_preprocess.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

using namespace waste;

namespace {

std::string fixture() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  const std::string path = std::string(dir ? dir : "") + "/vision/kimi-k3";
  if (!dir || !path_exists(path + "/image_0.json")) {
    std::fprintf(stderr, "SKIP: %s not found (WASTE_SHARED_DIR)\n", path.c_str());
    std::exit(77);
  }
  return path;
}

std::vector<uint8_t> bytes_of(const std::string& path) { return read_file_bytes(path, 64u << 20); }

std::vector<float> f32_of(const std::string& path) {
  auto b = bytes_of(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// The message of the waste::Error `f` throws; fails the test when it throws nothing.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no waste::Error thrown");
  return "";
}

// ---- building test images ----

struct PngSpec {
  int width, height, color_type, bit_depth;
  bool interlace = false;
  std::vector<png_color> palette = {};
  int level = 6;
};

void png_write_cb(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void png_flush_cb(png_structp) {}

// `row(y, buf)` fills one row in the PNG's own sample layout (16-bit samples big-endian).
template <class Row>
std::vector<uint8_t> make_png(const PngSpec& s, Row row) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  REQUIRE(setjmp(png_jmpbuf(png)) == 0);
  png_set_write_fn(png, &out, png_write_cb, png_flush_cb);
  png_set_compression_level(png, s.level);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), int(s.palette.size()));
  png_write_info(png, info);
  std::vector<uint8_t> buf(png_get_rowbytes(png, info));
  const int passes = png_set_interlace_handling(png);
  for (int p = 0; p < passes; ++p)
    for (int y = 0; y < s.height; ++y) {
      row(y, buf.data());
      png_write_row(png, buf.data());
    }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

uint32_t crc32_of(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

void put_chunk(std::vector<uint8_t>& v, const char* type, const std::vector<uint8_t>& data) {
  put_be32(v, uint32_t(data.size()));
  const size_t start = v.size();
  v.insert(v.end(), type, type + 4);
  v.insert(v.end(), data.begin(), data.end());
  put_be32(v, crc32_of(v.data() + start, v.size() - start));
}

// A well-formed PNG start (valid CRCs) whose IHDR claims w x h RGB, then an empty IDAT and IEND.
std::vector<uint8_t> png_claiming(uint32_t w, uint32_t h) {
  std::vector<uint8_t> v = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, w);
  put_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  put_chunk(v, "IHDR", ihdr);
  put_chunk(v, "IDAT", {});
  put_chunk(v, "IEND", {});
  return v;
}

// A baseline JPEG (quality 95, no subsampling) of w x h samples of `components` channels in
// color space `cs`, with `app1` written as an APP1 marker if given.
// `scans`, when given, is the progressive scan script.
std::vector<uint8_t> make_jpeg_raw(int w, int h, int components, J_COLOR_SPACE cs, const uint8_t* samples,
                                   const std::vector<uint8_t>& app1, const std::vector<jpeg_scan_info>& scans = {}) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &mem, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = components;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  for (int i = 0; i < components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  if (!scans.empty()) c.scan_info = scans.data(), c.num_scans = int(scans.size());
  jpeg_start_compress(&c, TRUE);
  if (!app1.empty()) jpeg_write_marker(&c, JPEG_APP0 + 1, app1.data(), unsigned(app1.size()));
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(samples) + size_t(c.next_scanline) * w * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(mem, mem + size);
  jpeg_destroy_compress(&c);
  std::free(mem);
  return out;
}

std::vector<uint8_t> make_jpeg(const RgbImage& img, const std::vector<uint8_t>& app1) {
  return make_jpeg_raw(img.width, img.height, 3, JCS_RGB, img.rgb.data(), app1);
}

// "Exif\0\0" + a little-endian TIFF header with one IFD0 entry: Orientation = o.
std::vector<uint8_t> exif_with_orientation(int o) {
  return {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0,  // TIFF header, IFD0 at 8
          1, 0,                                                     // one entry
          0x12, 0x01, 3, 0, 1, 0, 0, 0, uint8_t(o), 0, 0, 0,       // 0x0112, SHORT, count 1, o
          0, 0, 0, 0};                                              // no next IFD
}

const uint8_t* pixel(const RgbImage& img, int x, int y) { return &img.rgb[(size_t(y) * img.width + x) * 3]; }

}  // namespace

TEST_CASE("fixture images: grid and pixels as stored") {
  const std::string dir = fixture();
  for (int n = 0; path_exists(dir + "/image_" + std::to_string(n) + ".json"); ++n) {
    const std::string base = dir + "/image_" + std::to_string(n);
    const auto j = nlohmann::json::parse(read_file_text(base + ".json", 1u << 20));
    CAPTURE(base);
    const RgbImage img = decode_image_file(dir + "/" + j["image"]["file"].get<std::string>());
    CHECK(img.width == j["image"]["width"].get<int>());
    CHECK(img.height == j["image"]["height"].get<int>());

    const PatchGrid g = fit_patch_grid(img.width, img.height, 14, j["preprocess"]["max_patches"].get<int>());
    CHECK(g.h_patches == j["grid"]["h_patches"].get<int>());
    CHECK(g.w_patches == j["grid"]["w_patches"].get<int>());
    const auto shape = j["pixels"]["shape"].get<std::vector<int>>();
    REQUIRE(shape.size() == 4);
    CHECK(shape[0] == g.h_patches * g.w_patches);
    const int patch = shape[2];
    const auto mean = j["preprocess"]["image_mean"].get<std::array<float, 3>>();
    const auto stdv = j["preprocess"]["image_std"].get<std::array<float, 3>>();
    const std::vector<float> want = f32_of(dir + "/" + j["pixels"]["file"].get<std::string>());
    REQUIRE(want.size() == size_t(shape[0]) * shape[1] * shape[2] * shape[3]);

    auto max_diff = [&](const std::vector<float>& got, size_t* differing) {
      REQUIRE(got.size() == want.size());
      double m = 0;
      *differing = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(want[i]));
        m = std::max(m, d);
        *differing += got[i] != want[i];
      }
      return m;
    };
    size_t differing = 0;
    const double d_own = max_diff(image_pixels(img, g, patch, mean, stdv), &differing);
    MESSAGE(base << ": pixels from our decode: max |diff| " << d_own << ", " << differing << " of " << want.size()
                 << " values differ");
    if (j["image"]["format"] == "PNG") {
      CHECK(d_own <= 1e-4);
    } else {
      // The JPEG: our libjpeg-turbo decode vs stb_image's, and the pixels from stb's decode.
      const std::vector<uint8_t> stb = bytes_of(base + ".rgb.u8");
      REQUIRE(stb.size() == img.rgb.size());
      int max_code = 0;
      size_t codes_differing = 0;
      for (size_t i = 0; i < stb.size(); ++i) {
        const int d = std::abs(int(stb[i]) - int(img.rgb[i]));
        max_code = std::max(max_code, d);
        codes_differing += d != 0;
      }
      MESSAGE(base << ": libjpeg-turbo vs stb_image decode: max " << max_code << " codes, " << codes_differing
                   << " of " << stb.size() << " values differ");
      CHECK(max_code <= 4);
      const RgbImage from_stb{img.width, img.height, stb};
      const double d_stb = max_diff(image_pixels(from_stb, g, patch, mean, stdv), &differing);
      MESSAGE(base << ": pixels from stb's decode: max |diff| " << d_stb << ", " << differing << " differ");
      CHECK(d_stb <= 1e-4);
    }
  }
}

TEST_CASE("fit_patch_grid: the README's rule") {
  auto g = fit_patch_grid(70, 42);  // 5 x 3 patches -> even: 4 x 2
  CHECK(g.w_patches == 4);
  CHECK(g.h_patches == 2);
  g = fit_patch_grid(10, 10);  // smaller than 28x28: up to 2x2
  CHECK(g.w_patches == 2);
  CHECK(g.h_patches == 2);
  g = fit_patch_grid(4000, 3000);
  CHECK(g.w_patches * g.h_patches <= 1024);
  CHECK(g.w_patches % 2 == 0);
  CHECK(g.h_patches % 2 == 0);
  g = fit_patch_grid(100000, 14);  // extreme aspect: the budget still holds
  CHECK(g.w_patches * g.h_patches <= 1024);
  CHECK(g.h_patches == 2);
  CHECK_THROWS_AS(fit_patch_grid(0, 10), Error);
  CHECK_THROWS_AS(fit_patch_grid(10, 10, 14, 3), Error);
}

TEST_CASE("image_pixels: mean and std are parameters, no resample at the grid size") {
  RgbImage img{28, 28, std::vector<uint8_t>(28 * 28 * 3)};
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t(i % 3 == 0 ? 255 : i % 3 == 1 ? 0 : 51);
  const auto px = image_pixels(img, {2, 2}, 14, {0.48f, 0.45f, 0.40f}, {0.26f, 0.26f, 0.27f});
  REQUIRE(px.size() == 4 * 3 * 196);
  CHECK(px[0] == (255 / 255.0f - 0.48f) / 0.26f);
  CHECK(px[196] == (0 / 255.0f - 0.45f) / 0.26f);
  CHECK(px[2 * 196] == (51 / 255.0f - 0.40f) / 0.27f);
}

TEST_CASE("hostile inputs are errors naming the source") {
  const std::string dir = fixture();
  const auto png = bytes_of(dir + "/image_0.png");
  const auto jpg = bytes_of(dir + "/image_2.jpg");
  const std::string src = "messages[0].content[1].image_url";

  for (size_t cut : {size_t(8), size_t(33), png.size() / 2, png.size() - 5}) {
    CAPTURE(cut);
    const std::string e = error_of([&] { decode_image(png.data(), cut, src); });
    CHECK(e.find(src) == 0);
    MESSAGE("PNG cut at " << cut << ": " << e);
  }
  for (size_t cut : {size_t(3), size_t(100), jpg.size() / 2, jpg.size() - 2}) {
    CAPTURE(cut);
    const std::string e = error_of([&] { decode_image(jpg.data(), cut, src); });
    CHECK(e.find(src) == 0);
    MESSAGE("JPEG cut at " << cut << ": " << e);
  }
  std::string e = error_of([&] { decode_image(std::vector<uint8_t>{'G', 'I', 'F', '8', '9', 'a', 1, 0}, src); });
  CHECK(e == src + ": not a PNG or JPEG image (magic 47 49 46 38 39 61 01 00)");
  e = error_of([&] { decode_image(std::vector<uint8_t>{}, src); });
  CHECK(e.find(src) == 0);
  e = error_of([&] { decode_image_file("/nonexistent/x.png"); });
  CHECK(e.find("/nonexistent/x.png") != std::string::npos);

  const auto huge = png_claiming(100000, 100000);
  e = error_of([&] { decode_image(huge, "huge.png"); });
  CHECK(e.find("huge.png: image is 100000x100000") == 0);
  MESSAGE(e);
  // Garbage in a chunk: the CRC is wrong, libpng says so.
  auto bad = png;
  bad[40] ^= 0xff;
  e = error_of([&] { decode_image(bad, "bad.png"); });
  CHECK(e.find("bad.png: ") == 0);

  // A decompression bomb: a valid 6000x6000 flat gray PNG of a few tens of KB, within the
  // pixel limit but ~3000x its size once decoded to RGB.
  const auto bomb = make_png({6000, 6000, PNG_COLOR_TYPE_GRAY, 8, false, {}, 9},
                             [](int, uint8_t* row) { std::memset(row, 128, 6000); });
  MESSAGE("bomb: " << bomb.size() << " bytes for 6000x6000");
  e = error_of([&] { decode_image(bomb, "bomb.png"); });
  CHECK(e.find("bomb.png: ") == 0);
  CHECK(e.find("decompression") != std::string::npos);
  ImageLimits tight;
  tight.max_pixels = 1000;
  e = error_of([&] { decode_image(png, "small.png", tight); });
  CHECK(e.find("small.png: image is 84x56") == 0);
  tight = {};
  tight.max_bytes = 100;
  e = error_of([&] { decode_image(png, "small.png", tight); });
  CHECK(e.find("small.png: ") == 0);
}

TEST_CASE("PNG variants: RGBA and gray+alpha on white, 16-bit, palette, interlaced") {
  // RGBA: opaque red, transparent, half-transparent blue.
  auto rgba = make_png({3, 1, PNG_COLOR_TYPE_RGBA, 8}, [](int, uint8_t* r) {
    const uint8_t v[12] = {255, 0, 0, 255, 10, 20, 30, 0, 0, 0, 255, 128};
    std::memcpy(r, v, 12);
  });
  RgbImage img = decode_image(rgba, "rgba.png");
  REQUIRE(img.width == 3);
  CHECK(std::vector<uint8_t>(img.rgb.begin(), img.rgb.end()) ==
        std::vector<uint8_t>{255, 0, 0, 255, 255, 255, 127, 127, 255});

  auto ga = make_png({2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8}, [](int, uint8_t* r) {
    const uint8_t v[4] = {0, 255, 0, 0};
    std::memcpy(r, v, 4);
  });
  img = decode_image(ga, "ga.png");
  CHECK(img.rgb == std::vector<uint8_t>{0, 0, 0, 255, 255, 255});

  // 16-bit RGB: the high byte.
  auto deep = make_png({2, 1, PNG_COLOR_TYPE_RGB, 16}, [](int, uint8_t* r) {
    const uint8_t v[12] = {0x12, 0x34, 0xff, 0xff, 0x00, 0x80, 0xab, 0xcd, 0x01, 0x00, 0x7f, 0xff};
    std::memcpy(r, v, 12);
  });
  img = decode_image(deep, "deep.png");
  CHECK(img.rgb == std::vector<uint8_t>{0x12, 0xff, 0x00, 0xab, 0x01, 0x7f});

  // 16-bit gray, replicated.
  auto gray16 = make_png({1, 1, PNG_COLOR_TYPE_GRAY, 16}, [](int, uint8_t* r) { r[0] = 0x9a, r[1] = 0x01; });
  img = decode_image(gray16, "gray16.png");
  CHECK(img.rgb == std::vector<uint8_t>{0x9a, 0x9a, 0x9a});

  // Palette, 4 bits per index.
  PngSpec pal{4, 2, PNG_COLOR_TYPE_PALETTE, 4};
  pal.palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {7, 8, 9}};
  auto palette = make_png(pal, [](int y, uint8_t* r) { r[0] = y ? 0x32 : 0x01, r[1] = y ? 0x10 : 0x23; });
  img = decode_image(palette, "palette.png");
  REQUIRE(img.width == 4);
  REQUIRE(img.height == 2);
  CHECK(std::vector<uint8_t>(pixel(img, 0, 0), pixel(img, 0, 0) + 3) == std::vector<uint8_t>{255, 0, 0});
  CHECK(std::vector<uint8_t>(pixel(img, 1, 0), pixel(img, 1, 0) + 3) == std::vector<uint8_t>{0, 255, 0});
  CHECK(std::vector<uint8_t>(pixel(img, 3, 0), pixel(img, 3, 0) + 3) == std::vector<uint8_t>{7, 8, 9});
  CHECK(std::vector<uint8_t>(pixel(img, 0, 1), pixel(img, 0, 1) + 3) == std::vector<uint8_t>{7, 8, 9});
  CHECK(std::vector<uint8_t>(pixel(img, 1, 1), pixel(img, 1, 1) + 3) == std::vector<uint8_t>{0, 0, 255});

  // Interlaced RGB: every pixel where it belongs.
  PngSpec il{13, 11, PNG_COLOR_TYPE_RGB, 8};
  il.interlace = true;
  auto interlaced = make_png(il, [](int y, uint8_t* r) {
    for (int x = 0; x < 13; ++x) r[x * 3] = uint8_t(x), r[x * 3 + 1] = uint8_t(y), r[x * 3 + 2] = uint8_t(x * y);
  });
  img = decode_image(interlaced, "interlaced.png");
  bool ok = img.width == 13 && img.height == 11;
  for (int y = 0; ok && y < 11; ++y)
    for (int x = 0; x < 13; ++x)
      ok = ok && pixel(img, x, y)[0] == x && pixel(img, x, y)[1] == y && pixel(img, x, y)[2] == x * y;
  CHECK(ok);
}

TEST_CASE("JPEG EXIF orientation is applied") {
  // 32 x 16: left half red, right half blue; top-left 8x8 block green as a marker.
  RgbImage src{32, 16, std::vector<uint8_t>(32 * 16 * 3)};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 32; ++x) {
      uint8_t* p = &src.rgb[(size_t(y) * 32 + x) * 3];
      const bool marker = x < 8 && y < 8;
      p[0] = marker ? 0 : x < 16 ? 255 : 0;
      p[1] = marker ? 255 : 0;
      p[2] = marker ? 0 : x < 16 ? 0 : 255;
    }
  auto near = [](const uint8_t* p, int r, int g, int b) {
    return std::abs(p[0] - r) <= 24 && std::abs(p[1] - g) <= 24 && std::abs(p[2] - b) <= 24;
  };
  const RgbImage plain = decode_image(make_jpeg(src, {}), "plain.jpg");
  CHECK(plain.width == 32);
  CHECK(near(pixel(plain, 3, 3), 0, 255, 0));
  // Orientation 6: shown rotated 90 degrees clockwise, 16 wide and 32 high; the source's
  // top-left marker lands top-right, its left (red) half on top.
  const RgbImage rot = decode_image(make_jpeg(src, exif_with_orientation(6)), "rot6.jpg");
  REQUIRE(rot.width == 16);
  REQUIRE(rot.height == 32);
  CHECK(near(pixel(rot, 12, 3), 0, 255, 0));
  CHECK(near(pixel(rot, 3, 12), 255, 0, 0));
  CHECK(near(pixel(rot, 8, 28), 0, 0, 255));
  // Every orientation against apply_orientation of the plain decode (same JPEG data).
  for (int o = 1; o <= 8; ++o) {
    CAPTURE(o);
    const RgbImage got = decode_image(make_jpeg(src, exif_with_orientation(o)), "o.jpg");
    CHECK(got.rgb == apply_orientation(plain, o).rgb);
    CHECK(got.width == (o >= 5 ? 16 : 32));
  }
  // Malformed EXIF is ignored, never read out of bounds.
  auto ex = exif_with_orientation(6);
  CHECK(exif_orientation(ex.data(), ex.size()) == 6);
  for (size_t cut = 0; cut < ex.size() - 4; ++cut) CHECK(exif_orientation(ex.data(), cut) == 1);  // up to the entry's end
  ex[14] = 0xff, ex[15] = 0xff;  // 65535 entries claimed
  CHECK(exif_orientation(ex.data(), ex.size()) == 6);  // the first is still there and read
  ex[16] = 0;                                           // ...but no longer the orientation tag
  CHECK(exif_orientation(ex.data(), ex.size()) == 1);
}

TEST_CASE("JPEG grayscale and CMYK decode to RGB") {
  const std::vector<uint8_t> gray(16 * 16, 77);
  RgbImage img = decode_image(make_jpeg_raw(16, 16, 1, JCS_GRAYSCALE, gray.data(), {}), "gray.jpg");
  REQUIRE(img.width == 16);
  CHECK(std::abs(pixel(img, 5, 5)[0] - 77) <= 1);
  CHECK(pixel(img, 5, 5)[0] == pixel(img, 5, 5)[1]);
  CHECK(pixel(img, 5, 5)[0] == pixel(img, 5, 5)[2]);
  // libjpeg writes CMYK with an Adobe marker, so the samples are inverted ink (255 = none):
  // (255, 0, 255, 255) is full magenta ink only, i.e. magenta.
  std::vector<uint8_t> cmyk(16 * 16 * 4);
  for (size_t i = 0; i < cmyk.size(); i += 4) cmyk[i] = 255, cmyk[i + 1] = 0, cmyk[i + 2] = 255, cmyk[i + 3] = 255;
  img = decode_image(make_jpeg_raw(16, 16, 4, JCS_CMYK, cmyk.data(), {}), "cmyk.jpg");
  REQUIRE(img.width == 16);
  const uint8_t* p = pixel(img, 8, 8);
  CHECK(p[0] >= 250);
  CHECK(p[1] <= 5);
  CHECK(p[2] >= 250);
}

TEST_CASE("a progressive JPEG with hundreds of scans is refused") {
  // Gray 8x8, every coefficient sent at 11 bit positions: 64 x 11 = 704 valid scans.
  std::vector<jpeg_scan_info> scans;
  for (int k = 0; k < 64; ++k) {
    scans.push_back({1, {0, 0, 0, 0}, k, k, 0, 10});
    for (int al = 9; al >= 0; --al) scans.push_back({1, {0, 0, 0, 0}, k, k, al + 1, al});
  }
  const std::vector<uint8_t> gray(64, 99);
  const auto jpg = make_jpeg_raw(8, 8, 1, JCS_GRAYSCALE, gray.data(), {}, scans);
  const std::string e = error_of([&] { decode_image(jpg, "scans.jpg"); });
  CHECK(e == "scans.jpg: more than 256 progressive JPEG scans");
  // The same image with a normal script decodes.
  scans.resize(12);  // coefficients 0 and 1 only: still valid
  const RgbImage img = decode_image(make_jpeg_raw(8, 8, 1, JCS_GRAYSCALE, gray.data(), {}, scans), "few.jpg");
  CHECK(img.width == 8);
}
