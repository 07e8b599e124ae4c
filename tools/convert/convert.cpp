#include "tools/convert/convert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "shared/container/writer.h"
#include "shared/hf/checkpoint.h"
#include "shared/tokenizer/tokenizer_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "shared/util/progress.h"
#include "shared/util/thread_pool.h"
#include "tools/convert/expert_payload.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The options that change the bytes written. Progress left by a run with other options (or by
// another tool) is discarded, since the writer only knows about the config.
// Identity of the checkpoint's contents as far as cheaply known (names, dtypes, shapes, shard
// sizes), so a directory resumed with another checkpoint of the same config starts over.
uint64_t checkpoint_identity(const Checkpoint& ck) {
  std::string text = ck.config_json();
  std::vector<std::string> shards;
  for (const std::string& n : ck.names()) {
    text += n + " " + ck.dtype(n);
    for (uint64_t d : ck.shape(n)) text += " " + std::to_string(d);
    text += "\n";
    std::string f = ck.file_of(n);
    if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
  }
  for (const std::string& f : shards) text += fs::path(f).filename().string() + " " + std::to_string(fs::file_size(f)) + "\n";
  return checksum64(text.data(), text.size());
}

TrunkStorage trunk_storage_of(const ConvertOptions& o, const Checkpoint& ck) {
  return trunk_storage_for(ck.config(), trunk_choice_format(o.trunk), o.head, o.trunk_group, o.router);
}

std::string options_fingerprint(const ConvertOptions& o, const Checkpoint& ck) {
  const RvqOptions& r = o.rvq;
  const TrunkStorage t = trunk_storage_of(o, ck);
  return std::string("waste convert --experts ") + format_name(o.expert_format) + " --trunk " +
         trunk_choice_name(o.trunk) + (o.head ? std::string(" --head ") + format_name(*o.head) : std::string()) +
         // Only what differs from the defaults, so the progress of runs made before these
         // options existed still resumes.
         (t.group != kTrunkGroup ? " --trunk-group " + std::to_string(t.group) : std::string()) +
         (t.router != TensorFormat::F32 ? std::string(" --router ") + format_name(t.router) : std::string()) + " --vision " + vision_choice_name(o.vision) + " rvq effort=" +
         std::to_string(int(r.effort)) + " beam=" + std::to_string(r.beam_width) + " refine=" + std::to_string(r.refine_passes) + " kmeans=" +
         std::to_string(r.kmeans_iters) + " train_refine=" + std::to_string(r.train_refine_passes) + " train_vectors=" +
         std::to_string(r.max_train_vectors) + " seed=" + std::to_string(r.seed) + " scale=" +
         std::to_string(int(r.optimize_scale)) + " sample_experts=" + std::to_string(o.train_sample_experts) + " checkpoint=" + std::to_string(checkpoint_identity(ck));
}

const char* kOptionsMarker = ".progress/convert-options";

void discard_foreign_progress(const std::string& out, const std::string& fingerprint) {
  const std::string progress_dir = out + "/.progress";
  if (!path_exists(progress_dir)) return;
  const std::string marker = out + "/" + kOptionsMarker;
  if (path_exists(marker) && read_file_text(marker, 1 << 20) == fingerprint) return;
  std::fprintf(stderr, "waste convert: %s holds progress from a different run; starting over\n", out.c_str());
  std::error_code ec;
  fs::remove_all(progress_dir, ec);
  if (ec) throw Error(progress_dir + ": cannot remove: " + ec.message());
}

void write_trunk(ContainerWriter& w, const Checkpoint& ck, const std::vector<TrunkItem>& plan, bool show) {
  uint64_t total = 0;
  for (const TrunkItem& t : plan) total += t.spec.elements() * 4;
  Progress p("trunk  ", total, "B", show);
  w.begin_trunk();
  for (const TrunkItem& t : plan) {
    // One tensor in memory at a time.
    std::vector<float> v = t.via_read_weight ? ck.read_weight(t.source) : ck.read_tensor(t.source);
    // A NaN or Inf in the trunk (a head, a norm) makes logits NaN for every token: refused by name.
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end())
      throw Error(ck.dir() + ": tensor " + t.source + " holds " + (std::isnan(*bad) ? "NaN" : "Inf") + " at element " +
                  std::to_string(bad - v.begin()));
    w.add_tensor(t.spec.name, t.shape, v.data(), t.format, t.group);
    p.add(t.spec.elements() * 4);
  }
  w.end_trunk();
  p.finish();
}

// Encodes every expert of one layer and writes it; returns the relative error per kind (vq3r).
std::vector<float> write_layer(ContainerWriter& w, const Checkpoint& ck, int layer, const ConvertOptions& o,
                               ThreadPool& pool, Progress& progress) {
  const ModelConfig& c = ck.config();
  const uint32_t H = uint32_t(c.expert_hidden()), I = uint32_t(c.moe_intermediate);
  const bool vq = o.expert_format == TensorFormat::VQ3R;
  RvqOptions rvq = o.rvq;
  rvq.pool = &pool;
  std::vector<float> books;
  if (vq) books = train_layer_codebooks(ck, layer, o.train_sample_experts, rvq);
  w.begin_layer(layer, o.expert_format, H, I, vq ? books.data() : nullptr);
  const RecordLayout layout = w.layout();

  // Experts run in parallel, one per worker, as far as the memory budget allows; with a budget
  // of one expert, a single expert is encoded at a time with the pool working inside it.
  const uint64_t expert_bytes = 3ull * H * I * sizeof(float) + layout.payload_bytes;
  const size_t batch = size_t(std::max<uint64_t>(1, std::min<uint64_t>(pool.size(), o.expert_memory_budget / expert_bytes)));
  std::vector<std::vector<uint8_t>> payloads(batch, std::vector<uint8_t>(layout.payload_bytes));
  std::vector<std::array<EncodeStats, 3>> stats(batch);
  std::array<EncodeStats, 3> total{};
  auto encode_one = [&](uint32_t expert, size_t slot, const RvqOptions& opt) {
    ExpertWeights ew = read_expert(ck, layer, int(expert));
    try {
      if (vq)
        stats[slot] = fill_vq3r_payload(layout, ew, books.data(), opt, payloads[slot].data());
      else
        fill_lossless_payload(layout, ew, payloads[slot].data());
    } catch (const Error& e) {
      throw Error(ck.dir() + ": layer " + std::to_string(layer) + ", expert " + std::to_string(expert) + ": " + e.what());
    }
  };
  for (uint32_t first = 0; first < uint32_t(c.n_experts); first += uint32_t(batch)) {
    const uint32_t count = std::min<uint32_t>(uint32_t(batch), uint32_t(c.n_experts) - first);
    if (batch == 1) {
      encode_one(first, 0, rvq);
    } else {
      pool.parallel_for(count, 1, [&](size_t b, size_t e) {
        // A pool of one runs inline: a worker must not re-enter the pool it runs on.
        ThreadPool inline_pool(1);
        RvqOptions opt = rvq;
        opt.pool = &inline_pool;
        for (size_t i = b; i < e; ++i) encode_one(first + uint32_t(i), i, opt);
      });
    }
    for (uint32_t i = 0; i < count; ++i) {
      w.write_expert(first + i, payloads[i].data());
      for (int k = 0; k < 3; ++k) {
        total[size_t(k)].sum_sq_error += stats[i][size_t(k)].sum_sq_error;
        total[size_t(k)].sum_sq += stats[i][size_t(k)].sum_sq;
      }
      progress.add(1);
    }
  }
  std::vector<float> rel;
  if (vq)
    for (const EncodeStats& s : total) rel.push_back(float(s.relative_mse()));
  w.end_layer(rel);
  return rel;
}

tok::TokenizerFamily tokenizer_family(Arch a) {
  switch (a) {
    case Arch::DeepseekV3: return tok::TokenizerFamily::KimiK2;
    case Arch::KimiLinear: return tok::TokenizerFamily::KimiLinear;
    case Arch::KimiK3: return tok::TokenizerFamily::K3;
  }
  return tok::TokenizerFamily::KimiK2;
}

// The release's tiktoken.model (rank file) and WASTE's tokenizer_config for the family.
bool copy_tokenizer(ContainerWriter& w, const Checkpoint& ck) {
  const std::string ranks_path = ck.dir() + "/tiktoken.model";
  if (!path_exists(ranks_path)) {
    std::fprintf(stderr, "waste convert: warning: no tiktoken.model in %s; the container has no tokenizer\n",
                 ck.dir().c_str());
    return false;
  }
  const std::string ranks = read_file_text(ranks_path, 256ull << 20);
  uint32_t lines = 0;
  for (size_t at = 0; at < ranks.size();) {
    size_t end = ranks.find('\n', at);
    if (end == std::string::npos) end = ranks.size();
    if (end > at) ++lines;
    at = end + 1;
  }
  const tok::TokenizerConfig cfg = tok::tokenizer_config_for(tokenizer_family(ck.config().arch), lines);
  w.set_tokenizer(ranks, cfg.to_json());
  return true;
}

}  // namespace

ConvertReport convert_checkpoint(const ConvertOptions& o) {
  const auto start = Clock::now();
  require(o.expert_format == TensorFormat::VQ3R || o.expert_format == TensorFormat::F32 ||
              o.expert_format == TensorFormat::BF16,
          std::string("--experts must be vq3r, f32 or bf16, not ") + format_name(o.expert_format));
  Checkpoint ck = Checkpoint::open(o.hf_dir);
  const ModelConfig& c = ck.config();
  // Check everything before writing anything.
  std::vector<TrunkItem> plan = plan_trunk(ck, trunk_storage_of(o, ck));
  const VisionPlan vision = plan_vision(ck, o.vision);
  // The tower follows the text model in trunk.bin, so the text tensors sit where they would
  // without it.
  plan.insert(plan.end(), vision.items.begin(), vision.items.end());
  check_expert_tensors(ck);

  const std::string fingerprint = options_fingerprint(o, ck);
  discard_foreign_progress(o.out, fingerprint);
  WriterOptions wo;
  wo.created_by = fingerprint.substr(0, fingerprint.find(" rvq"));
  ContainerWriter w(o.out, ck.config_json(), wo);
  write_file_atomic(o.out + "/" + kOptionsMarker, fingerprint.data(), fingerprint.size());

  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool& pool = own_pool ? *own_pool : ThreadPool::global();

  ConvertReport report;
  report.trunk_resumed = w.trunk_done();
  if (!report.trunk_resumed) write_trunk(w, ck, plan, o.progress);

  const std::vector<int> moe = c.moe_layers();
  int written = 0;
  Progress progress("experts", uint64_t(moe.size()) * uint64_t(c.n_experts), "experts", o.progress);
  for (int layer : moe) {
    ConvertLayerReport lr;
    lr.layer = layer;
    const auto t0 = Clock::now();
    if (w.layer_done(layer)) {
      lr.resumed = true;
      progress.add(uint64_t(c.n_experts));
    } else {
      if (written == o.crash_after_layers) throw Error("simulated crash after " + std::to_string(written) + " layers");
      lr.relative_error = write_layer(w, ck, layer, o, pool, progress);
      ++written;
    }
    lr.seconds = seconds_since(t0);
    report.layers.push_back(std::move(lr));
  }
  progress.finish();
  report.tokenizer = copy_tokenizer(w, ck);
  if (!vision.items.empty()) w.set_preprocessor_config(vision.preprocessor_config_json);
  report.vision_tensors = vision.items.size();
  w.finish();
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace waste
