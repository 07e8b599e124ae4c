// Routed experts from iod that survive an iod restart: the connection (IodExperts) is dropped
// when a call fails and made again on the next call, so after the supervisor restarts iod,
// compute carries on against the new daemon (whose cache may still be warm from its usage file)
// without reloading the trunk. The request that saw the failure still fails with the error.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "compute/experts/iod_experts.h"
#include "compute/server/iod_health.h"

namespace waste::server {

class ReattachingExperts : public ExpertSource {
 public:
  // Connects at once (throws when iod is not there): a compute started without iod says so.
  // Every call to iod is bounded by call_timeout_ms and recorded in `health` (which outlives
  // this source).
  ReattachingExperts(const Container& container, std::string socket_path, int64_t call_timeout_ms,
                     IodHealth& health);

  ExpertView expert(int layer, int expert) override;  // throws, as IodExperts::expert does
  void prefetch(int layer, std::span<const int> experts) override;
  void fetch_layer(int layer, std::span<const int> experts) override;
  int next_ready(ExpertView& view) override;
  size_t next_ready_group(std::span<Ready> out) override;
  void end_layer() override;
  // Counters of every daemon this source talked to, summed (a restarted iod starts from 0).
  ExpertSourceStats stats() override;

  // One round trip to iod (attaching afresh if the connection was dropped), recorded in the
  // health like any call: the worker pings while idle so that /health knows iod's state.
  void ping();
  uint32_t slot_count();
  uint64_t slot_bytes();
  uint32_t reattaches() const { return reattaches_.load(); }  // any thread
  const std::string& socket() const { return socket_; }

 private:
  IodExperts& live();
  void drop();
  // Runs one call to iod: records it in health_, drops the connection when it fails.
  template <typename F>
  auto forward(F&& f) -> decltype(f());

  const Container& container_;
  std::string socket_;
  int64_t call_timeout_ms_;
  IodHealth& health_;
  std::unique_ptr<IodExperts> inner_;
  ExpertSourceStats carried_;             // of daemons already dropped
  ExpertSourceStats last_seen_;           // of the live one, for when it dies
  bool lost_ = false;                     // stats() found iod not answering: dropped by live()
  std::atomic<uint32_t> reattaches_{0};
};

}  // namespace waste::server
