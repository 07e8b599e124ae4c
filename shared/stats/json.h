// Statistics structs (stat.h) to JSON and back, each statistic at its JSON pointer.
#pragma once
#include <nlohmann/json.hpp>

#include "shared/stats/stat.h"

namespace waste::stats {

template <class S>
void to_json(nlohmann::json& j, const S& s) {
  each(s, [&](const Stat& st, const auto& v) { j[nlohmann::json::json_pointer(std::string(st.json))] = v; });
}

template <class S>
nlohmann::json to_json(const S& s) {
  nlohmann::json j = nlohmann::json::object();
  to_json(j, s);
  return j;
}

// A statistic the JSON lacks (an older peer's) keeps its value in s.
template <class S>
void from_json(const nlohmann::json& j, S& s) {
  each(s, [&](const Stat& st, auto& v) {
    const nlohmann::json::json_pointer p(std::string(st.json));
    if (j.contains(p) && j[p].is_number()) v = j[p].template get<std::remove_reference_t<decltype(v)>>();
  });
}

template <class S>
S from_json(const nlohmann::json& j) {
  S s;
  from_json(j, s);
  return s;
}

}  // namespace waste::stats
