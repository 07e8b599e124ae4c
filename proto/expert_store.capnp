# The iod's RPC interface (docs/PROTOCOL.md). A client connects to <run-dir>/iod.sock, calls
# attach, maps the shared-memory segment read-only, then per MoE layer calls fetch and waits on
# the returned slots' state words (futex, no RPC per expert). Pins belong to the connection:
# when it closes, every pin it holds is dropped.
@0xd4a61c7e93b25f08;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("waste::proto");

# A slot of the segment and the generation it had when handed out. A handle whose generation no
# longer matches the slot's state word is stale.
struct SlotHandle {
  slot @0 :UInt32;
  generation @1 :UInt64;
}

# The experts one decoder layer used (touch).
struct LayerUse {
  layer @0 :UInt32;
  experts @1 :List(UInt32);
}

struct SegmentInfo {
  name @0 :Text;            # Boost.Interprocess shared_memory_object name (/dev/shm/<name> on Linux), or
                            # iod's private huge-page file, "/proc/<iod pid>/fd/<n>" (iod --shm)
  bytes @1 :UInt64;         # mapped size
  layoutVersion @2 :UInt32; # shared/ipc/segment_layout.h kSegmentVersion
  slotCount @3 :UInt32;
  slotBytes @4 :UInt64;     # slot stride (4 KiB multiple, >= the largest record)
  slotTableOffset @5 :UInt64;
  slotsOffset @6 :UInt64;
  instanceId @7 :UInt64;
  containerId @8 :UInt64;
}

struct LayerStats {
  layer @0 :UInt32;         # decoder layer
  hits @1 :UInt64;
  misses @2 :UInt64;
}

# Every number here is one line of shared/stats/store_stats.h (its name, kind, unit and help).
struct Stats {
  ioPath @0 :Text;          # "io_uring" or "pread", and why when it fell back
  policy @1 :Text;
  slotCount @2 :UInt32;
  slotsOccupied @3 :UInt32;
  hits @4 :UInt64;          # demand lookups found cached (READY or already loading)
  joined @5 :UInt64;        # of the hits: joined a read still in flight
  misses @6 :UInt64;
  failures @7 :UInt64;      # reads that failed (short read, EIO, bad header, checksum)
  bytesRead @8 :UInt64;
  readSeconds @9 :Float64;  # wall time during which at least one read was in flight
  gbPerSecond @10 :Float64; # bytesRead / readSeconds / 1e9
  latencyP50Us @11 :Float64;
  latencyP90Us @12 :Float64;
  latencyP99Us @13 :Float64;
  latencyMaxUs @14 :Float64;
  queueDepth @15 :UInt32;   # configured
  inFlight @16 :UInt32;     # reads submitted or queued now
  prefetchIssued @17 :UInt64;
  prefetchUsed @18 :UInt64;
  prefetchWasted @19 :UInt64; # evicted before any demand used it
  connections @20 :UInt32;
  layers @21 :List(LayerStats);
  quarantinedSlots @22 :UInt32; # slots of reads a dead io_uring abandoned: never used again until restart
  cpuSeconds @23 :Float64;  # iod's process CPU time so far, user + system (getrusage RUSAGE_SELF)
  prewarmed @24 :UInt64;    # records read at start because the usage file ranks them hottest
}

interface ExpertStore {
  # The container's id (0 = don't check) must match the daemon's.
  attach @0 (containerId :UInt64) -> (segment :SegmentInfo);
  # Pins the experts of one decoder layer for this connection and returns their slots at once,
  # while the reads proceed; `releases` are handles of earlier fetches to unpin first.
  fetch @1 (layer :UInt32, experts :List(UInt32), releases :List(SlotHandle)) -> (handles :List(SlotHandle));
  # A hint: load these (best first) below the priority of any demand read; nothing is pinned.
  # `releases` (handles of earlier fetches) are unpinned first, so a client that ends a layer and
  # hints the next one sends one message, not two, and the hint can read into those slots.
  prefetch @2 (layer :UInt32, experts :List(UInt32), releases :List(SlotHandle)) -> (issued :UInt32);
  release @3 (handles :List(SlotHandle)) -> ();
  stats @4 () -> (stats :Stats);
  # Starts writing every request to `path` (JSON lines), replacing a running trace.
  traceStart @5 (path :Text) -> ();
  traceStop @6 () -> (requests :UInt64);
  # Uses the client served from slots without a fetch: every expert was READY in a slot it had
  # been handed before, it read the slot unpinned and checked afterwards that the slot's
  # generation had not changed (docs/PROTOCOL.md, "Unpinned reads"). Counted as the fetches
  # would have been (hits, the policy's use order, the usage file, the trace as "touch"); nothing
  # is pinned or read. Sent after the fact, one entry per layer batch over up to 16 passes
  # (kTouchPasses): a token is counted at each entry of the first MoE layer.
  touch @7 (uses :List(LayerUse)) -> ();
}
