// iod's request trace (`waste-iod --trace FILE`, `traceStart`): one JSON line per request,
// {"t_us", "conn", "op", "layer", "experts"}, layers in decoder numbering. `waste iobench
// --trace` takes it as well as a routing trace (../shared/traces): each connection's fetches
// and touches (uses compute served from slots without a fetch) are cut into tokens (a token
// starts at the first MoE layer's line and must then name every MoE layer in order);
// prefetches are hints and left out; a token a connection left unfinished at the end of the
// file is dropped. Sizes are bounded before use; errors name the
// file and line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "iod/cache/routing_trace.h"

namespace waste::iobench {

// True when the file's first line is an iod request (has "op"), false for a routing trace.
bool is_request_trace(const std::string& path);

// moe_layers: the container's MoE layers in order (decoder numbering), as in a routing trace.
cache::RoutingTrace routing_from_request_trace(const std::string& path, const std::vector<uint32_t>& moe_layers);

}  // namespace waste::iobench
