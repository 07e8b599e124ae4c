// The heart of iod: the expert cache over the shared-memory slots. It decides what to read
// (through the pluggable policy of iod/cache), hands out pinned slot handles per connection,
// queues reads (demand before prefetch) for the read engine, and on completion validates the
// record and publishes READY or FAILED in the slot's state word. Thread-safe: RPC calls come
// from the event-loop thread, completions from the engine's threads.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "iod/cache/expert_cache.h"
#include "iod/cache/usage_file.h"
#include "iod/io/io_choice.h"
#include "iod/io/read_engine.h"
#include "iod/io/record_checker.h"
#include "iod/io/read_faults.h"
#include "iod/io/read_queue.h"
#include "iod/latency_histogram.h"
#include "iod/request_check.h"
#include "shared/container/reader.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/ipc/shm_segment.h"
#include "shared/stats/store_stats.h"

namespace waste::iod {

struct StoreOptions {
  uint32_t slots = 0;
  std::string io = kDefaultIo;  // "uring" or "pread" (iod/io/io_choice.h)
  uint32_t queue_depth = 32;
  uint64_t read_chunk = kDefaultReadChunk;  // io_uring: a record is read in reads of at most this (0 = whole)
  std::string policy = cache::kDefaultPolicy;
  ipc::SegmentBacking shm = ipc::SegmentBacking::Auto;
  bool prewarm = true;        // read the hottest records of the usage file at start
  bool verify_checksums = true;
  cache::KeyPrior prior;      // usage-file popularity for the policy (empty = none)
  cache::UsageCounts usage;   // counts loaded from the usage file (empty = start from zero)
  UringFaults uring_faults;   // test hook (WASTE_IOD_TEST_URING_FAIL_AFTER)
  ReadFaults read_faults;     // test hook (WASTE_IOD_TEST_EIO): records that read back as EIO
  // Test hook (WASTE_IOD_TEST_CHECK_GATE): runs with the record published CHECKING, before its
  // payload checksum, on the thread that checks; a test holds records there.
  std::function<void()> before_payload_check;
};

// What stats() reports: one definition (shared/stats/store_stats.h) for iod and its clients.
using stats::LayerCounters;
using stats::StoreStats;

class Store {
 public:
  // Opens the banks (O_DIRECT), creates the segment `segment_name`, starts the read engine.
  Store(const Container& container, const std::string& segment_name, uint64_t instance_id, const StoreOptions& o);
  ~Store();

  const ipc::ShmSegment& segment() const { return segment_; }
  const cache::CacheGeometry& geometry() const { return geometry_; }
  const std::string& io_path() const { return io_path_; }
  uint64_t container_id() const { return container_.container_id(); }

  uint64_t open_connection();
  void close_connection(uint64_t conn);  // drops every pin of the connection
  // A demand fetch: unpins `releases`, then pins every expert (reads start for misses) and
  // returns the handles at once. Returns nullopt, having pinned nothing, when too few slots
  // are free or evictable right now (others are pinned or loading): the caller waits for
  // slots_changed and calls again with no releases and first_attempt false. Throws when the
  // request can never fit: more distinct experts than slots minus this connection's pins.
  std::optional<std::vector<ipc::SlotHandle>> try_fetch(uint64_t conn, uint32_t layer,
                                                        std::span<const uint32_t> experts,
                                                        std::span<const ipc::SlotHandle> releases,
                                                        bool first_attempt = true);
  // Called (from any thread, maybe with the store's lock held: it must only signal) when a
  // slot may have become usable: a pin dropped, a read finished.
  void set_slots_changed(std::function<void()> fn);
  // `releases` (this connection's pins) are unpinned first, under the same lock.
  uint32_t prefetch(uint64_t conn, uint32_t layer, std::span<const uint32_t> experts,
                    std::span<const ipc::SlotHandle> releases = {});
  void release(uint64_t conn, std::span<const ipc::SlotHandle> handles);
  // Uses the connection served from READY slots without a fetch (proto touch): counted as
  // the fetches would have been (hits, the policy's on_fetch and on_hit, the usage counts, the
  // trace, as "touch"), nothing pinned or read. Every key is checked before anything is counted.
  void touch(uint64_t conn, std::span<const LayerUse> uses);
  StoreStats stats() const;
  // Writes one JSON line per request to `path`, a new file (absolute; created 0600, never an
  // existing file or a symlink: the path may come from a peer, which must not get iod to
  // overwrite or append to a file of its choosing).
  void trace_start(const std::string& path);
  uint64_t trace_stop();
  // Queues the usage file's hottest records (lowest priority); returns how many.
  uint32_t prewarm(const std::vector<cache::ExpertKey>& hottest);
  // Stops the engine (waits for reads in flight). Idempotent.
  void shutdown();
  // The demand counts so far (the usage file's, plus every expert fetched since the start);
  // *changed says whether any were added since the last call.
  cache::UsageCounts usage_snapshot(bool* changed);

 private:
  struct SlotInfo {
    bool io_busy = false;          // a read is queued or in flight: never evicted
    bool prefetched_unused = false;
    bool prewarmed = false;
    bool abandoned = false;        // its read was abandoned by a dead io_uring: quarantined for good
  };
  struct Connection {
    std::unordered_multimap<uint32_t, uint64_t> pins;  // slot -> generation
  };
  class GuardPolicy;

  // The constructor's work after the options check (the constructor cleans up if it throws).
  void open_banks_and_start(const std::string& segment_name, uint64_t instance_id);
  void check_key(uint32_t layer, uint32_t expert) const;
  // Points slot s at key (new generation, LOADING) and queues its read. Lock held.
  void start_read(uint32_t slot, cache::ExpertKey key, bool demand, bool evicted, cache::ExpertKey victim);
  // Throws InvalidRequest naming `param` (the request field the handle came in) unless this
  // connection pins h.
  void unpin_locked(Connection& c, ipc::SlotHandle h, const char* param);
  void on_read_done(const ReadJob& job, int64_t result, uint64_t latency_ns);
  // The io_uring engine died: serve the queue with a pread pool from now on.
  void on_engine_failed(const std::string& why);
  void slots_changed_locked();
  // A demand found key cached (fetch) or used it from its slot (touch): hits, the layer's hits,
  // and a prefetch used when `slot` (kNoSlot: no longer cached) held an unused one. Lock held.
  void count_hit_locked(uint32_t pos, uint32_t slot, cache::ExpertKey key);
  // The usage counts after a layer's demands (a token ends at the first MoE layer). Lock held.
  void end_layer_use_locked(uint32_t pos);
  void trace_line(uint64_t conn, const char* op, uint32_t layer, std::span<const uint32_t> experts);

  const Container& container_;
  ServedExperts served_;  // what keys may name (request_check.h)
  cache::CacheGeometry geometry_;
  std::vector<int> bank_fd_;            // per geometry position
  std::vector<uint32_t> record_bytes_;  // per geometry position
  ipc::ShmSegment segment_;
  std::unique_ptr<cache::CachePolicy> policy_;
  std::unique_ptr<GuardPolicy> guard_;
  std::unique_ptr<cache::ExpertCache> cache_;
  std::vector<SlotInfo> slot_info_;
  ReadQueue queue_;
  std::unique_ptr<RecordChecker> checker_;  // io_uring's completions are checked here, off the ring's thread
  std::unique_ptr<ReadEngine> engine_;
  std::mutex fallback_mu_;                   // guards fallback_engine_ (set on the engine's thread)
  std::unique_ptr<ReadEngine> fallback_engine_;
  std::string io_path_;                      // guarded by mu_ once serving
  StoreOptions options_;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Connection> connections_;
  uint64_t next_conn_ = 1;
  std::vector<LayerCounters> layer_counters_;  // per geometry position
  uint64_t hits_ = 0, joined_ = 0, misses_ = 0, failures_ = 0, bytes_read_ = 0;
  uint64_t prefetch_issued_ = 0, prefetch_used_ = 0, prefetch_wasted_ = 0, prewarmed_ = 0;
  uint32_t reads_outstanding_ = 0;
  std::function<void()> slots_changed_;
  cache::UsageCounts usage_;
  bool usage_changed_ = false;
  std::chrono::steady_clock::time_point busy_since_;
  double busy_seconds_ = 0;
  LatencyHistogram latency_;
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, CloseFile> trace_;
  uint64_t trace_requests_ = 0;
  std::chrono::steady_clock::time_point trace_t0_;
};

}  // namespace waste::iod
