#include "iod/cache/policy.h"

#include <cstdlib>

#include "iod/cache/arc_policy.h"
#include "iod/cache/forecast_policy.h"
#include "iod/cache/frequency_policy.h"
#include "iod/cache/lfru_policy.h"
#include "iod/cache/lfu_policy.h"
#include "iod/cache/lru_policy.h"
#include "iod/cache/s3fifo_policy.h"
#include "shared/util/error.h"

namespace waste::cache {

namespace {

double parse_param(const std::string& spec, const std::string& key, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  require(!value.empty() && end && *end == '\0',
          "cache policy '" + spec + "': parameter " + key + " needs a number, got '" + value + "'");
  return v;
}

}  // namespace

std::vector<std::string> policy_names() { return {"lru", "lrfu", "cyclic", "forecast", "arc", "s3fifo", "lfu", "lfru"}; }

std::vector<std::string> baseline_policy_names() { return {"lru", "arc", "s3fifo", "lfu", "lfru"}; }

std::string policy_help() {
  return "forecast (default) | lru | lrfu | cyclic | arc | s3fifo | lfu | lfru, optionally with :name=value,... "
         "(forecast: prefetch=P use probability assumed for a prefetched record, prior=W weight of the "
         "usage-file popularity (0 = ignore), halve=N samples after which a class's counts halve; "
         "lrfu/cyclic: gamma=G per-token decay of the access count, prior=W, prefetch=P; "
         "arc: adaptive replacement (Megiddo & Modha); s3fifo: small=R share of the small FIFO (0.1; "
         "Yang et al. 2023); lfu: LFU with per-key counts kept across evictions, ties to the least recent; "
         "lfru: the C engine's rule (fewest in-cache hits, then least recent, among sample=N random "
         "slots, 16; 0 = all slots))";
}

namespace {

// "name=value,name=value" -> pairs, numbers checked.
std::vector<std::pair<std::string, double>> parse_params(const std::string& spec, const std::string& rest) {
  std::vector<std::pair<std::string, double>> out;
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? rest.size() : comma + 1;
    size_t eq = item.find('=');
    require(eq != std::string::npos, "cache policy '" + spec + "': expected name=value, got '" + item + "'");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    out.emplace_back(key, parse_param(spec, key, value));
  }
  return out;
}

}  // namespace

std::unique_ptr<CachePolicy> make_policy(const std::string& spec, const CacheGeometry& geometry,
                                         const KeyPrior& prior) {
  std::string name = spec, rest;
  if (size_t colon = spec.find(':'); colon != std::string::npos) {
    name = spec.substr(0, colon);
    rest = spec.substr(colon + 1);
  }
  if (name == "lru") {
    require(rest.empty(), "cache policy 'lru' takes no parameters (got '" + rest + "')");
    return std::make_unique<LruPolicy>();
  }
  if (name == "arc" || name == "lfu") {
    require(rest.empty(), "cache policy '" + name + "' takes no parameters (got '" + rest + "')");
    if (name == "arc") return std::make_unique<ArcPolicy>(geometry);
    return std::make_unique<LfuPolicy>(geometry);
  }
  if (name == "s3fifo") {
    double small = 0.1;
    for (const auto& [key, v] : parse_params(spec, rest)) {
      if (key == "small") small = v;
      else throw Error("cache policy '" + spec + "': unknown parameter '" + key + "' (" + policy_help() + ")");
    }
    return std::make_unique<S3FifoPolicy>(geometry, small);
  }
  if (name == "lfru") {
    double sample = LfruPolicy::kEngineSample;
    for (const auto& [key, v] : parse_params(spec, rest)) {
      if (key == "sample") sample = v;
      else throw Error("cache policy '" + spec + "': unknown parameter '" + key + "' (" + policy_help() + ")");
    }
    require(sample >= 0 && sample <= 1e6 && sample == double(uint32_t(sample)),
            "cache policy '" + spec + "': sample must be a whole number in [0, 1e6]");
    return std::make_unique<LfruPolicy>(uint32_t(sample));
  }
  if (name == "forecast") {
    ForecastParams params;
    for (const auto& [key, v] : parse_params(spec, rest)) {
      if (key == "prefetch") params.prefetch_p = v;
      else if (key == "prior") params.prior_weight = v;
      else if (key == "halve") params.halve_at = v;
      else throw Error("cache policy '" + spec + "': unknown parameter '" + key + "' (" + policy_help() + ")");
    }
    return std::make_unique<ForecastPolicy>(geometry, params, prior);
  }
  FrequencyParams params;
  if (name == "cyclic") params.mode = FrequencyParams::Mode::Cyclic;
  else if (name == "lrfu") params.mode = FrequencyParams::Mode::Lrfu;
  else throw Error("unknown cache policy '" + name + "' (expected " + policy_help() + ")");
  for (const auto& [key, v] : parse_params(spec, rest)) {
    if (key == "gamma") params.gamma = v;
    else if (key == "prior") params.prior_weight = v;
    else if (key == "prefetch") params.prefetch_p = v;
    else throw Error("cache policy '" + spec + "': unknown parameter '" + key + "' (" + policy_help() + ")");
  }
  return std::make_unique<FrequencyPolicy>(geometry, params, prior);
}

}  // namespace waste::cache
