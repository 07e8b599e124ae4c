// Where the model code gets its numbers from. The same forward pass runs on a Hugging Face
// checkpoint (tests, f32) and on a container's trunk (engine, quantised), so it only ever
// sees these two interfaces. Names are release names without the tensor prefix, exactly as
// shared/model/tensors.h lists them (e.g. "model.layers.3.self_attn.kv_b_proj.weight").
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shared/container/expert_view.h"
#include "shared/kernels/matvec.h"
#include "shared/stats/expert_stats.h"
#include "shared/util/error.h"

namespace waste {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // A 2-D matrix as stored (any trunk format matvec understands). Throws Error naming the
  // tensor when it is absent. The view stays valid as long as the source lives.
  virtual MatrixView matrix(const std::string& name) const = 0;
  // An f32 vector (norm weights, biases, A_log, conv weights flattened). Its size is the
  // stored element count, which the model checks against what it needs.
  virtual std::span<const float> vector(const std::string& name) const = 0;
  // Row `token` of model.embed_tokens.weight, dequantised into out[hidden].
  virtual void embedding_row(int64_t token, float* out) const = 0;
};

// An expert source's counters: one definition (shared/stats/expert_stats.h) for iod and compute.
using stats::ExpertSourceStats;

// One expert's record could not be had (a failed read, a checksum mismatch): the fault of that
// record alone, unlike a lost connection. next_ready() (or next_ready_group()) throws it after dropping the expert from
// the batch, so the caller may go on with the others and fail only the rows that routed to it.
class ExpertUnavailable : public Error {
 public:
  ExpertUnavailable(int layer, int expert, const std::string& what) : Error(what), layer(layer), expert(expert) {}
  int layer, expert;
};

// Routed experts. In the engine the views point into iod's shared-memory slots, so a view
// is only valid between expert() and release() of the same (layer, expert).
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual ExpertView expert(int layer, int expert) = 0;
  virtual void release(int layer, int expert) {}
  // A hint that these experts of `layer` are about to be asked for (lookahead). Never
  // changes results.
  virtual void prefetch(int layer, std::span<const int> experts) {}

  // The batch protocol the MoE layer uses: fetch_layer() asks for all of `experts` at once
  // (ascending ids); next_ready() hands them out one at a time in whatever order they become
  // available, returning the index into `experts` (-1 once all were handed out); a view stays
  // valid until the next next_ready() or end_layer() call, which releases it. The defaults
  // serve them in order through expert() and release(); the iod source overrides them to
  // consume slots in completion order. A record that cannot be had makes next_ready() (or
  // expert()) throw ExpertUnavailable; that expert is then out of the batch and the next call
  // goes on with the rest. An index may be handed out again: the view given before was read
  // unpinned and turned out torn (IodExperts), and whatever the caller made of it is to be
  // replaced by what it makes of the new view.
  virtual void fetch_layer(int layer, std::span<const int> experts);
  virtual int next_ready(ExpertView& view);
  // Several experts at once, for applying them on several threads (the MoE layer does): fills
  // out[0, k) with experts ready now, k >= 1 while any expert of the batch is left (it waits
  // for the first as next_ready does), 0 once all were handed out. Every view handed out stays
  // valid until the next next_ready, next_ready_group or end_layer call, which releases them
  // all; an index may come again (as from next_ready), never twice in one group. A source
  // throws ExpertUnavailable only before it has put any expert in `out` (the caller would
  // never apply those). The default hands out one (next_ready): sources whose views stay
  // valid longer, or that can hold several, hand out more. A source may hand out a view whose
  // bytes it is still verifying (IodExperts: a slot CHECKING); the next call confirms it, or
  // throws ExpertUnavailable for it, so what the caller made of a view is final only once a
  // later call returned (the loop's last call, returning 0, settles the layer).
  struct Ready {
    int index;  // into the batch's experts
    ExpertView view;
  };
  virtual size_t next_ready_group(std::span<Ready> out);
  virtual void end_layer();

  virtual ExpertSourceStats stats() { return {}; }

 protected:
  // A next_ready_group for sources whose views stay valid after the next next_ready (RAM that
  // never moves): up to `most` of out's room (0: all of it) by next_ready, in its order.
  size_t next_ready_each(std::span<Ready> out, size_t most = 0);

 private:
  int batch_layer_ = -1;
  std::vector<int> batch_;
  size_t batch_next_ = 0;
  int batch_held_ = -1;  // index handed out and not yet released
};

}  // namespace waste
