// Session state as a value: a copy (checkpoint) continues bit-identically to the session it was
// taken from, a prefill split anywhere gives the same state as one prefill (what lets the
// prompt cache resume at a checkpoint), and a session file round-trips exactly while a damaged,
// foreign or other-version file is refused naming what is wrong. Every family.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/model/session_file.h"
#include "shared/container/format.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/fixture_dir.h"

using namespace waste;
using waste::test::TempDir;
namespace fs = std::filesystem;

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  // An empty vector's data() may be null, which memcmp may not be given (UBSan), even for 0 bytes.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_state(const Session& a, const Session& b) {
  if (a.position() != b.position() || a.layers().size() != b.layers().size()) return false;
  for (size_t L = 0; L < a.layers().size(); ++L) {
    const LayerState &x = a.layers()[L], &y = b.layers()[L];
    if (!same_bits(x.mla.rows, y.mla.rows) || !same_bits(x.mla.rows_bf16, y.mla.rows_bf16) || !same_bits(x.kda.state, y.kda.state) || !same_bits(x.kda.conv_q, y.kda.conv_q) ||
        !same_bits(x.kda.conv_k, y.kda.conv_k) || !same_bits(x.kda.conv_v, y.kda.conv_v))
      return false;
  }
  return true;
}

// Counts expert fetches: a forward pass fetches, a restored state must not.
class CountingExperts : public ExpertSource {
 public:
  explicit CountingExperts(const Checkpoint& c) : inner_(c) {}
  ExpertView expert(int layer, int expert) override {
    ++fetched;
    return inner_.expert(layer, expert);
  }
  uint64_t fetched = 0;

 private:
  CheckpointExperts inner_;
};

struct Family {
  std::string name, dir;
  Checkpoint ckpt;
  CheckpointWeights weights;
  CountingExperts experts;
  Model model;
  std::vector<int32_t> ids;
  explicit Family(const std::string& n)
      : name(n),
        dir(fixture_dir(n.c_str())),
        ckpt(Checkpoint::open(dir)),
        weights(ckpt),
        experts(ckpt),
        model(Model::create(weights, experts, ckpt.config())),
        ids(nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>()) {}
  int64_t vocab() const { return model.config().vocab; }
  // Greedy logits of `steps` decode steps after `first`, from s.
  std::vector<float> continue_greedy(Session& s, int32_t first, int steps) {
    std::vector<float> all, l(static_cast<size_t>(vocab()));
    int32_t next = first;
    for (int i = 0; i < steps; ++i) {
      model.forward(s, {&next, 1}, l.data());
      all.insert(all.end(), l.begin(), l.end());
      next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    return all;
  }
};

constexpr uint64_t kContainerId = 0x5e55105e55105e55ull;

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void flip_byte(const std::string& path, uint64_t offset) {
  File f(path, O_RDWR);
  uint8_t b = 0;
  f.pread_exact(&b, 1, offset);
  b ^= 0x40;
  f.pwrite_exact(&b, 1, offset);
}

}  // namespace

TEST_CASE("session state: a checkpoint continues bit-identically; a prefill split anywhere equals one prefill") {
  for (const std::string name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    Family f(name);
    REQUIRE(f.ids.size() >= 12);
    const std::span<const int32_t> ids(f.ids);
    const int64_t ctx = 64;
    std::vector<float> l(size_t(f.vocab()));

    // One prefill of 10 ids vs 3 + 7 vs 1 + 4 + 5: the same state and the same logits.
    Session whole = f.model.new_session(ctx);
    std::vector<float> l_whole(size_t(f.vocab()));
    f.model.forward(whole, ids.first(10), l_whole.data());
    for (const std::vector<size_t>& cuts : {std::vector<size_t>{3, 7}, std::vector<size_t>{1, 4, 5}}) {
      Session split = f.model.new_session(ctx);
      size_t at = 0;
      for (size_t n : cuts) {
        f.model.forward(split, ids.subspan(at, n), l.data());
        at += n;
      }
      CHECK(same_bits(l, l_whole));
      CHECK(same_state(split, whole));
    }

    // A copy taken after the prefill continues exactly as the original does.
    Session checkpoint = whole;
    CHECK(checkpoint.state_bytes() == whole.state_bytes());
    CHECK(checkpoint.state_bytes() > 0);
    const int32_t next = ids[10];
    const std::vector<float> a = f.continue_greedy(whole, next, 6);
    Session resumed = checkpoint.with_context(ctx * 2);
    CHECK(resumed.max_context() == ctx * 2);
    const std::vector<float> b = f.continue_greedy(resumed, next, 6);
    CHECK(same_bits(a, b));
    // ... and the checkpoint itself was not touched by either.
    CHECK(checkpoint.position() == 10);
  }
}

TEST_CASE("session file: round trip continues bit-identically, no prefill") {
  for (const std::string name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    Family f(name);
    TempDir tmp;
    const std::span<const int32_t> ids(f.ids);
    Session s = f.model.new_session(64);
    std::vector<float> l(size_t(f.vocab()));
    f.model.forward(s, ids.first(9), l.data());
    const std::string path = tmp / "s.session";
    const uint64_t bytes = write_session_file(path, f.model, kContainerId, s, ids.first(9), ids[9]);
    CHECK(bytes == fs::file_size(path));
    CHECK(bytes > s.state_bytes());
    CHECK(!fs::exists(path + ".tmp"));

    const uint64_t fetched_before = f.experts.fetched;
    SessionFileContents back = read_session_file(path, f.model, kContainerId, 32);
    CHECK(f.experts.fetched == fetched_before);  // no forward ran
    CHECK(back.ids == std::vector<int32_t>(f.ids.begin(), f.ids.begin() + 9));
    REQUIRE(back.unfed.has_value());
    CHECK(*back.unfed == ids[9]);
    CHECK(back.state.max_context() == 32);
    CHECK(same_state(back.state, s));
    CHECK(same_bits(f.continue_greedy(back.state, ids[9], 5), f.continue_greedy(s, ids[9], 5)));

    // No pending token, position 0: both round-trip too.
    Session empty = f.model.new_session(8);
    write_session_file(path, f.model, kContainerId, empty, {}, std::nullopt);
    SessionFileContents e = read_session_file(path, f.model, kContainerId, 8);
    CHECK(e.state.position() == 0);
    CHECK(!e.unfed.has_value());
  }
}

TEST_CASE("a bf16 MLA cache: half the bytes, logits near the f32 cache's, its session file round-trips and is refused by an f32 model") {
  // Fixture checkpoints hold bf16 kv_b_proj (lossless): their sessions keep f32. A quantized trunk
  // gets bf16 (shared/model/mla_cache.h); here it is set by hand to compare the two.
  Family f("deepseek-v3");
  CHECK(f.model.mla_cache_format() == MlaCacheFormat::F32);
  TempDir tmp;
  const std::span<const int32_t> ids(f.ids);
  Session s32 = f.model.new_session(64);
  f.model.set_mla_cache_format(MlaCacheFormat::BF16);
  Session s16 = f.model.new_session(64);
  std::vector<float> l32(size_t(f.vocab())), l16(l32.size());
  f.model.forward(s32, ids.first(12), l32.data());
  f.model.forward(s16, ids.first(12), l16.data());
  CHECK(s16.state_bytes() * 2 == s32.state_bytes());  // deepseek-v3: MLA layers only
  double worst = 0;
  for (size_t i = 0; i < l32.size(); ++i) worst = std::max(worst, double(std::fabs(l32[i] - l16[i])));
  MESSAGE("bf16 cache: max |logit diff| ", worst, " after 12 tokens");
  CHECK(worst > 0);        // the rounding is real ...
  CHECK(worst <= 0.1);     // ... and small (docs/LEARNED.md: 0.04 at most on 40 rows)
  CHECK(std::max_element(l32.begin(), l32.end()) - l32.begin() == std::max_element(l16.begin(), l16.end()) - l16.begin());

  const std::string path = tmp / "s16.session";
  write_session_file(path, f.model, kContainerId, s16, ids.first(12), std::nullopt);
  SessionFileContents back = read_session_file(path, f.model, kContainerId, 64);
  CHECK(same_state(back.state, s16));
  CHECK(same_bits(f.continue_greedy(back.state, ids[12], 3), f.continue_greedy(s16, ids[12], 3)));

  f.model.set_mla_cache_format(MlaCacheFormat::F32);
  const std::string why = refusal([&] { read_session_file(path, f.model, kContainerId, 64); });
  CHECK(why.find("MLA latent cache (bf16)") != std::string::npos);
  CHECK(why.find("MLA latent cache (f32)") != std::string::npos);
  // A checkpoint of the other type is refused too (the prompt cache restores through this).
  CHECK_THROWS_AS(f.model.restore_session(64, s16.position(), s16.layers()), Error);
}

TEST_CASE("session file: damaged, truncated, foreign, other-version, oversized and symlinked files are refused by name") {
  Family f("kimi-linear");
  TempDir tmp;
  const std::span<const int32_t> ids(f.ids);
  Session s = f.model.new_session(64);
  std::vector<float> l(size_t(f.vocab()));
  f.model.forward(s, ids.first(8), l.data());
  const std::string good = tmp / "good.session";
  const uint64_t size = write_session_file(good, f.model, kContainerId, s, ids.first(8), std::nullopt);
  auto copy = [&](const std::string& name) {
    const std::string p = tmp / name;
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    return p;
  };
  auto load = [&](const std::string& p, uint64_t id = kContainerId, int64_t ctx = 64) {
    return refusal([&] { read_session_file(p, f.model, id, ctx); });
  };
  CHECK(load(good).empty());

  // Another model: its container id differs.
  CHECK(load(good, kContainerId + 1).find("saved from another model") != std::string::npos);
  // Too little context for what it holds.
  CHECK(load(good, kContainerId, 8).find("more than fit the session's context of 8") != std::string::npos);

  // A flipped byte in each region is caught by the checksum of that region, and named.
  const std::string header = copy("header.session");
  flip_byte(header, 40);  // the position
  CHECK(load(header).find("header is damaged") != std::string::npos);
  const std::string table = copy("table.session");
  flip_byte(table, 128 + 8);  // the first section's byte count
  CHECK(load(table).find("section table is damaged") != std::string::npos);
  const std::string state = copy("state.session");
  flip_byte(state, size - 3);  // inside the last layer's last section
  const std::string why = load(state);
  CHECK(why.find("is damaged (checksum mismatch)") != std::string::npos);
  CHECK(why.find("layer " + std::to_string(f.model.config().n_layers - 1)) != std::string::npos);
  CHECK(why.find(state) != std::string::npos);

  // Cut short or grown.
  const std::string cut = copy("cut.session");
  fs::resize_file(cut, size - 100);
  CHECK(load(cut).find("truncated or appended to") != std::string::npos);

  // Another version: the header's checksum is right but its version is not this build's.
  const std::string v3 = copy("v3.session");
  {
    File fh(v3, O_RDWR);
    std::vector<uint8_t> h(128);
    fh.pread_exact(h.data(), h.size(), 0);
    const uint32_t version = kSessionFileVersion + 1;
    std::memcpy(&h[8], &version, 4);
    const uint64_t sum = checksum64(h.data(), 120);
    std::memcpy(&h[120], &sum, 8);
    fh.pwrite_exact(h.data(), h.size(), 0);
  }
  CHECK(load(v3).find("session file version " + std::to_string(kSessionFileVersion + 1)) != std::string::npos);

  // The JSON files of version 1, and files that are no session at all.
  const std::string v1 = tmp / "v1.json";
  write_file_atomic(v1, "{\"format\": \"waste-session-1\", \"tokens\": [1, 2]}\n", 45);
  CHECK(load(v1).find("a version 1 session file") != std::string::npos);
  const std::string junk = tmp / "junk";
  const std::string junk_bytes(200, 'x');
  write_file_atomic(junk, junk_bytes.data(), junk_bytes.size());
  CHECK(load(junk).find("not a waste session file") != std::string::npos);
  CHECK(load(tmp / "absent").find("absent") != std::string::npos);

  // A symlink is not followed, on load and on save (the temporary is made with O_EXCL).
  const std::string link = tmp / "link.session";
  fs::create_symlink(good, link);
  CHECK(!load(link).empty());
  const std::string victim = tmp / "victim";
  write_file_atomic(victim, "keep", 4);
  fs::create_symlink(victim, tmp / "out.session.tmp");
  write_session_file(tmp / "out.session", f.model, kContainerId, s, ids.first(8), std::nullopt);
  CHECK(read_file_text(victim, 16) == "keep");  // the planted link was replaced, its target untouched
  CHECK(load(tmp / "out.session").empty());
}
