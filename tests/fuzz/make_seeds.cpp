// Writes the seed corpora of the targets whose inputs are binary or built from real structures
// (tests/fuzz/corpus/<name>/): Cap'n Proto requests of both RPC interfaces, a manifest, expert
// records, reply id streams, a safetensors shard, a session file of the kimi-linear fixture, rank
// files, tokenizer configs and usage files. The text seeds (config.json, chat requests, traces,
// an image) are copies of ../shared files (docs/TESTING.md, "Fuzzing"). Deterministic, each
// seed a few KB at most. Built with the tree (not installed, not a test); run by hand:
//   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus      (WASTE_SHARED_DIR for the fixture)
#include <capnp/message.h>
#include <fcntl.h>
#include <capnp/serialize.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/model/session_file.h"
#include "iod/cache/usage_file.h"
#include "proto/engine.capnp.h"
#include "proto/expert_store.capnp.h"
#include "shared/container/format.h"
#include "shared/container/manifest_io.h"
#include "shared/hf/checkpoint.h"
#include "shared/tokenizer/synthetic_ranks.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/file.h"
#include "tests/fuzz/fuzz_tokenizer.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace waste;

namespace {

std::string corpus;  // the corpus root, argv[1]

void put(const std::string& target, const std::string& name, const void* data, size_t n) {
  fs::create_directories(corpus + "/" + target);
  File f(corpus + "/" + target + "/" + name, O_WRONLY | O_CREAT | O_TRUNC);
  f.write_all(data, n);
}
void put(const std::string& target, const std::string& name, const std::string& s) { put(target, name, s.data(), s.size()); }
void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& b) { put(target, name, b.data(), b.size()); }

std::vector<uint8_t> flat(capnp::MessageBuilder& m, const std::string& prefix = "") {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(m);
  std::vector<uint8_t> out(prefix.begin(), prefix.end());
  const auto bytes = words.asBytes();
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

std::string shared_dir() {
  const char* d = std::getenv("WASTE_SHARED_DIR");
  return d && *d ? d : "../shared";
}

void expert_store_seeds() {
  using proto::ExpertStore;
  {
    capnp::MallocMessageBuilder m;
    auto p = m.initRoot<ExpertStore::FetchParams>();
    p.setLayer(1);
    auto e = p.initExperts(4);
    for (uint32_t i = 0; i < 4; ++i) e.set(i, i * 3);
    auto r = p.initReleases(2);
    r[0].setSlot(3), r[0].setGeneration(7);
    r[1].setSlot(9), r[1].setGeneration(1);
    put("expert_store_rpc", "fetch", flat(m, std::string(1, '\0')));
  }
  {
    capnp::MallocMessageBuilder m;
    auto p = m.initRoot<ExpertStore::PrefetchParams>();
    p.setLayer(3);
    auto e = p.initExperts(2);
    e.set(0, 15), e.set(1, 2);
    put("expert_store_rpc", "prefetch", flat(m, std::string(1, '\1')));
  }
  {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<ExpertStore::ReleaseParams>().initHandles(3);
    for (uint32_t i = 0; i < 3; ++i) r[i].setSlot(i * 20), r[i].setGeneration(i + 1);
    put("expert_store_rpc", "release", flat(m, std::string(1, '\3')));
  }
  {
    capnp::MallocMessageBuilder m;
    auto u = m.initRoot<ExpertStore::TouchParams>().initUses(2);
    u[0].setLayer(1);
    auto e0 = u[0].initExperts(2);
    e0.set(0, 4), e0.set(1, 11);
    u[1].setLayer(2);
    u[1].initExperts(1).set(0, 15);
    put("expert_store_rpc", "touch", flat(m, std::string(1, '\2')));
  }
}

void engine_seeds() {
  using proto::GenerateRequest;
  {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<GenerateRequest>();
    auto chat = r.getPrompt().initChat(3);
    chat[0].setRole("system"), chat[0].setContent("You are terse.");
    chat[1].setRole("user");
    auto parts = chat[1].initParts(2);
    parts[0].setText("What is in this image?");
    parts[1].setImage(true);
    parts[1].setText("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==");
    chat[2].setRole("assistant");
    auto calls = chat[2].initToolCalls(1);
    calls[0].setHasId(true), calls[0].setId("call_1"), calls[0].setName("look");
    calls[0].setArguments("{\"where\": \"left\"}");
    auto o = r.initChatOptions();
    o.setToolsJson(R"([{"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {"where": {"type": "string"}}}}}])");
    o.setToolChoice("auto");
    o.setResponseFormat("json_schema");
    o.setSchemaJson(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
    o.setThinkingEffort("high");
    r.setTemperature(0.7f), r.setTopP(0.9f), r.setMinP(0.05f);
    auto stop = r.initStop(2);
    stop.set(0, "\n\n"), stop.set(1, "END");
    put("engine_rpc", "chat_with_image", flat(m));
  }
  {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<GenerateRequest>();
    auto chat = r.getPrompt().initChat(2);
    chat[0].setRole("user"), chat[0].setContent("Hi");
    chat[1].setRole("tool"), chat[1].setHasToolCallId(true), chat[1].setToolCallId("call_1"), chat[1].setContent("42");
    r.setSeed(1);  // the fuzz target renders with Kimi for odd seeds
    r.initChatOptions().setToolChoice("function:look");
    put("engine_rpc", "chat_kimi_tool", flat(m));
  }
  {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<GenerateRequest>();
    auto t = r.getPrompt().initTokens(4);
    for (uint32_t i = 0; i < 4; ++i) t.set(i, int32_t(i + 10));
    auto im = r.initImages(1);
    const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    im.set(0, kj::arrayPtr(png, sizeof png));
    r.setPresencePenalty(1.5f), r.setFrequencyPenalty(-0.5f), r.setRepetitionPenalty(1.1f);
    put("engine_rpc", "tokens_with_image", flat(m));
  }
  {
    capnp::MallocMessageBuilder m;
    m.initRoot<GenerateRequest>().getPrompt().setText("Hello, world");
    put("engine_rpc", "text", flat(m));
  }
}

void manifest_seeds() {
  ManifestData m;
  m.arch = "kimi_linear";
  m.config_json = read_file_text(shared_dir() + "/fixtures/kimi-linear/config.json", 1 << 16);
  m.tensor_prefix = "";
  m.created_by = "fuzz_make_seeds";
  m.container_id = 42;
  m.trunk_bytes = 8192;
  TensorInfo t;
  t.name = "model.norm.weight", t.format = TensorFormat::F32, t.shape = {128}, t.offset = 0, t.bytes = 512, t.checksum = 1;
  m.tensors.push_back(t);
  t.name = "lm_head.weight", t.format = TensorFormat::Q8G, t.shape = {16, 128}, t.offset = 512, t.bytes = 2112, t.group = 64,
  t.scales_offset = 2048;
  m.tensors.push_back(t);
  ExpertLayerInfo l;
  l.layer = 1, l.bank_path = bank_file_name(1), l.expert_count = 16;
  l.layout = record_layout(TensorFormat::VQ3R, 128, 64);
  l.codebook_offset = 0, l.codebook_checksum = 5;
  l.relative_error = {0.1f, 0.2f, 0.3f};
  m.layers.push_back(l);
  m.codebooks_file = "codebooks.bin", m.codebooks_bytes = kCodebookFloats * 12;
  m.tokenizer_file = "tokenizer.model", m.tokenizer_config_file = "tokenizer_config.json";
  put("manifest", "kimi-linear", encode_manifest(m));
}

void record_seeds() {
  struct Shape {
    TensorFormat format;
    uint32_t hidden, intermediate;
    const char* name;
  };
  for (const Shape& s : {Shape{TensorFormat::VQ3R, 64, 32, "vq3r"}, Shape{TensorFormat::BF16, 16, 8, "bf16"},
                         Shape{TensorFormat::F32, 8, 8, "f32"}}) {
    const RecordLayout layout = record_layout(s.format, s.hidden, s.intermediate);
    std::vector<uint8_t> record(layout.stride, 0);
    for (size_t i = kRecordHeaderBytes; i < kRecordHeaderBytes + layout.payload_bytes; ++i) record[i] = uint8_t(i * 7);
    const RecordHeader h = make_record_header(layout, 1, 2, record.data() + kRecordHeaderBytes);
    std::memcpy(record.data(), &h, sizeof h);
    // The target's layout bytes (format, widths in units of 8 minus one, verify), then the record
    // up to the end of its payload (the target zero-pads to the stride).
    std::vector<uint8_t> in = {uint8_t(s.format), 0, uint8_t(s.hidden / 8 - 1), 0, uint8_t(s.intermediate / 8 - 1), 1};
    in.insert(in.end(), record.begin(), record.begin() + kRecordHeaderBytes + layout.payload_bytes);
    put("record_header", s.name, in);
  }
}

std::vector<uint8_t> reply_input(uint8_t mode, const tok::Tokenizer& t, const std::string& markup) {
  std::vector<uint8_t> out = {mode};
  for (uint32_t id : t.encode_markup(markup)) out.push_back(uint8_t(id)), out.push_back(uint8_t(id >> 8));
  return out;
}

void reply_seeds() {
  // Mode byte (tests/fuzz/fuzz_reply.cpp): bit 0 thinking, bits 1-2 family (0 K2, 1 Kimi-Linear,
  // 2 K3), bits 3-4 set: no chat format.
  const tok::Tokenizer& k3 = fuzz::fuzz_tokenizer(tok::TokenizerFamily::K3);
  put("reply", "k3_think_call", reply_input(0x05, k3,
      "Let me look.<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"look\"<|sep|>"
      "<|open|>argument key=\"where\" type=\"string\"<|sep|>left<|close|>argument<|sep|>"
      "<|open|>argument key=\"n\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|>"));
  put("reply", "k3_response_json", reply_input(0x04, k3,
      "{\"a\": 1}<|close|>response<|sep|><|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{\"x\": [1, 2]}"
      "<|close|>json<|sep|><|end_of_msg|>"));
  const tok::Tokenizer& kimi = fuzz::fuzz_tokenizer(tok::TokenizerFamily::KimiLinear);
  put("reply", "kimi_think_call", reply_input(0x02, kimi,
      "<think>hmm</think>Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.look:0"
      "<|tool_call_argument_begin|>{\"where\": \"left\"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"));
  const tok::Tokenizer& k2 = fuzz::fuzz_tokenizer(tok::TokenizerFamily::KimiK2);
  put("reply", "k2_plain", reply_input(0x18, k2, "Plain text \xc3\xa9 and a stop.[EOS]"));
}

void safetensors_seeds() {
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}, "c": {"dtype": "F8_E4M3", "shape": [0], "data_offsets": [32, 32]}})";
  std::vector<uint8_t> f(8);
  for (int i = 0; i < 8; ++i) f[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  f.insert(f.end(), header.begin(), header.end());
  for (int i = 0; i < 32; ++i) f.push_back(uint8_t(i));
  put("safetensors", "two_tensors.safetensors", f);
}

void session_seeds() {
  const std::string dir = shared_dir() + "/fixtures/kimi-linear";
  Checkpoint ckpt = Checkpoint::open(dir);
  CheckpointWeights weights(ckpt);
  CheckpointExperts experts(ckpt);
  Model model = Model::create(weights, experts, ckpt.config());
  // What tests/fuzz/fuzz_session.cpp reads them with: container id 42, a context of 64.
  for (int n : {2}) {  // one seed: the KDA state alone makes it 63 KB
    Session s = model.new_session(64);
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t(i + 1));
    if (n > 0) {
      std::vector<float> logits(size_t(model.config().vocab));
      model.forward(s, ids, logits.data());
    }
    const test::TempDir dir("waste-seed-session");
    const std::string tmp = dir / "seed.session";
    write_session_file(tmp, model, 42, s, ids, n > 0 ? std::optional<int32_t>(7) : std::nullopt);
    put("session", "kimi-linear-" + std::to_string(n) + "-tokens", read_file_bytes(tmp, 1 << 20));
  }
}

void tokenizer_seeds() {
  put("tiktoken", "synthetic-16-merges.tiktoken", tok::synthetic_rank_file(16));
  put("tokenizer_config", "k2.json", tok::tokenizer_config_for(tok::TokenizerFamily::KimiK2, 512).to_json());
  put("tokenizer_config", "kimi-linear.json", tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear, 512).to_json());
  put("tokenizer_config", "k3.json", tok::tokenizer_config_for(tok::TokenizerFamily::K3, 512).to_json());
}

void usage_seeds() {
  // The geometry tests/fuzz/fuzz_usage.cpp serves: MoE layers 1..3 of 16 experts, top-4.
  const cache::CacheGeometry g({1, 2, 3}, 16, 4);
  cache::UsageCounts u = cache::UsageCounts::for_geometry(g, 42);
  for (uint32_t t = 0; t < 5; ++t) {
    for (uint32_t l = 1; l <= 3; ++l)
      for (uint32_t k = 0; k < 4; ++k) u.add({l, (t * 5 + l * 3 + k) % 16});
    u.end_token();
  }
  put("usage", "three-layers", cache::encode_usage(u));
  put("usage", "empty", cache::encode_usage(cache::UsageCounts::for_geometry(g, 0)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  corpus = argv[1];
  try {
    expert_store_seeds();
    engine_seeds();
    manifest_seeds();
    record_seeds();
    reply_seeds();
    safetensors_seeds();
    session_seeds();
    tokenizer_seeds();
    usage_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
