#include "tools/waste/running_instance.h"

#include <cstdio>
#include <filesystem>

#include "shared/util/error.h"

namespace waste::cli {

namespace fs = std::filesystem;

bool same_model(const std::string& served, const std::string& model) {
  std::error_code ec;
  if (fs::equivalent(served, model, ec) && !ec) return true;
  // Not both here (compute on another host, a container since removed): compare the paths.
  const fs::path a = fs::weakly_canonical(fs::absolute(served, ec), ec);
  const fs::path b = fs::weakly_canonical(fs::absolute(model, ec), ec);
  return !a.empty() && a == b;
}

std::optional<RunningInstance> find_running_instance(const std::string& connect, const std::string& model) {
  const bool explicit_connect = !connect.empty();
  const std::string where = explicit_connect ? connect : client::default_run_dir();
  if (!explicit_connect) {
    // Only a socket that exists is tried: no instance is the common case, not an error.
    std::error_code ec;
    if (!fs::exists(fs::path(where) / "compute.sock", ec)) return std::nullopt;
  }
  RunningInstance r;
  r.where = where;
  try {
    r.client = std::make_unique<client::Client>(where);
    r.info = r.client->info();
  } catch (const Error& e) {
    if (explicit_connect)
      throw Error(std::string(e.what()) + "\nno instance answers at " + where + " (start one with `waste up MODEL`)");
    // A stale socket of a stopped instance: nothing runs there.
    return std::nullopt;
  }
  if (!model.empty() && !same_model(r.info.model, model)) {
    const std::string msg = "the instance at " + where + " serves " + r.info.model + ", not " + model;
    if (explicit_connect) throw Error(msg);
    std::fprintf(stderr, "waste: %s; using a private engine\n", msg.c_str());
    return std::nullopt;
  }
  return r;
}

}  // namespace waste::cli
