#include "iod/store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "iod/io/record_checksum.h"
#include "shared/platform/direct_io.h"
#include "shared/platform/shm.h"
#include "shared/util/error.h"
#include "shared/util/timeline.h"

namespace waste::iod {

using cache::ExpertKey;
using cache::kNoSlot;
using ipc::SlotState;

// Forwards to the real policy but never offers a slot whose read is still queued or in flight
// as a victim (the kernel may be writing into it); pins alone don't cover unpinned prefetches.
class Store::GuardPolicy final : public cache::CachePolicy {
 public:
  GuardPolicy(cache::CachePolicy& inner, const std::vector<SlotInfo>& info) : inner_(inner), info_(info) {}
  std::string name() const override { return inner_.name(); }
  void reset(uint32_t slots) override { inner_.reset(slots); }
  void on_fetch(uint32_t layer, std::span<const uint32_t> experts) override { inner_.on_fetch(layer, experts); }
  void on_miss(ExpertKey key, cache::InsertKind kind) override { inner_.on_miss(key, kind); }
  void on_hit(uint32_t slot, ExpertKey key) override { inner_.on_hit(slot, key); }
  void on_insert(uint32_t slot, ExpertKey key, cache::InsertKind kind) override { inner_.on_insert(slot, key, kind); }
  void on_evict(uint32_t slot, ExpertKey key) override { inner_.on_evict(slot, key); }
  uint32_t choose_victim(const cache::EvictableFn& evictable) override {
    return inner_.choose_victim([&](uint32_t s) { return !info_[s].io_busy && evictable(s); });
  }

 private:
  cache::CachePolicy& inner_;
  const std::vector<SlotInfo>& info_;
};

namespace {

cache::CacheGeometry geometry_of(const Container& c) {
  std::vector<uint32_t> layers;
  uint32_t experts = 0;
  for (const auto& l : c.expert_layers()) {
    layers.push_back(uint32_t(l.layer));
    experts = std::max(experts, l.expert_count);
  }
  require(!layers.empty(), c.dir() + ": the container has no MoE layers; iod has nothing to serve");
  return cache::CacheGeometry(layers, experts, uint32_t(std::max(1, c.config().top_k)));
}

uint64_t largest_record(const Container& c) {
  uint64_t m = 0;
  for (const auto& l : c.expert_layers()) m = std::max(m, l.layout.stride);
  return m;
}

}  // namespace

Store::Store(const Container& container, const std::string& segment_name, uint64_t instance_id, const StoreOptions& o)
    : container_(container), served_(ServedExperts::of(container)), geometry_(geometry_of(container)), queue_(o.slots), options_(o) {
  require(o.slots > 0, "iod: the cache needs at least one slot");
  try {
    open_banks_and_start(segment_name, instance_id);
  } catch (...) {
    // ~Store does not run when the constructor throws; members (segment, engine) clean up
    // themselves, the raw bank descriptors do not.
    for (int f : bank_fd_) platform::close_file(f);
    throw;
  }
}

void Store::open_banks_and_start(const std::string& segment_name, uint64_t instance_id) {
  const StoreOptions& o = options_;
  const Container& container = container_;
  // Before anything is opened or created: a build without io_uring refuses "uring" by name.
  const std::string bad_io = io_choice_problem(o.io);
  require(bad_io.empty(), "iod: --io: " + bad_io);
  for (const auto& l : container.expert_layers()) {
    require(l.layout.stride % kRecordAlign == 0 && l.layout.stride <= (1ull << 31),
            l.bank_path + ": record stride " + std::to_string(l.layout.stride) + " unusable for direct I/O");
    const platform::DirectFile f = platform::open_direct_read(l.bank_path, platform::DirectFallback::PageCache);
    if (f.fd < 0) throw Error(l.bank_path + ": cannot open: " + std::strerror(f.error));
    if (!f.direct)
      spdlog::warn("{}: the file system refuses {}; reading through the page cache", l.bank_path,
                   platform::kDirectIoName);
    bank_fd_.push_back(f.fd);
    record_bytes_.push_back(uint32_t(l.layout.stride));
  }
  ipc::SegmentLayout layout = ipc::segment_layout(o.slots, largest_record(container));
  std::string why_not_huge;
  segment_ = ipc::ShmSegment::create(segment_name, layout, instance_id, container.container_id(), o.shm, &why_not_huge);
  const std::string huge = platform::shm_huge_page_mode();
  if (segment_.private_file())
    spdlog::info("iod: the cache sits on 2 MiB pages: a private file in a user namespace's tmpfs (huge=within_size; "
                 "/dev/shm has huge={})",
                 huge);
  else if (platform::shm_huge_pages_enabled(huge))
    spdlog::info("iod: /dev/shm huge pages: {} (the cache can sit on 2 MiB pages)", huge);
  else if (huge != "unknown")
    spdlog::warn("iod: /dev/shm has no huge pages (huge={}) and {}: cached records sit on 4 KiB pages (README, "
                 "\"Huge pages for the expert cache\"); as root: {}",
                 huge, why_not_huge.empty() ? "--shm named was asked for" : "no private huge-page file (" + why_not_huge + ")",
                 platform::shm_huge_pages_hint());
  slot_info_.assign(o.slots, {});
  layer_counters_.assign(geometry_.moe_layer_count(), {});
  policy_ = cache::make_policy(o.policy, geometry_, o.prior);
  guard_ = std::make_unique<GuardPolicy>(*policy_, slot_info_);
  cache_ = std::make_unique<cache::ExpertCache>(geometry_, o.slots, *guard_);

  usage_ = o.usage.matches(geometry_) ? o.usage : cache::UsageCounts::for_geometry(geometry_, container.container_id());
  usage_.container_id = container.container_id();

  ReadDone done = [this](const ReadJob& j, int64_t r, uint64_t ns) { on_read_done(j, r, ns); };
  if (!o.read_faults.empty()) done = with_read_faults(std::move(done), o.read_faults);
  SlotRegion region{segment_.slot_data(0), uint64_t(o.slots) * segment_.slot_bytes(), segment_.slot_bytes()};
  if (o.io == "uring") {
    // Not compiled in a build without io_uring (make_uring_engine is not defined there); the
    // check above has refused "uring" in that build already.
    if constexpr (kHaveUring) {
      std::string why;
      checker_ = std::make_unique<RecordChecker>(o.slots, done);
      ReadDone to_checker = [c = checker_.get()](const ReadJob& j, int64_t r, uint64_t ns) { c->landed(j, r, ns); };
      engine_ = make_uring_engine(queue_, to_checker, o.queue_depth, o.read_chunk, region, why,
                                  [this](const std::string& w) { on_engine_failed(w); }, o.uring_faults);
      if (engine_) {
        io_path_ = "io_uring (READ_FIXED, queue depth " + std::to_string(o.queue_depth) +
                   (o.read_chunk ? ", reads of at most " + std::to_string(o.read_chunk >> 10) + " KiB)" : ", whole records)");
      } else {
        checker_.reset();  // the pread pool's threads check what they read themselves
        io_path_ = "pread pool of " + std::to_string(o.queue_depth) + " threads (io_uring unavailable: " + why + ")";
        spdlog::warn("iod: io_uring unavailable ({}); falling back to a pread pool (whole records)", why);
      }
    }
  } else {
    io_path_ = "pread pool of " + std::to_string(o.queue_depth) + " threads (forced by --io pread)";
  }
  if (!engine_) engine_ = make_pread_engine(queue_, done, o.queue_depth);
  spdlog::info("iod: reads via {}", io_path_);
}

Store::~Store() {
  shutdown();
  for (int f : bank_fd_) platform::close_file(f);
}

void Store::shutdown() {
  // The io_uring thread may be inside on_engine_failed (taking fallback_mu_): join it first,
  // without holding fallback_mu_, then stop whatever pool it started.
  if (engine_) engine_->stop();
  {
    std::lock_guard lock(fallback_mu_);
    if (fallback_engine_) fallback_engine_->stop();
  }
  // Last: it hands over what the io_uring thread reaped before it stopped.
  if (checker_) checker_->stop();
}

void Store::on_engine_failed(const std::string& why) {
  // Runs on the dying engine's thread; the queue still holds every job it did not take.
  std::lock_guard lock(fallback_mu_);
  if (fallback_engine_ || queue_.closed()) return;
  // The path is named before the pool starts: its first reads may complete (and a client ask
  // for stats) before this thread would otherwise get the store lock back.
  {
    std::lock_guard state(mu_);
    io_path_ = "pread pool of " + std::to_string(options_.queue_depth) + " threads, whole records (io_uring failed while serving: " +
               why + ")";
    spdlog::warn("iod: reads continue via {}", io_path_);
  }
  ReadDone done = [this](const ReadJob& j, int64_t r, uint64_t ns) { on_read_done(j, r, ns); };
  if (!options_.read_faults.empty()) done = with_read_faults(std::move(done), options_.read_faults);
  fallback_engine_ = make_pread_engine(queue_, done, options_.queue_depth);
}

void Store::set_slots_changed(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  slots_changed_ = std::move(fn);
}

void Store::slots_changed_locked() {
  if (slots_changed_) slots_changed_();
}

cache::UsageCounts Store::usage_snapshot(bool* changed) {
  std::lock_guard lock(mu_);
  if (changed) *changed = usage_changed_;
  usage_changed_ = false;
  return usage_;
}

void Store::check_key(uint32_t layer, uint32_t expert) const { check_expert_key(served_, layer, expert); }

uint64_t Store::open_connection() {
  std::lock_guard lock(mu_);
  uint64_t id = next_conn_++;
  connections_[id];
  return id;
}

void Store::close_connection(uint64_t conn) {
  std::lock_guard lock(mu_);
  auto it = connections_.find(conn);
  if (it == connections_.end()) return;
  size_t n = it->second.pins.size();
  for (auto& [slot, gen] : it->second.pins) cache_->unpin(slot);
  connections_.erase(it);
  if (n) slots_changed_locked();
  if (n) spdlog::info("iod: connection {} closed, dropped {} pins", conn, n);
}

void Store::start_read(uint32_t slot, ExpertKey key, bool demand, bool evicted, ExpertKey victim) {
  SlotInfo& si = slot_info_[slot];
  if (evicted && si.prefetched_unused) ++prefetch_wasted_;
  si.prefetched_unused = false;
  si.prewarmed = false;
  ipc::SlotEntry& e = segment_.entry(slot);
  uint64_t gen = ipc::generation_of(e.word.load(std::memory_order_relaxed)) + 1;
  uint32_t pos = geometry_.position(key.layer);
  // The word first, then the fields: the word is also the sequence lock of a client reading the
  // slot table without a pin (word, fields, fence, word again: docs/PROTOCOL.md), which must not
  // see the new key under the old READY word. The READY store in on_read_done publishes them.
  e.word.store(ipc::make_state_word(SlotState::Loading, gen), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.layer = key.layer;
  e.expert = key.expert;
  e.record_bytes = record_bytes_[pos];
  e.error[0] = 0;
  ipc::futex_wake_word(e.word);  // a waiter with a stale handle sees the new generation
  si.io_busy = true;
  if (reads_outstanding_++ == 0) busy_since_ = std::chrono::steady_clock::now();
  ReadJob job;
  job.slot = slot;
  job.generation = gen;
  job.fd = bank_fd_[pos];
  job.offset = uint64_t(key.expert) * record_bytes_[pos];
  job.bytes = record_bytes_[pos];
  job.dst = segment_.slot_data(slot);
  job.layer = key.layer;
  job.expert = key.expert;
  timeline::instant(demand ? "demand_queued" : "prefetch_queued", "iod", int(key.layer), int(key.expert));
  queue_.push(job, demand);
}

void Store::on_read_done(const ReadJob& job, int64_t result, uint64_t latency_ns) {
  // The check's own span shows what a record waits for before READY: on io_uring this runs on
  // the record checker's thread (record_checker.h), on the pread pool on the reading thread.
  const int64_t check_start = timeline::enabled() ? timeline::now_ns() : 0;
  if (timeline::enabled()) {
    const int64_t submitted = job.submitted_ns ? job.submitted_ns : check_start - int64_t(latency_ns);
    timeline::span("read", "iod", submitted, submitted + int64_t(latency_ns), int(job.layer), int(job.expert));
  }
  std::string why;
  const ExpertLayerInfo* l = container_.expert_layer(int(job.layer));
  const std::string who = "layer " + std::to_string(job.layer) + " expert " + std::to_string(job.expert) + ": ";
  if (result < 0) {
    why = who + "read error (" + std::string(std::strerror(int(-result))) + ") at offset " + std::to_string(job.offset);
  } else if (uint64_t(result) < job.bytes) {
    why = who + "short read: " + std::to_string(result) + " of " + std::to_string(job.bytes) + " bytes at offset " +
          std::to_string(job.offset);
  } else {
    // Header against the manifest always, and the xxh3 payload checksum on every read (the
    // fast path of record_checksum; check_record has validated payload_bytes against the layout).
    why = check_record(job.dst, l->layout, job.layer, job.expert, false);
    const auto* h = reinterpret_cast<const RecordHeader*>(job.dst);
    // (Never for an abandoned read, whose slot the kernel may still write: such a read completes
    // with an error today, and this guard keeps it from ever being published as landed.)
    if (why.empty() && options_.verify_checksums && !job.abandoned) {
      // CHECKING first: the bytes are in and stay as they are (the slot is still io_busy, so
      // never a victim), and compute may run its kernels on them while the checksum runs here,
      // using what they made only once the word says READY. The check of a layer's last record
      // then overlaps that record's kernels instead of preceding them.
      ipc::SlotEntry& e = segment_.entry(job.slot);
      e.word.store(ipc::make_state_word(SlotState::Checking, job.generation), std::memory_order_release);
      ipc::futex_wake_word(e.word);
      if (options_.before_payload_check) options_.before_payload_check();
      if (record_checksum(job.dst + kRecordHeaderBytes, h->payload_bytes) != h->checksum)
        why = who + "payload checksum mismatch (damaged record)";
    }
  }
  if (job.abandoned)
    why = who + "read abandoned: the io_uring ring failed with it in flight (slot " + std::to_string(job.slot) +
          " quarantined; fetch it again)";
  if (!why.empty()) spdlog::error("iod: {}: {}", l->bank_path, why);
  if (timeline::enabled()) timeline::span("check", "iod", check_start, timeline::now_ns(), int(job.layer), int(job.expert));
  ipc::SlotEntry& e = segment_.entry(job.slot);
  // The state word is published under the lock together with io_busy, so a fetch never sees
  // FAILED on a slot it still believes busy (it would count a hit and hand out the failure
  // instead of reading the record again).
  std::lock_guard lock(mu_);
  if (why.empty()) {
    e.word.store(ipc::make_state_word(SlotState::Ready, job.generation), std::memory_order_release);
  } else {
    std::snprintf(e.error, ipc::kSlotErrorBytes, "%s", why.c_str());
    e.word.store(ipc::make_state_word(SlotState::Failed, job.generation), std::memory_order_release);
  }
  ipc::futex_wake_word(e.word);
  SlotInfo& si = slot_info_[job.slot];
  if (job.abandoned) {
    // The kernel may still write into the slot: the cache forgets the key (its next demand
    // reads it into another slot) and quarantines the slot (never free, never a victim, never
    // read into again). It also stays io_busy, so the guard never offers it either.
    if (cache_->holds(job.slot)) cache_->quarantine(job.slot);
    si.abandoned = true;
  } else {
    si.io_busy = false;
  }
  slots_changed_locked();
  if (--reads_outstanding_ == 0)
    busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  if (result > 0) bytes_read_ += uint64_t(result);
  if (!why.empty()) ++failures_;
  latency_.add(latency_ns);
}

void Store::unpin_locked(Connection& c, ipc::SlotHandle h, const char* param) {
  auto range = c.pins.equal_range(h.slot);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == h.generation) {
      c.pins.erase(it);
      cache_->unpin(h.slot);
      slots_changed_locked();
      return;
    }
  }
  throw Error("release: slot " + std::to_string(h.slot) + " generation " + std::to_string(h.generation) +
                  " is not pinned by this connection (stale or unknown handle)",
              ErrorKind::InvalidRequest, param);
}

std::optional<std::vector<ipc::SlotHandle>> Store::try_fetch(uint64_t conn, uint32_t layer,
                                                             std::span<const uint32_t> experts,
                                                             std::span<const ipc::SlotHandle> releases,
                                                             bool first_attempt) {
  for (uint32_t x : experts) check_key(layer, x);
  std::lock_guard lock(mu_);
  Connection& c = connections_.at(conn);
  if (first_attempt) {
    trace_line(conn, "fetch", layer, experts);
    for (const auto& h : releases) unpin_locked(c, h, "releases");
  }
  std::vector<uint32_t> distinct(experts.begin(), experts.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());

  // Slots this request needs besides what it finds cached, and whether it could ever fit.
  uint32_t own_pinned = 0;  // distinct slots this connection pins
  for (auto it = c.pins.begin(); it != c.pins.end(); it = c.pins.equal_range(it->first).second) ++own_pinned;
  uint32_t new_slots = 0, new_own = 0;
  for (uint32_t x : distinct) {
    uint32_t s = cache_->find(ExpertKey{layer, x});
    if (s == kNoSlot) ++new_slots;
    if (s == kNoSlot || c.pins.find(s) == c.pins.end()) ++new_own;
  }
  const uint32_t usable = cache_->slots() - cache_->quarantined();
  if (own_pinned + new_own > usable)
    throw Error("fetch: layer " + std::to_string(layer) + ": " + std::to_string(distinct.size()) +
                    " experts can never fit: the cache has " + std::to_string(usable) +
                    " usable slots and this connection has " + std::to_string(own_pinned) +
                    " of them pinned (release handles first)",
                ErrorKind::InvalidRequest, "experts");
  // Enough free or evictable slots now? (Evictable: unpinned, no read outstanding, not one of
  // this request's own records.) Stops counting as soon as there are enough.
  uint32_t available = cache_->slots() - cache_->occupied();
  for (uint32_t s = 0; s < cache_->slots() && available < new_slots; ++s) {
    if (!cache_->holds(s) || cache_->pinned(s) || slot_info_[s].io_busy) continue;
    ExpertKey k = cache_->key_in(s);
    if (k.layer == layer && std::binary_search(distinct.begin(), distinct.end(), k.expert)) continue;
    ++available;
  }
  if (available < new_slots) return std::nullopt;  // wait for a release or a read to finish

  uint32_t pos = geometry_.position(layer);
  cache_->begin_layer(layer, experts);
  std::vector<ipc::SlotHandle> out;
  out.reserve(experts.size());
  for (uint32_t x : experts) {
    ExpertKey key{layer, x};
    cache::Acquired a = cache_->acquire(key);
    if (a.slot == kNoSlot) {
      // Not expected after the count above (a policy that would not name an evictable slot):
      // undo and wait like a full cache.
      for (const auto& h : out) unpin_locked(c, h, "experts");
      spdlog::warn("iod: fetch layer {} expert {}: the policy found no victim although slots were evictable", layer, x);
      return std::nullopt;
    }
    ipc::SlotEntry& e = segment_.entry(a.slot);
    uint64_t w = e.word.load(std::memory_order_acquire);
    // FAILED is only ever published together with io_busy cleared (both under mu_).
    if (a.hit && ipc::state_of(w) == SlotState::Failed) {
      // A failed record is read again on the next demand (a transient EIO may pass).
      ++misses_;
      ++layer_counters_[pos].misses;
      start_read(a.slot, key, true, false, {});
    } else if (a.hit) {
      count_hit_locked(pos, a.slot, key);
      // Joined: a read still in flight (CHECKING is a hit on a record already read).
      if (ipc::state_of(w) == SlotState::Loading) {
        ++joined_;
        queue_.promote(a.slot, ipc::generation_of(w));  // a prefetch in the queue now leaves as demand
      }
    } else {
      ++misses_;
      ++layer_counters_[pos].misses;
      start_read(a.slot, key, true, a.evicted, a.victim);
    }
    ipc::SlotHandle h{a.slot, ipc::generation_of(e.word.load(std::memory_order_relaxed))};
    c.pins.emplace(h.slot, h.generation);
    out.push_back(h);
    usage_.add(key);
  }
  end_layer_use_locked(pos);
  return out;
}

uint32_t Store::prefetch(uint64_t conn, uint32_t layer, std::span<const uint32_t> experts,
                         std::span<const ipc::SlotHandle> releases) {
  for (uint32_t x : experts) check_key(layer, x);
  std::lock_guard lock(mu_);
  if (!releases.empty()) {
    Connection& c = connections_.at(conn);
    for (const auto& h : releases) {
      check_release_slot(h, cache_->slots());
      unpin_locked(c, h, "releases");
    }
  }
  trace_line(conn, "prefetch", layer, experts);
  uint32_t issued = 0;
  for (uint32_t x : experts) {
    ExpertKey key{layer, x};
    if (cache_->find(key) != kNoSlot) continue;
    cache::Acquired a = cache_->insert_guess(key, cache::InsertKind::Prefetch);
    if (a.slot == kNoSlot) break;  // nothing evictable: the rest rank lower anyway
    start_read(a.slot, key, false, a.evicted, a.victim);
    slot_info_[a.slot].prefetched_unused = true;
    ++prefetch_issued_;
    ++issued;
  }
  return issued;
}

void Store::count_hit_locked(uint32_t pos, uint32_t slot, ExpertKey key) {
  ++hits_;
  ++layer_counters_[pos].hits;
  if (slot != kNoSlot && slot_info_[slot].prefetched_unused) {
    ++prefetch_used_;
    slot_info_[slot].prefetched_unused = false;
    timeline::instant("prefetch_used", "iod", int(key.layer), int(key.expert));
  }
}

void Store::end_layer_use_locked(uint32_t pos) {
  // A token = one pass over the MoE layers: counted at its first layer's fetch or touch.
  if (pos == 0) usage_.end_token();
  usage_changed_ = true;
}

void Store::touch(uint64_t conn, std::span<const LayerUse> uses) {
  check_layer_uses(served_, uses);
  std::lock_guard lock(mu_);
  for (const LayerUse& u : uses) {
    trace_line(conn, "touch", u.layer, u.experts);
    const uint32_t pos = geometry_.position(u.layer);
    cache_->begin_layer(u.layer, u.experts);
    for (uint32_t x : u.experts) {
      const ExpertKey key{u.layer, x};
      // The client read the record intact from its slot: a hit, whether or not the slot still
      // holds it now (an eviction since then leaves the policy no slot to credit).
      count_hit_locked(pos, cache_->touch(key), key);
      usage_.add(key);
    }
    end_layer_use_locked(pos);
  }
}

uint32_t Store::prewarm(const std::vector<ExpertKey>& hottest) {
  std::lock_guard lock(mu_);
  uint32_t n = 0;
  for (const ExpertKey& key : hottest) {
    if (cache_->occupied() >= cache_->slots()) break;
    if (!geometry_.contains(key) || cache_->find(key) != kNoSlot) continue;
    cache::Acquired a = cache_->insert_guess(key, cache::InsertKind::Prewarm);
    if (a.slot == kNoSlot) break;
    start_read(a.slot, key, false, a.evicted, a.victim);
    slot_info_[a.slot].prewarmed = true;
    ++n;
  }
  prewarmed_ += n;
  return n;
}

void Store::release(uint64_t conn, std::span<const ipc::SlotHandle> handles) {
  std::lock_guard lock(mu_);
  Connection& c = connections_.at(conn);
  for (const auto& h : handles) {
    check_release_slot(h, cache_->slots());
    unpin_locked(c, h, "handles");
  }
}

StoreStats Store::stats() const {
  std::lock_guard lock(mu_);
  StoreStats s;
  s.io_path = io_path_;
  s.quarantined_slots = cache_->quarantined();
  s.policy = policy_->name();
  s.slot_count = cache_->slots();
  s.slots_occupied = cache_->occupied() - cache_->quarantined();  // slots holding a record
  s.queue_depth = options_.queue_depth;
  s.in_flight = reads_outstanding_;
  s.connections = uint32_t(connections_.size());
  s.hits = hits_;
  s.joined = joined_;
  s.misses = misses_;
  s.failures = failures_;
  s.bytes_read = bytes_read_;
  s.read_seconds = busy_seconds_;
  if (reads_outstanding_ > 0)
    s.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  s.p50_us = latency_.percentile_us(0.50);
  s.p90_us = latency_.percentile_us(0.90);
  s.p99_us = latency_.percentile_us(0.99);
  s.max_us = latency_.max_us();
  s.prefetch_issued = prefetch_issued_;
  s.prefetch_used = prefetch_used_;
  s.prefetch_wasted = prefetch_wasted_;
  s.prewarmed = prewarmed_;
  s.gb_per_s = s.read_seconds > 0 ? double(s.bytes_read) / s.read_seconds / 1e9 : 0.0;
  for (uint32_t p = 0; p < geometry_.moe_layer_count(); ++p)
    s.layers.push_back({geometry_.moe_layers()[p], layer_counters_[p]});
  return s;
}

void Store::trace_line(uint64_t conn, const char* op, uint32_t layer, std::span<const uint32_t> experts) {
  if (!trace_) return;
  nlohmann::json j;
  j["t_us"] = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - trace_t0_).count();
  j["conn"] = conn;
  j["op"] = op;
  j["layer"] = layer;
  j["experts"] = std::vector<uint32_t>(experts.begin(), experts.end());
  // Flushed per line: the trace survives a crash of the daemon, and a reader sees each request
  // as soon as iod has taken it (one small write per request, only while tracing).
  const std::string line = j.dump() + '\n';
  std::fwrite(line.data(), 1, line.size(), trace_.get());
  std::fflush(trace_.get());
  ++trace_requests_;
}

void Store::trace_start(const std::string& path) {
  require_request(!path.empty() && path[0] == '/', "traceStart: " + path + ": give an absolute path", "path");
  require_request(path.find('\0') == std::string::npos, "traceStart: the path holds a NUL byte", "path");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error("traceStart: cannot create " + path + ": " + std::strerror(errno) +
                    (errno == EEXIST ? " (the trace is always a new file: remove it or name another)" : ""),
                ErrorKind::InvalidRequest, "path");
  std::unique_ptr<std::FILE, CloseFile> f(::fdopen(fd, "w"));
  if (!f) {
    ::close(fd);
    throw Error("traceStart: fdopen " + path + ": " + std::strerror(errno));
  }
  std::lock_guard lock(mu_);
  trace_ = std::move(f);
  trace_requests_ = 0;
  trace_t0_ = std::chrono::steady_clock::now();
  spdlog::info("iod: tracing requests to {}", path);
}

uint64_t Store::trace_stop() {
  std::lock_guard lock(mu_);
  uint64_t n = trace_requests_;
  if (trace_) std::fflush(trace_.get());
  trace_.reset();
  return n;
}

}  // namespace waste::iod
