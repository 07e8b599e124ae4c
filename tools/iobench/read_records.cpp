// `waste iobench MODEL --read-records FILE`: reads a given list of expert records with direct
// I/O, in order, through the same reader as the raw reference (io_uring with registered
// buffers, as iod reads, or the pread pool), and reports the rate. The e2e harness replays a
// run's own iod reads with it (tools/bench/e2e/README.md): the disk rate of that access pattern,
// through iod's kind of reader, so that only the disk differs from the engine's run.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/container/reader.h"
#include "shared/platform/direct_io.h"
#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tools/iobench/record_ages.h"
#include "tools/iobench/record_list.h"
#include "tools/iobench/replay.h"

namespace waste::iobench {

namespace {

// "layer expert" per line (the format and its strict parsing: record_list.h), each checked
// against the container: an unknown layer or an expert past its bank is an error naming the line.
std::vector<RecordRef> read_record_list(const std::string& path, const Container& c) {
  // Keyed by the 32-bit id as written, so no listed layer is narrowed into another one.
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> bank_of;  // layer -> (MoE position, experts)
  const auto& layers = c.expert_layers();
  for (size_t i = 0; i < layers.size(); ++i) bank_of[uint32_t(layers[i].layer)] = {uint32_t(i), layers[i].expert_count};
  // Bounded: a list longer than this is not a run's reads (a K3 run reads a few thousand). The
  // file is read whole up to its size at open, so /dev/zero or a file of one endless line ends
  // in an error naming it rather than a string that grows until memory runs out.
  constexpr size_t kMaxRecords = size_t(1) << 24;
  constexpr uint64_t kMaxListBytes = uint64_t(kMaxRecords) * 32;  // "layer expert\n" with room for comments
  std::istringstream f(read_file_text(path, kMaxListBytes));
  std::vector<RecordRef> out;
  for (const ListedRecord& r : parse_record_list(f, path, kMaxRecords)) {
    const std::string where = path + ":" + std::to_string(r.line) + ": ";
    const auto it = bank_of.find(r.layer);
    require(it != bank_of.end(), where + "layer " + std::to_string(r.layer) + " has no routed experts in " + c.dir());
    require(r.expert < it->second.second, where + "expert " + std::to_string(r.expert) + " of layer " +
                                              std::to_string(r.layer) + " is past its " +
                                              std::to_string(it->second.second) + " records");
    out.push_back({it->second.first, r.expert});
  }
  require(!out.empty(), "iobench: --read-records " + path + ": no records");
  return out;
}

nlohmann::json result_json(const RawResult& r) {
  return {{"reads", r.reads}, {"bytes", r.bytes}, {"seconds", r.seconds}, {"gb_per_s", r.gb_per_s},
          {"p50_us", r.p50_us}, {"p99_us", r.p99_us}, {"depth", r.depth}, {"read_fixed", r.fixed_buffers}};
}

}  // namespace

void run_read_records(const ReplayOptions& o, const std::string& list_path, uint64_t timed_last, bool json) {
  require(!o.model.empty(), "iobench --read-records: MODEL is required");
  Container c = Container::open(o.model);
  std::vector<RecordRef> recs = read_record_list(list_path, c);
  require(timed_last <= recs.size(), "iobench: --timed-last " + std::to_string(timed_last) + " is more than the " +
                                         std::to_string(recs.size()) + " records listed");
  // Why the page cache could not be dropped ("" when it was, or when --no-drop-caches): said
  // in both outputs, never swallowed.
  const std::string not_dropped = o.drop_caches ? platform::drop_page_cache() : "";
  if (!not_dropped.empty() && !json) std::fprintf(stderr, "iobench: page cache not dropped: %s\n", not_dropped.c_str());
  // The untimed head first (a run's prompt and warm-up reads), then the timed tail, so the disk
  // sees the run's order; with no --timed-last everything is timed.
  const size_t head = timed_last ? recs.size() - timed_last : 0;
  RawResult first{}, timed{};
  if (head > 0) first = measure_raw_records(o.model, {recs.begin(), recs.begin() + ptrdiff_t(head)}, o.qd, o.io, 0);
  timed = measure_raw_records(o.model, {recs.begin() + ptrdiff_t(head), recs.end()}, o.qd, o.io, 0);
  if (json) {
    nlohmann::json j{{"model", o.model}, {"records", recs.size()}, {"qd", o.qd}, {"io", o.io},
                     {"page_cache_dropped", o.drop_caches && not_dropped.empty()}, {"timed", result_json(timed)}};
    if (!not_dropped.empty()) j["page_cache_not_dropped"] = not_dropped;
    if (head > 0) j["untimed_head"] = result_json(first);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (head > 0)
    std::printf("untimed head: %llu reads, %.3f GB/s\n", static_cast<unsigned long long>(first.reads), first.gb_per_s);
  std::printf("%s: %llu records at qd %u (%s%s): %.3f GB/s, p50 %.0f us, p99 %.0f us\n", list_path.c_str(),
              static_cast<unsigned long long>(timed.reads), o.qd, o.io.c_str(),
              timed.fixed_buffers ? ", registered buffers" : "", timed.gb_per_s, timed.p50_us, timed.p99_us);
}

}  // namespace waste::iobench
