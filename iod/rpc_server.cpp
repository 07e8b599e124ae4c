#include "iod/rpc_server.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>

#include <vector>

#include "proto/expert_store.capnp.h"
#include "shared/util/error.h"

namespace waste::iod {

namespace {

// waste::Error (bad input from the peer) becomes an RPC error the client sees as a message.
template <typename F>
kj::Promise<void> guarded(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return KJ_EXCEPTION(FAILED, e.what());
  } catch (const std::out_of_range& e) {
    return KJ_EXCEPTION(FAILED, "unknown connection");
  }
  return kj::READY_NOW;
}

template <typename Reader>
std::vector<ipc::SlotHandle> handles_of(Reader list) {
  std::vector<ipc::SlotHandle> out;
  out.reserve(list.size());
  for (auto h : list) out.push_back({h.getSlot(), h.getGeneration()});
  return out;
}

template <typename Reader>
std::vector<uint32_t> experts_of(Reader list) {
  std::vector<uint32_t> out;
  out.reserve(list.size());
  for (uint32_t x : list) out.push_back(x);
  return out;
}

class ExpertStoreImpl final : public proto::ExpertStore::Server {
 public:
  explicit ExpertStoreImpl(Store& s) : store_(s), conn_(s.open_connection()) {}
  ~ExpertStoreImpl() { store_.close_connection(conn_); }

  kj::Promise<void> attach(AttachContext ctx) override {
    return guarded([&] {
      uint64_t want = ctx.getParams().getContainerId();
      require(want == 0 || want == store_.container_id(),
              "attach: this iod serves container " + std::to_string(store_.container_id()) + ", not " +
                  std::to_string(want));
      const auto& seg = store_.segment();
      const auto& h = seg.header();
      auto s = ctx.getResults().initSegment();
      s.setName(seg.name());
      s.setBytes(seg.bytes());
      s.setLayoutVersion(h.version);
      s.setSlotCount(h.slot_count);
      s.setSlotBytes(h.slot_bytes);
      s.setSlotTableOffset(h.slot_table_offset);
      s.setSlotsOffset(h.slots_offset);
      s.setInstanceId(h.instance_id);
      s.setContainerId(h.container_id);
    });
  }

  kj::Promise<void> fetch(FetchContext ctx) override {
    return guarded([&] {
      auto p = ctx.getParams();
      auto experts = experts_of(p.getExperts());
      auto releases = handles_of(p.getReleases());
      auto hs = store_.fetch(conn_, p.getLayer(), experts, releases);
      auto out = ctx.getResults().initHandles(uint32_t(hs.size()));
      for (size_t i = 0; i < hs.size(); ++i) {
        out[uint32_t(i)].setSlot(hs[i].slot);
        out[uint32_t(i)].setGeneration(hs[i].generation);
      }
    });
  }

  kj::Promise<void> prefetch(PrefetchContext ctx) override {
    return guarded([&] {
      auto p = ctx.getParams();
      auto experts = experts_of(p.getExperts());
      ctx.getResults().setIssued(store_.prefetch(conn_, p.getLayer(), experts));
    });
  }

  kj::Promise<void> release(ReleaseContext ctx) override {
    return guarded([&] { store_.release(conn_, handles_of(ctx.getParams().getHandles())); });
  }

  kj::Promise<void> stats(StatsContext ctx) override {
    return guarded([&] {
      StoreStats st = store_.stats();
      auto s = ctx.getResults().initStats();
      s.setIoPath(st.io_path);
      s.setPolicy(st.policy);
      s.setSlotCount(st.slot_count);
      s.setSlotsOccupied(st.slots_occupied);
      s.setHits(st.hits);
      s.setJoined(st.joined);
      s.setMisses(st.misses);
      s.setFailures(st.failures);
      s.setBytesRead(st.bytes_read);
      s.setReadSeconds(st.read_seconds);
      s.setGbPerSecond(st.read_seconds > 0 ? double(st.bytes_read) / st.read_seconds / 1e9 : 0.0);
      s.setLatencyP50Us(st.p50_us);
      s.setLatencyP90Us(st.p90_us);
      s.setLatencyP99Us(st.p99_us);
      s.setLatencyMaxUs(st.max_us);
      s.setQueueDepth(st.queue_depth);
      s.setInFlight(st.in_flight);
      s.setPrefetchIssued(st.prefetch_issued);
      s.setPrefetchUsed(st.prefetch_used);
      s.setPrefetchWasted(st.prefetch_wasted);
      s.setConnections(st.connections);
      auto layers = s.initLayers(uint32_t(st.layers.size()));
      for (size_t i = 0; i < st.layers.size(); ++i) {
        layers[uint32_t(i)].setLayer(st.layers[i].first);
        layers[uint32_t(i)].setHits(st.layers[i].second.hits);
        layers[uint32_t(i)].setMisses(st.layers[i].second.misses);
      }
    });
  }

  kj::Promise<void> traceStart(TraceStartContext ctx) override {
    return guarded([&] { store_.trace_start(ctx.getParams().getPath().cStr()); });
  }

  kj::Promise<void> traceStop(TraceStopContext ctx) override {
    return guarded([&] { ctx.getResults().setRequests(store_.trace_stop()); });
  }

 private:
  Store& store_;
  uint64_t conn_;
};

// One accepted client: its stream, the two-party network over it and the RPC system whose
// bootstrap is this connection's own ExpertStoreImpl.
struct Connection {
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  Connection(kj::Own<kj::AsyncIoStream>&& s, Store& store)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER),
        rpc(capnp::makeRpcServer(network, capnp::Capability::Client(kj::heap<ExpertStoreImpl>(store)))) {}
};

struct Server : public kj::TaskSet::ErrorHandler {
  Store& store;
  kj::Own<kj::ConnectionReceiver> listener;
  kj::TaskSet tasks;
  Server(Store& s, kj::Own<kj::ConnectionReceiver> l) : store(s), listener(kj::mv(l)), tasks(*this) {}
  void taskFailed(kj::Exception&& e) override { spdlog::warn("iod: connection ended: {}", e.getDescription().cStr()); }

  kj::Promise<void> accept_loop() {
    return listener->accept().then([this](kj::Own<kj::AsyncIoStream>&& stream) {
      auto c = kj::heap<Connection>(kj::mv(stream), store);
      auto done = c->network.onDisconnect();
      tasks.add(done.attach(kj::mv(c)));
      return accept_loop();
    });
  }
};

}  // namespace

kj::Promise<void> serve_expert_store(Store& store, kj::AsyncIoContext& io, const std::string& socket_path) {
  auto addr = io.provider->getNetwork().parseAddress(("unix:" + socket_path).c_str()).wait(io.waitScope);
  auto server = kj::heap<Server>(store, addr->listen());
  auto loop = server->accept_loop();
  return loop.attach(kj::mv(server));
}

}  // namespace waste::iod
