// Images in K3 prompts end to end, with real processes, on the shared vision fixture (a tiny K3
// text model beside a tiny tower; ../shared/vision/kimi-k3), converted with --vision f32:
//  - `waste vision` gives every fixture image's grid and token count exactly, its pixels within
//    1e-4 (PNG; the JPEG within a few codes), and embeddings from the stored pixels within
//    1e-4 x their RMS;
//  - through waste-compute (supervised with iod, and alone at other prefill chunk sizes), the
//    logits of a prompt holding two images equal, bit for bit, the logits of the same prompt
//    whose pad positions are fed the tower's embeddings directly, in prefill and step by step;
//  - a session with an image batched with one without gives each exactly what it gets alone;
//  - bad images are refused naming the field, and compute keeps serving.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/integration/f32_file.h"
#include "tests/integration/test_engine_instance.h"
#include "tools/libwaste/engine_client.h"

using namespace waste;
using namespace waste::test;

namespace {

constexpr int32_t kPad = 509;  // the fixture's media_placeholder_token_id
const char* kImages[] = {"image_0.png", "image_1.png", "image_2.jpg", "image_3.png"};

std::string fixture() { return shared_dir() + "/vision/kimi-k3"; }

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

nlohmann::json image_json(int i) {
  std::ifstream f(fixture() + "/image_" + std::to_string(i) + ".json");
  return nlohmann::json::parse(f);
}

// The fixture converted once for every case here (f32: the README's check is on unquantized weights).
struct Converted {
  TempDir dir;
  std::string model = dir / "k3v.waste";
  bool ok = false;
  std::string why;
  Converted() {
    auto r = run_command(waste_bin() + " convert " + fixture() + " --out " + model +
                         " --experts f32 --trunk f32 --vision f32 --no-progress");
    ok = r.status == 0;
    why = r.output;
  }
};

Converted& converted() {
  static Converted c;
  return c;
}

bool have_fixture() { return std::filesystem::exists(fixture() + "/model-vision.safetensors"); }

// A prompt with two images: ordinary ids stand for the media markers (the fixture has no tokenizer).
std::vector<int32_t> two_image_prompt() {
  return {1, 5, 7, 100, 20, 21, 101, kPad, 102, 30, 31, 100, 22, 101, kPad, 102, 40, 41, 42};
}

// The prompt with each placeholder repeated over its image's tokens.
std::vector<int32_t> expanded(const std::vector<int32_t>& ids, const std::vector<int64_t>& tokens) {
  std::vector<int32_t> out;
  size_t k = 0;
  for (int32_t id : ids) {
    if (id != kPad) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), size_t(tokens[k++]), kPad);
  }
  return out;
}

// waste-compute alone (in-process expert reads) at a prefill chunk size, in its own run directory.
struct Compute {
  TempDir run;
  std::unique_ptr<ChildProcess> p;
  Compute(const std::string& model, int chunk, const std::vector<std::pair<std::string, std::string>>& env = {}) {
    const char* exe = std::getenv("WASTE_COMPUTE");
    REQUIRE(exe != nullptr);
    p = std::make_unique<ChildProcess>(std::vector<std::string>{exe, "--model", model, "--run-dir", run.path(),
                                                                 "--no-iod", "--chunk", std::to_string(chunk),
                                                                 "--ctx", "1024", "--sessions", "2"},
                                       env);
    REQUIRE(p->started());
    // spdlog writes to stdout.
    const bool up = p->wait_for([&] { return p->out().find("compute: serving on") != std::string::npos; }, 120);
    REQUIRE_MESSAGE(up, p->out() << p->err());
  }
  std::string where() const { return run.path(); }
};

}  // namespace

TEST_CASE("waste vision: every fixture image's grid, tokens, pixels and embeddings") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  TempDir tmp;
  for (int i = 0; i < 4; ++i) {
    const std::string name = kImages[i];
    CAPTURE(name);
    const nlohmann::json ref = image_json(i);
    const std::string px = tmp / "p.f32", emb = tmp / "e.f32", emb2 = tmp / "e2.f32";
    auto r = run_command(waste_bin() + " vision " + c.model + " --image " + fixture() + "/" + kImages[i] +
                         " --json --pixels-out " + px + " --embeddings " + emb);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    CHECK(j["h_patches"] == ref["grid"]["h_patches"]);
    CHECK(j["w_patches"] == ref["grid"]["w_patches"]);
    CHECK(j["image_tokens"] == ref["grid"]["image_tokens"]);
    CHECK(j["width"] == ref["image"]["width"]);
    CHECK(j["height"] == ref["image"]["height"]);
    const std::vector<float> ref_px = read_f32(fixture() + "/image_" + std::to_string(i) + ".pixels.f32");
    const double px_err = max_diff(read_f32(px), ref_px);
    if (std::string(kImages[i]).ends_with(".png"))
      CHECK(px_err <= 1e-4);
    else
      CHECK(px_err <= 4 * 2.0 / 255);  // libjpeg-turbo vs stb_image: a few codes (x 2/255 after normalizing)
    // The tower and projector from the stored pixels: the README's strict bound.
    const std::string grid = std::to_string(ref["grid"]["h_patches"].get<int>()) + "," +
                             std::to_string(ref["grid"]["w_patches"].get<int>());
    r = run_command(waste_bin() + " vision " + c.model + " --pixels " + fixture() + "/image_" + std::to_string(i) +
                    ".pixels.f32 --grid " + grid + " --embeddings " + emb2);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const std::vector<float> ref_e = read_f32(fixture() + "/image_" + std::to_string(i) + ".embeddings.f32");
    const double rel = max_diff(read_f32(emb2), ref_e) / rms(ref_e);
    MESSAGE(name << ": pixels max |diff| " << px_err << ", embeddings from stored pixels " << rel << " x rms");
    CHECK(rel <= 1e-4);
  }
  // Refusals name what is wrong.
  auto r = run_command(waste_bin() + " vision " + c.model + " --pixels " + fixture() + "/image_0.pixels.f32 --grid 4,8");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("the grid needs") != std::string::npos, r.output);
  r = run_command(waste_bin() + " vision " + c.model + " --pixels " + fixture() + "/image_0.pixels.f32 --grid 3,8");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("merge") != std::string::npos, r.output);
}

TEST_CASE("an image prompt through the processes equals its pad positions fed the tower's rows directly") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  TempDir tmp;
  // The tower's rows for image_0 and image_1 (PNGs: the JPEG decodes differently from the reference), by `waste vision` (the prompt path's code).
  std::vector<std::vector<uint8_t>> files;
  std::vector<int64_t> tokens;
  std::vector<float> rows;
  for (int i : {0, 1}) {
    files.push_back(file_bytes(fixture() + "/" + kImages[i]));
    const std::string e = tmp / ("e" + std::to_string(i) + ".f32");
    auto r = run_command(waste_bin() + " vision " + c.model + " --image " + fixture() + "/" + kImages[i] +
                         " --json --embeddings " + e);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    tokens.push_back(nlohmann::json::parse(r.output.substr(r.output.find('{')))["image_tokens"].get<int64_t>());
    const std::vector<float> v = read_f32(e);
    rows.insert(rows.end(), v.begin(), v.end());
  }
  const std::vector<int32_t> prompt = two_image_prompt(), direct = expanded(prompt, tokens);
  const size_t n = direct.size();

  // Real processes: the supervisor's iod + compute, then compute alone at two other chunk sizes.
  const std::string run = tmp / "run";
  auto up = run_command(Instance::supervise() + " up " + c.model + " --run-dir " + run + " --budget 512M --ctx 1024");
  REQUIRE_MESSAGE(up.status == 0, up.output);
  std::vector<float> reference;  // the first instance's image-prompt prefill logits
  auto check_instance = [&](const std::string& where, const std::string& what) {
    CAPTURE(what);
    client::Client cl(where);
    CHECK(cl.info().vision);
    auto s = cl.open_session();
    uint32_t V = 0;
    const std::vector<float> with_images = s->eval(prompt, false, &V, files);
    REQUIRE(with_images.size() == n * V);
    const std::vector<float> fed = s->eval(direct, false, &V, {}, rows);
    CHECK(with_images == fed);  // bit-identical
    const std::vector<float> step_images = s->eval(prompt, true, &V, files);
    const std::vector<float> step_fed = s->eval(direct, true, &V, {}, rows);
    CHECK(step_images == step_fed);
    CHECK(step_images == with_images);  // a prefill chunked anywhere equals the steps (KDA recurrence)
    if (reference.empty()) {
      reference = with_images;
      // Fed the fixture's own embeddings (an independent implementation's), the logits stay close.
      std::vector<float> ref_rows;
      for (int i : {0, 1}) {
        const std::vector<float> v = read_f32(fixture() + "/image_" + std::to_string(i) + ".embeddings.f32");
        ref_rows.insert(ref_rows.end(), v.begin(), v.end());
      }
      const double rel = max_diff(s->eval(direct, false, &V, {}, ref_rows), fed) / rms(fed);
      MESSAGE("logits fed the fixture's embeddings vs the engine's: max |diff| " << rel << " x rms");
      CHECK(rel < 1e-4);
    } else {
      CHECK(with_images == reference);
    }
    // Without the images the placeholder rows differ: the logits after them must too.
    std::vector<float> tail_rows(rows.size(), 0.0f);
    const std::vector<float> zeros = s->eval(direct, false, &V, {}, tail_rows);
    CHECK(max_diff(zeros, fed) > 1e-3);
    // The first greedy token of a generation with the images is the argmax of the last row.
    client::Request req;
    req.kind = client::Request::Kind::Tokens;
    req.tokens = prompt;
    req.images = files;
    req.max_tokens = 1;
    int32_t got = -1;
    const client::Result res = s->generate(req, [&](int32_t id, std::string_view) {
      if (id >= 0) got = id;
      return true;
    });
    const float* last = &fed[(n - 1) * V];
    CHECK(got == int32_t(std::max_element(last, last + V) - last));
    CHECK(res.prompt_tokens == n);
    CHECK(res.image_tokens == uint64_t(tokens[0] + tokens[1]));
  };
  check_instance(run, "supervised iod + compute");
  for (int chunk : {3, 16}) {
    Compute alone(c.model, chunk);
    check_instance(alone.where(), "compute --chunk " + std::to_string(chunk));
  }
  run_command(Instance::supervise() + " down --run-dir " + run);
}

TEST_CASE("batched with a text-only session, an image session gets what it gets alone; bad images fail alone") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  const std::vector<uint8_t> img = file_bytes(fixture() + "/image_2.jpg");
  auto run = [&](client::Session& s, bool with_image) {
    client::Request req;
    req.kind = client::Request::Kind::Tokens;
    req.tokens = with_image ? std::vector<int32_t>{1, 5, 100, kPad, 102, 9} : std::vector<int32_t>{1, 6, 8, 10, 12};
    if (with_image) req.images = {img};
    req.max_tokens = 12;
    std::vector<int32_t> out;
    s.generate(req, [&](int32_t id, std::string_view) {
      if (id >= 0) out.push_back(id);
      return true;
    });
    return out;
  };
  std::vector<int32_t> alone_image, alone_text;
  {
    Compute solo(c.model, 128);
    client::Client cl(solo.where());
    auto s = cl.open_session();
    alone_image = run(*s, true);
    s->reset();
    alone_text = run(*s, false);
  }
  // The start gate holds the steps until both requests run, so they share every step.
  Compute both(c.model, 128, {{"WASTE_COMPUTE_TEST_START_GATE", "2"}});
  std::vector<int32_t> batched_image, batched_text;
  std::thread t([&] {
    client::Client cl(both.where());
    auto s = cl.open_session();
    batched_image = run(*s, true);
  });
  {
    client::Client cl(both.where());
    auto s = cl.open_session();
    batched_text = run(*s, false);
  }
  t.join();
  CHECK(batched_image == alone_image);
  CHECK(batched_text == alone_text);
  CHECK(alone_image.size() == 12);

  // Bad images: each refused naming the field; the next good request still works.
  client::Client cl(both.where());
  auto s = cl.open_session();
  const std::vector<uint8_t> png = file_bytes(fixture() + "/image_0.png");
  std::vector<std::vector<uint8_t>> bad = {
      std::vector<uint8_t>(png.begin(), png.begin() + 100),  // truncated
      {},                                                    // zero bytes
      std::vector<uint8_t>{'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0},  // wrong magic
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(i);
    client::Request req;
    req.kind = client::Request::Kind::Tokens;
    req.tokens = {1, kPad, 2};
    req.images = {bad[i]};
    req.max_tokens = 2;
    std::string err;
    try {
      s->generate(req, [](int32_t, std::string_view) { return true; });
    } catch (const std::exception& e) {
      err = e.what();
    }
    CHECK_MESSAGE(err.find("images[0]") != std::string::npos, err);
  }
  // Placeholders and images must agree in number.
  client::Request req;
  req.kind = client::Request::Kind::Tokens;
  req.tokens = {1, kPad, 2, kPad};
  req.images = {png};
  std::string err;
  try {
    s->generate(req, [](int32_t, std::string_view) { return true; });
  } catch (const std::exception& e) {
    err = e.what();
  }
  CHECK_MESSAGE(err.find("image placeholders") != std::string::npos, err);
  s->reset();
  CHECK(run(*s, true) == alone_image);
}

TEST_CASE("waste eval in-process: an image equals its rows fed as --pad-embeddings, bit for bit") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  TempDir tmp;
  auto r = run_command(waste_bin() + " vision " + c.model + " --image " + fixture() + "/image_0.png --json --embeddings " +
                       (tmp / "e.f32"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const int64_t n = nlohmann::json::parse(r.output.substr(r.output.find('{')))["image_tokens"].get<int64_t>();
  const std::vector<int32_t> prompt = {1, 5, 100, kPad, 102, 9, 11};
  const std::vector<int32_t> direct = expanded(prompt, {n});
  auto write_ids = [&](const std::string& path, const std::vector<int32_t>& ids) {
    std::ofstream(path) << nlohmann::json(ids).dump();
  };
  write_ids(tmp / "p.json", prompt);
  write_ids(tmp / "d.json", direct);
  for (const std::string step : {"", " --step"}) {
    CAPTURE(step);
    r = run_command(waste_bin() + " eval " + c.model + " --no-progress --no-iod --tokens " + (tmp / "p.json") +
                    " --logits " + (tmp / "a.f32") + " --image " + fixture() + "/image_0.png" + step);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    r = run_command(waste_bin() + " eval " + c.model + " --no-progress --no-iod --tokens " + (tmp / "d.json") +
                    " --logits " + (tmp / "b.f32") + " --pad-embeddings " + (tmp / "e.f32") + step);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const std::vector<float> a = read_f32(tmp / "a.f32"), b = read_f32(tmp / "b.f32");
    CHECK(a.size() == direct.size() * 512);
    CHECK(a == b);
  }
  // A count that does not match is refused by name.
  r = run_command(waste_bin() + " eval " + c.model + " --no-progress --no-iod --tokens " + (tmp / "p.json") +
                  " --logits " + (tmp / "b.f32") + " --pad-embeddings " + (tmp / "e.f32"));
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("rows for") != std::string::npos, r.output);
}

TEST_CASE("images in a continuing session, and prompts that differ only in their image's pixels") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  const std::vector<uint8_t> png0 = file_bytes(fixture() + "/image_0.png");
  const std::vector<uint8_t> png1 = file_bytes(fixture() + "/image_1.png");
  Compute compute(c.model, 4);
  client::Client cl(compute.where());
  auto gen = [&](client::Session& s, std::vector<int32_t> ids, std::vector<std::vector<uint8_t>> images, uint32_t n,
                 client::Result* res = nullptr) {
    client::Request req;
    req.kind = client::Request::Kind::Tokens;
    req.tokens = std::move(ids);
    req.images = std::move(images);
    req.max_tokens = n;
    std::vector<int32_t> out;
    const client::Result r = s.generate(req, [&](int32_t id, std::string_view) {
      if (id >= 0) out.push_back(id);
      return true;
    });
    if (res) *res = r;
    return out;
  };
  // Two turns on one session, each with an image (the second prompt follows the first reply's
  // unfed last token) equal one fresh prompt holding both turns and both images.
  const std::vector<int32_t> turn1 = {1, 5, 100, kPad, 102, 9}, turn2 = {7, 100, kPad, 102, 3};
  auto s = cl.open_session();
  const std::vector<int32_t> reply1 = gen(*s, turn1, {png0}, 5);
  const std::vector<int32_t> reply2 = gen(*s, turn2, {png1}, 6);
  REQUIRE(reply1.size() == 5);
  std::vector<int32_t> whole = turn1;
  whole.insert(whole.end(), reply1.begin(), reply1.end());
  whole.insert(whole.end(), turn2.begin(), turn2.end());
  auto fresh = cl.open_session();
  CHECK(gen(*fresh, whole, {png0, png1}, 6) == reply2);

  // Two images of the same size with other pixels: the prompts' ids are the same (the placeholder
  // repeated over the same count), so only the image tells them apart. The prompt cache must
  // not hand the first image's state to the second.
  TempDir tmp;
  auto png = [&](const std::string& name, int r, int g, int b) {
    const std::string path = tmp / name;
    const std::string py =
        "import struct,zlib,sys\n"
        "w=h=56\n"
        "raw=b''.join(b'\\x00'+bytes([" + std::to_string(r) + "," + std::to_string(g) + "," + std::to_string(b) +
        "])*w for _ in range(h))\n"
        "def chunk(t,d): return struct.pack('>I',len(d))+t+d+struct.pack('>I',zlib.crc32(t+d)&0xffffffff)\n"
        "open(sys.argv[1],'wb').write(b'\\x89PNG\\r\\n\\x1a\\n'+chunk(b'IHDR',struct.pack('>IIBBBBB',w,h,8,2,0,0,0))"
        "+chunk(b'IDAT',zlib.compress(raw))+chunk(b'IEND',b''))\n";
    std::ofstream(tmp / "png.py") << py;
    auto res = run_command("python3 " + (tmp / "png.py") + " " + path);
    REQUIRE_MESSAGE(res.status == 0, res.output);
    return file_bytes(path);
  };
  const std::vector<uint8_t> red = png("red.png", 250, 10, 10), blue = png("blue.png", 10, 10, 250);
  const std::vector<int32_t> ids = {1, 2, 100, kPad, 102, 8, 9};
  client::Result first, second, third;
  auto a = cl.open_session();
  const std::vector<int32_t> with_red = gen(*a, ids, {red}, 4, &first);
  auto b = cl.open_session();
  const std::vector<int32_t> with_blue = gen(*b, ids, {blue}, 4, &second);
  auto d = cl.open_session();
  const std::vector<int32_t> red_again = gen(*d, ids, {red}, 4, &third);
  CHECK(first.prompt_tokens == second.prompt_tokens);  // the same expanded ids
  CHECK(first.cached_tokens == 0);
  CHECK(second.cached_tokens == 0);                    // the red checkpoint does not serve blue
  CHECK(third.cached_tokens == third.prompt_tokens);   // the same image again: the whole prompt
  CHECK(red_again == with_red);
  // Blue alone on a compute that never saw red gives the same reply.
  Compute cold(c.model, 4);
  client::Client cc(cold.where());
  auto e = cc.open_session();
  CHECK(gen(*e, ids, {blue}, 4) == with_blue);
  CHECK(with_blue != with_red);  // the images really are different inputs

  // A request may not raise the patch budget past the server's --image-patches.
  client::Request big;
  big.kind = client::Request::Kind::Tokens;
  big.tokens = ids;
  big.images = {red};
  big.image_patches = 4096;
  std::string err;
  try {
    e->generate(big, [](int32_t, std::string_view) { return true; });
  } catch (const std::exception& ex) {
    err = ex.what();
  }
  CHECK_MESSAGE(err.find("image_patches") != std::string::npos, err);
}

TEST_CASE("waste-compute --tcp: session files only over the run directory's socket") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  TempDir run, files;
  const int port = free_port();
  const char* exe = std::getenv("WASTE_COMPUTE");
  REQUIRE(exe != nullptr);
  ChildProcess p({exe, "--model", c.model, "--run-dir", run.path(), "--no-iod", "--tcp",
                  "127.0.0.1:" + std::to_string(port)});
  REQUIRE(p.wait_for([&] { return p.out().find("compute: serving on") != std::string::npos; }, 120));
  const std::string file = files / "s.session";
  {
    client::Client tcp("127.0.0.1:" + std::to_string(port));
    auto s = tcp.open_session();
    std::string err;
    try {
      s->save(file);
    } catch (const std::exception& e) {
      err = e.what();
    }
    CHECK_MESSAGE(err.find("refused on a TCP connection") != std::string::npos, err);
    CHECK_FALSE(std::filesystem::exists(file));
    CHECK_THROWS(s->load("/etc/passwd"));
  }
  client::Client local(run.path());
  auto s = local.open_session();
  CHECK(s->save(file).bytes > 0);  // the socket's peers (the run directory's owner) may
}

TEST_CASE("image_patches without images is refused by name, not ignored") {
  REQUIRE_MESSAGE(have_fixture(), "the team's vision fixture is missing: " << fixture());
  Converted& c = converted();
  REQUIRE_MESSAGE(c.ok, c.why);
  Compute compute(c.model, 16);
  client::Client cl(compute.where());
  auto s = cl.open_session();
  client::Request req;
  req.kind = client::Request::Kind::Tokens;
  req.tokens = {1, 2, 3};
  req.image_patches = 256;
  req.max_tokens = 1;
  std::string err;
  try {
    s->generate(req, [](int32_t, std::string_view) { return true; });
  } catch (const std::exception& e) {
    err = e.what();
  }
  CHECK_MESSAGE(err.find("image_patches") != std::string::npos, err);
  CHECK_MESSAGE(err.find("no images") != std::string::npos, err);
}
