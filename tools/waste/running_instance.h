// How `waste run` and `waste chat` find a running instance (`waste up`) to talk to over Engine
// RPC before they fall back to a private engine:
//  - `--connect W` (a run directory, socket, unix:PATH or host:port): W must answer, and when a
//    model is named it must be the model W serves; otherwise an error (the user asked for W).
//  - else the default run directory (client::default_run_dir()): used when its compute answers
//    and serves the named model (or any model when none is named); an instance serving another
//    model is reported on stderr and not used.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "tools/libwaste/engine_client.h"

namespace waste::cli {

struct RunningInstance {
  std::unique_ptr<client::Client> client;
  std::string where;  // what was connected to (for messages)
  client::Info info;
};

// nullopt: nothing suitable answers, fall back to a private engine. Throws Error when an explicit
// `connect` does not answer or serves another model than `model`.
std::optional<RunningInstance> find_running_instance(const std::string& connect, const std::string& model);

// True when `served` (EngineInfo.model, the container directory compute opened) and `model`
// name the same container directory (same file, or the same normalised absolute path).
bool same_model(const std::string& served, const std::string& model);

}  // namespace waste::cli
