// The container end to end through the real CLI: synth, info, verify, damage detection,
// and the reader's refusals.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "shared/util/random.h"
#include "tests/integration/process.h"

using namespace waste;
using namespace waste::test;

namespace {

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

std::string synth(const TempDir& tmp, const std::string& name, const std::string& args) {
  std::string out = tmp / name;
  auto r = run_command(waste_bin() + " synth --no-progress --out " + out + " " + args);
  INFO(r.output);
  REQUIRE_EQ(r.status, 0);
  return out;
}

}  // namespace

TEST_CASE("synth writes a valid container for every tiny preset, in every expert format") {
  TempDir tmp;
  for (std::string preset : {"tiny-kimi-linear", "tiny-k3", "tiny-k2"}) {
    for (std::string fmt : {"vq3r", "f32", "bf16"}) {
      CAPTURE(preset);
      CAPTURE(fmt);
      std::string dir = synth(tmp, preset + "-" + fmt, "--preset " + preset + " --experts-format " + fmt);
      Container c = Container::open(dir);
      CHECK(c.synthetic());
      CHECK_EQ(int(c.expert_layers().size()), c.config().n_moe_layers());
      for (const auto& l : c.expert_layers()) CHECK_EQ(l.layout.stride % 4096, 0u);
      auto r = run_command(waste_bin() + " verify --no-progress " + dir);
      INFO(r.output);
      CHECK_EQ(r.status, 0);
    }
  }
}

TEST_CASE("synth is deterministic by seed") {
  TempDir tmp;
  std::string a = synth(tmp, "a", "--preset tiny-k2 --seed 7");
  std::string b = synth(tmp, "b", "--preset tiny-k2 --seed 7");
  std::string c = synth(tmp, "c", "--preset tiny-k2 --seed 8");
  auto cmp = [](const std::string& x, const std::string& y) { return run_command("cmp -s " + x + " " + y).status == 0; };
  for (const char* f : {"manifest", "trunk.bin", "experts-L1.bin", "codebooks.bin"}) {
    CAPTURE(f);
    CHECK(cmp(a + "/" + f, b + "/" + f));
  }
  CHECK_FALSE(cmp(a + "/experts-L1.bin", c + "/experts-L1.bin"));
  CHECK_NE(Container::open(a).container_id(), Container::open(c).container_id());
}

TEST_CASE("Kimi-Linear-shaped bank: 256 records, 4 KiB stride; any damaged payload byte is named") {
  TempDir tmp;
  std::string dir = synth(tmp, "kl", "--preset kimi-linear-48b --layers 2 --vocab 8192");
  Container c = Container::open(dir);
  REQUIRE_EQ(c.expert_layers().size(), 1u);
  const auto& l = c.expert_layers()[0];
  CHECK_EQ(l.expert_count, 256u);
  CHECK_EQ(l.layout.stride, 2666496u);
  CHECK_EQ(std::filesystem::file_size(l.bank_path), 256ull * l.layout.stride);
  auto ok = run_command(waste_bin() + " verify --no-progress " + dir);
  INFO(ok.output);
  REQUIRE_EQ(ok.status, 0);

  // Flip a random payload byte of a random record, check the error names layer and expert, undo.
  Rng rng(42);
  for (int trial = 0; trial < 3; ++trial) {
    uint32_t expert = uint32_t(rng.below(256));
    uint64_t offset = uint64_t(expert) * l.layout.stride + kRecordHeaderBytes + rng.below(l.layout.payload_bytes);
    flip_byte(l.bank_path, offset);
    auto bad = run_command(waste_bin() + " verify --no-progress " + dir);
    CHECK_EQ(bad.status, 1);
    CHECK_NE(bad.output.find("layer 1 expert " + std::to_string(expert) + ":"), std::string::npos);
    flip_byte(l.bank_path, offset);
  }
  CHECK_EQ(run_command(waste_bin() + " verify --no-progress " + dir).status, 0);
}

TEST_CASE("the reader refuses damaged containers with errors that name the problem") {
  TempDir tmp;
  std::string dir = synth(tmp, "t", "--preset tiny-kimi-linear");
  SUBCASE("truncated bank") {
    std::filesystem::resize_file(dir + "/experts-L2.bin", 4096);
    CHECK_THROWS_WITH_AS(Container::open(dir), doctest::Contains("experts-L2.bin"), Error);
  }
  SUBCASE("truncated trunk") {
    std::filesystem::resize_file(dir + "/trunk.bin", 1000);
    CHECK_THROWS_WITH_AS(Container::open(dir), doctest::Contains("trunk.bin"), Error);
  }
  SUBCASE("garbage manifest") {
    std::ofstream(dir + "/manifest", std::ios::binary | std::ios::trunc) << "not a manifest at all!!";
    CHECK_THROWS_AS(Container::open(dir), Error);
  }
  SUBCASE("missing manifest") {
    std::filesystem::remove(dir + "/manifest");
    CHECK_THROWS_WITH_AS(Container::open(dir), doctest::Contains("no manifest"), Error);
  }
  SUBCASE("damaged header is caught on read") {
    Container c = Container::open(dir);
    flip_byte(dir + "/experts-L3.bin", 5 * c.expert_layer(3)->layout.stride + 8);  // layer field of expert 5
    std::vector<uint8_t> rec(c.expert_layer(3)->layout.stride);
    CHECK_THROWS_WITH_AS(c.read_record(3, 5, rec.data()), doctest::Contains("layer 3 expert 5"), Error);
    CHECK_NOTHROW(c.read_record(3, 6, rec.data()));
  }
  SUBCASE("info --json describes the model") {
    auto r = run_command(waste_bin() + " info --json " + dir);
    REQUIRE_EQ(r.status, 0);
    auto j = nlohmann::json::parse(r.output);
    CHECK_EQ(j["arch"], "kimi_linear");
    CHECK_EQ(j["shape"]["moe_layers"], 3);
    CHECK_EQ(j["per_token"]["working_set_slots"], 12);
  }
}

TEST_CASE("CLI errors are clear") {
  auto r = run_command(waste_bin() + " info /nonexistent/x.waste");
  CHECK_EQ(r.status, 1);
  CHECK_NE(r.output.find("/nonexistent/x.waste"), std::string::npos);
  r = run_command(waste_bin() + " synth --preset nope --out /tmp/x");
  CHECK_EQ(r.status, 1);
  CHECK_NE(r.output.find("unknown preset"), std::string::npos);
}
