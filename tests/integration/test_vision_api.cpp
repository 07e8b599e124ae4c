// Images in prompts through the front ends, with real processes on a synthetic K3 with a vision
// tower (`waste synth --preset tiny-k3`): OpenAI image_url data URLs over HTTP (usage counts the
// image tokens, streamed and not; every bad image, a remote URL or a bad detail is a 400 naming
// the field, and the server answers after), local files with --image-dir and what it refuses, a
// model without a tower, the C API, `waste run --image` and `waste chat`'s /image, and the
// official openai npm client. The images are made here (zlib): their token counts come from the
// README's grid rule (../shared/vision/kimi-k3/README.md, "The pipeline, exactly", step 2)
// applied to the size the test wrote, checked against the fixture's image_0.png (6) when present.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "shared/image/image_budget.h"
#include "tests/integration/test_engine_instance.h"
#include "tools/libwaste/engine_client.h"
#include "tools/libwaste/waste.h"
#include "tools/serve/openai.h"
#include "tests/skip.h"

static_assert(WASTE_API_VERSION >= 2, "the C API's image fields (waste_content_part.data, waste_request.images)");

using namespace waste::test;
using nlohmann::json;
using Bytes = std::vector<uint8_t>;
using waste::kDefaultImagePatches;
using waste::serve::kLowDetailPatches;

namespace {

// ---- images made here ---------------------------------------------------------------------

void put_u32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

void chunk(Bytes& png, const char* type, const Bytes& data) {
  put_u32(png, uint32_t(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  put_u32(png, uint32_t(crc32(0, body.data(), uInt(body.size()))));
}

Bytes zlib_of(const Bytes& raw) {
  uLongf n = compressBound(uLong(raw.size()));
  Bytes out(n);
  REQUIRE(compress2(out.data(), &n, raw.data(), uLong(raw.size()), 9) == Z_OK);
  out.resize(n);
  return out;
}

// A PNG whose IHDR says w x h (bit depth, colour type as given) and whose IDAT holds `raw`.
Bytes png_of(uint32_t w, uint32_t h, uint8_t depth, uint8_t color, const Bytes& raw) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put_u32(ihdr, w);
  put_u32(ihdr, h);
  ihdr.insert(ihdr.end(), {depth, color, 0, 0, 0});
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", zlib_of(raw));
  chunk(png, "IEND", {});
  return png;
}

// An 8-bit RGB PNG with a pattern (noise = true: incompressible, for a large file).
Bytes rgb_png(uint32_t w, uint32_t h, bool noise = false) {
  Bytes raw;
  raw.reserve(size_t(h) * (1 + 3 * w));
  uint32_t x = 12345;
  for (uint32_t r = 0; r < h; ++r) {
    raw.push_back(0);  // filter: none
    for (uint32_t c = 0; c < 3 * w; ++c) {
      x = x * 1664525u + 1013904223u;
      raw.push_back(noise ? uint8_t(x >> 24) : uint8_t((r * 7 + c * 3) & 0xff));
    }
  }
  return png_of(w, h, 8, 2, raw);
}

// A real decompression bomb: 16000 x 4000 1-bit grey, all zero, a few KB that would decode to
// 192 MB of RGB.
Bytes bomb_png() {
  const uint32_t w = 16000, h = 4000;
  Bytes raw(size_t(h) * (1 + w / 8), 0);
  return png_of(w, h, 1, 0, raw);
}

// The width and height of a PNG as its IHDR says.
std::pair<int, int> png_size(const Bytes& png) {
  auto u32 = [&](size_t at) { return int(uint32_t(png[at]) << 24 | uint32_t(png[at + 1]) << 16 | uint32_t(png[at + 2]) << 8 | png[at + 3]); };
  return {u32(16), u32(20)};
}

// The README's grid rule: the image tokens of a W x H image at `budget` patches (patch p, 2x2 merge).
int64_t image_tokens(int W, int H, int patch, int budget) {
  const double s = std::min(1.0, std::sqrt(double(budget) / (double(W) * H / (patch * patch))));
  int gw = int(W * s / patch + 0.5), gh = int(H * s / patch + 0.5);
  gw = std::max(2, gw) & ~1;
  gh = std::max(2, gh) & ~1;
  while (gw * gh > budget) (gw >= gh ? gw : gh) -= 2;
  return int64_t(gh / 2) * (gw / 2);
}

std::string base64(const Bytes& b) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((b.size() + 2) / 3 * 4);
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t v = uint32_t(b[i]) << 16 | (i + 1 < b.size() ? uint32_t(b[i + 1]) << 8 : 0) | (i + 2 < b.size() ? b[i + 2] : 0);
    out += t[v >> 18 & 63];
    out += t[v >> 12 & 63];
    out += i + 1 < b.size() ? t[v >> 6 & 63] : '=';
    out += i + 2 < b.size() ? t[v & 63] : '=';
  }
  return out;
}

std::string data_url(const Bytes& b) { return "data:image/png;base64," + base64(b); }

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// ---- HTTP ---------------------------------------------------------------------------------

struct Http {
  int status = 0;
  std::string body;
  json j() const { return json::parse(body, nullptr, false); }
};

Http post(const std::string& url, const std::string& body, const std::string& dir) {
  const std::string file = dir + "/body.json";
  std::ofstream(file, std::ios::binary) << body;
  auto r = run_command("curl -sS -N --max-time 300 -o " + dir + "/out.txt -w '%{http_code}' -H 'Content-Type: application/json' "
                       "--data-binary @" + file + " " + url);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

Http get(const std::string& url, const std::string& dir) {
  auto r = run_command("curl -sS -o " + dir + "/out.txt -w '%{http_code}' " + url);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

// An image_url part (detail only when given) and a chat of one user message: the parts, then text.
json image_part(const std::string& url, const std::string& detail = "") {
  json u = {{"url", url}};
  if (!detail.empty()) u["detail"] = detail;
  return {{"type", "image_url"}, {"image_url", u}};
}

json chat_with(const std::vector<json>& parts, const std::string& text = "What is in the picture?", int max_tokens = 4) {
  json content = json::array();
  for (const json& p : parts) content.push_back(p);
  content.push_back({{"type", "text"}, {"text", text}});
  return {{"model", "tiny"}, {"max_tokens", max_tokens}, {"messages", {{{"role", "user"}, {"content", content}}}}};
}

// The usage of a streamed reply (stream_options.include_usage), and its text.
json streamed_usage(const Http& h, std::string* text = nullptr) {
  json usage;
  std::istringstream lines(h.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json c = json::parse(line.substr(6));
    if (c.contains("usage")) usage = c["usage"];
    if (text && !c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      *text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  return usage;
}

void check_400(const Http& h, const std::string& param) {
  CHECK_MESSAGE(h.status == 400, h.body);
  const json j = h.j();
  REQUIRE_MESSAGE(!j.is_discarded(), h.body);
  CHECK_MESSAGE(j["error"]["param"] == param, h.body);
  CHECK(j["error"]["type"] == "invalid_request_error");
}

// ---- the model ----------------------------------------------------------------------------

// The vision facts `waste info --json` reports; exits 77 (skip) when synth wrote no tower.
struct VisionFacts {
  int patch = 14;
  int32_t placeholder = -1;
};

VisionFacts vision_facts(const Instance& inst) {
  auto r = run_command(waste_bin() + " info " + inst.model() + " --json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const json j = json::parse(r.output);
  if (!j.contains("vision") || j["vision"].is_null()) {
    MESSAGE("SKIP: waste synth --preset tiny-k3 wrote no vision tower");
    std::exit(77);
  }
  return {j["vision"]["patch"].get<int>(), j["vision"]["media_placeholder_token_id"].get<int32_t>()};
}

// The prompt ids `waste prompt` renders for `request` with each image as its media markup:
// one placeholder per image, before the expansion.
size_t rendered_ids(const Instance& inst, json request, const std::vector<std::pair<int, int>>& sizes, const std::string& dir) {
  json prompts = json::array();
  for (auto [w, h] : sizes)
    prompts.push_back("<|media_begin|>image " + std::to_string(w) + "x" + std::to_string(h) + "<|media_content|><|media_pad|><|media_end|>");
  request["image_prompts"] = prompts;
  request.erase("max_tokens");
  request.erase("model");
  request.erase("stream");
  request.erase("stream_options");
  std::ofstream(dir + "/request.json") << request.dump();
  auto r = run_command(waste_bin() + " prompt " + inst.model() + " --request " + dir + "/request.json --json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  return json::parse(r.output)["ids"].size();
}

std::string fixture_image(const std::string& name) { return shared_dir() + "/vision/kimi-k3/" + name; }

}  // namespace

TEST_CASE("vision api: image_url data URLs count their image tokens in usage, streamed and not; bad input is a 400") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const VisionFacts vf = vision_facts(inst);
  TempDir tmp;
  const std::string url = base + "/v1/chat/completions";

  // The grid rule on the fixture's image_0.png (84x56): 6 image tokens, as its image_0.json says.
  if (const Bytes f = read_bytes(fixture_image("image_0.png")); !f.empty()) {
    const auto [w, h] = png_size(f);
    CHECK(image_tokens(w, h, 14, kDefaultImagePatches) == 6);
    const Http r = post(url, chat_with({image_part(data_url(f))}).dump(), tmp.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CHECK(r.j()["usage"]["prompt_tokens_details"]["image_tokens"] == 6);
  }

  // One image: prompt_tokens = the rendered prompt with one placeholder - 1 + the image tokens.
  const Bytes small = rgb_png(84, 56), wide = rgb_png(700, 150);
  const int64_t small_tokens = image_tokens(84, 56, vf.patch, kDefaultImagePatches), wide_tokens = image_tokens(700, 150, vf.patch, kDefaultImagePatches);
  {
    const json req = chat_with({image_part(data_url(small))});
    const Http r = post(url, req.dump(), tmp.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    const json u = r.j()["usage"];
    const size_t ids = rendered_ids(inst, req, {{84, 56}}, tmp.path());
    CHECK(u["prompt_tokens"] == ids - 1 + size_t(small_tokens));
    CHECK(u["prompt_tokens_details"]["image_tokens"] == small_tokens);
    CHECK(u["completion_tokens"] == 4);
    // Streamed, with the usage chunk: the same figures and the same text.
    json sreq = req;
    sreq["stream"] = true;
    sreq["stream_options"] = {{"include_usage", true}};
    std::string text;
    const Http s = post(url, sreq.dump(), tmp.path());
    REQUIRE_MESSAGE(s.status == 200, s.body);
    const json su = streamed_usage(s, &text);
    CHECK(su["prompt_tokens"] == u["prompt_tokens"]);
    CHECK(su["prompt_tokens_details"]["image_tokens"] == small_tokens);
    CHECK(text == r.j()["choices"][0]["message"]["content"]);
  }
  // Two images in one message (each placeholder takes the next), detail auto / high = the default.
  {
    const json req = chat_with({image_part(data_url(small), "auto"), image_part(data_url(wide), "high")});
    const Http r = post(url, req.dump(), tmp.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    const size_t ids = rendered_ids(inst, req, {{84, 56}, {700, 150}}, tmp.path());
    CHECK(r.j()["usage"]["prompt_tokens"] == ids - 2 + size_t(small_tokens + wide_tokens));
    CHECK(r.j()["usage"]["prompt_tokens_details"]["image_tokens"] == small_tokens + wide_tokens);
  }
  // detail low: kLowDetailPatches (256) at most.
  {
    const Bytes big = rgb_png(1260, 224);
    const Http r = post(url, chat_with({image_part(data_url(big), "low")}).dump(), tmp.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    const int64_t low = image_tokens(1260, 224, vf.patch, kLowDetailPatches);
    CHECK(low < image_tokens(1260, 224, vf.patch, kDefaultImagePatches));
    CHECK(r.j()["usage"]["prompt_tokens_details"]["image_tokens"] == low);
  }
  // No image: no image_tokens in the details (only cached_tokens, as OpenAI has it).
  {
    const Http r = post(url, json{{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}.dump(), tmp.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CHECK_FALSE(r.j()["usage"]["prompt_tokens_details"].contains("image_tokens"));
  }
  // Two 20 MB images fit one request: with a vision tower the default body bound is room for a
  // request's images as base64 (2 x 26.7 MB here) and 1 MiB more; one byte past it is a 413.
  {
    const Bytes huge = rgb_png(2700, 2700, true);
    REQUIRE(huge.size() > 20u << 20);
    const Http r = post(url, chat_with({image_part(data_url(huge)), image_part(data_url(huge))}, "Same?", 1).dump(), tmp.path());
    CHECK_MESSAGE(r.status == 200, r.body.substr(0, 400));  // (CHECK: the bad-input checks below run anyway)
    if (r.status == 200)
      CHECK(r.j()["usage"]["prompt_tokens_details"]["image_tokens"] == 2 * image_tokens(2700, 2700, vf.patch, kDefaultImagePatches));
    static_assert(waste::serve::kDefaultMaxBodyVision == (waste::kMaxImageBytesPerRequest + 2) / 3 * 4 + (1u << 20));
    std::string over = chat_with({image_part("data:image/png;base64,")}).dump();
    const std::string pad = "\"pad\":\"";
    over.insert(1, pad + std::string(waste::serve::kDefaultMaxBodyVision + 1 - over.size() - pad.size() - 2, 'a') + "\",");
    REQUIRE(over.size() == waste::serve::kDefaultMaxBodyVision + 1);
    const Http big = post(url, over, tmp.path());
    CHECK_MESSAGE(big.status == 413, big.body.substr(0, 400));
    CHECK_MESSAGE(big.j()["error"]["message"].get<std::string>().find("--max-body") != std::string::npos, big.body);
  }
  // A body of tiny JSON values (each some 65 bytes of parsed tree per 3 bytes of body) is
  // refused while it parses, past 1 Mi values (413), and so is one nested too deep (400).
  {
    std::string many = "{\"messages\":[";
    for (int i = 0; i <= (1 << 20); ++i) many += "{},";
    many += "{}]}";
    const Http r = post(url, many, tmp.path());
    CHECK_MESSAGE(r.status == 413, r.body);
    CHECK_MESSAGE(r.j()["error"]["message"].get<std::string>().find("the request body holds more than 1048576 JSON values") !=
                      std::string::npos, r.body);
    const std::string deep = "{\"messages\":" + std::string(200, '[') + std::string(200, ']') + "}";
    const Http d = post(url, deep, tmp.path());
    CHECK_MESSAGE(d.status == 400, d.body);
    CHECK_MESSAGE(d.j()["error"]["message"].get<std::string>().find("nests JSON deeper than 128") != std::string::npos, d.body);
  }

  // Bad images, each a 400 naming the part, plain (compute's refusal) and streamed (the server's
  // own check, before the headers); the server answers a good request after each.
  const Bytes good = rgb_png(84, 56);
  Bytes truncated(good.begin(), good.begin() + ptrdiff_t(good.size() / 2));
  Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0, 0x2c};
  Bytes claims_huge = png_of(100000, 100000, 8, 2, Bytes(64, 0));
  const std::vector<std::pair<std::string, Bytes>> bad = {
      {"truncated PNG", truncated}, {"wrong magic", gif}, {"zero bytes", {}},
      {"100000x100000 header", claims_huge}, {"decompression bomb", bomb_png()}};
  for (const auto& [what_binding, bytes] : bad) {
    const std::string& what = what_binding;  // clang 14 cannot capture a structured binding in a lambda
    CAPTURE(what);
    for (bool stream : {false, true}) {
      CAPTURE(stream);
      json req = chat_with({image_part(data_url(bytes))});
      if (stream) req["stream"] = true;
      check_400(post(url, req.dump(), tmp.path()), "messages[0].content[0]");
    }
    CHECK(post(url, chat_with({image_part(data_url(good))}).dump(), tmp.path()).status == 200);
    // The same file through the CLI: a clear error naming it, no crash (exit 1, not a signal).
    const std::string file = tmp / "bad.img";
    write_bytes(file, bytes);
    const auto v = run_command(waste_bin() + " vision " + inst.model() + " --image " + file);
    CHECK(v.status == 1);
    CHECK_MESSAGE(v.output.find(file) != std::string::npos, v.output);
    const auto r = run_command(waste_bin() + " run " + inst.model() + " 'What?' --chat -n 2 --image " + file +
                               " --connect " + inst.run_dir());
    CHECK(r.status == 1);
    CHECK_MESSAGE(r.output.find("bad.img") != std::string::npos, r.output);
  }
  // References the server does not take, and fields it does not know.
  check_400(post(url, chat_with({image_part("https://example.com/cat.png")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.url");
  check_400(post(url, chat_with({image_part("http://example.com/cat.png")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.url");
  check_400(post(url, chat_with({image_part("ftp://example.com/cat.png")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.url");
  check_400(post(url, chat_with({image_part("file:///etc/passwd")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.url");  // no --image-dir: no local files at all
  check_400(post(url, chat_with({image_part("data:image/png;base64,%%%")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.url");
  check_400(post(url, chat_with({image_part(data_url(good), "ultra")}).dump(), tmp.path()),
            "messages[0].content[0].image_url.detail");
  check_400(post(url, chat_with({image_part(data_url(good), "low"), image_part(data_url(good))}).dump(), tmp.path()),
            "messages[0].content[1].image_url.detail");  // one patch budget per request
  // More images than a request takes: refused by the server before anything is decoded.
  {
    const std::vector<json> many(size_t(waste::kMaxImagesPerRequest) + 1, image_part(data_url(good)));
    check_400(post(url, chat_with(many).dump(), tmp.path()), "messages[0].content[" + std::to_string(waste::kMaxImagesPerRequest) + "]");
  }
  // K3's own part form takes the same references.
  const json k3_form = chat_with({json{{"type", "image"}, {"image", data_url(good)}}});
  const Http k3r = post(url, k3_form.dump(), tmp.path());
  CHECK_MESSAGE(k3r.status == 200, k3r.body);
  check_400(post(url, chat_with({json{{"type", "image"}, {"image", "https://example.com/a.png"}}}).dump(), tmp.path()),
            "messages[0].content[0].image");
  json unknown = chat_with({image_part(data_url(good))});
  unknown["messages"][0]["content"][0]["image_url"]["size"] = 3;
  check_400(post(url, unknown.dump(), tmp.path()), "messages[0].content[0].image_url.size");
  const Http comp = post(base + "/v1/completions",
                         json{{"max_tokens", 2}, {"prompt", {image_part(data_url(good))}}}.dump(), tmp.path());
  check_400(comp, "prompt");
  CHECK(post(url, chat_with({image_part(data_url(good))}).dump(), tmp.path()).status == 200);

  // What the server says of itself: vision in /v1/models, image counters in /metrics.
  CHECK(json::parse(get(base + "/v1/models", tmp.path()).body)["data"][0]["vision"] == true);
  const std::string metrics = get(base + "/metrics", tmp.path()).body;
  for (const char* m : {"waste_images_total", "waste_image_tokens_total", "waste_vision_seconds_total"})
    CHECK_MESSAGE(metrics.find(m) != std::string::npos, m);
  std::smatch m;
  REQUIRE(std::regex_search(metrics, m, std::regex("\nwaste_images_total (\\d+)")));
  CHECK(std::stoi(m[1]) >= 10);

  // The official openai npm client (SKIPped inside when npm cannot install it).
  write_bytes(tmp / "small.png", small);
  const std::string script = env_or("WASTE_SOURCE_DIR", ".") + "/tests/integration/openai_vision_client.mjs";
  auto node = run_command("node " + script + " " + base + " " + tmp.path() + " " + (tmp / "small.png") + " " +
                          std::to_string(small_tokens));
  if (node.status == 77) {
    waste::test::skip_part("openai npm client not available: " + node.output);
  } else {
    CHECK_MESSAGE(node.status == 0, node.output);
    CHECK_MESSAGE(node.output.find("image replies parsed") != std::string::npos, node.output);
  }
}

// Does this kernel (or emulator: qemu-user 7.2 has no openat2) give openat2(2)? waste-serve's
// --image-dir opens files beneath the directory only through it, and refuses without it.
bool have_openat2() {
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  const long fd = ::syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
  if (fd >= 0) ::close(int(fd));
  return !(fd < 0 && errno == ENOSYS);
}

TEST_CASE("vision api: --image-dir lets image_url name files under it, and nothing else") {
  TempDir tmp, outside;
  const std::string dir = tmp / "images";
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  if (!have_openat2()) {
    // The refusal is the product's behaviour here: a clear error at start, no unsafe fallback.
    Instance refused("--http 127.0.0.1:" + std::to_string(free_port()) + " --ctx 2048 --image-dir " + dir, "512M",
                     "tiny-k3");
    CHECK_FALSE(refused.ok());
    CHECK_MESSAGE(refused.why().find("this kernel has no openat2(2)") != std::string::npos, refused.why());
    waste::test::skip_part("--image-dir serving: no openat2(2) here (Linux < 5.6, or qemu-user)");
    return;
  }
  REQUIRE(::mkdir((dir + "/sub").c_str(), 0755) == 0);
  const Bytes png = rgb_png(84, 56);
  write_bytes(dir + "/a b.png", png);
  write_bytes(dir + "/sub/c.png", png);
  write_bytes(outside / "secret.png", png);
  REQUIRE(::symlink((outside / "secret.png").c_str(), (dir + "/link.png").c_str()) == 0);
  REQUIRE(::symlink(outside.path().c_str(), (dir + "/linkdir").c_str()) == 0);
  REQUIRE(::mkdir((dir + "/deep").c_str(), 0755) == 0);
  REQUIRE(::symlink(outside.path().c_str(), (dir + "/deep/out").c_str()) == 0);  // a link a level down
  REQUIRE(::symlink("sub", (dir + "/inlink").c_str()) == 0);                      // links inside are not followed either
  REQUIRE(::symlink("a b.png", (dir + "/inner.png").c_str()) == 0);
  REQUIRE(::mkfifo((dir + "/fifo.png").c_str(), 0644) == 0);
  // waste up passes --image-dir to waste-serve.
  const int port = free_port();
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048 --image-dir " + dir, "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const VisionFacts vf = vision_facts(inst);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v1/chat/completions";
  const int64_t tokens = image_tokens(84, 56, vf.patch, kDefaultImagePatches);

  for (const std::string& ref : {"file://" + dir + "/a%20b.png", dir + "/sub/c.png", std::string("sub/c.png"),
                                 "file://" + dir + "/./sub//c.png", "file://localhost" + dir + "/sub/c.png"}) {
    CAPTURE(ref);
    const Http r = post(url, chat_with({image_part(ref)}).dump(), outside.path());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CHECK(r.j()["usage"]["prompt_tokens_details"]["image_tokens"] == tokens);
  }
  const std::string link = "symbolic link", not_regular = "not a regular file";
  for (const auto& [ref_binding, says] : std::vector<std::pair<std::string, std::string>>{
           {dir + "/../images/sub/c.png", "'..'"},
           {"sub/../sub/c.png", "'..'"},
           {dir + "/link.png", link},  // a symbolic link to a file outside
           {"inner.png", link},        // ... or inside
           {dir + "/linkdir/secret.png", link},  // a symlinked directory pointing outside
           {"linkdir/secret.png", link},
           {"file://" + dir + "/linkdir/secret.png", link},
           {"deep/out/secret.png", link},  // ... further down
           {"inlink/c.png", link},         // ... or inside
           {outside / "secret.png", "not under"},
           {dir + "/fifo.png", not_regular},  // opened non-blocking: no hang (curl's --max-time would end one)
           {dir + "/sub", not_regular},
           {dir, "not under"},
           {dir + "/missing.png", "cannot open"},
           {std::string("file://otherhost") + dir + "/sub/c.png", "local absolute path"},
           {"file://" + dir + "/a%2", "%-escape"}}) {
    const std::string& ref = ref_binding;  // clang 14 cannot capture a structured binding in a lambda
    CAPTURE(ref);
    const auto t0 = std::chrono::steady_clock::now();
    const Http r = post(url, chat_with({image_part(ref)}).dump(), outside.path());
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
    check_400(r, "messages[0].content[0].image_url.url");
    CHECK_MESSAGE(r.j()["error"]["message"].get<std::string>().find(says) != std::string::npos, r.body);
  }
  CHECK(post(url, chat_with({image_part(dir + "/sub/c.png")}).dump(), outside.path()).status == 200);
  // Refused at start: --image-dir without --http, waste-serve --image-dir /.
  const auto no_http = run_command(Instance::supervise() + " up " + inst.model() + " --run-dir " + (tmp / "run2") +
                                   " --image-dir " + dir);
  CHECK(no_http.status != 0);
  CHECK_MESSAGE(no_http.output.find("--image-dir") != std::string::npos, no_http.output);
  const auto root = run_command(env_or("WASTE_SERVE", "waste-serve") + " --connect " + inst.run_dir() +
                                " --listen 127.0.0.1:0 --image-dir /");
  CHECK(root.status != 0);
  CHECK_MESSAGE(root.output.find("root directory") != std::string::npos, root.output);
  const auto file = run_command(env_or("WASTE_SERVE", "waste-serve") + " --connect " + inst.run_dir() +
                                " --listen 127.0.0.1:0 --image-dir " + dir + "/sub/c.png");
  CHECK(file.status != 0);
  CHECK_MESSAGE(file.output.find("not a directory") != std::string::npos, file.output);
}

TEST_CASE("vision api: a model without a vision tower refuses images by name, over HTTP, C and the CLI") {
  const int port = free_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048", "512M", "tiny-k3 --vision none");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const Bytes png = rgb_png(84, 56);
  write_bytes(tmp / "a.png", png);

  check_400(post(base + "/v1/chat/completions", chat_with({image_part(data_url(png))}).dump(), tmp.path()),
            "messages[0].content[0]");
  CHECK(json::parse(get(base + "/v1/models", tmp.path()).body)["data"][0]["vision"] == false);

  waste_client* c = waste_connect(inst.run_dir().c_str());
  REQUIRE_MESSAGE(c != nullptr, waste_last_error());
  waste_session* s = waste_open_session(c, 0);
  REQUIRE(s != nullptr);
  char info[4096];
  REQUIRE(waste_info_json(c, info, sizeof info, nullptr) == WASTE_OK);
  CHECK(json::parse(info)["vision"] == false);
  waste_content_part parts[2] = {{WASTE_PART_IMAGE, nullptr, png.data(), png.size()}, {WASTE_PART_TEXT, "What?", nullptr, 0}};
  waste_message msg[1] = {};
  msg[0].role = "user";
  msg[0].parts = parts;
  msg[0].n_parts = 2;
  waste_request q;
  waste_default_request(&q);
  q.messages = msg;
  q.n_messages = 1;
  q.sampling.max_tokens = 2;
  CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR);
  CHECK(std::string(waste_last_error_field()) == "messages[0].parts[0]");
  CHECK(std::string(waste_last_error()).find("no vision tower") != std::string::npos);
  waste_close_session(s);
  waste_disconnect(c);

  const auto run = run_command(waste_bin() + " run " + inst.model() + " 'What?' --chat -n 2 --image " + (tmp / "a.png") +
                               " --connect " + inst.run_dir());
  CHECK(run.status != 0);
  CHECK_MESSAGE(run.output.find("has no vision tower") != std::string::npos, run.output);
  const auto priv = run_command(waste_bin() + " run " + inst.model() + " 'What?' --chat -n 2 --private --image " + (tmp / "a.png"));
  CHECK(priv.status != 0);
  CHECK_MESSAGE(priv.output.find("has no vision tower") != std::string::npos, priv.output);
  const auto chat = run_command("printf '/image " + (tmp / "a.png") + "\\n/quit\\n' | " + waste_bin() + " chat --connect " +
                                inst.run_dir());
  CHECK_MESSAGE(chat.output.find("has no vision tower") != std::string::npos, chat.output);
}

TEST_CASE("vision api: the C API and the C++ client attach images; waste run --image and waste chat /image") {
  Instance inst("--ctx 2048", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const VisionFacts vf = vision_facts(inst);
  TempDir tmp;
  const Bytes png = rgb_png(84, 56), wide = rgb_png(700, 150);
  const int64_t tokens = image_tokens(84, 56, vf.patch, kDefaultImagePatches), wide_tokens = image_tokens(700, 150, vf.patch, kDefaultImagePatches);
  write_bytes(tmp / "a.png", png);
  write_bytes(tmp / "wide.png", wide);
  write_bytes(tmp / "bad.png", Bytes(png.begin(), png.begin() + 60));

  // C: a chat with the file itself, then with a data: URL; an ids prompt with images.
  waste_client* c = waste_connect(inst.run_dir().c_str());
  REQUIRE_MESSAGE(c != nullptr, waste_last_error());
  char info[4096];
  REQUIRE(waste_info_json(c, info, sizeof info, nullptr) == WASTE_OK);
  CHECK(json::parse(info)["vision"] == true);
  CHECK(json::parse(info)["image_patches"] == kDefaultImagePatches);
  const std::string url = data_url(png);
  auto chat_request = [&](waste_content_part* parts, size_t n, waste_message* msg, waste_request* q) {
    msg[0] = waste_message{};
    msg[0].role = "user";
    msg[0].parts = parts;
    msg[0].n_parts = n;
    waste_default_request(q);
    q->messages = msg;
    q->n_messages = 1;
    q->sampling.max_tokens = 3;
  };
  {
    waste_session* s = waste_open_session(c, 0);
    waste_content_part parts[2] = {{WASTE_PART_IMAGE, nullptr, png.data(), png.size()}, {WASTE_PART_TEXT, "What?", nullptr, 0}};
    waste_message msg[1];
    waste_request q;
    chat_request(parts, 2, msg, &q);
    waste_reply* reply = nullptr;
    REQUIRE_MESSAGE(waste_generate_request(s, &q, nullptr, nullptr, &reply) == WASTE_OK, waste_last_error());
    CHECK(reply->result.image_tokens == uint64_t(tokens));
    CHECK(reply->result.tokens == 3);
    const uint64_t prompt = reply->result.prompt_tokens;
    waste_reply_free(reply);
    // The same image as a data: URL: the same prompt.
    waste_close_session(s);
    s = waste_open_session(c, 0);
    parts[0] = {WASTE_PART_IMAGE, url.c_str(), nullptr, 0};
    REQUIRE_MESSAGE(waste_generate_request(s, &q, nullptr, nullptr, &reply) == WASTE_OK, waste_last_error());
    CHECK(reply->result.image_tokens == uint64_t(tokens));
    CHECK(reply->result.prompt_tokens == prompt);
    waste_reply_free(reply);
    // Refused: both forms at once, neither, a bad image (compute names the part), a bad budget.
    parts[0] = {WASTE_PART_IMAGE, url.c_str(), png.data(), png.size()};
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR_ARGUMENT);
    CHECK(std::string(waste_last_error_field()) == "messages[0].parts[0].data");
    parts[0] = {WASTE_PART_IMAGE, nullptr, nullptr, 0};
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR_ARGUMENT);
    parts[0] = {WASTE_PART_IMAGE, nullptr, png.data(), png.size()};
    parts[1] = {WASTE_PART_TEXT, "What?", png.data(), png.size()};  // a text part carries no data
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR_ARGUMENT);
    CHECK(std::string(waste_last_error_field()) == "messages[0].parts[1].data");
    parts[1] = {WASTE_PART_TEXT, "What?", nullptr, 0};
    parts[0] = {WASTE_PART_IMAGE, nullptr, png.data(), 60};
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR);
    CHECK(std::string(waste_last_error_field()) == "messages[0].parts[0]");
    parts[0] = {WASTE_PART_IMAGE, nullptr, png.data(), png.size()};
    q.image_patches = 2;
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR);
    CHECK(std::string(waste_last_error_field()) == "image_patches");
    waste_close_session(s);
  }
  {
    // An ids prompt: each placeholder id takes the next image.
    waste_session* s = waste_open_session(c, 0);
    const int32_t ids[] = {5, 6, vf.placeholder, 7, vf.placeholder, 8};
    const waste_image images[2] = {{png.data(), png.size()}, {wide.data(), wide.size()}};
    waste_request q;
    waste_default_request(&q);
    q.ids = ids;
    q.n_ids = 6;
    q.images = images;
    q.n_images = 2;
    q.sampling.max_tokens = 2;
    waste_reply* reply = nullptr;
    REQUIRE_MESSAGE(waste_generate_request(s, &q, nullptr, nullptr, &reply) == WASTE_OK, waste_last_error());
    CHECK(reply->result.image_tokens == uint64_t(tokens + wide_tokens));
    CHECK(reply->result.prompt_tokens == uint64_t(4 + tokens + wide_tokens));
    waste_reply_free(reply);
    q.n_images = 1;  // two placeholders, one image
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR);
    q.ids = nullptr;
    q.n_ids = 0;
    q.text = "plain";
    CHECK(waste_generate_request(s, &q, nullptr, nullptr, nullptr) == WASTE_ERROR_ARGUMENT);
    CHECK(std::string(waste_last_error_field()) == "images");
    waste_close_session(s);
  }
  waste_disconnect(c);

  // C++: eval with an image has a row per expanded position; the client's Info says vision.
  {
    waste::client::Client cc(inst.run_dir());
    const auto i = cc.info();
    CHECK(i.vision);
    CHECK(i.image_patches == uint32_t(kDefaultImagePatches));
    auto s = cc.open_session();
    uint32_t vocab = 0;
    const std::vector<float> logits = s->eval({5, vf.placeholder, 6}, false, &vocab, {png});
    REQUIRE(vocab > 0);
    CHECK(logits.size() == size_t(2 + tokens) * vocab);
    // A part is an image's file or its URL, and a text part has no file: both refused by name.
    using Part = waste::chat::ContentPart;
    for (const auto& [part, says] : std::vector<std::pair<Part, std::string>>{
             {Part{Part::Kind::Image, url, png}, "both its file and a URL"},
             {Part{Part::Kind::Text, "What?", png}, "a text part has no data"}}) {
      waste::client::Request r;
      r.kind = waste::client::Request::Kind::Chat;
      waste::chat::Message m;
      m.role = "user";
      m.content = {Part{Part::Kind::Text, "Look:", {}}, part};
      r.chat.messages.push_back(m);
      r.max_tokens = 2;
      try {
        s->generate_events(r, [](const waste::client::TokenEvent&) { return true; });
        FAIL("the client sent a part with " << says);
      } catch (const waste::chat::RequestError& e) {
        CHECK(e.param == "messages[0].content[1]");
        CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos, e.what());
      }
    }
  }

  // waste run --image, through the instance and in this process: the same greedy answer.
  const std::string err = tmp / "err.txt";
  auto stderr_text = [&] {
    std::ifstream f(err);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto run_out = [&](const std::string& cmd) { return run_command("{ " + cmd + " 2>" + err + "; }"); };
  const std::string images = " --image " + (tmp / "a.png") + " --image " + (tmp / "wide.png");
  const auto through = run_out(waste_bin() + " run " + inst.model() + " 'Compare them' --chat --no-thinking -n 6" + images +
                               " --connect " + inst.run_dir());
  REQUIRE_MESSAGE(through.status == 0, (through.output + stderr_text()));
  const std::string figures = std::to_string(tokens + wide_tokens) + " of them for 2 images";
  CHECK_MESSAGE(stderr_text().find(figures) != std::string::npos, stderr_text());
  const auto in_process = run_out(waste_bin() + " run " + inst.model() + " 'Compare them' --chat --no-thinking -n 6" + images +
                                  " --private --no-iod");
  REQUIRE_MESSAGE(in_process.status == 0, (in_process.output + stderr_text()));
  CHECK_MESSAGE(stderr_text().find(figures) != std::string::npos, stderr_text());
  CHECK(in_process.output == through.output);
  // --image-patches: a smaller budget, fewer tokens.
  const auto low = run_out(waste_bin() + " run " + inst.model() + " 'Wide' --chat -n 2 --image " + (tmp / "wide.png") +
                           " --image-patches 64 --connect " + inst.run_dir());
  REQUIRE_MESSAGE(low.status == 0, (low.output + stderr_text()));
  CHECK_MESSAGE(stderr_text().find(std::to_string(image_tokens(700, 150, vf.patch, 64)) + " of them for 1 image") !=
                    std::string::npos, stderr_text());
  // Refusals name the file or the option.
  for (const auto& [args_binding, says] : std::vector<std::pair<std::string, std::string>>{
           {"'x' --image " + (tmp / "a.png"), "--image needs --chat"},
           {"'x' --chat --image " + (tmp / "missing.png"), tmp / "missing.png"},
           {"'x' --chat --image " + (tmp / "bad.png"), tmp / "bad.png"}}) {
    const std::string& args = args_binding;  // clang 14 cannot capture a structured binding in a lambda
    CAPTURE(args);
    const auto r = run_command(waste_bin() + " run " + inst.model() + " " + args + " -n 2 --connect " + inst.run_dir());
    CHECK(r.status != 0);
    CHECK_MESSAGE(r.output.find(says) != std::string::npos, r.output);
  }

  // waste chat: /image prints the size and the tokens, /image alone lists and drops, the next
  // message carries what is pending.
  const auto chat = run_out("printf '/image " + (tmp / "a.png") + "\\n/image " + (tmp / "wide.png") + "\\n/image\\n/image " +
                            (tmp / "a.png") + "\\n/image " + (tmp / "bad.png") + "\\nWhat is it?\\n/stats\\n/quit\\n' | " +
                            waste_bin() + " chat -n 3 --no-thinking --connect " + inst.run_dir());
  REQUIRE_MESSAGE(chat.status == 0, (chat.output + stderr_text()));
  CHECK_MESSAGE(chat.output.find("84x56, " + std::to_string(tokens) + " image tokens") != std::string::npos, chat.output);
  CHECK_MESSAGE(chat.output.find("700x150, " + std::to_string(wide_tokens) + " image tokens") != std::string::npos, chat.output);
  CHECK_MESSAGE(chat.output.find("dropped 2 pending images") != std::string::npos, chat.output);
  CHECK_MESSAGE(stderr_text().find(tmp / "bad.png") != std::string::npos, stderr_text());
  // The turn's prompt held the one image pending then: /stats' prompt tokens say so.
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(chat.output, m, std::regex("session (\\{.*\\})")), chat.output);
  const json turn = {{"messages", {{{"role", "user"}, {"content", {image_part("data:,"), {{"type", "text"}, {"text", "What is it?"}}}}}}},
                     {"thinking", false}};
  CHECK(json::parse(m[1].str())["prompt_tokens"] == rendered_ids(inst, turn, {{84, 56}}, tmp.path()) - 1 + size_t(tokens));
}
