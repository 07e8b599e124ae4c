#include "iod/rpc_server.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <kj/async-unix.h>
#include <optional>
#include <vector>

#include "iod/request_check.h"
#include "shared/stats/capnp.h"
#include "proto/expert_store.capnp.h"
#include "shared/ipc/rpc_error.h"
#include "shared/util/error.h"

namespace waste::iod {

namespace {

// An RPC error with its kind and field (shared/ipc/rpc_error.h): the peer acts on the kind
// (compute retries Overloaded, reports InvalidRequest as its own bug), never on the text.
kj::Exception failure(const std::string& message, ErrorKind kind = ErrorKind::Internal, const std::string& param = "") {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str(ipc::encode_error(kind, param, message).c_str()));
}

// The typed failure of any exception: an Error keeps its kind and field, anything else is Internal.
kj::Exception failure_of(const std::exception& e) {
  if (const auto* w = dynamic_cast<const Error*>(&e)) return failure(w->what(), w->kind(), w->param());
  return failure(e.what());
}

// Every call's failure reaches the peer typed. out_of_range is the connection table's
// (connections_.at): a call on a connection the store no longer knows.
template <typename F>
kj::Promise<void> guarded(F&& f) {
  try {
    f();
  } catch (const std::out_of_range&) {
    return failure("unknown connection");
  } catch (const std::exception& e) {
    return failure_of(e);
  }
  return kj::READY_NOW;
}

// The daemon's CPU time so far, user + system, all threads (what `waste bench` turns into
// CPU seconds per GB read).
double process_cpu_seconds() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// Demand fetches that found every slot pinned or loading wait here (FIFO) until the store says
// slots changed (a release, a finished read, a connection gone), then are tried again. The
// store signals from any thread through an eventfd the event loop watches. The queue's size is
// fixed at start-up; a fetch that waits longer than kFetchWaitSeconds fails (two clients
// each waiting for slots the other pins would otherwise wait for ever).
class FetchWaiters {
 public:
  static constexpr size_t kCapacity = 1024;
  static constexpr uint64_t kFetchWaitSeconds = 60;

  FetchWaiters(Store& store, kj::UnixEventPort& port, kj::Timer& timer) : store_(store), timer_(timer) {
    fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    require(fd_ >= 0, std::string("iod: eventfd: ") + std::strerror(errno));
    observer_ = kj::heap<kj::UnixEventPort::FdObserver>(port, fd_, kj::UnixEventPort::FdObserver::OBSERVE_READ);
    waiting_.reserve(kCapacity);
    store_.set_slots_changed([this] {
      if (!waiting_count_.load(std::memory_order_relaxed)) return;  // nobody to wake
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
    });
    watch_ = watch().eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::error("iod: fetch wait loop failed: {}", e.getDescription().cStr());
    });
  }
  ~FetchWaiters() {
    store_.set_slots_changed({});
    watch_ = nullptr;
    observer_ = nullptr;
    ::close(fd_);
  }

  kj::Promise<std::vector<ipc::SlotHandle>> wait(uint64_t conn, uint32_t layer, std::vector<uint32_t> experts) {
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [](Waiter& w) { return !w.f->isWaiting(); }),
                   waiting_.end());
    require_kind(waiting_.size() < kCapacity, ErrorKind::Overloaded,
                 "fetch: layer " + std::to_string(layer) + ": every slot is pinned or loading and " +
                     std::to_string(kCapacity) + " fetches already wait for one");
    auto paf = kj::newPromiseAndFulfiller<std::vector<ipc::SlotHandle>>();
    waiting_.push_back({conn, layer, std::move(experts), kj::mv(paf.fulfiller)});
    waiting_count_.store(waiting_.size(), std::memory_order_relaxed);
    // A slot may have freed between try_fetch and now: look once more.
    retry();
    auto timeout = timer_.afterDelay(kFetchWaitSeconds * kj::SECONDS)
                       .then([layer]() -> kj::Promise<std::vector<ipc::SlotHandle>> {
                         std::string m = "fetch: layer " + std::to_string(layer) + ": waited " +
                                         std::to_string(kFetchWaitSeconds) +
                                         " s for a slot; every slot stays pinned or loading (do other clients hold "
                                         "their pins?)";
                         return failure(m, ErrorKind::Overloaded);
                       });
    return paf.promise.exclusiveJoin(kj::mv(timeout));
  }

 private:
  struct Waiter {
    uint64_t conn;
    uint32_t layer;
    std::vector<uint32_t> experts;
    kj::Own<kj::PromiseFulfiller<std::vector<ipc::SlotHandle>>> f;
  };

  kj::Promise<void> watch() {
    return observer_->whenBecomesReadable().then([this] {
      uint64_t v;
      while (::read(fd_, &v, sizeof v) > 0) {
      }
      retry();
      return watch();
    });
  }

  // Tries every waiting fetch in arrival order; the ones that now fit leave.
  void retry() {
    for (size_t i = 0; i < waiting_.size();) {
      Waiter& w = waiting_[i];
      bool leave = !w.f->isWaiting();  // cancelled, timed out or its connection went away
      if (!leave) {
        try {
          if (auto hs = store_.try_fetch(w.conn, w.layer, w.experts, {}, false)) {
            w.f->fulfill(kj::mv(*hs));
            leave = true;
          }
        } catch (const std::exception& e) {
          w.f->reject(failure_of(e));
          leave = true;
        }
      }
      if (leave) {
        waiting_.erase(waiting_.begin() + long(i));
      } else {
        ++i;
      }
    }
    waiting_count_.store(waiting_.size(), std::memory_order_relaxed);
  }

  Store& store_;
  kj::Timer& timer_;
  int fd_ = -1;
  kj::Own<kj::UnixEventPort::FdObserver> observer_;
  std::vector<Waiter> waiting_;
  std::atomic<size_t> waiting_count_{0};
  kj::Promise<void> watch_ = nullptr;
};

class ExpertStoreImpl final : public proto::ExpertStore::Server {
 public:
  ExpertStoreImpl(Store& s, FetchWaiters& w) : store_(s), waiters_(w), conn_(s.open_connection()) {}
  ~ExpertStoreImpl() { store_.close_connection(conn_); }

  kj::Promise<void> attach(AttachContext ctx) override {
    return guarded([&] {
      uint64_t want = ctx.getParams().getContainerId();
      require_request(want == 0 || want == store_.container_id(),
                      "attach: this iod serves container " + std::to_string(store_.container_id()) + ", not " +
                          std::to_string(want),
                      "containerId");
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
    std::optional<kj::Promise<std::vector<ipc::SlotHandle>>> later;
    auto now = guarded([&] {
      auto p = ctx.getParams();
      auto experts = experts_of(p.getExperts());
      auto releases = handles_of(p.getReleases());
      if (auto hs = store_.try_fetch(conn_, p.getLayer(), experts, releases)) {
        set_handles(ctx, *hs);
      } else {
        later.emplace(waiters_.wait(conn_, p.getLayer(), std::move(experts)));
      }
    });
    if (!later) return now;
    return kj::mv(*later).then([ctx](std::vector<ipc::SlotHandle>&& hs) mutable { set_handles(ctx, hs); });
  }

  kj::Promise<void> prefetch(PrefetchContext ctx) override {
    return guarded([&] {
      auto p = ctx.getParams();
      auto experts = experts_of(p.getExperts());
      auto releases = handles_of(p.getReleases());
      ctx.getResults().setIssued(store_.prefetch(conn_, p.getLayer(), experts, releases));
    });
  }

  kj::Promise<void> release(ReleaseContext ctx) override {
    return guarded([&] { store_.release(conn_, handles_of(ctx.getParams().getHandles())); });
  }

  kj::Promise<void> touch(TouchContext ctx) override {
    return guarded([&] { store_.touch(conn_, layer_uses_of(ctx.getParams().getUses())); });
  }

  kj::Promise<void> stats(StatsContext ctx) override {
    return guarded([&] {
      StoreStats st = store_.stats();
      st.cpu_seconds = process_cpu_seconds();
      auto s = ctx.getResults().initStats();
      s.setIoPath(st.io_path);
      s.setPolicy(st.policy);
      stats::to_capnp(st, s);
      auto layers = s.initLayers(uint32_t(st.layers.size()));
      for (size_t i = 0; i < st.layers.size(); ++i) {
        layers[uint32_t(i)].setLayer(st.layers[i].first);
        stats::to_capnp(st.layers[i].second, layers[uint32_t(i)]);
      }
    });
  }

  static void set_handles(FetchContext& ctx, const std::vector<ipc::SlotHandle>& hs) {
    auto out = ctx.getResults().initHandles(uint32_t(hs.size()));
    for (size_t i = 0; i < hs.size(); ++i) {
      out[uint32_t(i)].setSlot(hs[i].slot);
      out[uint32_t(i)].setGeneration(hs[i].generation);
    }
  }

  kj::Promise<void> traceStart(TraceStartContext ctx) override {
    return guarded([&] { store_.trace_start(ctx.getParams().getPath().cStr()); });
  }

  kj::Promise<void> traceStop(TraceStopContext ctx) override {
    return guarded([&] { ctx.getResults().setRequests(store_.trace_stop()); });
  }

 private:
  Store& store_;
  FetchWaiters& waiters_;
  uint64_t conn_;
};

// One accepted client: its stream, the two-party network over it and the RPC system whose
// bootstrap is this connection's own ExpertStoreImpl.
struct Connection {
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  Connection(kj::Own<kj::AsyncIoStream>&& s, Store& store, FetchWaiters& waiters)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER),
        rpc(capnp::makeRpcServer(network, capnp::Capability::Client(kj::heap<ExpertStoreImpl>(store, waiters)))) {}
};

// final: kj::heap deletes it through its own type (ErrorHandler has no virtual destructor).
struct Server final : public kj::TaskSet::ErrorHandler {
  Store& store;
  FetchWaiters waiters;  // before tasks: the connections (in tasks) refer to it
  kj::Own<kj::ConnectionReceiver> listener;
  kj::TaskSet tasks;
  Server(Store& s, kj::AsyncIoContext& io, kj::Own<kj::ConnectionReceiver> l)
      : store(s), waiters(s, io.unixEventPort, io.provider->getTimer()), listener(kj::mv(l)), tasks(*this) {}
  void taskFailed(kj::Exception&& e) override { spdlog::warn("iod: connection ended: {}", e.getDescription().cStr()); }

  kj::Promise<void> accept_loop() {
    return listener->accept().then([this](kj::Own<kj::AsyncIoStream>&& stream) {
      auto c = kj::heap<Connection>(kj::mv(stream), store, waiters);
      auto done = c->network.onDisconnect();
      tasks.add(done.attach(kj::mv(c)));
      return accept_loop();
    });
  }
};

}  // namespace

kj::Promise<void> serve_expert_store(Store& store, kj::AsyncIoContext& io, const std::string& socket_path) {
  auto addr = io.provider->getNetwork().parseAddress(("unix:" + socket_path).c_str()).wait(io.waitScope);
  auto server = kj::heap<Server>(store, io, addr->listen());
  auto loop = server->accept_loop();
  return loop.attach(kj::mv(server));
}

}  // namespace waste::iod
