// The container end to end through the real CLI: synth, info, verify, damage detection,
// and the reader's refusals.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shared/container/reader.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/random.h"
#include "tests/integration/process.h"
#include "tests/integration/synth_model.h"

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
  return synth_model(tmp / name, args);
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

TEST_CASE("synth tiny-k3 writes a vision tower that opens, loads apart, and info and plan describe") {
  TempDir tmp;
  const std::string dir = synth(tmp, "k3", "--preset tiny-k3");
  const Container c = Container::open(dir);
  REQUIRE(c.has_vision());
  const VisionConfig v = VisionConfig::from_json(c.config_json(), "tiny-k3");
  CHECK_EQ(v.text_hidden, c.config().hidden);  // the projector feeds the text model
  CHECK_EQ(v.n_layers, 2);
  // The placeholder is the synthetic tokenizer's own <|media_pad|>.
  const auto tok = nlohmann::json::parse(read_file_text(c.tokenizer_config_path(), 1 << 20));
  CHECK_EQ(v.media_placeholder_token_id, tok["special_tokens"]["<|media_pad|>"].get<int64_t>());
  CHECK_LT(v.media_placeholder_token_id, c.config().vocab);
  const PreprocessorConfig p = PreprocessorConfig::from_json(c.preprocessor_config_json(), "tiny-k3");
  CHECK(p.image_mean == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK(p.image_std == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  uint64_t bytes = 0;
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    CAPTURE(s.name);
    const TensorInfo& t = c.tensor(s.name);
    CHECK(t.format == (s.role == TensorRole::Vector ? TensorFormat::F32 : TensorFormat::Q8G));
    if (t.format == TensorFormat::Q8G) CHECK_EQ(t.group, s.name == "vision_tower.patch_embed.proj.weight" ? 28u : 32u);
    bytes += t.bytes;
  }
  CHECK_EQ(c.vision_bytes(), bytes);
  // Random weights of unit scale: a norm weight is 1, a matrix row's rms about 1/sqrt(cols).
  const Trunk vision(c, {}, true, nullptr, TrunkPart::Vision);
  CHECK_EQ(vision.f32("vision_tower.encoder.blocks.0.norm0.weight")[0], 1.0f);
  const TensorInfo& fc0 = c.tensor("vision_tower.encoder.blocks.0.mlp.fc0.weight");
  std::vector<float> row(fc0.cols());
  read_tensor_row(c, fc0, 0, row.data());
  double sq = 0;
  for (float x : row) sq += double(x) * x;
  CHECK(std::sqrt(sq / double(row.size())) == doctest::Approx(1.0 / std::sqrt(double(row.size()))).epsilon(0.2));
  const Trunk text(c, {"model.embed_tokens.weight"}, false);
  CHECK_FALSE(text.has("vision_tower.encoder.final_layernorm.weight"));

  auto info = run_command(waste_bin() + " info --json " + dir);
  REQUIRE_EQ(info.status, 0);
  auto j = nlohmann::json::parse(info.output);
  CHECK_EQ(j["vision"]["layers"], 2);
  CHECK_EQ(j["vision"]["bytes"], c.vision_bytes());
  CHECK_EQ(j["vision"]["preprocessor"]["patch_size"], 14);
  CHECK_EQ(j["trunk"]["file_bytes"], c.trunk_bytes());
  CHECK_EQ(j["trunk"]["bytes"], c.trunk_bytes() - c.vision_bytes());
  auto text_info = run_command(waste_bin() + " info " + dir);
  CHECK_NE(text_info.output.find("vision tower   2 blocks, hidden 64, 4 x 24 heads"), std::string::npos);

  auto plan = run_command(waste_bin() + " plan --json " + dir);
  INFO(plan.output);
  REQUIRE_EQ(plan.status, 0);
  auto pj = nlohmann::json::parse(plan.output);
  CHECK_EQ(pj["vision"]["weight_bytes"], c.vision_bytes());
  CHECK_GT(pj["vision"]["activation_bytes"].get<uint64_t>(), 0u);
  CHECK_EQ(pj["vision_bytes"].get<uint64_t>(),
           pj["vision"]["weight_bytes"].get<uint64_t>() + pj["vision"]["activation_bytes"].get<uint64_t>());
  CHECK_EQ(pj["floor_bytes"].get<uint64_t>(),
           pj["trunk_bytes"].get<uint64_t>() + pj["session_state_bytes"].get<uint64_t>() +
               pj["scratch_bytes"].get<uint64_t>() + pj["experts_in_flight_bytes"].get<uint64_t>() +
               pj["prompt_cache_bytes"].get<uint64_t>() + pj["vision_bytes"].get<uint64_t>());
  CHECK_NE(run_command(waste_bin() + " plan " + dir).output.find("  vision "), std::string::npos);

  // --vision none: the same text model, no tower, nothing counted for it.
  const std::string none = synth(tmp, "k3-none", "--preset tiny-k3 --vision none");
  const Container n = Container::open(none);
  CHECK_FALSE(n.has_vision());
  CHECK(n.preprocessor_config_json().empty());
  // The tower sits after the text tensors: they are the same bytes at the same offsets.
  CHECK_LE(n.trunk_bytes(), c.trunk_bytes() - c.vision_bytes());
  CHECK_EQ(n.tensor("model.norm.weight").offset, c.tensor("model.norm.weight").offset);
  CHECK_EQ(n.tensor("model.norm.weight").checksum, c.tensor("model.norm.weight").checksum);
  auto none_plan = nlohmann::json::parse(run_command(waste_bin() + " plan --json " + none).output);
  CHECK_EQ(none_plan["vision_bytes"], 0);
  CHECK_EQ(none_plan["trunk_bytes"], pj["trunk_bytes"]);
  CHECK(nlohmann::json::parse(run_command(waste_bin() + " info --json " + none).output)["vision"].is_null());
}

TEST_CASE("CLI errors are clear") {
  auto r = run_command(waste_bin() + " info /nonexistent/x.waste");
  CHECK_EQ(r.status, 1);
  CHECK_NE(r.output.find("/nonexistent/x.waste"), std::string::npos);
  r = run_command(waste_bin() + " synth --preset nope --out /tmp/x");
  CHECK_EQ(r.status, 1);
  CHECK_NE(r.output.find("unknown preset"), std::string::npos);
  r = run_command(waste_bin() + " synth --preset tiny-k3 --vision q4g --out /tmp/x");
  CHECK_EQ(r.status, 1);
  CHECK_NE(r.output.find("--vision must be q8g, bf16, f32 or none"), std::string::npos);
}

TEST_CASE("a FIFO in place of a container file is refused at once by every tool, naming it") {
  TempDir tmp;
  const std::string dir = synth(tmp, "fifo.waste", "--preset tiny-kimi-linear");
  for (const std::string name : {"trunk.bin", "experts-L1.bin", "manifest"}) {
    CAPTURE(name);
    const std::string path = dir + "/" + name, keep = tmp / "kept";
    REQUIRE(std::rename(path.c_str(), keep.c_str()) == 0);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    // `timeout` is the deadline a hang would hit (exit 124), not a timing claim.
    for (const std::string cmd : {" info ", " verify --no-progress ", " run --no-progress --private -n 1 "}) {
      CAPTURE(cmd);
      const std::string tail = cmd.find("run") != std::string::npos ? " hello" : "";
      auto r = run_command("timeout 60 " + waste_bin() + cmd + dir + tail);
      CHECK(r.status == 1);
      CHECK_MESSAGE(r.output.find(name + ": a FIFO, not a regular file") != std::string::npos, r.output);
    }
    REQUIRE(std::remove(path.c_str()) == 0);
    REQUIRE(std::rename(keep.c_str(), path.c_str()) == 0);
  }
}

TEST_CASE("waste tokenize takes TEXT as it is: brackets and commas are text, an empty TEXT is []") {
  TempDir tmp;
  const std::string dir = synth(tmp, "tok.waste", "--preset tiny-k3");
  const std::string jsonl = tmp / "in.jsonl";
  for (const std::string text : {"[BOS]", "[a,b]", "a,b", ""}) {
    CAPTURE(text);
    auto cli = run_command(waste_bin() + " tokenize " + dir + " '" + text + "'");
    REQUIRE_MESSAGE(cli.status == 0, cli.output);
    // The --jsonl path reads the text from JSON, untouched by the command line parser.
    std::ofstream(jsonl) << nlohmann::json{{"text", text}}.dump() << "\n";
    auto ref = run_command(waste_bin() + " tokenize " + dir + " --jsonl " + jsonl);
    REQUIRE_MESSAGE(ref.status == 0, ref.output);
    CHECK(nlohmann::json::parse(cli.output) == nlohmann::json::parse(ref.output)["ids"]);
  }
  CHECK(run_command(waste_bin() + " tokenize " + dir + " '[BOS]'").output !=
        run_command(waste_bin() + " tokenize " + dir + " BOS").output);
}

TEST_CASE("waste run removes its temporary run directory when the private iod fails to start") {
  TempDir tmp;
  const std::string dir = synth(tmp, "leak.waste", "--preset tiny-kimi-linear");
  const std::string scratch = tmp / "tmpdir";
  std::filesystem::create_directories(scratch);
  // A budget under the planner's floor: iod refuses to start.
  auto r = run_command("TMPDIR=" + scratch + " " + waste_bin() + " run " + dir + " hi -n 1 --no-progress --budget 1K");
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find("under the floor") != std::string::npos, r.output);
  CHECK(std::filesystem::is_empty(scratch));
  // And after a run that worked.
  r = run_command("TMPDIR=" + scratch + " " + waste_bin() + " run " + dir + " hi -n 1 --no-progress");
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(std::filesystem::is_empty(scratch));
}

TEST_CASE("a damaged trunk tensor is refused at load, naming it") {
  TempDir tmp;
  const std::string dir = synth(tmp, "dmg.waste", "--preset tiny-kimi-linear");
  const Container c = Container::open(dir);
  const TensorInfo& t = c.tensor("model.norm.weight");
  flip_byte(c.trunk_path(), t.offset + 4);
  auto r = run_command("timeout 120 " + waste_bin() + " run " + dir + " hi -n 2 --no-progress --no-iod");
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find("tensor model.norm.weight is damaged (checksum mismatch)") != std::string::npos, r.output);
}

TEST_CASE("damaged VQ3R codebooks are found by verify and refused at load, naming the layer") {
  TempDir tmp;
  const std::string dir = synth(tmp, "books.waste", "--preset tiny-kimi-linear --experts-format vq3r");
  const Container c = Container::open(dir);
  REQUIRE(!c.codebooks_path().empty());
  const ExpertLayerInfo& l = c.expert_layers().front();
  REQUIRE(l.codebook_checksum != 0);
  flip_byte(c.codebooks_path(), l.codebook_offset + 100);
  auto v = run_command(waste_bin() + " verify --no-progress " + dir);
  CHECK(v.status != 0);
  const std::string what = "layer " + std::to_string(l.layer) + "'s codebooks are damaged";
  CHECK_MESSAGE(v.output.find(what) != std::string::npos, v.output);
  auto r = run_command("timeout 120 " + waste_bin() + " run " + dir + " hi -n 2 --no-progress --no-iod");
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.output.find(what) != std::string::npos, r.output);
}

// Numbers out of an option's range are refused before anything runs, naming the option: never
// clamped, wrapped or saturated, never an internal error (exit 2) such as a std::bad_alloc.
TEST_CASE("waste run refuses out-of-range --kda-chunk, --ctx, --working-sets and --seed, naming them") {
  TempDir tmp;
  const std::string dir = synth(tmp, "range.waste", "--preset tiny-kimi-linear");
  const std::pair<std::string, std::string> bad[] = {
      {"--kda-chunk", "65536"}, {"--kda-chunk", "0"}, {"--kda-chunk", "-1"},
      {"--ctx", "99999999999"}, {"--ctx", "0"}, {"--working-sets", "-1"}, {"--working-sets", "nan"},
      {"--working-sets", "inf"}, {"--working-sets", "1e30"}, {"--seed", "-1"}, {"--seed", "99999999999999999999999"}};
  // Named copies, not structured bindings: clang before 16 cannot capture a binding in
  // CAPTURE's lambda (the ASan build compiles with clang).
  for (const auto& case_ : bad) {
    const std::string& flag = case_.first;
    const std::string& value = case_.second;
    CAPTURE(flag);
    CAPTURE(value);
    // `timeout` is the deadline a hang would hit (exit 124), not a timing claim.
    auto r = run_command("timeout 60 " + waste_bin() + " run " + dir + " hi -n 1 --no-progress --private " + flag + " " + value);
    CHECK(r.status != 0);
    CHECK(r.status != 2);  // not an internal error
    CHECK(r.status != 124);
    CHECK_MESSAGE(r.output.find(flag + ":") != std::string::npos, r.output);
    const bool names_value = r.output.find("'" + value + "'") != std::string::npos || r.output.find(" " + value + " ") != std::string::npos;
    CHECK_MESSAGE(names_value, r.output);
  }
  // The ends of each range are taken.
  for (const std::string ok : {"--kda-chunk 256", "--kda-chunk 1", "--working-sets 0.5", "--seed 18446744073709551615"}) {
    CAPTURE(ok);
    auto r = run_command("timeout 120 " + waste_bin() + " run " + dir + " hi -n 1 --no-progress --private " + ok);
    CHECK_MESSAGE(r.status == 0, r.output);
  }
}

TEST_CASE("waste bench bounds its counts and keeps them within --ctx; run's -n and --connect follow one rule") {
  TempDir tmp;
  const std::string dir = synth(tmp, "bench.waste", "--preset tiny-kimi-linear");
  const std::string bench = "timeout 120 " + waste_bin() + " bench " + dir + " --no-iod --no-progress ";
  const std::pair<std::string, std::string> refused[] = {
      {"--prefill 2147483647", "--prefill:"}, {"-n 2147483647 --warmup 2147483647", "--tokens:"},
      {"-n 10 --ctx 5", "do not fit --ctx 5"}, {"-n 16777216 --warmup 1", "exceed the largest --ctx"}};
  for (const auto& case_ : refused) {
    const std::string& args = case_.first;
    const std::string& says = case_.second;
    CAPTURE(args);
    auto r = run_command(bench + args);
    CHECK(r.status != 0);
    CHECK(r.status != 2);  // not an internal error
    CHECK_MESSAGE(r.output.find(says) != std::string::npos, r.output);
  }
  // Exactly --ctx: 10 decode tokens, no warmup.
  auto fits = run_command(bench + "-n 10 --warmup 0 --ctx 10");
  CHECK_MESSAGE(fits.status == 0, fits.output);
  CHECK(fits.output.find("10 decode tokens") != std::string::npos);

  const std::string run = "timeout 120 " + waste_bin() + " run " + dir + " hi --no-progress ";
  // -1: until the context is full, the same way in this process as through an instance.
  auto all = run_command(run + "--no-iod -n -1 --ctx 40");
  CHECK_MESSAGE(all.status == 0, all.output);
  CHECK_MESSAGE(all.output.find("stop: context") != std::string::npos, all.output);
  for (const std::string where : {"--no-iod", "--connect /nonexistent"}) {
    CAPTURE(where);
    auto r = run_command(run + where + " -n -2");
    CHECK(r.status == 1);
    CHECK_MESSAGE(r.output.find("-n/--max-tokens -2") != std::string::npos, r.output);
  }
  // Engine options cannot apply to a running instance: refused by name, before connecting.
  auto c = run_command(run + "--connect /nonexistent --kda-chunk 16 --chunk 1 --lookahead 0 --timeline /x");
  CHECK(c.status == 1);
  CHECK_MESSAGE(c.output.find("--kda-chunk, --chunk, --lookahead, --timeline describe an engine in this process") !=
                    std::string::npos,
                c.output);
}

TEST_CASE("a private iod that refuses to start is reported with its reason and the options it was given") {
  TempDir tmp;
  const std::string dir = synth(tmp, "refuse.waste", "--preset tiny-kimi-linear");
  const std::pair<std::string, std::string> cases[] = {
      {"--budget 1Q", "unknown unit 'Q'"}, {"--budget -5G", "size '-5G'"}, {"--slots 3", "--slots 3 is under the floor"}};
  for (const std::string cmd : {" run ", " bench "}) {
    for (const auto& case_ : cases) {
      const std::string& args = case_.first;
      const std::string& reason = case_.second;
      CAPTURE(cmd);
      CAPTURE(args);
      const std::string tail = cmd == " run " ? " hi -n 1" : " -n 1";
      auto r = run_command("timeout 120 " + waste_bin() + cmd + dir + tail + " --no-progress " + args);
      CHECK(r.status == 1);
      // The last line is the error: the command, iod's reason, and what it was given.
      const std::string last = r.output.substr(r.output.rfind("waste: error:"));
      CHECK_MESSAGE(last.find("error:" + cmd.substr(0, cmd.size() - 1) + ": the private iod") != std::string::npos, last);
      CHECK_MESSAGE(last.find(reason) != std::string::npos, last);
      CHECK_MESSAGE(last.find("[with " + args) != std::string::npos, last);
      CHECK(last.find("iobench") == std::string::npos);
    }
  }
}

TEST_CASE("waste chat refuses an out-of-range -n and --seed by name, before looking for an instance") {
  for (const std::string args : {"-n -2", "-n 99999999999", "--seed -1", "--seed 99999999999999999999999", "--ctx 99999999999"}) {
    CAPTURE(args);
    auto r = run_command("timeout 60 " + waste_bin() + " chat --model /nonexistent.waste " + args + " hi");
    CHECK(r.status != 0);
    CHECK(r.status != 2);
    const std::string flag = args.substr(0, args.find(' ')) == "-n" ? "--max-tokens:" : args.substr(0, args.find(' ')) + ":";
    CHECK_MESSAGE(r.output.find(flag) != std::string::npos, r.output);
  }
}

// waste up checks its sizes itself and hands every value to the supervisor as --flag=value, so
// "-5G" is never read as an option by the supervisor's parser and the error names waste up's flag.
TEST_CASE("waste up refuses a bad --budget or --prompt-cache by name, before starting anything") {
  for (const std::string args : {"--budget -5G", "--budget 1Q", "--budget nan", "--prompt-cache -1G"}) {
    CAPTURE(args);
    auto r = run_command("timeout 60 " + waste_bin() + " up /nonexistent.waste --run-dir /nonexistent-run-dir " + args);
    CHECK(r.status != 0);
    CHECK_MESSAGE(r.output.find(args.substr(0, args.find(' ')) + ":") != std::string::npos, r.output);
    CHECK_MESSAGE(r.output.find("waste-supervise") == std::string::npos, r.output);
  }
}
